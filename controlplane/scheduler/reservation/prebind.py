"""PreBind: record on the pod which reservation it was placed into.

The ``scheduling.koordinator.sh/reservation-allocated`` annotation is Go's JSON of
``{"name", "uid"}`` (each omitted when empty, no spaces), e.g.
``{"name":"r1","uid":"6f1c..."}``. Reserve pods and ``reservation-ignored`` pods get none.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from controlplane.scheduler.reservation.reservepod import is_reserve_pod
from koordinator.api.extension.reservation import (
    ANNOTATION_RESERVATION_ALLOCATED,
    ReservationAllocated,
    is_reservation_ignored,
)

__all__ = ["reservation_allocated_value", "with_reservation_allocated"]


def reservation_allocated_value(name: str, uid: str) -> str:
    """The annotation's text for the reservation ``name``/``uid``."""
    return ReservationAllocated(name=name, uid=uid).to_json()


def with_reservation_allocated(pod: Mapping[str, Any], reservation: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``pod`` annotated as allocated from ``reservation`` (unchanged for reserve
    pods and ``reservation-ignored`` pods)."""
    updated: dict[str, Any] = copy.deepcopy(dict(pod))
    meta = updated.setdefault("metadata", {})
    if is_reserve_pod(pod) or is_reservation_ignored(meta.get("labels")):
        return updated
    r_meta = reservation.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    annotations[ANNOTATION_RESERVATION_ALLOCATED] = reservation_allocated_value(
        str(r_meta.get("name") or ""), str(r_meta.get("uid") or "")
    )
    meta["annotations"] = annotations
    return updated
