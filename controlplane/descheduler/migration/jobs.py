"""PodMigrationJob vocabulary: phases, condition types, reasons and the status edits the
controller makes (upstream's ``pod_migration_job_types.go`` and ``migration/util``)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from koordinator.api.goparse import GoParseError, parse_duration_seconds
from koordinator.kube.timeutil import format_time, parse_time

Obj = Mapping[str, Any]

PHASE_PENDING = "Pending"
PHASE_RUNNING = "Running"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
PHASE_ABORTED = "Aborted"
TERMINAL = (PHASE_SUCCEEDED, PHASE_FAILED, PHASE_ABORTED)
STATUS_COMPLETE = "Complete"

COND_RESERVATION_CREATED = "ReservationCreated"
COND_RESERVATION_SCHEDULED = "ReservationScheduled"
COND_EVICTION = "Eviction"
COND_POD_SCHEDULED = "PodScheduled"
COND_POD_BOUND_RESERVATION = "PodBoundReservation"
COND_RESERVATION_BOUND = "ReservationBound"
COND_BOUND_POD_READY = "BoundPodReady"

REASON_TIMEOUT = "Timeout"
REASON_FAILED_CREATE_RESERVATION = "FailedCreateReservation"
REASON_RESERVATION_EXPIRED = "ReservationExpired"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_FORBIDDEN = "ForbiddenMigratePod"
REASON_MISSING_POD = "MissingPod"
REASON_MISSING_RESERVATION = "MissingReservation"
REASON_INVALID_POD_REF = "InvalidPodRef"
REASON_EVICTING = "Evicting"
REASON_EVICT_COMPLETE = "EvictComplete"
REASON_WAIT_FOR_BIND = "WaitForPodBindReservation"
REASON_WAIT_FOR_READY = "WaitForBoundPodReady"
REASON_RESERVATION_CREATED = "ReservationCreated"
REASON_RESERVATION_SCHEDULED = "ReservationScheduled"
REASON_POD_BOUND_RESERVATION = "PodBoundReservation"
REASON_BOUND_POD_READY = "BoundPodReady"
REASON_COMPLETE = "Complete"

TRUE, FALSE = "True", "False"


def meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def phase(job: Obj) -> str:
    return str((job.get("status") or {}).get("phase") or "")


def pod_ref(job: Obj) -> Mapping[str, Any]:
    return (job.get("spec") or {}).get("podRef") or {}


def reservation_ref(job: Obj) -> Mapping[str, Any]:
    return ((job.get("spec") or {}).get("reservationOptions") or {}).get("reservationRef") or {}


def ttl_seconds(job: Obj) -> float:
    raw = (job.get("spec") or {}).get("ttl")
    if not isinstance(raw, str) or not raw:
        return 0.0
    try:
        return parse_duration_seconds(raw)
    except GoParseError:
        return 0.0


def created(obj: Obj) -> float | None:
    raw = meta(obj).get("creationTimestamp")
    try:
        return parse_time(raw) if isinstance(raw, str) and raw else None
    except ValueError:
        return None


def condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in status.get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == kind:
            return c
    return None


class StatusEdit:
    """A working copy of a job's status; :attr:`changed` says whether it needs writing."""

    def __init__(self, job: Obj, now: float) -> None:
        self.status: dict[str, Any] = copy.deepcopy(dict(job.get("status") or {}))
        self.now = now
        self.changed = False

    def set(self, **fields: Any) -> None:
        for key, value in fields.items():
            if self.status.get(key) != value:
                self.status[key] = value
                self.changed = True

    def condition(self, kind: str, status: str, reason: str = "", message: str = "") -> bool:
        """Set a condition (and the job's status/reason/message from it); True when it changed."""
        conditions: list[dict[str, Any]] = self.status.setdefault("conditions", [])
        now = format_time(self.now)
        for c in conditions:
            if c.get("type") != kind:
                continue
            if (
                c.get("status") == status
                and c.get("reason", "") == reason
                and c.get("message", "") == message
            ):
                return False
            if c.get("status") != status:
                c["lastTransitionTime"] = now
            c.update(status=status, reason=reason, message=message, lastProbeTime=now)
            break
        else:
            conditions.append(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                }
            )
        self.status.update(status=kind, reason=reason, message=message)
        self.changed = True
        return True
