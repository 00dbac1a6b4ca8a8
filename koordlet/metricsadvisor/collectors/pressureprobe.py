"""PressureProbe: has the node's and pods' usage collected at once when node CPU or memory
jumps past a QoS threshold between two collections.

The QoS strategies act on fresh usage as soon as the node and pod usage collectors deliver
it, so pressure that appears just after a collection waits up to a whole
``--collect-res-used-interval`` before CPUSuppress or MemoryEvict sees it. The probe reads
only ``/proc/stat`` and ``/proc/meminfo`` (kept descriptors, no NUMA files) every
``--qos-pressure-probe-interval`` (250ms; 0, or one at least as long as the collect
interval, turns it off) and computes the node's CPU, in cores over the time since its
previous read, and its memory used, as NodeResourceCollector does. It asks the runner to
collect NodeResourceCollector and PodResourceCollector now
(:class:`~koordlet.metricsadvisor.framework.Hastening`)
when, with the NodeSLO's ``resourceUsedThresholdWithBE.enable`` on, either

* CPU is at or above ``cpuSuppressThresholdPercent`` of the Node's CPU capacity (BE pods
  are held back only above it: their allowance is that share less what everything else
  uses), with the BECPUSuppress gate on, or
* memory is at or above ``memoryEvictThresholdPercent`` of the Node's memory capacity
  (BEMemoryEvict's and MemoryEvict's trigger), with one of those gates on,

and the last collection's value was not (the threshold was just crossed), or is at least
:data:`STEP` of the capacity lower (it rose further while above). It hastens at most once
per collect interval, never right after a collection (less than a probe interval ago),
and writes nothing itself: the hastened collection's samples are what the strategies,
the NodeMetric and the predictor read, like any other collection's. While it has nothing
to watch (the NodeSLO's switch off, as by default, or the gates off) it reads nothing and
ticks on the collect interval, in the batch of the collections: it costs no wake-up of
its own (on a VM, each is worth a tenth of a millisecond or more).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.api.features import FeatureGates
from koordinator.api.quantity import Quantity, QuantityError
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.metricsadvisor.collectors.noderesource import NodeResourceCollector
from koordlet.metricsadvisor.collectors.podresource import PodResourceCollector
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase
from koordlet.system import kernel, proc

#: a rise, as a share of the capacity, that hastens again while usage stays above a threshold
STEP = 0.05
#: what a hastened collection collects: the usage the QoS strategies are woken by
HASTENED = (NodeResourceCollector.NAME, PodResourceCollector.NAME)
#: CPUSuppress's threshold when the NodeSLO gives none
DEFAULT_CPU_PERCENT = 65


def crossed(probed: float, collected: float, percent: int | None, capacity: float | None) -> bool:
    """Whether ``probed`` is at or above ``percent`` of ``capacity`` while ``collected`` was
    below it, or has risen by at least :data:`STEP` of ``capacity`` since; False when the
    percent or the capacity is unknown."""
    if percent is None or capacity is None:
        return False
    threshold = capacity * percent / 100
    return probed >= threshold and (collected < threshold or probed - collected >= STEP * capacity)


def thresholds(slo: NodeSLOSpec | None, gates: FeatureGates) -> tuple[int | None, int | None]:
    """The CPU and memory percents the probe watches, None for one it does not: CPU with
    the BECPUSuppress gate on (65 % when the NodeSLO gives none, as CPUSuppress), memory
    with BEMemoryEvict or MemoryEvict on and a percent set (without one they plan
    nothing); neither while the NodeSLO's switch is off."""
    strategy = slo.resource_used_threshold_with_be if slo is not None else None
    if strategy is None or not strategy.enable:
        return None, None
    cpu = strategy.cpu_suppress_threshold_percent
    memory = strategy.memory_evict_threshold_percent
    memory_on = gates.enabled("BEMemoryEvict") or gates.enabled("MemoryEvict")
    return (
        (DEFAULT_CPU_PERCENT if cpu is None else cpu) if gates.enabled("BECPUSuppress") else None,
        memory if memory_on else None,
    )


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

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx, ctx.config.pressure_probe_interval)
        self._reader = proc.NodeStatsReader(ctx.paths, numa=False)
        #: busy ticks and time of the previous read
        self._last: tuple[int, float] | None = None
        self._hastened_at = float("-inf")
        #: nothing to wait for: the agent's start does not depend on the probe
        self.started = True

    def enabled(self) -> bool:
        return 0 < self.interval < self.ctx.config.collect_res_used_interval

    def close(self) -> None:
        self._reader.close()

    def collect(self, now: float) -> None:
        config = self.ctx.config
        cpu_percent, memory_percent = thresholds(self.ctx.states.get_node_slo(), self.ctx.gates)
        if cpu_percent is None and memory_percent is None:
            # nothing to watch: tick with the collections (no wake-up of its own), read nothing
            self.interval, self._last = config.collect_res_used_interval, None
            return
        self.interval = config.pressure_probe_interval
        stats = self._reader.read()
        busy, last = stats.stat.total.busy, self._last
        self._last = (busy, now)
        collected = self.ctx.shared.node
        if last is None or now <= last[1] or collected is None:
            return
        if now - collected.timestamp < self.interval:
            return  # a collection has just run: the strategies see the same
        if now - self._hastened_at < config.collect_res_used_interval:
            return
        node = self.ctx.states.get_node()
        cpu = (busy - last[0]) / (now - last[1]) / kernel.clock_ticks()
        memory = float(stats.meminfo.used_bytes)
        if crossed(cpu, collected.cpu, cpu_percent, capacity(node, "cpu")) or crossed(
            memory, collected.memory, memory_percent, capacity(node, "memory")
        ):
            self._hastened_at = now
            self.ctx.hastening.request(HASTENED)
