"""What the CPU burst, CPU eviction and memory QoS strategies read from a pod's spec and status.

Quantities that do not parse count as absent (a strategy skips what it cannot read rather
than failing the round). CPU is in milli-cores; ``kubernetes.io/batch-cpu`` and
``kubernetes.io/mid-cpu`` are already integer milli-cores, so their plain value is used, as
upstream does. Memory is in bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from koordinator.api import resourcelist
from koordinator.api.extension.priority import DEFAULT_PRIORITY_VALUE, get_pod_priority_class_with_default
from koordinator.api.quantity import Quantity, QuantityError
from koordlet.statesinformer.podmeta import ContainerMeta, PodMeta


def quantity(resources: Mapping[str, Any] | None, name: str) -> int | None:
    """``resources[name]`` in milli-cores for ``cpu``, as a plain integer otherwise; None when
    absent or malformed."""
    raw = (resources or {}).get(name)
    if raw is None:
        return None
    try:
        parsed = Quantity.parse(str(raw))
    except QuantityError:
        return None
    return parsed.milli_value() if name == "cpu" else parsed.value()


def spec_containers(pod: Mapping[str, Any], *, sidecars: bool = False) -> Iterator[Mapping[str, Any]]:
    """The regular containers of the spec, then (with ``sidecars``) restartable init containers."""
    spec = pod.get("spec") or {}
    yield from spec.get("containers") or ()
    if sidecars:
        yield from (c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always")


def container_spec(pod: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    return next((c for c in spec_containers(pod) if c.get("name") == name), None)


def request(container: Mapping[str, Any], name: str) -> int | None:
    return quantity((container.get("resources") or {}).get("requests"), name)


def limit(container: Mapping[str, Any], name: str) -> int | None:
    return quantity((container.get("resources") or {}).get("limits"), name)


def pod_request(pod: Mapping[str, Any], name: str) -> int:
    """The pod's effective request (containers, init containers, overhead); 0 when unknown."""
    try:
        total = resourcelist.pod_requests(pod)
    except resourcelist.ResourceListError:
        return 0
    value = total.get(name)
    if value is None:
        return 0
    return value.milli_value() if name == "cpu" else value.value()


def sum_requests(pod: Mapping[str, Any], name: str) -> int:
    """Σ positive ``name`` requests of the containers and sidecars (batch resources)."""
    return sum(max(request(c, name) or 0, 0) for c in spec_containers(pod, sidecars=True))


def is_active(pod: PodMeta) -> bool:
    """Pending or Running (upstream's ``!IsPodInactive``)."""
    return pod.phase in ("Pending", "Running")


def container_status(pod: PodMeta, name: str) -> Mapping[str, Any] | None:
    status = pod.pod.get("status") or {}
    return next((s for s in status.get("containerStatuses") or () if s.get("name") == name), None)


def is_running(pod: PodMeta, container: ContainerMeta) -> bool:
    """The container status reports ``state.running``."""
    status = container_status(pod, container.name) or {}
    return (status.get("state") or {}).get("running") is not None


def spec_priority(pod: PodMeta) -> int | None:
    value = (pod.pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def priority_value(pod: PodMeta) -> int:
    """Upstream's ``GetPodPriorityValueWithDefault``: a non-zero ``spec.priority``, else the
    default value of the pod's priority class (from the label, the priority range, or its QoS
    class: LS/LSR/LSE/SYSTEM are koord-prod, 9500; BE is koord-batch, 5500; none is 0)."""
    value = spec_priority(pod)
    if value:
        return value
    return DEFAULT_PRIORITY_VALUE[get_pod_priority_class_with_default(pod.pod)]
