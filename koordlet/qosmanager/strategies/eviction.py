"""What the eviction strategies (CPUEvict, MemoryEvict) share: which features run, which
pods are candidates, in what order, and how victims are taken until enough is released.

* A feature runs when its gate is on, the NodeSLO switch ``resourceUsedThresholdWithBE.enable``
  is true and its configuration check accepts the thresholds (a refusal is a plan note).
* The eviction-enabled features (CPUEvict, MemoryEvict, CPUAllocatableEvict,
  MemoryAllocatableEvict) take active pods labelled ``koordinator.sh/eviction-enabled=true``
  whose priority (upstream's value with default: a non-zero ``spec.priority``, else the
  default of the pod's priority class) is at most the feature's priority threshold, whose
  ``koordinator.sh/eviction-policy`` allows the feature, and that have a recent usage sample
  of the strategy's resource; ordered by ``koordinator.sh/eviction-priority`` (0 when
  absent or not an int32), the priority, ``koordinator.sh/priority`` (the priority when
  absent or not a decimal integer), then a per-feature key.
* The allocatable features sum the requests of every pod up to the priority threshold per
  resource of its priority class (``batch-*`` for koord-batch, ``mid-*`` for koord-mid, the
  plain resource otherwise) and compare each sum with the node's allocatable of it.

Victims are taken in order until every resource to release is released. A pod another
feature already chose counts first (as upstream credits every evicted pod to every task).

Where upstream is plainly wrong, this koordlet does what upstream means, and says so:

* A candidate whose eviction releases nothing of what is still short (an allocatable
  feature's koord-free pod, or a koord-mid pod when only ``batch-*`` is over) is passed over;
  upstream evicts it anyway (its release counts as nothing) and goes on.
* Upstream's allocatable features compare the plain ``cpu``/``memory`` requests of pods
  outside koord-batch and koord-mid with the allocatable too, but no pod's eviction counts
  towards that release ("only koord-batch/koord-mid are supported"), so upstream would evict
  every candidate. Here it is only noted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.constants import eviction_enabled, eviction_policy, eviction_priority
from koordinator.api.extension.priority import (
    LABEL_POD_PRIORITY,
    PriorityClass,
    get_pod_priority_class_with_default,
)
from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY
from koordinator.api.sloconfig.nodeslo import feature_disabled_by_node_slo
from koordinator.api.types.slo import ResourceThresholdStrategy
from koordlet.qosmanager.framework import PROTECTED, Eviction, Plan, Snapshot
from koordlet.qosmanager.strategies import podspec
from koordlet.statesinformer.podmeta import PodMeta

#: what refuses a feature's configuration: the reason, or None when it may run
ConfigCheck = Callable[[ResourceThresholdStrategy], str | None]

#: the highest priority an allocatable feature may evict (koord-mid's top): prod is spared
PRIORITY_MID_MAX = 7999
#: the resource a koord-batch or koord-mid pod requests instead of ``cpu`` / ``memory``
CLASS_RESOURCES: dict[str, dict[PriorityClass, str]] = {
    "cpu": {PriorityClass.BATCH: BATCH_CPU, PriorityClass.MID: MID_CPU},
    "memory": {PriorityClass.BATCH: BATCH_MEMORY, PriorityClass.MID: MID_MEMORY},
}
#: the NodeSLO names of each allocatable feature's threshold and lower percent
_ALLOCATABLE_FIELDS = {
    "cpu": ("cpuAllocatableEvictThresholdPercent", "cpuAllocatableEvictLowerPercent"),
    "memory": ("memoryAllocatableEvictThresholdPercent", "memoryAllocatableEvictLowerPercent"),
}
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_DECIMAL = re.compile(r"[+-]?[0-9]+")


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


#: one feature of an eviction strategy: (snapshot, plan, its config, node capacity, pod usage by
#: uid, evictions chosen so far by pod uid) -> adds its evictions to the chosen ones
FeatureRun = Callable[
    [Snapshot, Plan, ResourceThresholdStrategy, int, Mapping[str, float], dict[str, Eviction]], None
]


def plan_evictions(
    snapshot: Snapshot,
    name: str,
    resource: str,
    checks: Mapping[str, ConfigCheck],
    runs: Mapping[str, FeatureRun],
    usage: Callable[[float], Mapping[str, float]],
) -> Plan:
    """An eviction strategy's plan: each of its features that may run (:func:`features_to_run`),
    in order, with the node's ``resource`` capacity and the pods' usage over the last two
    collection intervals; a pod chosen by several features is evicted once."""
    plan = Plan(name)
    capacity = snapshot.node.capacity.get(resource, 0)
    if capacity <= 0:
        return plan.note(f"node {'CPU' if resource == 'cpu' else resource} capacity unknown")
    used = usage(2 * snapshot.collect_interval)
    chosen: dict[str, Eviction] = {}
    for feature, config in features_to_run(snapshot, plan, checks):
        runs[feature](snapshot, plan, config, capacity, used, chosen)
    plan.evictions = list(chosen.values())
    return plan


def allocatable_check(resource: str) -> ConfigCheck:
    """The check of CPUAllocatableEvict (``resource="cpu"``) or MemoryAllocatableEvict
    (``"memory"``): a threshold, a lower percent under it and
    ``allocatableEvictPriorityThreshold`` up to 7999. Upstream's MemoryAllocatableEvict lets
    a missing lower percent through its check and then dereferences it (a crash); it is
    refused here."""

    threshold_field, lower_field = _ALLOCATABLE_FIELDS[resource]

    def check(config: ResourceThresholdStrategy) -> str | None:
        threshold, lower = _allocatable_percents(config, resource)
        if threshold is None:
            return f"{threshold_field} not set"
        if threshold < 0:
            return f"{threshold_field} {threshold} is negative"
        if lower is None:
            return f"{lower_field} not set"
        if lower >= threshold:
            return f"{lower_field} {lower} is not below the threshold {threshold}"
        priority = config.allocatable_evict_priority_threshold
        if priority is None:
            return "allocatableEvictPriorityThreshold not set"
        if priority > PRIORITY_MID_MAX:
            return f"allocatableEvictPriorityThreshold {priority} is above {PRIORITY_MID_MAX} (prod pods)"
        return None

    return check


def _allocatable_percents(config: ResourceThresholdStrategy, resource: str) -> tuple[int | None, int | None]:
    """(threshold, lower) percent of the allocatable feature of ``resource``."""
    if resource == "cpu":
        return config.cpu_allocatable_evict_threshold_percent, config.cpu_allocatable_evict_lower_percent
    return config.memory_allocatable_evict_threshold_percent, config.memory_allocatable_evict_lower_percent


def allowed(pod: PodMeta, feature: str) -> bool:
    """``koordinator.sh/eviction-policy`` absent, or naming ``feature``."""
    try:
        policy = eviction_policy(pod.annotations)
    except AnnotationError:
        return False
    return policy is None or feature in policy


def enabled_victims(
    snapshot: Snapshot, feature: str, priority_limit: int, usage: Mapping[str, float]
) -> list[PodMeta]:
    """The eviction-enabled features' candidates: active pods labelled
    ``koordinator.sh/eviction-enabled=true``, with a priority (with default) up to
    ``priority_limit``, a recent sample in ``usage``, and an eviction policy that lets
    ``feature`` evict them."""
    return [
        p
        for p in snapshot.pods
        if podspec.is_active(p)
        and allowed(p, feature)
        and podspec.priority_value(p) <= priority_limit
        and eviction_enabled(p.labels)
        and p.uid in usage
    ]


def _eviction_priority(pod: PodMeta) -> int:
    """``koordinator.sh/eviction-priority`` as upstream reads it: an int32, else 0."""
    try:
        value = eviction_priority(pod.annotations)
    except AnnotationError:
        return 0
    if value is None or not _INT32[0] <= value <= _INT32[1]:
        return 0
    return value


def _label_priority(pod: PodMeta, default: int) -> int:
    """``koordinator.sh/priority`` as upstream's eviction order reads it (``strconv.Atoi``):
    a decimal integer, else ``default``."""
    raw = pod.labels.get(LABEL_POD_PRIORITY)
    if raw is None or not _DECIMAL.fullmatch(raw):
        return default
    value = int(raw)
    return value if _INT64[0] <= value <= _INT64[1] else default


def priority_victim_key(last: Callable[[PodMeta], float]) -> Callable[[PodMeta], tuple[float, ...]]:
    """The eviction-enabled features' order: eviction-priority, priority (with default),
    ``koordinator.sh/priority`` (default: the priority), ascending; then ``last``."""

    def key(pod: PodMeta) -> tuple[float, ...]:
        priority = podspec.priority_value(pod)
        return (
            float(_eviction_priority(pod)),
            float(priority),
            float(_label_priority(pod, priority)),
            last(pod),
        )

    return key


def take_victims(
    plan: Plan,
    feature: str,
    reason: str,
    release: Mapping[str, float],
    victims: list[PodMeta],
    credit: Callable[[PodMeta], tuple[str, float]],
    chosen: dict[str, Eviction],
    why: str,
    *,
    refused: AbstractSet[str],
) -> None:
    """Choose ``victims`` in order until every resource in ``release`` is released (``credit``
    says what evicting a pod releases, of which resource); every pod another feature already
    chose counts first. A pod that releases none of what is still short, an LSE, LSR or LS
    pod (the evictor never evicts those), or one whose eviction was ``refused`` lately, is
    passed over for the next candidate (upstream tries the next candidate in the same round
    once an eviction fails). What the candidates cannot release, and the pods passed over,
    are noted in the plan."""
    released = dict.fromkeys(release, 0.0)
    passed_over: list[str] = []
    refused_over: list[str] = []
    for eviction in chosen.values():
        resource, amount = credit(eviction.pod)
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
        if pod.uid in refused:
            refused_over.append(pod.key)
            continue
        chosen[pod.uid] = Eviction(pod, feature, reason, f"{why}; koordlet feature {feature}")
        released[resource] += amount
    if passed_over:
        plan.note(f"{feature}: passed over {', '.join(passed_over)}: LSE, LSR and LS pods are never evicted")
    if refused_over:
        plan.note(f"{feature}: passed over {', '.join(refused_over)}: their eviction was refused lately")
    for resource in short():
        plan.note(
            f"{feature}: candidates release {released[resource]:.0f} of the "
            f"{release[resource]:.0f} {resource} needed"
        )


def class_request(pod: PodMeta, base: str) -> tuple[str, int]:
    """The resource of ``base`` (``cpu`` or ``memory``) the pod's priority class requests,
    and how much: Σ positive ``batch-*``/``mid-*`` requests of the containers and sidecars,
    else the pod's effective ``base`` request (milli-cores for CPU, bytes for memory)."""
    resource = CLASS_RESOURCES[base].get(get_pod_priority_class_with_default(pod.pod), base)
    if resource == base:
        return resource, podspec.pod_request(pod.pod, base)
    return resource, podspec.sum_requests(pod.pod, resource)


def allocatable_run(feature: str, reason: str, base: str) -> FeatureRun:
    """The run of CPUAllocatableEvict (``base="cpu"``) or MemoryAllocatableEvict (``"memory"``):
    :func:`evict_by_allocatable` with the feature's name and eviction reason."""

    def run(
        snapshot: Snapshot,
        plan: Plan,
        config: ResourceThresholdStrategy,
        capacity: int,
        usage: Mapping[str, float],
        chosen: dict[str, Eviction],
    ) -> None:
        evict_by_allocatable(snapshot, plan, config, feature, reason, base, usage, chosen)

    return run


def evict_by_allocatable(
    snapshot: Snapshot,
    plan: Plan,
    config: ResourceThresholdStrategy,
    feature: str,
    reason: str,
    base: str,
    usage: Mapping[str, float],
    chosen: dict[str, Eviction],
) -> None:
    """CPUAllocatableEvict (``base="cpu"``) or MemoryAllocatableEvict (``"memory"``), its
    configuration already checked: per class resource, the requests of the pods up to
    ``allocatableEvictPriorityThreshold`` against the node's allocatable of it; above the
    threshold percent ``release = requested - lower% * allocatable`` (everything requested
    when the node has none of it). Victims: the eviction-enabled candidates (``usage`` holds
    the samples they need), larger request of the class resource first among equals; each
    releases that request."""
    high, low = _allocatable_percents(config, base)
    limit = config.allocatable_evict_priority_threshold
    assert high is not None
    assert low is not None
    assert limit is not None
    requested: dict[str, int] = {}
    for pod in snapshot.pods:
        # a finished pod's requests hold nothing (upstream counts them, so completed Jobs
        # on the node could have running pods evicted)
        if podspec.priority_value(pod) > limit or not podspec.is_active(pod):
            continue
        resource, amount = class_request(pod, base)
        requested[resource] = requested.get(resource, 0) + amount
    release: dict[str, float] = {}
    for resource, amount in sorted(requested.items()):
        allocatable = snapshot.node.allocatable.get(resource, 0)
        if allocatable <= 0:
            over = amount
        elif amount / allocatable > high / 100:
            over = int(amount - low / 100 * allocatable)
        else:
            continue
        if over <= 0:
            continue
        if resource == base:
            plan.note(
                f"{feature}: {base} requests of pods outside koord-batch and koord-mid ({amount}) "
                f"exceed {high}% of allocatable {allocatable}: nothing evicted for them (upstream "
                f"releases only koord-batch and koord-mid requests)"
            )
            continue
        release[resource] = over
    if not release:
        return
    victims = enabled_victims(snapshot, feature, limit, usage)
    victims.sort(key=priority_victim_key(lambda p: -class_request(p, base)[1]))
    why = "requests exceed " + ", ".join(
        f"{high}% of allocatable {r} (releasing {v:.0f})" for r, v in sorted(release.items())
    )
    take_victims(
        plan,
        feature,
        reason,
        release,
        victims,
        lambda p: class_request(p, base),
        chosen,
        why,
        refused=snapshot.unevictable,
    )
