"""Node usage, thresholds and classification for one node pool (upstream's
``utilization_util.go``).

Every amount is an integer: CPU in milli-cores, everything else in units. A node's usage is
its NodeMetric's ``systemUsage`` plus the sum of its ``podsMetric`` usages for each
thresholded resource, and ``pods`` is the number of its pods that have not ended; its *prod*
usage is the sum over its prod pods alone. Nodes without a NodeMetric, or with one that
carries no ``nodeMetric`` or whose ``updateTime`` is older than
``nodeMetricExpirationSeconds``, are skipped.

Thresholds are percentages of the node's allocatable (the ``raw-allocatable`` annotation's
values over ``status.allocatable``): ``int(percent * 0.01 * allocatable)``. A resource with no
low threshold gets 100% for both (0% in deviation mode, where it is then not checked). In
deviation mode the percentages are relative to the pool's mean usage: low = mean - low%,
high = mean + high%, each clamped to [0, 100].

A node is *under* its low thresholds when it is schedulable and every resource is at or
under its low threshold, *over* its high thresholds when any resource is over its high
threshold; with prod thresholds set, the same tests on its prod usage apply to the prod
thresholds. The plug-in combines the two into upstream's classes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordinator.api import resourcelist
from koordinator.api.extension.annotations import AnnotationError, get_resource_list
from koordinator.api.extension.node import ANNOTATION_NODE_RAW_ALLOCATABLE
from koordinator.api.extension.priority import (
    PriorityClass,
    get_pod_priority_class_with_default,
    priority_class_by_name,
)
from koordinator.api.quantity import Quantity
from koordinator.nodemetrics import NodeMetricRecord

__all__ = [
    "CPU",
    "MEMORY",
    "PODS",
    "NodeThresholds",
    "NodeUsage",
    "amount",
    "is_over",
    "is_under",
    "node_allocatable",
    "node_thresholds",
    "node_usages",
    "percentages",
    "pod_key",
    "resolve_percents",
]

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
MIN_PERCENT = 0.0
MAX_PERCENT = 100.0

Obj = Mapping[str, Any]
Percents = Mapping[str, float]


def amount(name: str, quantity: Quantity) -> int:
    """A quantity as the integer the thresholds compare: milli-cores for CPU, else units."""
    return quantity.milli_value() if name == CPU else quantity.value()


def pod_key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def node_allocatable(node: Obj) -> dict[str, int]:
    """``status.allocatable`` with the ``raw-allocatable`` annotation's values over it (a
    malformed annotation is ignored)."""
    parsed = resourcelist.parse((node.get("status") or {}).get("allocatable"))
    try:
        raw = get_resource_list(
            (node.get("metadata") or {}).get("annotations"), ANNOTATION_NODE_RAW_ALLOCATABLE
        )
    except AnnotationError:
        raw = None
    parsed.update(raw or {})
    return {name: amount(name, quantity) for name, quantity in parsed.items()}


def is_prod(pod: Obj | None, reported: str) -> bool:
    """A prod pod: the priority class the koordlet reported for it, else the pod's own."""
    if reported:
        return priority_class_by_name(reported) is PriorityClass.PROD
    return pod is not None and get_pod_priority_class_with_default(pod) is PriorityClass.PROD


@dataclass
class NodeUsage:
    node: Obj
    name: str
    #: the pods on the node that have not ended
    pods: list[Obj]
    allocatable: dict[str, int]
    usage: dict[str, int]
    prod_usage: dict[str, int]
    #: ``namespace/name`` -> the pod's reported usage
    pod_usage: dict[str, dict[str, int]]
    #: the keys of its prod pods: by the priority class the koordlet reported, else (a pod the
    #: NodeMetric does not report) the pod's own
    prod_pods: set[str] = field(default_factory=set)

    @property
    def schedulable(self) -> bool:
        return not (self.node.get("spec") or {}).get("unschedulable")


def node_usages(
    nodes: Iterable[Obj],
    pods_on_node: Callable[[str], Sequence[Obj]],
    metrics: Mapping[str, NodeMetricRecord],
    resources: Sequence[str],
    expiration_s: int | None,
    now: float,
) -> tuple[dict[str, NodeUsage], dict[str, str]]:
    """The usage of each node that has a current NodeMetric, and why each other node was
    skipped."""
    usages: dict[str, NodeUsage] = {}
    skipped: dict[str, str] = {}
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name") or "")
        record = metrics.get(name)
        if record is None:
            skipped[name] = "no NodeMetric"
            continue
        if record.node_usage is None:
            skipped[name] = "NodeMetric has no nodeMetric status"
            continue
        if expiration_s is not None and (
            record.update_time is None or (expiration_s > 0 and now - record.update_time >= expiration_s)
        ):
            skipped[name] = f"NodeMetric expired (older than {expiration_s}s)"
            continue
        pods = [pod for pod in pods_on_node(name) if _active(pod)]
        by_key = {pod_key(pod): pod for pod in pods}
        usage = {r: record.system_usage.get(r, 0) for r in resources}
        prod_usage = dict.fromkeys(resources, 0)
        pod_usage: dict[str, dict[str, int]] = {}
        prod_pods: set[str] = set()
        for key, entry in record.pods.items():
            pod_usage[key] = dict(entry.usage)
            prod = is_prod(by_key.get(key), entry.priority)
            if prod:
                prod_pods.add(key)
            for r in resources:
                value = entry.usage.get(r, 0)
                usage[r] += value
                if prod:
                    prod_usage[r] += value
        usage[PODS] = len(pods)
        prod_usage[PODS] = sum(1 for pod in pods if is_prod(pod, "") or pod_key(pod) in prod_pods)
        # a prod pod the NodeMetric does not report yet is still one of the node's prod pods
        prod_pods.update(key for key, pod in by_key.items() if key not in record.pods and is_prod(pod, ""))
        usages[name] = NodeUsage(
            node, name, pods, node_allocatable(node), usage, prod_usage, pod_usage, prod_pods
        )
    return usages, skipped


def _active(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def resolve_percents(
    deviation: bool, low: Percents | None, high: Percents | None, always: Sequence[str] = (MEMORY,)
) -> tuple[dict[str, float], dict[str, float]]:
    """``newThresholds``: every resource named by either map (and ``always``) gets a value;
    one without a low threshold gets 100% (deviation: 0%) for both -- upstream overrides
    its high threshold too, so such a resource is never balanced."""
    lows = dict(low or {})
    highs = dict(high or {})
    names = [*lows, *highs, *always]
    fill = MIN_PERCENT if deviation else MAX_PERCENT
    for name in names:
        if name not in lows:
            lows[name] = fill
            highs[name] = fill
    return lows, highs


def _clamp(percent: float) -> float:
    return min(MAX_PERCENT, max(MIN_PERCENT, percent))


def _fraction(percent: float, capacity: int) -> int:
    return int(percent * 0.01 * capacity)


def mean_percentages(
    usages: Sequence[tuple[Mapping[str, int], Mapping[str, int]]], resources: Iterable[str]
) -> dict[str, float]:
    """The mean usage percentage per resource over (usage, allocatable) pairs (a node
    without the resource counts as 0%)."""
    means: dict[str, float] = {}
    for r in resources:
        total = 0.0
        for usage, allocatable in usages:
            capacity = allocatable.get(r, 0)
            if capacity > 0:
                total += 100.0 * usage.get(r, 0) / capacity
        means[r] = total / len(usages) if usages else 0.0
    return means


@dataclass(frozen=True)
class NodeThresholds:
    low: dict[str, int]
    high: dict[str, int]


def node_thresholds(
    usages: Mapping[str, NodeUsage],
    low: Percents,
    high: Percents,
    deviation: bool,
    usage_of: Callable[[NodeUsage], Mapping[str, int]] | None = None,
) -> dict[str, NodeThresholds]:
    """Each node's absolute thresholds; ``usage_of`` picks the usage the deviation mean is
    taken over (default: the node usage)."""
    resources = list(low)
    means: dict[str, float] = {}
    if deviation:
        pick = usage_of or (lambda u: u.usage)
        means = mean_percentages([(pick(u), u.allocatable) for u in usages.values()], resources)
    result: dict[str, NodeThresholds] = {}
    for name, u in usages.items():
        lows: dict[str, int] = {}
        highs: dict[str, int] = {}
        for r in resources:
            capacity = u.allocatable.get(r, 0)
            if not deviation:
                lows[r] = _fraction(low[r], capacity)
                highs[r] = _fraction(high[r], capacity)
            elif low[r] == MIN_PERCENT:
                lows[r] = highs[r] = capacity
            else:
                lows[r] = _fraction(_clamp(means[r] - low[r]), capacity)
                highs[r] = _fraction(_clamp(means[r] + high[r]), capacity)
        result[name] = NodeThresholds(lows, highs)
    return result


def is_under(usage: Mapping[str, int], thresholds: Mapping[str, int]) -> bool:
    """Every thresholded resource at or under its threshold."""
    return all(usage.get(r, 0) <= limit for r, limit in thresholds.items())


def is_over(usage: Mapping[str, int], thresholds: Mapping[str, int]) -> list[str]:
    """The thresholded resources over their threshold (sorted)."""
    return sorted(r for r, limit in thresholds.items() if usage.get(r, 0) > limit)


def percentages(usage: Mapping[str, int], allocatable: Mapping[str, int]) -> dict[str, float]:
    """Usage as a percentage of allocatable, per resource the node has."""
    return {
        r: 100.0 * value / allocatable[r]
        for r, value in usage.items()
        if allocatable.get(r, 0) > 0 and math.isfinite(value)
    }
