"""PressureProbe: has the node's and pods' usage collected at once when node CPU or memory
jumps past a QoS threshold between two collections.

The QoS strategies act on fresh usage as soon as the node and pod usage collectors deliver
it, so pressure that appears just after a collection waits up to a whole
``--collect-res-used-interval`` before CPUSuppress or MemoryEvict sees it. The probe reads
``/proc/stat``'s aggregate ``cpu`` line and ``/proc/meminfo`` (kept descriptors) every
``--qos-pressure-probe-interval`` (250ms; 0, or one at least as long as the collect
interval, turns it off) and computes the node's CPU, in cores over the time since its
previous read, and its memory used, as NodeResourceCollector does. It asks the runner to
collect NodeResourceCollector and PodResourceCollector now
(:class:`~koordlet.metricsadvisor.framework.Hastening`; the runner brings the other
collectors of the same interval along) when, with the NodeSLO's
``resourceUsedThresholdWithBE.enable`` on, one of them *jumped* past its threshold: it is
at or above the threshold and at least :data:`STEP` of the capacity above the last
collection's value. The thresholds:

* CPU: ``cpuSuppressThresholdPercent`` of the Node's CPU capacity (BE pods are held back
  only above it: their allowance is that share less what everything else uses), with the
  BECPUSuppress gate on and BECPUManager off (CPUSuppress then suppresses nothing);
* memory: ``memoryEvictThresholdPercent`` of the Node's memory capacity (BEMemoryEvict's and
  MemoryEvict's trigger), with one of those gates on.

A node whose usage merely hovers at a threshold (BE pods using all CPUSuppress leaves them
keep it there) does not count as jumping: it takes a rise of a tenth of the capacity. The
probe also hastens at most once every :data:`HOLD_OFF_INTERVALS` collect intervals, not
within :data:`SETTLE_SHARE` of a collect interval after a collection (counted in its own
ticks: the strategies have just seen one), and not while the usage collectors deliver
nothing (:data:`STALE_INTERVALS`): at most three collections in 2.25 collect intervals,
a third more than without it, whatever the load and the probe interval. It writes no
samples: the hastened collection's are what the strategies, the NodeMetric and the
predictor read, like any other collection's. Its time is the monotonic clock, so a step
of the wall clock neither stops nor repeats it.

While it has nothing to watch (the NodeSLO's switch off, as by default, or the gates off)
it reads nothing and looks again every :data:`IDLE_INTERVALS` collect intervals: one tick
in ten seconds by default (on a VM each wake-up costs a tenth of a millisecond or more).
A read that fails is logged once, until one succeeds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from koordinator.api.features import FeatureGates
from koordinator.api.quantity import Quantity, QuantityError
from koordinator.api.sloconfig.nodeslo import default_resource_threshold_strategy
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.metricsadvisor.collectors.noderesource import NodeResourceCollector
from koordlet.metricsadvisor.collectors.podresource import PodResourceCollector
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase, UsagePoint
from koordlet.system import kernel, proc
from koordlet.system.errors import HostError

log = logging.getLogger(__name__)

#: the rise since the last collection, as a share of the capacity, that makes a jump
STEP = 0.1
#: at most one hastened collection in this many collect intervals
HOLD_OFF_INTERVALS = 2
#: no hastening while the last collection is older than this many collect intervals
STALE_INTERVALS = 2
#: no hastening within this share of a collect interval after a collection
SETTLE_SHARE = 0.25
#: with nothing to watch, the probe looks again after this many collect intervals
IDLE_INTERVALS = 10
#: what a hastened collection collects: the usage the QoS strategies are woken by
HASTENED = (NodeResourceCollector.NAME, PodResourceCollector.NAME)
#: the shortest --qos-pressure-probe-interval besides 0 (off)
MIN_INTERVAL_S = 0.05


def jumped(probed: float, collected: float, percent: int | None, capacity: float | None) -> bool:
    """Whether ``probed`` is at or above ``percent`` of ``capacity`` and at least :data:`STEP`
    of ``capacity`` above ``collected``; False when the percent or the capacity is unknown."""
    if percent is None or capacity is None:
        return False
    return probed >= capacity * percent / 100 and probed - collected >= STEP * capacity


def thresholds(slo: NodeSLOSpec | None, gates: FeatureGates) -> tuple[int | None, int | None]:
    """The CPU and memory percents the probe watches, None for one it does not (see the
    module's docstring); neither while the NodeSLO's switch is off."""
    strategy = slo.resource_used_threshold_with_be if slo is not None else None
    if strategy is None or not strategy.enable:
        return None, None
    cpu: int | None = None
    if gates.enabled("BECPUSuppress") and not gates.enabled("BECPUManager"):
        cpu = strategy.cpu_suppress_threshold_percent
        if cpu is None:  # CPUSuppress's default
            cpu = default_resource_threshold_strategy().cpu_suppress_threshold_percent
    memory_on = gates.enabled("BEMemoryEvict") or gates.enabled("MemoryEvict")
    return cpu, strategy.memory_evict_threshold_percent if memory_on else None


def capacity(node: Mapping[str, Any] | None, name: str) -> float | None:
    """The Node's capacity of ``name`` (cores for ``cpu``, bytes for ``memory``), as the
    strategies read it; None when absent, malformed or zero."""
    raw = (((node or {}).get("status") or {}).get("capacity") or {}).get(name)
    try:
        value = Quantity.parse(str(raw)).milli_value() / 1000 if raw is not None else 0.0
    except QuantityError:
        return None
    return value if value > 0 else None


class PressureProbe(CollectorBase):
    NAME = "PressureProbe"

    def __init__(self, ctx: CollectContext, monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__(ctx, ctx.config.pressure_probe_interval)
        self._monotonic = monotonic
        self._reader = proc.NodeStatsReader(ctx.paths, totals_only=True)
        #: busy ticks and (monotonic) time of the previous read
        self._last: tuple[int, float] | None = None
        #: the last collection seen, and when the probe first saw it
        self._collection: UsagePoint | None = None
        self._collection_seen = float("-inf")
        #: the probe's ticks since it first saw that collection
        self._ticks_since = 0
        self._hastened_at = float("-inf")
        self._failing = False
        #: nothing to wait for: the agent's start does not depend on the probe
        self.started = True

    def enabled(self) -> bool:
        return 0 < self.interval < self.ctx.config.collect_res_used_interval

    def close(self) -> None:
        self._reader.close()

    def _read(self) -> tuple[int, float] | None:
        """The busy ticks and memory used, or None when the files cannot be read."""
        try:
            stats = self._reader.read()
        except HostError as err:
            if not self._failing:
                log.warning("pressure probe: %s (no probing until it can be read)", err)
            self._failing, self._last = True, None
            return None
        if self._failing:
            log.info("pressure probe: /proc/stat and /proc/meminfo read again")
            self._failing = False
        return stats.stat.total.busy, float(stats.meminfo.used_bytes)

    def collect(self, now: float) -> None:
        config = self.ctx.config
        every = config.collect_res_used_interval
        at = self._monotonic()
        collected = self.ctx.shared.node
        if collected is not self._collection:
            self._collection, self._collection_seen, self._ticks_since = collected, at, 0
        else:
            self._ticks_since += 1
        cpu_percent, memory_percent = thresholds(self.ctx.states.get_node_slo(), self.ctx.gates)
        if cpu_percent is None and memory_percent is None:
            self.interval, self._last = IDLE_INTERVALS * every, None  # no rate across the pause
            return
        self.interval = config.pressure_probe_interval
        read = self._read()
        if read is None:
            return
        (busy, memory), last = read, self._last
        self._last = (busy, at)
        if last is None or at <= last[1] or collected is None:
            return
        if self._ticks_since * self.interval < SETTLE_SHARE * every - 1e-9:
            return  # the strategies have just seen a collection
        if at - self._collection_seen > STALE_INTERVALS * every:
            return  # the usage collectors deliver nothing: nothing to bring forward
        if at - self._hastened_at < HOLD_OFF_INTERVALS * every:
            return
        node = self.ctx.states.get_node()
        cpu = (busy - last[0]) / (at - last[1]) / kernel.clock_ticks()
        if jumped(cpu, collected.cpu, cpu_percent, capacity(node, "cpu")) or jumped(
            memory, collected.memory, memory_percent, capacity(node, "memory")
        ):
            self._hastened_at = at
            self.ctx.hastening.request(HASTENED)
