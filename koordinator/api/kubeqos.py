"""The Kubernetes QoS class of a pod dict, as ``v1qos.GetPodQOS`` computes it.

``status.qosClass`` wins when set; otherwise the class is computed from the spec exactly as
the kubelet does: only ``cpu`` and ``memory`` count, zero quantities are ignored, init
containers count like regular ones, and pod-level ``spec.resources`` (when present) replace
the container sums. Guaranteed needs every container to limit both cpu and memory and every
request to equal its limit; no requests and no limits at all is BestEffort.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from koordinator.api import resourcelist
from koordinator.api.quantity import Quantity

__all__ = ["KubeQOSClass", "compute_pod_qos", "get_pod_qos"]

_QOS_RESOURCES = ("cpu", "memory")


class KubeQOSClass(StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


_BY_VALUE = {c.value: c for c in KubeQOSClass}


def _positive(resources: Mapping[str, Any] | None, where: str) -> dict[str, Quantity]:
    parsed = resourcelist.parse(resources, path=where)
    return {k: v for k, v in parsed.items() if k in _QOS_RESOURCES and v.sign() > 0}


def compute_pod_qos(pod: Mapping[str, Any]) -> KubeQOSClass:
    """``v1qos.ComputePodQOS`` on a pod dict (ignores ``status.qosClass``)."""
    spec = pod.get("spec") or {}
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    guaranteed = True
    pod_resources = spec.get("resources")
    if pod_resources:
        requests = _positive(pod_resources.get("requests"), "spec.resources.requests")
        limits = _positive(pod_resources.get("limits"), "spec.resources.limits")
        guaranteed = set(_QOS_RESOURCES) <= set(limits)
    else:
        for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
            resources = container.get("resources") or {}
            name = container.get("name", "")
            requests = resourcelist.add(requests, _positive(resources.get("requests"), f"{name}.requests"))
            own_limits = _positive(resources.get("limits"), f"{name}.limits")
            limits = resourcelist.add(limits, own_limits)
            if not set(_QOS_RESOURCES) <= set(own_limits):
                guaranteed = False
    if not requests and not limits:
        return KubeQOSClass.BEST_EFFORT
    requests_equal_limits = all(name in limits and limits[name] == value for name, value in requests.items())
    if guaranteed and requests_equal_limits and len(requests) == len(limits):
        return KubeQOSClass.GUARANTEED
    return KubeQOSClass.BURSTABLE


def get_pod_qos(pod: Mapping[str, Any]) -> KubeQOSClass:
    """``status.qosClass`` when set, else :func:`compute_pod_qos`."""
    status = (pod.get("status") or {}).get("qosClass")
    if isinstance(status, str) and status in _BY_VALUE:
        return _BY_VALUE[status]
    return compute_pod_qos(pod)
