"""``ReservationInfo``: the scheduler's working record of one Reservation.

* ``allocatable`` -- what it holds (``status.allocatable`` once Available, else the
  template's pod requests; ``pods`` only when the template requests it).
* ``resource_names`` -- the keys of ``allocatable``; for the ``Restricted`` policy narrowed
  to ``reservation-restricted-options`` ``resources`` when that leaves any.
* ``reserved`` -- kept back inside the reservation (``node.koordinator.sh/reservation``
  on the Reservation: ``resources`` plus the size of ``reservedCPUs`` as cpu): held on
  the node with the rest (:meth:`~ReservationInfo.held`) but not for its owners to use
  (:meth:`~ReservationInfo.remaining`).
* ``allocated`` -- the sum of the assigned owner pods' requests restricted to
  ``resource_names``; pods are tracked by UID, adding twice or removing an unknown pod
  changes nothing, and removal never drives an amount below zero.
* ``allocate_policy`` (``""`` Default, ``Aligned``, ``Restricted``), ``allocate_once``
  (default true), ``owners``, ``taints``, ``order`` (the ``reservation-order`` label),
  ``unschedulable`` (``spec.unschedulable`` or being deleted).

A malformed owner selector or restricted-options annotation is kept as ``parse_error``;
such a reservation matches no pod and the transformer skips it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler.reservation.matching import OwnerMatcher, match_owners, parse_owner_matchers
from controlplane.scheduler.reservation.phases import is_available, node_name_of
from controlplane.scheduler.reservation.reservepod import (
    ReservationError,
    reservation_requests,
    template_priority,
)
from koordinator.api import resourcelist
from koordinator.api.cpuset import parse_cpuset
from koordinator.api.extension.annotations import AnnotationError, decode_json
from koordinator.api.extension.node import get_node_reservation
from koordinator.api.extension.reservation import (
    ANNOTATION_RESERVATION_RESTRICTED_OPTIONS,
    reservation_order,
)
from koordinator.api.quantity import Format, Quantity
from koordinator.api.resourcelist import ResourceList

__all__ = [
    "ALLOCATE_POLICY_ALIGNED",
    "ALLOCATE_POLICY_DEFAULT",
    "ALLOCATE_POLICY_RESTRICTED",
    "PodRequirement",
    "ReservationInfo",
    "restricted_resource_names",
]

ALLOCATE_POLICY_DEFAULT = ""
ALLOCATE_POLICY_ALIGNED = "Aligned"
ALLOCATE_POLICY_RESTRICTED = "Restricted"

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class PodRequirement:
    """An owner pod as the reservation remembers it."""

    namespace: str
    name: str
    uid: str
    requests: ResourceList


def restricted_resource_names(names: list[str], annotations: Mapping[str, str]) -> list[str]:
    """``reservation-restricted-options``: keep the listed names, or all when none is listed."""
    if not annotations.get(ANNOTATION_RESERVATION_RESTRICTED_OPTIONS):
        return names
    try:
        options = decode_json(annotations, ANNOTATION_RESERVATION_RESTRICTED_OPTIONS)
    except AnnotationError as exc:
        raise ReservationError(str(exc)) from None
    if not isinstance(options, Mapping):
        raise ReservationError(f"invalid {ANNOTATION_RESERVATION_RESTRICTED_OPTIONS}: not an object")
    listed = set(options.get("resources") or ())
    kept = [name for name in names if name in listed]
    return kept or names


def _reserved_inside(annotations: Mapping[str, str]) -> ResourceList:
    """``GetNodeReservationFromAnnotation`` on the Reservation; malformed means nothing."""
    try:
        reservation = get_node_reservation(annotations)
    except AnnotationError:
        return {}
    if reservation is None:
        return {}
    reserved = dict(reservation.resources)
    if reservation.reserved_cpus:
        try:
            cpus = parse_cpuset(reservation.reserved_cpus)
        except ValueError:
            return {}
        reserved["cpu"] = Quantity.from_int(len(cpus), Format.DECIMAL_SI)
    return reserved


@dataclass
class ReservationInfo:
    """See the module docstring; build one with :meth:`from_reservation`."""

    reservation: Obj
    allocatable: ResourceList
    resource_names: list[str]
    reserved: ResourceList = field(default_factory=dict)
    allocated: ResourceList = field(default_factory=dict)
    assigned_pods: dict[str, PodRequirement] = field(default_factory=dict)
    owner_matchers: list[OwnerMatcher] = field(default_factory=list)
    parse_error: str | None = None

    @classmethod
    def from_reservation(cls, reservation: Obj) -> ReservationInfo:
        meta = reservation.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        spec = reservation.get("spec") or {}
        errors: list[str] = []
        allocatable = reservation_requests(reservation)
        names = sorted(allocatable)
        if spec.get("allocatePolicy") == ALLOCATE_POLICY_RESTRICTED:
            try:
                names = restricted_resource_names(names, annotations)
            except ReservationError as exc:
                errors.append(str(exc))
        matchers: list[OwnerMatcher] = []
        try:
            matchers = parse_owner_matchers(spec.get("owners"))
        except ReservationError as exc:
            errors.append(str(exc))
        return cls(
            reservation=reservation,
            allocatable=allocatable,
            resource_names=names,
            reserved=_reserved_inside(annotations),
            owner_matchers=matchers,
            parse_error="; ".join(errors) or None,
        )

    # ---- identity and spec -------------------------------------------------------------------

    @property
    def _meta(self) -> Obj:
        return self.reservation.get("metadata") or {}

    @property
    def _spec(self) -> Obj:
        return self.reservation.get("spec") or {}

    @property
    def name(self) -> str:
        return str(self._meta.get("name") or "")

    @property
    def uid(self) -> str:
        return str(self._meta.get("uid") or "")

    @property
    def labels(self) -> Mapping[str, str]:
        return self._meta.get("labels") or {}

    @property
    def node_name(self) -> str:
        return node_name_of(self.reservation)

    @property
    def allocate_policy(self) -> str:
        return str(self._spec.get("allocatePolicy") or ALLOCATE_POLICY_DEFAULT)

    @property
    def allocate_once(self) -> bool:
        return self._spec.get("allocateOnce", True) is not False

    @property
    def owners(self) -> list[Obj]:
        return list(self._spec.get("owners") or ())

    @property
    def taints(self) -> list[Obj]:
        return list(self._spec.get("taints") or ())

    @property
    def order(self) -> int:
        """The ``reservation-order`` label; 0 (no preference) when absent or malformed."""
        return reservation_order(self.labels)

    @property
    def priority(self) -> int:
        return template_priority(self.reservation)

    @property
    def terminating(self) -> bool:
        return bool(self._meta.get("deletionTimestamp"))

    @property
    def unschedulable(self) -> bool:
        return bool(self._spec.get("unschedulable")) or self.terminating

    def is_available(self) -> bool:
        return is_available(self.reservation)

    # ---- owners --------------------------------------------------------------------------------

    def match_owners(self, pod: Obj) -> bool:
        return self.parse_error is None and match_owners(pod, self.owner_matchers)

    @property
    def allocated_pods(self) -> int:
        return len(self.assigned_pods)

    def add_assigned_pod(self, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if uid in self.assigned_pods:
            return
        requests = resourcelist.pod_requests(pod)
        self.allocated = resourcelist.add(self.allocated, resourcelist.mask(requests, self.resource_names))
        self.assigned_pods[uid] = PodRequirement(
            str(meta.get("namespace") or ""), str(meta.get("name") or ""), uid, requests
        )

    def remove_assigned_pod(self, pod: Obj) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        requirement = self.assigned_pods.pop(uid, None)
        if requirement is not None and requirement.requests:
            masked = resourcelist.mask(requirement.requests, self.resource_names)
            self.allocated = resourcelist.subtract_non_negative(self.allocated, masked)

    # ---- amounts -------------------------------------------------------------------------------

    def remaining(self) -> ResourceList:
        """``allocatable - allocated - reserved`` (may go negative, as upstream's arithmetic):
        what an owner may still take from the reservation."""
        return resourcelist.subtract(resourcelist.subtract(self.allocatable, self.allocated), self.reserved)

    def held(self) -> ResourceList:
        """``allocatable - allocated`` floored at zero: what the reservation keeps on its node
        for itself (upstream's reserve pod less its owners' share); ``reserved`` is part of
        it, kept from other pods and owners alike."""
        return resourcelist.subtract_non_negative(self.allocatable, self.allocated)

    def clone(self) -> ReservationInfo:
        return ReservationInfo(
            reservation=self.reservation,
            allocatable=dict(self.allocatable),
            resource_names=list(self.resource_names),
            reserved=dict(self.reserved),
            allocated=dict(self.allocated),
            assigned_pods=dict(self.assigned_pods),
            owner_matchers=list(self.owner_matchers),
            parse_error=self.parse_error,
        )
