"""ColdPageCollector (upstream's coldmemoryresource): cold page cache of the node, pods and containers.

Enabled by the ColdPageCollector gate on a kernel with kidled (Anolis) and cgroup v1
(``memory.idle_page_stats`` exists only there); elsewhere it says why and does not run.
Its first round turns kidled on (``koordlet.system.kidled.enable``); where the kernel
refuses that (a read-only ``/sys``, a value it does not take) the collector says why once
and collects nothing from then on, as upstream's ``Enabled()`` answers false when the
write fails, and start-up does not wait for it. Every
``--coldpage-collector-interval`` (5 s) it then stores, for the node (the memory root),
each pod and container, and each host application of the NodeSLO: the cold bytes
(``*_memory_cold_page_size``) and the memory usage with only the hot page cache
(``*_memory_with_hot_page_usage``): for the node ``(MemTotal - MemFree) x 1024 - cold``,
for a cgroup its usage with page cache minus its cold bytes. The NodeMetric reporter reads
the latter under the ``usageWithHotPageCache`` memory policy.
"""

from __future__ import annotations

import logging

from koordlet.metriccache import Key, Rows, kinds
from koordlet.metricsadvisor.collectors.hostapplication import host_application_cgroup_dir
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase, PodCgroups
from koordlet.system import kidled, proc
from koordlet.system.cgroup.stats import Stat
from koordlet.system.errors import HostError

log = logging.getLogger(__name__)

_IDLE_PAGE_STATS = "memory.idle_page_stats"
_MEMORY = frozenset({Stat.MEMORY})
#: container, pod and host application kinds
_COLD_KINDS = (
    kinds.CONTAINER_MEMORY_COLD_PAGE_SIZE,
    kinds.POD_MEMORY_COLD_PAGE_SIZE,
    kinds.HOST_APPLICATION_MEMORY_COLD_PAGE_SIZE,
)
_HOT_KINDS = (
    kinds.CONTAINER_MEMORY_WITH_HOT_PAGE_USAGE,
    kinds.POD_MEMORY_WITH_HOT_PAGE_USAGE,
    kinds.HOST_APPLICATION_MEMORY_WITH_HOT_PAGE_USAGE,
)


class ColdPageCollector(CollectorBase):
    NAME = "ColdPageCollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx, ctx.config.coldpage_collector_interval)
        self._kidled_started = False
        #: why the collector collects nothing (kidled could not be started); None otherwise
        self.unsupported_reason: str | None = None

    def enabled(self) -> bool:
        if not self.ctx.gates.enabled("ColdPageCollector"):
            return False
        ok, why = kidled.supported(self.ctx.paths)
        if ok and self.ctx.cgroups.version != 1:
            ok, why = False, "memory.idle_page_stats exists only on cgroup v1"
        if not ok:
            log.warning("ColdPageCollector disabled: %s", why)
        return ok

    def _cold_bytes(self, relative: str) -> int | None:
        try:
            text = self.ctx.cgroups.read_text(_IDLE_PAGE_STATS, relative)
            return kidled.parse_cold_page_bytes(text, relative or "/")
        except HostError as err:
            log.debug("no cold pages for %r: %s", relative, err.strerror)
            return None

    def _start_kidled(self) -> bool:
        """Turn kidled on, once; False (said once, never tried again) when it cannot be."""
        if self._kidled_started:
            return True
        if self.unsupported_reason is not None:
            return False
        try:
            kidled.enable(self.ctx.paths)
        except HostError as err:
            self.unsupported_reason = f"cannot start kidled: {err}"
            log.warning("ColdPageCollector collects nothing on this node: %s", self.unsupported_reason)
            self.started = True  # nothing to wait for
            return False
        self._kidled_started = True
        log.info("kidled started: scan period %ss, hierarchical", kidled.DEFAULT_SCAN_PERIOD_SECONDS)
        return True

    def collect(self, now: float) -> None:
        if not self._start_kidled():
            return
        rows = Rows(now)
        node_cold = self._cold_bytes("")
        if node_cold is not None:
            rows.extend(kinds.NODE_MEMORY_COLD_PAGE_SIZE, [()], [float(node_cold)])
            try:
                meminfo = proc.read_meminfo(self.ctx.paths)
                used = (meminfo.kib("MemTotal") - meminfo.kib("MemFree")) * 1024
                rows.extend(kinds.NODE_MEMORY_WITH_HOT_PAGE_USAGE, [()], [float(max(used - node_cold, 0))])
            except (OSError, KeyError) as err:
                log.warning("cannot read the node's memory: %s", err)
        targets = PodCgroups.of(self.ctx.states.get_all_pods())
        slo = self.ctx.states.get_node_slo()
        apps = list(slo.host_applications) if slo is not None else []
        layout = self.ctx.cgroups.layout
        # the containers, the pods, then the host applications
        dirs = [*targets.dirs, *(host_application_cgroup_dir(app, layout) for app in apps)]
        names = [*targets.ids, *(app.name for app in apps)]
        memory = self.ctx.reader.read_columns(dirs, _MEMORY).columns[Stat.MEMORY] if dirs else []
        pods, n = len(targets.dirs), targets.containers
        for index, (name, relative) in enumerate(zip(names, dirs, strict=True)):
            cold = self._cold_bytes(relative)
            if cold is None:
                continue
            which = 2 if index >= pods else int(index >= n)
            key: list[Key] = [(name,)]
            rows.extend(_COLD_KINDS[which], key, [float(cold)])
            stat = memory[index]
            if stat is not None:  # usage with page cache: every field of MemoryStat
                rows.extend(_HOT_KINDS[which], key, [float(max(sum(stat) - cold, 0))])
        self.ctx.cache.append_rows(rows)
        self.started = True
