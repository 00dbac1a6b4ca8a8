"""Reservation protocol keys: the allocation record on pods, reservation affinity, ordering, reserve pods."""

from __future__ import annotations

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.annotations import get_model
from koordinator.api.extension.constants import SCHEDULING_DOMAIN_PREFIX
from koordinator.api.goparse import GoParseError, parse_int
from koordinator.api.model import Model, field
from koordinator.api.types.core import NodeSelectorTerm, Toleration

__all__ = [
    "ANNOTATION_EXACT_MATCH_RESERVATION",
    "ANNOTATION_IS_PRE_ALLOCATION",
    "ANNOTATION_RESERVATION_AFFINITY",
    "ANNOTATION_RESERVATION_ALLOCATED",
    "ANNOTATION_RESERVATION_NAME",
    "ANNOTATION_RESERVATION_NODE",
    "ANNOTATION_RESERVATION_RESTRICTED_OPTIONS",
    "ANNOTATION_RESERVE_POD",
    "LABEL_OPERATING_MODE",
    "LABEL_PRE_ALLOCATION_REQUIRED",
    "LABEL_RESERVATION_IGNORED",
    "LABEL_RESERVATION_ORDER",
    "ReservationAffinity",
    "ReservationAffinitySelector",
    "ReservationAllocated",
    "get_reservation_affinity",
    "get_reservation_allocated",
    "is_reservation_ignored",
    "reservation_order",
]

ANNOTATION_RESERVATION_ALLOCATED = SCHEDULING_DOMAIN_PREFIX + "/reservation-allocated"
ANNOTATION_RESERVATION_AFFINITY = SCHEDULING_DOMAIN_PREFIX + "/reservation-affinity"
#: Pod label ``"true"``: never place the pod into a reservation.
LABEL_RESERVATION_IGNORED = SCHEDULING_DOMAIN_PREFIX + "/reservation-ignored"
#: Reservation label: an integer, smaller is preferred, 0 is ignored.
LABEL_RESERVATION_ORDER = SCHEDULING_DOMAIN_PREFIX + "/reservation-order"
# Annotations of the scheduler's internal "reserve pod"; forbidden on real pods.
ANNOTATION_RESERVE_POD = SCHEDULING_DOMAIN_PREFIX + "/reserve-pod"
ANNOTATION_RESERVATION_NAME = SCHEDULING_DOMAIN_PREFIX + "/reservation-name"
ANNOTATION_RESERVATION_NODE = SCHEDULING_DOMAIN_PREFIX + "/reservation-node"
ANNOTATION_IS_PRE_ALLOCATION = SCHEDULING_DOMAIN_PREFIX + "/is-pre-allocation"
ANNOTATION_EXACT_MATCH_RESERVATION = SCHEDULING_DOMAIN_PREFIX + "/exact-match-reservation"
ANNOTATION_RESERVATION_RESTRICTED_OPTIONS = SCHEDULING_DOMAIN_PREFIX + "/reservation-restricted-options"
LABEL_PRE_ALLOCATION_REQUIRED = SCHEDULING_DOMAIN_PREFIX + "/pre-allocation-required"
#: ``Runnable`` or ``Reservation``.
LABEL_OPERATING_MODE = SCHEDULING_DOMAIN_PREFIX + "/operating-mode"


@dataclass
class ReservationAllocated(Model):
    """``reservation-allocated``: which reservation a pod was placed into."""

    name: str = field("name", default="")
    uid: str = field("uid", default="")


@dataclass
class ReservationAffinitySelector(Model):
    reservation_selector_terms: list[NodeSelectorTerm] = field("reservationSelectorTerms", factory=list)


@dataclass
class ReservationAffinity(Model):
    """``reservation-affinity``: which reservations a pod may (or must) use."""

    name: str = field("name", default="")
    required_during_scheduling_ignored_during_execution: ReservationAffinitySelector | None = field(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    reservation_selector: dict[str, str] = field("reservationSelector", factory=dict)
    tolerations: list[Toleration] = field("tolerations", factory=list)


def get_reservation_allocated(annotations: Mapping[str, Any] | None) -> ReservationAllocated | None:
    return get_model(annotations, ANNOTATION_RESERVATION_ALLOCATED, ReservationAllocated)


def get_reservation_affinity(annotations: Mapping[str, Any] | None) -> ReservationAffinity | None:
    return get_model(annotations, ANNOTATION_RESERVATION_AFFINITY, ReservationAffinity)


def is_reservation_ignored(labels: Mapping[str, str] | None) -> bool:
    return (labels or {}).get(LABEL_RESERVATION_IGNORED) == "true"


def reservation_order(labels: Mapping[str, str] | None) -> int:
    """The reservation's order label; 0 (no preference) when absent or not an integer."""
    raw = (labels or {}).get(LABEL_RESERVATION_ORDER)
    if not raw:
        return 0
    try:
        return parse_int(raw, 10, 64)
    except GoParseError:
        return 0
