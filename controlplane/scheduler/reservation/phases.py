"""Where a Reservation stands: its phase, conditions and node, read from the object dict.

The predicates follow ``pkg/util/reservation``: *active* = placed on a node and Available
or Waiting (owners may allocate), *available* = placed and Available, *failed* /
*succeeded* by phase alone, *expired* = Failed with a Ready condition that is False for the
reason ``Expired`` (the first Ready condition decides).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "CONDITION_FALSE",
    "CONDITION_READY",
    "CONDITION_SCHEDULED",
    "CONDITION_TRUE",
    "CONDITION_UNKNOWN",
    "PHASE_AVAILABLE",
    "PHASE_FAILED",
    "PHASE_PENDING",
    "PHASE_SUCCEEDED",
    "PHASE_WAITING",
    "REASON_AVAILABLE",
    "REASON_EXPIRED",
    "REASON_SCHEDULED",
    "REASON_SUCCEEDED",
    "REASON_UNSCHEDULABLE",
    "conditions_of",
    "is_active",
    "is_available",
    "is_expired",
    "is_failed",
    "is_succeeded",
    "node_name_of",
    "phase_of",
]

PHASE_PENDING = "Pending"
PHASE_AVAILABLE = "Available"
PHASE_SUCCEEDED = "Succeeded"
PHASE_WAITING = "Waiting"
PHASE_FAILED = "Failed"

CONDITION_SCHEDULED = "Scheduled"
CONDITION_READY = "Ready"

CONDITION_TRUE = "True"
CONDITION_FALSE = "False"
CONDITION_UNKNOWN = "Unknown"

REASON_SCHEDULED = "Scheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_AVAILABLE = "Available"
REASON_SUCCEEDED = "Succeeded"
REASON_EXPIRED = "Expired"


def _status(reservation: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not reservation:
        return {}
    return reservation.get("status") or {}


def phase_of(reservation: Mapping[str, Any] | None) -> str:
    return str(_status(reservation).get("phase") or "")


def node_name_of(reservation: Mapping[str, Any] | None) -> str:
    """``status.nodeName``: where the scheduler placed the reservation ("" while pending)."""
    return str(_status(reservation).get("nodeName") or "")


def conditions_of(reservation: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list(_status(reservation).get("conditions") or ())


def is_active(reservation: Mapping[str, Any] | None) -> bool:
    """Placed, and Available or Waiting: owners may allocate from it."""
    return bool(node_name_of(reservation)) and phase_of(reservation) in (PHASE_AVAILABLE, PHASE_WAITING)


def is_available(reservation: Mapping[str, Any] | None) -> bool:
    return bool(node_name_of(reservation)) and phase_of(reservation) == PHASE_AVAILABLE


def is_succeeded(reservation: Mapping[str, Any] | None) -> bool:
    return phase_of(reservation) == PHASE_SUCCEEDED


def is_failed(reservation: Mapping[str, Any] | None) -> bool:
    return phase_of(reservation) == PHASE_FAILED


def is_expired(reservation: Mapping[str, Any] | None) -> bool:
    """Failed, and the first Ready condition is False with reason ``Expired``."""
    if not is_failed(reservation):
        return False
    for condition in conditions_of(reservation):
        if condition.get("type") == CONDITION_READY:
            return condition.get("status") == CONDITION_FALSE and condition.get("reason") == REASON_EXPIRED
    return False
