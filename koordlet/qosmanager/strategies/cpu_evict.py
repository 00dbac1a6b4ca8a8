"""CPUEvict: evict pods when CPU runs short (features BECPUEvict, CPUAllocatableEvict, CPUEvict).

Each feature needs its gate and the NodeSLO switch ``resourceUsedThresholdWithBE.enable``;
they run in that order and a pod chosen by one counts towards the others.

* **BECPUEvict** (needs ``cpuEvictBESatisfactionLowerPercent`` in (0, 60] and
  ``cpuEvictBESatisfactionUpperPercent`` in (0, 100), upper >= lower): over
  ``window = max(collect interval, cpuEvictTimeWindowSeconds)`` the average BE CPU usage,
  request and real limit (``node_be``, milli-cores) — enough of them only when
  ``count * interval >= window / 3`` (integer seconds). The limit is the real limit, or with
  ``cpuEvictPolicy=evictByAllocatable`` the node's allocatable ``kubernetes.io/batch-cpu``
  (0 counts as 1 milli-core, absent as unknown). BE pods must use at least
  ``cpuEvictBEUsageThresholdPercent`` (90) of a limit of one core or more (below one core
  always counts; no limit never does). ``satisfaction = limit / request``; at or under the
  lower percent, ``release = int(request * (upper% - satisfaction))`` milli batch-cpu. The
  same with the last values (two collect intervals) unless request and limit are unchanged;
  the smaller release wins. Victims: active BE pods (label) the eviction policy allows (upstream
  also takes finished ones, crediting a request they no longer hold), lower
  ``spec.priority`` first when both pods have one and they differ, else higher
  ``usage / batch-cpu request``; each releases its batch-cpu request (containers and sidecars).
* **CPUAllocatableEvict** (needs ``cpuAllocatableEvictThresholdPercent``, a lower percent
  under it and ``allocatableEvictPriorityThreshold`` up to 7999): per resource —
  ``kubernetes.io/batch-cpu`` of koord-batch pods, ``kubernetes.io/mid-cpu`` of koord-mid
  pods — the requests of pods up to that priority against the node's allocatable of the
  same resource; above the threshold percent, ``release = requested - lower% * allocatable``
  (everything requested when the node has none of it). Victims: the eviction-enabled
  candidates of the classes over their threshold, larger request first among equals; each
  releases its request.
* **CPUEvict** (needs ``cpuEvictThresholdPercent``, a lower percent under it — default
  threshold - 2 — and ``evictEnabledPriorityThreshold``): average node CPU over the window;
  ``usage% = int(used * 1000) * 100 / capacity milli``; at or above the threshold,
  ``release = capacity * (usage% - lower%) / 100`` milli-cores. Victims release their last
  CPU use, larger use first among equals.

CPUAllocatableEvict and CPUEvict take the eviction-enabled candidates with a recent CPU
sample (see :mod:`.eviction`, also for where this koordlet deliberately differs from
upstream). LSE, LSR and LS pods are never victims. The runner waits
``--cpu-evict-cool-time-seconds`` (20 s) after an eviction before planning again, and as
upstream also for that long after it starts (``cooldown_from_start``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.extension.resources import BATCH_CPU
from koordinator.api.types.slo import ResourceThresholdStrategy
from koordlet.metriccache.kinds import (
    BE_REAL_LIMIT,
    BE_REQUEST,
    BE_USAGE,
    NODE_BE,
    NODE_CPU_USAGE,
)
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

NAME = "CPUEvict"
BE_CPU_EVICT = "BECPUEvict"
CPU_ALLOCATABLE_EVICT = "CPUAllocatableEvict"
CPU_EVICT = "CPUEvict"
REASON_SATISFACTION = "evictPodByBECPUSatisfaction"
REASON_USAGE = "evictPodByNodeCPUUsage"
REASON_ALLOCATABLE = "evictPodByNodeCPUAllocatable"

SATISFACTION_LOWER_MAX = 60
SATISFACTION_UPPER_MAX = 100
BE_USAGE_THRESHOLD = 90
RELEASE_BUFFER_PERCENT = 2
MIN_ALLOCATABLE_BATCH_MILLI = 1


def satisfaction_config_error(config: ResourceThresholdStrategy) -> str | None:
    lower = config.cpu_evict_be_satisfaction_lower_percent
    upper = config.cpu_evict_be_satisfaction_upper_percent
    if lower is None or upper is None:
        return "cpuEvictBESatisfactionLowerPercent or cpuEvictBESatisfactionUpperPercent not set"
    if not 0 < lower <= SATISFACTION_LOWER_MAX:
        return f"cpuEvictBESatisfactionLowerPercent {lower} not in (0, {SATISFACTION_LOWER_MAX}]"
    if not 0 < upper < SATISFACTION_UPPER_MAX:
        return f"cpuEvictBESatisfactionUpperPercent {upper} not in (0, {SATISFACTION_UPPER_MAX})"
    if upper < lower:
        return f"cpuEvictBESatisfactionUpperPercent {upper} < cpuEvictBESatisfactionLowerPercent {lower}"
    return None


def usage_threshold_config_error(config: ResourceThresholdStrategy) -> str | None:
    threshold = config.cpu_evict_threshold_percent
    if threshold is None:
        return "cpuEvictThresholdPercent not set"
    if threshold < 0:
        return f"cpuEvictThresholdPercent {threshold} is negative"
    lower = config.cpu_evict_lower_percent
    lower = lower if lower is not None else threshold - RELEASE_BUFFER_PERCENT
    if lower >= threshold:
        return f"cpuEvictLowerPercent {lower} is not below cpuEvictThresholdPercent {threshold}"
    if config.evict_enabled_priority_threshold is None:
        return "evictEnabledPriorityThreshold not set"
    return None


def be_usage_high_enough(usage: float, limit: float, threshold_percent: int | None) -> bool:
    """BE pods use enough of their limit for eviction to help (a limit under a core always does)."""
    if limit <= 0:
        return False
    if limit < 1000:
        return True
    threshold = threshold_percent if threshold_percent is not None else BE_USAGE_THRESHOLD
    return usage / limit >= threshold / 100


def release_by_satisfaction(request: float, limit: float, lower_percent: int, upper_percent: int) -> int:
    """``int(request * (upper% - limit / request))`` when the satisfaction is at most lower%, else 0."""
    if request <= 0:
        return 0
    satisfaction = limit / request
    if satisfaction > lower_percent / 100:
        return 0
    gap = upper_percent / 100 - satisfaction
    if gap <= 0:
        return 0
    return int(request * gap)


def batch_cpu_request(pod: PodMeta) -> int:
    """Σ ``kubernetes.io/batch-cpu`` requests of the containers and sidecars (milli-cores)."""
    return podspec.sum_requests(pod.pod, BATCH_CPU)


@dataclass(frozen=True)
class _BEValues:
    usage: float
    request: float
    limit: float
    count: int


class CPUEvict:
    NAME = NAME

    #: as upstream, the cooldown also runs from the start (no eviction in the first 20 s)
    cooldown_from_start = True

    def __init__(self, interval: float = 1.0, cooldown: float = 20.0) -> None:
        self.interval = interval
        self.cooldown = cooldown

    def enabled(self, snapshot: Snapshot) -> tuple[bool, str]:
        return any_gate_enabled(snapshot, FEATURES)

    def plan(self, snapshot: Snapshot) -> Plan:
        runs = {
            BE_CPU_EVICT: self._be_satisfaction,
            CPU_ALLOCATABLE_EVICT: allocatable_run(CPU_ALLOCATABLE_EVICT, REASON_ALLOCATABLE, "cpu"),
            CPU_EVICT: self._usage,
        }
        return plan_evictions(snapshot, NAME, "cpu", FEATURES, runs, snapshot.pod_cpu)

    # --- BECPUEvict ------------------------------------------------------------------------------

    def _be_values(self, snapshot: Snapshot, start: float, aggregate: str) -> _BEValues:
        query = snapshot.metrics.avg if aggregate == "avg" else snapshot.metrics.last
        values: dict[str, float] = {}
        counts: list[int] = []
        for allocation in (BE_USAGE, BE_REQUEST, BE_REAL_LIMIT):
            labels = {"be_resource": "cpu", "be_allocation": allocation}
            values[allocation] = query(NODE_BE, start, snapshot.now, **labels) or 0.0
            counts.append(snapshot.metrics.count(NODE_BE, start, snapshot.now, **labels))
        return _BEValues(values[BE_USAGE], values[BE_REQUEST], values[BE_REAL_LIMIT], min(counts))

    def _be_allocatable(self, snapshot: Snapshot) -> float:
        value = snapshot.node.allocatable.get(BATCH_CPU)
        if value is None or value < 0:
            return -1.0
        return float(value) if value > 0 else float(MIN_ALLOCATABLE_BATCH_MILLI)

    def _be_satisfaction(
        self,
        snapshot: Snapshot,
        plan: Plan,
        config: ResourceThresholdStrategy,
        capacity: int,
        usage: Mapping[str, float],
        chosen: dict[str, Eviction],
    ) -> None:
        lower = config.cpu_evict_be_satisfaction_lower_percent
        upper = config.cpu_evict_be_satisfaction_upper_percent
        assert lower is not None
        assert upper is not None
        threshold = config.cpu_evict_be_usage_threshold_percent
        interval = int(snapshot.collect_interval)
        window = max(interval, config.cpu_evict_time_window_seconds or 0)
        by_allocatable = config.cpu_evict_policy == "evictByAllocatable"
        allocatable = self._be_allocatable(snapshot)
        average = self._be_values(snapshot, snapshot.now - window, "avg")
        if average.count * interval < window // 3:
            plan.note(f"{BE_CPU_EVICT}: {average.count} BE samples in {window}s are not enough")
            return
        limit = allocatable if by_allocatable else average.limit
        if not be_usage_high_enough(average.usage, limit, threshold):
            plan.note(f"{BE_CPU_EVICT}: average BE usage {average.usage:.0f}m of {limit:.0f}m is not high")
            return
        release = release_by_satisfaction(average.request, limit, lower, upper)
        if release <= 0:
            plan.note(
                f"{BE_CPU_EVICT}: average BE request {average.request:.0f}m, limit {limit:.0f}m: satisfied"
            )
            return
        current = self._be_values(snapshot, snapshot.now - 2 * snapshot.collect_interval, "last")
        current_limit = allocatable if by_allocatable else current.limit
        if not be_usage_high_enough(current.usage, current_limit, threshold):
            plan.note(f"{BE_CPU_EVICT}: last BE usage {current.usage:.0f}m of {current_limit:.0f}m is low")
            return
        request = average.request
        if current.request != average.request or current_limit != limit:
            now_release = release_by_satisfaction(current.request, current_limit, lower, upper)
            if now_release <= 0:
                plan.note(
                    f"{BE_CPU_EVICT}: last BE request {current.request:.0f}m, "
                    f"limit {current_limit:.0f}m: satisfied"
                )
                return
            if now_release < release:
                release, request, limit = now_release, current.request, current_limit
        requests = {p.uid: batch_cpu_request(p) for p in snapshot.pods}
        ratio = {uid: int(usage.get(uid, 0.0) * 1000) / r if r > 0 else 0.0 for uid, r in requests.items()}

        def compare(a: PodMeta, b: PodMeta) -> int:
            pa, pb = podspec.spec_priority(a), podspec.spec_priority(b)
            if pa is not None and pb is not None and pa != pb:
                return -1 if pa < pb else 1
            ra, rb = ratio[a.uid], ratio[b.uid]
            if ra != rb:
                return -1 if ra > rb else 1
            return -1 if a.name < b.name else (1 if a.name > b.name else 0)

        victims = [
            p
            for p in snapshot.pods
            if get_pod_qos_class_raw(p.pod) is QoSClass.BE
            and podspec.is_active(p)
            and allowed(p, BE_CPU_EVICT)
        ]
        victims.sort(key=functools.cmp_to_key(compare))
        why = (
            f"BE CPU satisfaction {limit / request:.2f} <= {lower}%, "
            f"releasing {release}m batch-cpu towards {upper}%"
        )
        take_victims(
            plan,
            BE_CPU_EVICT,
            REASON_SATISFACTION,
            {BATCH_CPU: release},
            victims,
            lambda p: (BATCH_CPU, requests.get(p.uid, 0)),
            chosen,
            why,
            refused=snapshot.unevictable,
        )

    # --- CPUEvict ----------------------------------------------------------------------------------

    def _usage(
        self,
        snapshot: Snapshot,
        plan: Plan,
        config: ResourceThresholdStrategy,
        capacity: int,
        usage: Mapping[str, float],
        chosen: dict[str, Eviction],
    ) -> None:
        threshold = config.cpu_evict_threshold_percent
        limit = config.evict_enabled_priority_threshold
        assert threshold is not None
        assert limit is not None
        lower = config.cpu_evict_lower_percent
        lower = lower if lower is not None else threshold - RELEASE_BUFFER_PERCENT
        window = max(int(snapshot.collect_interval), config.cpu_evict_time_window_seconds or 0)
        used = snapshot.metrics.avg(NODE_CPU_USAGE, snapshot.now - window, snapshot.now)
        if used is None:
            plan.note(f"{CPU_EVICT}: no node CPU usage in the last {window}s")
            return
        percent = int(used * 1000) * 100 // capacity
        if percent < threshold:
            return
        release = capacity * (percent - lower) // 100
        victims = enabled_victims(snapshot, CPU_EVICT, limit, usage)
        victims.sort(key=priority_victim_key(lambda p: -usage[p.uid]))
        why = f"node CPU usage {percent}% >= {threshold}%, releasing {release}m to reach {lower}%"
        take_victims(
            plan,
            CPU_EVICT,
            REASON_USAGE,
            {"cpu": release},
            victims,
            lambda p: ("cpu", int(usage.get(p.uid, 0.0) * 1000)),
            chosen,
            why,
            refused=snapshot.unevictable,
        )


#: the features, in the order they run, with what refuses their configuration
FEATURES: dict[str, ConfigCheck] = {
    BE_CPU_EVICT: satisfaction_config_error,
    CPU_ALLOCATABLE_EVICT: allocatable_check("cpu"),
    CPU_EVICT: usage_threshold_config_error,
}
