"""The order in which LowNodeLoad visits source nodes and their pods, and in which
arbitration takes waiting jobs' pods (upstream's ``utils/sorter``).

* Nodes: by weighted usage score, highest first. A resource's score is
  ``min(usage, allocatable) * 1000 // allocatable`` (0 without allocatable); the node's is the
  weighted mean over the resources it reports, integer-divided as upstream.
* Pods, the one evicted first first: lower Koordinator priority class (free, batch, mid,
  prod, then none), lower ``spec.priority``, lower Kubernetes QoS (BestEffort first), lower
  Koordinator QoS (BE first), then the pod whose usage best matches the node's overage
  (pods with no reported usage last), newer first.

The overage match is upstream's piecewise pod scorer (koordinator PRs 1962 and 2092): over
the resources the node is over its high threshold on only (weighted), a pod using a ratio
``r`` of the overage (usage minus threshold) scores ``r`` below 1 and ``1/r + 1`` from 1 up:
the smallest pod that alone brings the node back under its threshold comes first, then
larger ones, then those too small to do it alone, largest first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.api.extension.priority import PriorityClass, get_pod_priority_class_raw
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.kubeqos import KubeQOSClass, get_pod_qos
from koordinator.kube.timeutil import parse_time

__all__ = ["overage_score", "pod_order", "usage_score"]

Obj = Mapping[str, Any]

_PRIORITY_CLASS_ORDER = {
    PriorityClass.FREE: 1,
    PriorityClass.BATCH: 2,
    PriorityClass.MID: 3,
    PriorityClass.PROD: 4,
    PriorityClass.NONE: 5,
}
_QOS_ORDER = {
    QoSClass.BE: 1,
    QoSClass.LS: 2,
    QoSClass.LSR: 3,
    QoSClass.LSE: 4,
    QoSClass.SYSTEM: 4,
    QoSClass.NONE: 5,
}
_KUBE_QOS_ORDER = {KubeQOSClass.BEST_EFFORT: 1, KubeQOSClass.BURSTABLE: 2, KubeQOSClass.GUARANTEED: 3}


def usage_score(usage: Mapping[str, int], allocatable: Mapping[str, int], weights: Mapping[str, int]) -> int:
    """``ResourceUsageScorer``: the weighted mean of per-resource scores (0 to 1000)."""
    total = weight_sum = 0
    for name, used in usage.items():
        weight = weights.get(name, 0)
        capacity = allocatable.get(name, 0)
        score = 0 if capacity <= 0 else min(used, capacity) * 1000 // capacity
        total += score * weight
        weight_sum += weight
    return total // weight_sum if weight_sum else 0


def overage_score(usage: Mapping[str, int], overage: Mapping[str, int], weights: Mapping[str, int]) -> float:
    """The weighted piecewise match of a pod's usage to the node's overage (0 to 2)."""
    total = 0.0
    weight_sum = 0
    for name, over in overage.items():
        weight = weights.get(name, 0)
        if over <= 0 or weight <= 0:
            continue
        ratio = usage.get(name, 0) / over
        total += weight * (1 / ratio + 1 if ratio >= 1 else ratio)
        weight_sum += weight
    return total / weight_sum if weight_sum else 0.0


def _created(pod: Obj) -> float:
    raw = (pod.get("metadata") or {}).get("creationTimestamp")
    try:
        return parse_time(raw) if isinstance(raw, str) and raw else 0.0
    except ValueError:
        return 0.0


def pod_order(
    pod: Obj,
    pod_usage: Mapping[str, Mapping[str, int]],
    overage: Mapping[str, int],
    weights: Mapping[str, int],
    key: str,
) -> tuple[int, int, int, int, int, float, float]:
    """The sort key: ascending order is eviction order."""
    priority = (pod.get("spec") or {}).get("priority")
    usage = pod_usage.get(key)
    return (
        _PRIORITY_CLASS_ORDER[get_pod_priority_class_raw(pod)],
        priority if isinstance(priority, int) else 0,
        _KUBE_QOS_ORDER.get(get_pod_qos(pod), 3),
        _QOS_ORDER[get_pod_qos_class_raw(pod)],
        0 if usage is not None else 1,
        -overage_score(usage, overage, weights) if usage is not None else 0.0,
        -_created(pod),
    )
