"""resctrlCollector: LLC occupancy and memory bandwidth of the QoS resctrl groups.

Enabled by the ResctrlCollector gate together with ``--enable-resctrl-collector`` on a
CPU that can allocate and monitor (``/proc/cpuinfo`` flags ``cat_l3`` and ``mba``, and
``cqm_mbm_total``, ``cqm_mbm_local``, ``cqm_llc``, ``cqm_occup_llc``; vendor Intel or
AMD), as upstream. Every ``--resctrl-collector-interval`` (10 s), while the resctrl root
schemata validates (the filesystem is mounted), the groups ``LSR``, ``LS`` and ``BE``
are read: ``mon_data/mon_L3_<cache id>/llc_occupancy`` (bytes) is stored as
``resctrl_resource_llc{qos,cache_id}``; ``mbm_local_bytes`` and ``mbm_total_bytes`` are
cumulative, so their growth per second (bytes/s) is stored as
``resctrl_resource_mb{qos,cache_id,mb_type}``: the first reading of a domain only primes
it, and a counter that went back (the group was re-created) primes it again. A group that
does not exist (its QoS class has no resctrl policy yet) is skipped. The gauges hold what
upstream's hold: ``koordlet_resctrl_llc_occupancy`` the bytes occupied,
``koordlet_resctrl_memory_bandwidth`` the raw cumulative ``mbm_*_bytes`` counters (from
the first reading on; dashboards apply ``rate()``); each round they hold exactly the
domains read.

Upstream declares its bandwidth series with three labels but builds the samples with a
fourth (the resource type), so every bandwidth sample is refused; here each kind's
samples carry exactly the labels it declares (the LLC kind has no ``mb_type``).
"""

from __future__ import annotations

import logging

from koordlet.metriccache import Key, Rows, kinds
from koordlet.metrics import sync_gauge
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase, RateCache
from koordlet.system.errors import HostError
from koordlet.system.resctrl import QOS_GROUPS, Resctrl
from koordlet.system.topology import read_cpu_basic_info

log = logging.getLogger(__name__)

_MONITORING_FLAGS = ("cat_l3", "mba", "cqm_mbm_total", "cqm_mbm_local", "cqm_llc", "cqm_occup_llc")
_VENDORS = ("GenuineIntel", "AuthenticAMD")
MBM_LOCAL_BYTES, MBM_TOTAL_BYTES = "mbm_local_bytes", "mbm_total_bytes"


def resctrl_monitoring_supported(flags: frozenset[str], vendor_id: str) -> tuple[bool, str]:
    """Can this CPU allocate and monitor cache and memory bandwidth (upstream's checks)?"""
    missing = [flag for flag in _MONITORING_FLAGS if flag not in flags]
    if missing:
        return False, f"CPU lacks {', '.join(missing)}"
    if vendor_id not in _VENDORS:
        return False, f"vendor {vendor_id or 'unknown'} is not {' or '.join(_VENDORS)}"
    return True, f"{vendor_id} CPU with resctrl allocation and monitoring"


class ResctrlCollector(CollectorBase):
    NAME = "resctrlCollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx, ctx.config.resctrl_collector_interval)
        self.resctrl = Resctrl(ctx.paths)
        self._rates = RateCache(ttl=20 * self.interval)
        #: why the last round collected nothing ("" once the filesystem answered)
        self._unmounted_reason = ""

    def enabled(self) -> bool:
        if not (self.ctx.gates.enabled("ResctrlCollector") and self.ctx.config.enable_resctrl_collector):
            return False
        basic = read_cpu_basic_info(self.ctx.paths)
        ok, why = resctrl_monitoring_supported(basic.flags, basic.vendor_id)
        if not ok:
            log.warning("resctrlCollector disabled: %s", why)
        return ok

    def collect(self, now: float) -> None:
        try:
            self.resctrl.root_schemata()
        except HostError as err:
            reason = f"resctrl is not mounted at {self.resctrl.root}: {err.strerror}"
            if reason != self._unmounted_reason:  # said once, not every round
                self._unmounted_reason = reason
                log.warning("resctrlCollector collects nothing: %s", reason)
            self.started = True
            return
        self._unmounted_reason = ""
        llc_keys: list[Key] = []
        llc_values: list[float | None] = []
        mb_keys: list[Key] = []
        mb_values: list[float | None] = []
        #: the raw counters, for the gauge: (qos, cache id, mb_type) -> bytes
        mb_counters: list[tuple[tuple[str, str, str], float]] = []
        for qos in QOS_GROUPS:
            try:
                domains = self.resctrl.mon_data(qos)
            except HostError as err:
                log.debug("resctrl group %s not monitored: %s", qos, err.strerror)
                continue
            for cache_id, data in sorted(domains.items()):
                ident = str(cache_id)
                if data.llc_occupancy is not None:
                    llc_keys.append((qos, ident))
                    llc_values.append(float(data.llc_occupancy))
                for mb_type, counter in (
                    (MBM_LOCAL_BYTES, data.mbm_local_bytes),
                    (MBM_TOTAL_BYTES, data.mbm_total_bytes),
                ):
                    if counter is None:
                        continue
                    mb_counters.append(((qos, ident, mb_type), float(counter)))
                    rate = self._rates.rate((qos, ident, mb_type), now, float(counter))
                    if rate is not None:
                        mb_keys.append((qos, ident, mb_type))
                        mb_values.append(rate)
        self._rates.sweep(now)
        rows = Rows(now)
        rows.extend(kinds.RESCTRL_RESOURCE_LLC, llc_keys, llc_values)
        rows.extend(kinds.RESCTRL_RESOURCE_MB, mb_keys, mb_values)
        self.ctx.cache.append_rows(rows)
        metrics = self.ctx.metrics
        node = metrics.node
        llc = [
            ((node, cache_id, qos), value or 0.0)
            for (qos, cache_id), value in zip(llc_keys, llc_values, strict=True)
        ]
        mb = [((node, cache_id, qos, mb_type), counter) for (qos, cache_id, mb_type), counter in mb_counters]
        for _ in sync_gauge(metrics.resctrl_llc_occupancy, llc):
            pass
        for _ in sync_gauge(metrics.resctrl_memory_bandwidth, mb):
            pass
        self.started = True
