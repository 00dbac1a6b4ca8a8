"""Could a pod run on another node? (upstream's ``descheduler/node`` ``PodFitsAnyNode``)

A node fits a pod when it is schedulable, the pod tolerates its ``NoSchedule``/``NoExecute``
taints, the pod's ``nodeSelector`` and required node affinity match it, and its allocatable
minus the requests of the pods already on it holds the pod's requests (``pods`` counting one
per pod). The pod's current node never fits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from koordinator.api import resourcelist
from koordinator.api.quantity import Quantity
from koordinator.api.selectors import node_fields, node_selector_matches
from koordinator.api.taints import untolerated_taint

__all__ = ["fits_any", "misfit"]

Obj = Mapping[str, Any]


def _active(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def misfit(pod: Obj, node: Obj, pods_on_node: Sequence[Obj]) -> str | None:
    """Why ``pod`` cannot go to ``node`` (None: it can)."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "")
    spec = pod.get("spec") or {}
    if spec.get("nodeName") == name:
        return "the pod's own node"
    if (node.get("spec") or {}).get("unschedulable"):
        return "node is unschedulable"
    taint = untolerated_taint(spec.get("tolerations") or (), (node.get("spec") or {}).get("taints") or ())
    if taint is not None:
        return f"untolerated taint {taint.get('key')}={taint.get('value') or ''}:{taint.get('effect')}"
    labels = meta.get("labels") or {}
    selector = spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return "node(s) didn't match Pod's node selector"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required and not node_selector_matches(required, labels, node_fields(node)):
        return "node(s) didn't match Pod's node affinity"
    allocatable = resourcelist.parse((node.get("status") or {}).get("allocatable"))
    used = resourcelist.sum_of(resourcelist.pod_requests(p) for p in pods_on_node if _active(p))
    used["pods"] = Quantity.from_int(sum(1 for p in pods_on_node if _active(p)))
    request = resourcelist.pod_requests(pod)
    request["pods"] = Quantity.from_int(1)
    short = resourcelist.fits(request, resourcelist.subtract(allocatable, used))
    if short:
        return "insufficient " + ", ".join(short)
    return None


def fits_any(pod: Obj, nodes: Iterable[Obj], pods_on_node: Callable[[str], Sequence[Obj]]) -> Obj | None:
    """The first node of ``nodes`` the pod fits (None: none)."""
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name") or "")
        if misfit(pod, node, pods_on_node(name)) is None:
            return node
    return None
