"""MemoryEvict: evict pods when node memory runs short (features BEMemoryEvict,
MemoryAllocatableEvict and MemoryEvict, run in that order).

* **BEMemoryEvict**: node memory used (``node_memory_usage``, last value within two
  collect intervals) at or above ``memoryEvictThresholdPercent`` (70) of capacity triggers
  it; enough BE pods are evicted to bring usage back to ``memoryEvictLowerPercent``
  (threshold - 2): ``release = capacity * (usage% - lower%) / 100`` bytes, with integer
  percents and division. Victims are BE pods (label) whose ``koordinator.sh/eviction-policy``
  allows the feature, lower ``spec.priority`` first (when both pods have one and they
  differ), then larger memory use; pods with no or zero usage last (by name, descending).
  Each victim releases its memory use.
* **MemoryAllocatableEvict** (needs ``memoryAllocatableEvictThresholdPercent``,
  ``memoryAllocatableEvictLowerPercent`` under it and ``allocatableEvictPriorityThreshold``
  up to 7999): per resource — ``kubernetes.io/batch-memory`` of koord-batch pods,
  ``kubernetes.io/mid-memory`` of koord-mid pods — the requests of pods up to the priority
  threshold against the node's allocatable of that resource; above the threshold percent,
  ``release = requested - lower% * allocatable``. Victims: the eviction-enabled candidates
  with a memory sample, larger request first among equals; each releases its request.
* **MemoryEvict** (needs ``evictEnabledPriorityThreshold``): like BEMemoryEvict over the
  eviction-enabled candidates (see :mod:`.eviction`) with a memory sample, larger use first
  among equals.

BEMemoryEvict and MemoryEvict need ``memoryEvictLowerPercent`` (default threshold - 2)
below ``memoryEvictThresholdPercent``; a feature whose configuration is refused plans
nothing and says why in a note, as upstream (which logs it).

Upstream bug fixed here: upstream's MemoryEvict multiplies each victim's memory use by
1000 (copied from the CPU variant, where usage is in cores), so the first victim always
"releases" enough and the usage may stay above the threshold. Victims here release their
memory use in bytes, and enough of them are chosen to reach the lower percent. The other
deliberate differences (pods that release nothing of what is short, the plain ``memory``
requests of the allocatable feature) are in :mod:`.eviction`; upstream's
MemoryAllocatableEvict also computes in float32, here the release is exact.

A pod already chosen by one feature counts towards the others. LSE, LSR and LS pods are
never victims (the evictor refuses them): the next candidate is taken instead. The runner waits
``--memory-evict-cool-time-seconds`` (4 s) after an eviction before planning again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.types.slo import ResourceThresholdStrategy
from koordlet.metriccache.kinds import NODE_MEMORY_USAGE
from koordlet.qosmanager.framework import Eviction, Plan, Snapshot
from koordlet.qosmanager.strategies import podspec
from koordlet.qosmanager.strategies.eviction import (
    ConfigCheck,
    allocatable_check,
    allocatable_run,
    allowed,
    any_gate_enabled,
    enabled_victims,
    plan_evictions,
    priority_victim_key,
    take_victims,
)
from koordlet.statesinformer.podmeta import PodMeta

NAME = "MemoryEvict"
BE_MEMORY_EVICT = "BEMemoryEvict"
MEMORY_ALLOCATABLE_EVICT = "MemoryAllocatableEvict"
MEMORY_EVICT = "MemoryEvict"
REASON_USAGE = "evictPodByNodeMemoryUsage"
REASON_ALLOCATABLE = "evictPodByNodeMemoryAllocatable"
RELEASE_BUFFER_PERCENT = 2


def usage_threshold_error(config: ResourceThresholdStrategy) -> str | None:
    """BEMemoryEvict's configuration (upstream's check): a threshold, and a lower percent
    (default threshold - 2) under it."""
    threshold = config.memory_evict_threshold_percent
    if threshold is None:
        return "memoryEvictThresholdPercent not set"
    if threshold < 0:
        return f"memoryEvictThresholdPercent {threshold} is negative"
    lower = memory_lower_percent(config, threshold)
    if lower >= threshold:
        return f"memoryEvictLowerPercent {lower} is not below memoryEvictThresholdPercent {threshold}"
    return None


def enabled_usage_threshold_error(config: ResourceThresholdStrategy) -> str | None:
    """MemoryEvict's configuration: BEMemoryEvict's, and ``evictEnabledPriorityThreshold``."""
    invalid = usage_threshold_error(config)
    if invalid is None and config.evict_enabled_priority_threshold is None:
        return "evictEnabledPriorityThreshold not set"
    return invalid


def memory_lower_percent(config: ResourceThresholdStrategy, threshold: int) -> int:
    lower = config.memory_evict_lower_percent
    return lower if lower is not None else threshold - RELEASE_BUFFER_PERCENT


def be_victim_order(usage: Mapping[str, float]) -> Callable[[PodMeta, PodMeta], int]:
    """Upstream's BE order: priority (when both set and different), then usage (whole bytes)
    desc, zero/unknown usage last, name descending among those."""

    def compare(a: PodMeta, b: PodMeta) -> int:
        pa, pb = podspec.spec_priority(a), podspec.spec_priority(b)
        if pa is not None and pb is not None and pa != pb:
            return -1 if pa < pb else 1
        ua, ub = int(usage.get(a.uid, 0.0)), int(usage.get(b.uid, 0.0))
        if ua > 0 and ub > 0:
            return -1 if ua > ub else (1 if ua < ub else 0)
        if ua > 0:
            return -1
        if ub > 0:
            return 1
        return -1 if a.name > b.name else (1 if a.name < b.name else 0)

    return compare


#: what the usage features release, as take_victims counts it
_BYTES = "bytes"


def _memory_credit(usage: Mapping[str, float]) -> Callable[[PodMeta], tuple[str, float]]:
    return lambda pod: (_BYTES, float(int(usage.get(pod.uid, 0.0))))


class MemoryEvict:
    NAME = NAME

    def __init__(self, interval: float = 1.0, cooldown: float = 4.0) -> None:
        self.interval = interval
        self.cooldown = cooldown

    def enabled(self, snapshot: Snapshot) -> tuple[bool, str]:
        return any_gate_enabled(snapshot, _CHECKS)

    def plan(self, snapshot: Snapshot) -> Plan:
        runs = {
            BE_MEMORY_EVICT: self._be_memory,
            MEMORY_ALLOCATABLE_EVICT: allocatable_run(MEMORY_ALLOCATABLE_EVICT, REASON_ALLOCATABLE, "memory"),
            MEMORY_EVICT: self._memory,
        }
        return plan_evictions(snapshot, NAME, "memory", _CHECKS, runs, snapshot.pod_memory)

    def _pressure(
        self, snapshot: Snapshot, plan: Plan, config: ResourceThresholdStrategy, feature: str, capacity: int
    ) -> tuple[int, str] | None:
        """(bytes to release, why) when node memory is at or above the eviction threshold."""
        high = config.memory_evict_threshold_percent
        assert high is not None
        low = memory_lower_percent(config, high)
        window = 2 * snapshot.collect_interval
        used = snapshot.metrics.last(NODE_MEMORY_USAGE, snapshot.now - window, snapshot.now)
        if used is None:
            plan.note(f"{feature}: no node memory usage in the last {window:g}s")
            return None
        percent = int(used) * 100 // capacity
        if percent < high:
            return None
        release = capacity * (percent - low) // 100
        return (
            release,
            f"node memory usage {percent}% >= {high}%, releasing {release} bytes to reach {low}%",
        )

    def _be_memory(
        self,
        snapshot: Snapshot,
        plan: Plan,
        config: ResourceThresholdStrategy,
        capacity: int,
        usage: Mapping[str, float],
        chosen: dict[str, Eviction],
    ) -> None:
        pressure = self._pressure(snapshot, plan, config, BE_MEMORY_EVICT, capacity)
        if pressure is None:
            return
        release, why = pressure
        victims = [
            p
            for p in snapshot.pods
            if get_pod_qos_class_raw(p.pod) is QoSClass.BE
            and podspec.is_active(p)  # a finished pod releases nothing
            and allowed(p, BE_MEMORY_EVICT)
        ]
        victims.sort(key=functools.cmp_to_key(be_victim_order(usage)))
        credit = _memory_credit(usage)
        take_victims(
            plan,
            BE_MEMORY_EVICT,
            REASON_USAGE,
            {_BYTES: release},
            victims,
            credit,
            chosen,
            why,
            refused=snapshot.unevictable,
        )

    def _memory(
        self,
        snapshot: Snapshot,
        plan: Plan,
        config: ResourceThresholdStrategy,
        capacity: int,
        usage: Mapping[str, float],
        chosen: dict[str, Eviction],
    ) -> None:
        pressure = self._pressure(snapshot, plan, config, MEMORY_EVICT, capacity)
        if pressure is None:
            return
        release, why = pressure
        limit = config.evict_enabled_priority_threshold
        assert limit is not None
        victims = enabled_victims(snapshot, MEMORY_EVICT, limit, usage)
        victims.sort(key=priority_victim_key(lambda p: -usage[p.uid]))
        # fixed: credit each victim its memory use in bytes (upstream multiplies by 1000)
        credit = _memory_credit(usage)
        take_victims(
            plan,
            MEMORY_EVICT,
            REASON_USAGE,
            {_BYTES: release},
            victims,
            credit,
            chosen,
            why,
            refused=snapshot.unevictable,
        )


#: the features, in the order they run, with what refuses their configuration
_CHECKS: dict[str, ConfigCheck] = {
    BE_MEMORY_EVICT: usage_threshold_error,
    MEMORY_ALLOCATABLE_EVICT: allocatable_check("memory"),
    MEMORY_EVICT: enabled_usage_threshold_error,
}
