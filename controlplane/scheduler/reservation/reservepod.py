"""The reserve pod: the stand-in pod the scheduler places for a Reservation, and the way back.

:func:`reserve_pod` builds it as ``NewReservePod`` does: the template's metadata and spec,
named and identified by the Reservation's UID (namespace ``default`` unless the template
sets one), the Reservation's labels and annotations laid over the template's, the
``reserve-pod: "true"`` and ``reservation-name`` annotations, a template ``nodeName`` moved
into the ``reservation-node`` annotation, ``status.nodeName`` as the pod's node once bound,
priority = template priority, else the Reservation's ``koordinator.sh/priority`` label
(an int32), else MaxInt32, the template's scheduler name (``default-scheduler`` when
empty), phase Succeeded / Failed for finished reservations, and, for an Available
reservation whose template requests differ from ``status.allocatable``, its container
resources replaced by one fake container requesting exactly the allocatable.

Pods and Reservations are plain dicts as the API returns them; nothing here mutates its
arguments.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from controlplane.scheduler.reservation.phases import (
    is_available,
    is_expired,
    is_failed,
    is_succeeded,
    node_name_of,
)
from koordinator.api import resourcelist
from koordinator.api.extension.annotations import AnnotationError, decode_json
from koordinator.api.extension.constants import SCHEDULING_DOMAIN_PREFIX
from koordinator.api.extension.priority import LABEL_POD_PRIORITY
from koordinator.api.extension.reservation import (
    ANNOTATION_RESERVATION_NAME,
    ANNOTATION_RESERVATION_NODE,
    ANNOTATION_RESERVE_POD,
)
from koordinator.api.goparse import GoParseError, parse_int
from koordinator.api.resourcelist import ResourceList

__all__ = [
    "ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE",
    "DEFAULT_NAMESPACE",
    "DEFAULT_SCHEDULER_NAME",
    "FAKE_CONTAINER_NAME",
    "MAX_INT32",
    "ReservationError",
    "is_reserve_pod",
    "reservation_key",
    "reservation_name_of",
    "reservation_requests",
    "reserve_pod",
    "reserve_pod_namespaced_name",
    "reserve_pod_node_name",
    "resize_allocatable",
    "scheduler_name",
    "template_priority",
    "validate_reservation",
]

#: Reservation annotation ``{"resources": ResourceList}``: allocatable overrides taken at Bind
ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE = SCHEDULING_DOMAIN_PREFIX + "/reservation-resize-allocatable"
DEFAULT_NAMESPACE = "default"
DEFAULT_SCHEDULER_NAME = "default-scheduler"
FAKE_CONTAINER_NAME = "__internal_fake_container__"
MAX_INT32 = 2**31 - 1


class ReservationError(ValueError):
    """A Reservation (or a pod's reservation annotation) the scheduler cannot use."""


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _template(reservation: Mapping[str, Any]) -> Mapping[str, Any] | None:
    template = (reservation.get("spec") or {}).get("template")
    return template if isinstance(template, Mapping) else None


def _template_spec(reservation: Mapping[str, Any]) -> Mapping[str, Any]:
    return (_template(reservation) or {}).get("spec") or {}


def reservation_key(reservation: Mapping[str, Any]) -> str:
    """The reserve pod's name and UID: the Reservation's UID."""
    return str(_meta(reservation).get("uid") or "")


def scheduler_name(reservation: Mapping[str, Any]) -> str:
    return str(_template_spec(reservation).get("schedulerName") or DEFAULT_SCHEDULER_NAME)


def template_priority(reservation: Mapping[str, Any]) -> int:
    """``spec.template.spec.priority``, 0 when unset (the ReservationInfo priority)."""
    priority = _template_spec(reservation).get("priority")
    return int(priority) if priority is not None else 0


def resize_allocatable(reservation: Mapping[str, Any]) -> ResourceList:
    """The ``reservation-resize-allocatable`` overrides (empty when absent)."""
    annotations = _meta(reservation).get("annotations") or {}
    if not annotations.get(ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE):
        return {}
    try:
        data = decode_json(annotations, ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE)
        if not isinstance(data, Mapping):
            raise ReservationError(f"invalid {ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE}: not an object")
        return resourcelist.parse(data.get("resources"))
    except (AnnotationError, resourcelist.ResourceListError) as exc:
        raise ReservationError(str(exc)) from None


def reservation_requests(reservation: Mapping[str, Any]) -> ResourceList:
    """What the reservation holds: ``status.allocatable`` once Available, else the template's
    pod requests (``pods`` only when the template requests it explicitly)."""
    if is_available(reservation):
        return resourcelist.parse((reservation.get("status") or {}).get("allocatable"))
    if _template(reservation) is None:
        return {}
    return resourcelist.pod_requests({"spec": _template_spec(reservation)})


def validate_reservation(reservation: Mapping[str, Any]) -> None:
    """``ValidateReservation``: a template and at least one owner.

    Upstream also demands ``ttl`` or ``expires``; there the CRD defaults ``ttl`` to 24h, so
    only the first two checks can fail on a stored object. This CRD has no such default
    (it would break the ttl/expires exclusivity rule), and the 24h default is applied where
    the TTL is read, so a Reservation without either is valid here as it is upstream.
    """
    spec = reservation.get("spec") or {}
    if _template(reservation) is None:
        raise ReservationError("the reservation misses the template spec")
    if not spec.get("owners"):
        raise ReservationError("the reservation misses the owner spec")


def reserve_pod(reservation: Mapping[str, Any]) -> dict[str, Any]:
    """The reserve pod of ``reservation`` (see the module docstring)."""
    template = _template(reservation) or {}
    metadata: dict[str, Any] = copy.deepcopy(dict(template.get("metadata") or {}))
    spec: dict[str, Any] = copy.deepcopy(dict(template.get("spec") or {}))
    meta = _meta(reservation)

    key = reservation_key(reservation)
    metadata["name"] = key
    metadata["uid"] = key
    if not metadata.get("namespace"):
        metadata["namespace"] = DEFAULT_NAMESPACE
    labels = dict(metadata.get("labels") or {})
    labels.update(meta.get("labels") or {})
    metadata["labels"] = labels
    annotations = dict(metadata.get("annotations") or {})
    annotations.update(meta.get("annotations") or {})
    annotations[ANNOTATION_RESERVE_POD] = "true"
    annotations[ANNOTATION_RESERVATION_NAME] = str(meta.get("name") or "")
    metadata["annotations"] = annotations

    if spec.get("nodeName"):
        # the pinned node is checked by Filter; other plug-ins must not see it before binding
        annotations[ANNOTATION_RESERVATION_NODE] = spec["nodeName"]
        spec["nodeName"] = ""
    if node_name := node_name_of(reservation):
        spec["nodeName"] = node_name

    if spec.get("priority") is None:
        spec["priority"] = _label_priority(meta.get("labels") or {})
    spec["schedulerName"] = scheduler_name(reservation)

    pod: dict[str, Any] = {"metadata": metadata, "spec": spec, "status": {}}
    if is_succeeded(reservation):
        pod["status"]["phase"] = "Succeeded"
    elif is_expired(reservation) or is_failed(reservation):
        pod["status"]["phase"] = "Failed"

    if is_available(reservation):
        allocatable = resourcelist.parse((reservation.get("status") or {}).get("allocatable"))
        requests = resourcelist.pod_requests(pod)
        if not resourcelist.equal(requests, allocatable):
            _replace_with_fake_container(spec, {**requests, **allocatable})
    return pod


def _label_priority(labels: Mapping[str, str]) -> int:
    """The ``koordinator.sh/priority`` label as an int32, else MaxInt32 (never preempted)."""
    raw = labels.get(LABEL_POD_PRIORITY)
    if raw:
        try:
            return parse_int(raw, 10, 32)
        except GoParseError:
            pass
    return MAX_INT32


def _replace_with_fake_container(spec: dict[str, Any], requests: ResourceList) -> None:
    spec.pop("overhead", None)
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            container["resources"] = {}
    amounts = resourcelist.to_json(requests)
    spec["containers"] = [
        *(spec.get("containers") or ()),
        {"name": FAKE_CONTAINER_NAME, "resources": {"limits": dict(amounts), "requests": dict(amounts)}},
    ]


def reserve_pod_namespaced_name(reservation: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of the reserve pod without building it."""
    namespace = str(_meta(_template(reservation)).get("namespace") or DEFAULT_NAMESPACE)
    return namespace, reservation_key(reservation)


def is_reserve_pod(pod: Mapping[str, Any] | None) -> bool:
    return (_meta(pod).get("annotations") or {}).get(ANNOTATION_RESERVE_POD) == "true"


def reservation_name_of(pod: Mapping[str, Any] | None) -> str:
    """The Reservation a reserve pod stands for ("" for other pods)."""
    return str((_meta(pod).get("annotations") or {}).get(ANNOTATION_RESERVATION_NAME) or "")


def reserve_pod_node_name(pod: Mapping[str, Any] | None) -> str:
    """The node the Reservation's template pins ("" when it pins none)."""
    return str((_meta(pod).get("annotations") or {}).get(ANNOTATION_RESERVATION_NODE) or "")
