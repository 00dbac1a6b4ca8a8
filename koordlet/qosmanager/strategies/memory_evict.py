"""MemoryEvict: evict pods when node memory runs short (features BEMemoryEvict,
MemoryAllocatableEvict and MemoryEvict).

* **BEMemoryEvict**: node memory used (``node_memory_usage``, last value within two
  collect intervals) at or above ``memoryEvictThresholdPercent`` (70) of capacity triggers
  it; enough BE pods are evicted to bring usage back to ``memoryEvictLowerPercent``
  (threshold - 2): ``release = capacity * (usage% - lower%) / 100`` with integer percents.
  Victims are BE pods whose ``koordinator.sh/eviction-policy`` allows the feature, lower
  ``spec.priority`` first (when both pods have one and they differ), then larger memory
  use; pods with no or zero usage last (by name, descending). Each victim releases its
  memory use.
* **MemoryAllocatableEvict**: the memory requests (batch-memory of koord-batch pods,
  mid-memory of koord-mid pods, memory otherwise) of pods up to
  ``allocatableEvictPriorityThreshold`` above ``memoryAllocatableEvictThresholdPercent``
  of allocatable; releases down to the lower percent, crediting each victim's request.
* **MemoryEvict** (needs ``evictEnabledPriorityThreshold``): like BEMemoryEvict over
  active pods labelled ``koordinator.sh/eviction-enabled=true`` with priority up to
  ``evictEnabledPriorityThreshold`` and a recent memory sample (a pod without one is not a
  candidate), ordered by ``koordinator.sh/eviction-priority``, ``spec.priority``,
  ``koordinator.sh/priority``, then larger use.

BEMemoryEvict and MemoryEvict need ``memoryEvictLowerPercent`` (default threshold - 2)
below ``memoryEvictThresholdPercent``; a feature whose configuration is refused plans
nothing and says why in a note, as upstream (which logs it).

Upstream bug fixed here: upstream's MemoryEvict multiplies each victim's memory use by
1000 (copied from the CPU variant, where usage is in cores), so the first victim always
"releases" enough and the usage may stay above the threshold. Victims here release their
memory use in bytes, and enough of them are chosen to reach the lower percent.

A pod already chosen by one feature counts towards the others. LSE, LSR and LS pods are
never victims (the evictor refuses them): the next candidate is taken instead. The runner waits
``--memory-evict-cool-time-seconds`` (4 s) after an eviction before planning again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.constants import eviction_enabled, eviction_policy, eviction_priority
from koordinator.api.extension.priority import (
    LABEL_POD_PRIORITY,
    PriorityClass,
    get_pod_priority_class_with_default,
)
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.extension.resources import BATCH_MEMORY, MID_MEMORY
from koordinator.api.sloconfig.nodeslo import feature_disabled_by_node_slo
from koordinator.api.types.slo import ResourceThresholdStrategy
from koordlet.metriccache.kinds import NODE_MEMORY_USAGE
from koordlet.qosmanager.framework import PROTECTED, Eviction, Plan, Snapshot
from koordlet.qosmanager.strategies import podspec
from koordlet.statesinformer.podmeta import PodMeta

NAME = "MemoryEvict"
BE_MEMORY_EVICT = "BEMemoryEvict"
MEMORY_ALLOCATABLE_EVICT = "MemoryAllocatableEvict"
MEMORY_EVICT = "MemoryEvict"
REASON_USAGE = "evictPodByNodeMemoryUsage"
REASON_ALLOCATABLE = "evictPodByNodeMemoryAllocatable"
DEFAULT_ALLOCATABLE_PRIORITY_THRESHOLD = 7999
RELEASE_BUFFER_PERCENT = 2

#: what refuses a feature's configuration: the reason, or None when it may run
ConfigCheck = Callable[[ResourceThresholdStrategy], str | None]


def any_gate_enabled(snapshot: Snapshot, features: Mapping[str, ConfigCheck]) -> tuple[bool, str]:
    """An eviction strategy runs when any of its features' gates is on."""
    if not any(snapshot.gates.enabled(f) for f in features):
        return False, f"feature gates {', '.join(features)} are off"
    return True, ""


def features_to_run(
    snapshot: Snapshot, plan: Plan, features: Mapping[str, ConfigCheck]
) -> Iterator[tuple[str, ResourceThresholdStrategy]]:
    """(feature, its configuration) for those of ``features`` (in order) whose gate is on,
    that the NodeSLO does not disable and whose configuration their check accepts; the
    others, but those with the gate off, are noted in ``plan`` with the reason."""
    config = snapshot.node_slo.resource_used_threshold_with_be
    for feature, check in features.items():
        if not snapshot.gates.enabled(feature):
            continue
        disabled, why = feature_disabled_by_node_slo(snapshot.node_slo, feature)
        if disabled:
            plan.note(f"{feature} disabled by NodeSLO: {why or 'enable=false'}")
            continue
        invalid = "no resourceUsedThresholdWithBE in the NodeSLO" if config is None else check(config)
        if invalid:
            plan.note(f"{feature}: invalid config: {invalid}")
            continue
        assert config is not None
        yield feature, config


def usage_threshold_error(config: ResourceThresholdStrategy) -> str | None:
    """BEMemoryEvict's configuration (upstream's check): a threshold, and a lower percent
    (default threshold - 2) under it."""
    threshold = config.memory_evict_threshold_percent
    if threshold is None:
        return "memoryEvictThresholdPercent not set"
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


def enabled_victims(
    snapshot: Snapshot, feature: str, priority_limit: int, usage: Mapping[str, float]
) -> list[PodMeta]:
    """Upstream's candidates of the eviction-enabled features: active pods labelled
    ``koordinator.sh/eviction-enabled=true``, with ``spec.priority`` (0 when unset) up to
    ``priority_limit``, a recent sample in ``usage``, and an eviction policy that lets
    ``feature`` evict them."""
    return [
        p
        for p in snapshot.pods
        if podspec.is_active(p)
        and allowed(p, feature)
        and (podspec.spec_priority(p) or 0) <= priority_limit
        and eviction_enabled(p.labels)
        and p.uid in usage
    ]


def allowed(pod: PodMeta, feature: str) -> bool:
    """``koordinator.sh/eviction-policy`` absent, or naming ``feature``."""
    try:
        policy = eviction_policy(pod.annotations)
    except AnnotationError:
        return False
    return policy is None or feature in policy


def take_victims(
    plan: Plan,
    feature: str,
    reason: str,
    release: Mapping[str, float],
    victims: list[PodMeta],
    credit: Callable[[PodMeta], tuple[str, float]],
    chosen: dict[str, Eviction],
    why: str,
) -> None:
    """Choose ``victims`` in order until every resource in ``release`` is released (``credit``
    says what evicting a pod releases, of which resource); pods already chosen by another
    feature count first. An LSE, LSR or LS pod is passed over (the evictor never evicts
    those) and the next candidate taken. What the candidates cannot release, and the
    protected pods passed over, are noted in the plan."""
    released = dict.fromkeys(release, 0.0)
    passed_over: list[str] = []
    for pod in victims:
        if pod.uid in chosen:
            resource, amount = credit(pod)
            if resource in released:
                released[resource] += amount

    def short() -> list[str]:
        return [r for r, need in release.items() if released[r] < need]

    for pod in victims:
        if not short():
            break
        if pod.uid in chosen:
            continue
        resource, amount = credit(pod)
        if resource not in short():
            continue
        if pod.qos in PROTECTED:
            passed_over.append(f"{pod.key} ({pod.qos})")
            continue
        chosen[pod.uid] = Eviction(pod, feature, reason, f"{why}; koordlet feature {feature}")
        released[resource] += amount
    if passed_over:
        plan.note(f"{feature}: passed over {', '.join(passed_over)}: LSE, LSR and LS pods are never evicted")
    for resource in short():
        plan.note(
            f"{feature}: candidates release {released[resource]:.0f} of the "
            f"{release[resource]:.0f} {resource} needed"
        )


def be_victim_order(usage: Mapping[str, float]) -> Callable[[PodMeta, PodMeta], int]:
    """Upstream's BE order: priority (when both set and different), then usage desc,
    zero/unknown usage last, name descending among those."""

    def compare(a: PodMeta, b: PodMeta) -> int:
        pa, pb = podspec.spec_priority(a), podspec.spec_priority(b)
        if pa is not None and pb is not None and pa != pb:
            return -1 if pa < pb else 1
        ua, ub = usage.get(a.uid, 0.0), usage.get(b.uid, 0.0)
        if ua > 0 and ub > 0:
            return -1 if ua > ub else (1 if ua < ub else 0)
        if ua > 0:
            return -1
        if ub > 0:
            return 1
        return -1 if a.name > b.name else (1 if a.name < b.name else 0)

    return compare


def _label_priority(pod: PodMeta) -> int:
    try:
        return int(pod.labels.get(LABEL_POD_PRIORITY, "0"))
    except ValueError:
        return 0


def priority_victim_key(usage: Mapping[str, float]) -> Callable[[PodMeta], tuple[float, ...]]:
    """MemoryEvict/CPUEvict order: eviction-priority, spec.priority, koordinator.sh/priority
    ascending, then usage descending."""

    def key(pod: PodMeta) -> tuple[float, ...]:
        try:
            evict_priority = eviction_priority(pod.annotations)
        except AnnotationError:
            evict_priority = None
        return (
            float(evict_priority if evict_priority is not None else 0),
            float(podspec.spec_priority(pod) or 0),
            float(_label_priority(pod)),
            -usage.get(pod.uid, 0.0),
        )

    return key


def _requests(pod: PodMeta) -> int:
    """A pod's memory request in the resource its priority class uses."""
    priority = get_pod_priority_class_with_default(pod.pod)
    name = {PriorityClass.BATCH: BATCH_MEMORY, PriorityClass.MID: MID_MEMORY}.get(priority, "memory")
    spec = pod.pod.get("spec") or {}
    return sum(
        podspec.request(c, name) or 0
        for field in ("containers", "initContainers")
        for c in spec.get(field) or ()
    )


#: what memory evictions release, as take_victims counts it
_BYTES = "bytes"


def _memory_credit(usage: Mapping[str, float]) -> Callable[[PodMeta], tuple[str, float]]:
    return lambda pod: (_BYTES, usage.get(pod.uid, 0.0))


def _request_credit(pod: PodMeta) -> tuple[str, float]:
    return _BYTES, float(_requests(pod))


class MemoryEvict:
    NAME = NAME

    def __init__(self, interval: float = 1.0, cooldown: float = 4.0) -> None:
        self.interval = interval
        self.cooldown = cooldown

    def enabled(self, snapshot: Snapshot) -> tuple[bool, str]:
        return any_gate_enabled(snapshot, _CHECKS)

    def plan(self, snapshot: Snapshot) -> Plan:
        plan = Plan(NAME)
        node = snapshot.node or {}
        status = node.get("status") or {}
        capacity = podspec.quantity(status.get("capacity"), "memory") or 0
        if capacity <= 0:
            return plan.note("node memory capacity unknown")
        window = 2 * snapshot.collect_interval
        pod_memory = snapshot.pod_memory(window)
        chosen: dict[str, Eviction] = {}
        runs = {
            BE_MEMORY_EVICT: self._be_memory,
            MEMORY_ALLOCATABLE_EVICT: self._allocatable,
            MEMORY_EVICT: self._memory,
        }
        for feature, config in features_to_run(snapshot, plan, _CHECKS):
            runs[feature](snapshot, plan, config, capacity, pod_memory, chosen)
        plan.evictions = list(chosen.values())
        return plan

    def _pressure(
        self, snapshot: Snapshot, plan: Plan, config: ResourceThresholdStrategy, feature: str, capacity: int
    ) -> tuple[float, str] | None:
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
        release = capacity * (percent - low) / 100
        return (
            release,
            f"node memory usage {percent}% >= {high}%, releasing {release:.0f} bytes to reach {low}%",
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
            if get_pod_qos_class_raw(p.pod) is QoSClass.BE and allowed(p, BE_MEMORY_EVICT)
        ]
        victims.sort(key=functools.cmp_to_key(be_victim_order(usage)))
        credit = _memory_credit(usage)
        take_victims(plan, BE_MEMORY_EVICT, REASON_USAGE, {_BYTES: release}, victims, credit, chosen, why)

    def _allocatable(
        self,
        snapshot: Snapshot,
        plan: Plan,
        threshold: ResourceThresholdStrategy,
        capacity: int,
        usage: Mapping[str, float],
        chosen: dict[str, Eviction],
    ) -> None:
        high = threshold.memory_allocatable_evict_threshold_percent
        if high is None:
            return
        low = threshold.memory_allocatable_evict_lower_percent
        low = low if low is not None else high - 2
        status = (snapshot.node or {}).get("status") or {}
        allocatable = podspec.quantity(status.get("allocatable"), "memory") or capacity
        limit = threshold.allocatable_evict_priority_threshold or DEFAULT_ALLOCATABLE_PRIORITY_THRESHOLD
        candidates = [
            p
            for p in snapshot.pods
            if (podspec.spec_priority(p) or 0) <= limit and allowed(p, MEMORY_ALLOCATABLE_EVICT)
        ]
        requested = sum(_requests(p) for p in candidates)
        if requested * 100 <= allocatable * high:
            return
        release = requested - allocatable * low / 100
        candidates.sort(key=priority_victim_key(usage))
        why = f"requests {requested} bytes exceed {high}% of allocatable, releasing {release:.0f} bytes"
        take_victims(
            plan,
            MEMORY_ALLOCATABLE_EVICT,
            REASON_ALLOCATABLE,
            {_BYTES: release},
            candidates,
            _request_credit,
            chosen,
            why,
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
        victims.sort(key=priority_victim_key(usage))
        # fixed: credit each victim its memory use in bytes (upstream multiplies by 1000)
        credit = _memory_credit(usage)
        take_victims(plan, MEMORY_EVICT, REASON_USAGE, {_BYTES: release}, victims, credit, chosen, why)


#: the features, in the order they run, with what refuses their configuration;
#: MemoryAllocatableEvict checks its own (an unset threshold turns it off)
_CHECKS: dict[str, ConfigCheck] = {
    BE_MEMORY_EVICT: usage_threshold_error,
    MEMORY_ALLOCATABLE_EVICT: lambda _config: None,
    MEMORY_EVICT: enabled_usage_threshold_error,
}
