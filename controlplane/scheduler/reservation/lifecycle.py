"""A Reservation's life after creation: binding, owners, expiry and garbage collection.

Each transition returns a new Reservation dict carrying the status upstream writes (the
argument is never changed), with every timestamp taken from the injected ``now`` (epoch
seconds):

* :func:`bind` / :func:`set_available` -- the reserve pod was bound: ``allocatable`` from
  the template (with ``reservation-resize-allocatable`` overrides), ``nodeName``, phase
  Available, conditions exactly ``[Scheduled True Scheduled, Ready True Available]``.
  Binding a Failed reservation is refused with ``reservation is not active``.
* :func:`set_unschedulable` -- a scheduling attempt failed: the Scheduled condition says
  why; the phase is kept (the reserve pod is retried).
* :func:`set_expired` -- phase Failed, Ready False ``Expired``.
* :func:`set_succeeded` -- an allocate-once reservation got its owner: phase Succeeded,
  Ready False ``Succeeded``.
* :func:`sync_owners` -- ``currentOwners`` / ``allocated`` from the pods whose
  ``reservation-allocated`` names this UID, Succeeded when allocate-once; ``None`` when
  nothing changed (the controller writes only on a difference).

Expiry (``isReservationNeedExpiration``): never for Failed/Succeeded or ``ttl: 0``; else
``now`` strictly after ``expires``, or strictly more than ``ttl`` since creation. With
neither field set the TTL is upstream's CRD default, 24h. A reservation also expires when
its node is gone. Garbage collection removes an expired or succeeded reservation once
``gcDurationSeconds`` have passed since its Expired condition's transition (Succeeded:
that condition's last probe), or at once when its node is gone.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from typing import Any

from controlplane.scheduler.reservation.messages import ERR_REASON_RESERVATION_INACTIVE
from controlplane.scheduler.reservation.phases import (
    CONDITION_FALSE,
    CONDITION_READY,
    CONDITION_SCHEDULED,
    CONDITION_TRUE,
    PHASE_AVAILABLE,
    PHASE_FAILED,
    PHASE_SUCCEEDED,
    REASON_AVAILABLE,
    REASON_EXPIRED,
    REASON_SCHEDULED,
    REASON_SUCCEEDED,
    REASON_UNSCHEDULABLE,
    conditions_of,
    is_expired,
    is_failed,
    is_succeeded,
    node_name_of,
)
from controlplane.scheduler.reservation.reservepod import (
    ReservationError,
    reservation_requests,
    resize_allocatable,
)
from koordinator.api import resourcelist
from koordinator.api.extension.reservation import get_reservation_allocated
from koordinator.api.goparse import GoParseError, parse_duration
from koordinator.api.types.scheduling import DEFAULT_RESERVATION_TTL
from koordinator.kube.timeutil import format_time, parse_time

__all__ = [
    "DEFAULT_GC_DURATION_S",
    "MAX_RETRY_AFTER_S",
    "MIN_RETRY_AFTER_S",
    "bind",
    "expires_at",
    "needs_cleanup",
    "needs_expiration",
    "next_sync_after",
    "set_available",
    "set_expired",
    "set_succeeded",
    "set_unschedulable",
    "should_expire",
    "should_garbage_collect",
    "sync_owners",
    "ttl_seconds",
]

#: ``gcDurationSeconds`` default: a finished reservation is kept for a day
DEFAULT_GC_DURATION_S = 86400.0
#: the controller re-checks a live reservation between these bounds (seconds)
MIN_RETRY_AFTER_S = 3.0
MAX_RETRY_AFTER_S = 15.0

Reservation = Mapping[str, Any]


def _spec(reservation: Reservation) -> Mapping[str, Any]:
    return reservation.get("spec") or {}


def _time_or_dawn(text: Any) -> float:
    """A timestamp; a missing one is Go's zero time, long before anything."""
    if not text:
        return -math.inf
    return parse_time(str(text))


def ttl_seconds(reservation: Reservation) -> float | None:
    """The TTL in seconds (0: never expires); ``None`` when only ``expires`` is set."""
    spec = _spec(reservation)
    raw = spec.get("ttl")
    if raw is None:
        if spec.get("expires") is not None:
            return None
        raw = DEFAULT_RESERVATION_TTL
    try:
        return parse_duration(str(raw)) / 1e9
    except GoParseError as exc:
        raise ReservationError(f"invalid spec.ttl: {exc}") from None


def expires_at(reservation: Reservation) -> float | None:
    raw = _spec(reservation).get("expires")
    return None if raw is None else parse_time(str(raw))


def expiry_deadline(reservation: Reservation) -> float | None:
    """When the reservation expires: ``now`` strictly after it (None: never, or already ended)."""
    if is_failed(reservation) or is_succeeded(reservation):
        return None
    ttl = ttl_seconds(reservation)
    if ttl == 0:
        return None
    deadlines = []
    expires = expires_at(reservation)
    if expires is not None:
        deadlines.append(expires)
    if ttl is not None:
        deadlines.append(_time_or_dawn((reservation.get("metadata") or {}).get("creationTimestamp")) + ttl)
    return min(deadlines) if deadlines else None


def needs_expiration(reservation: Reservation, now: float) -> bool:
    """Whether the controller should mark the reservation expired at ``now``."""
    deadline = expiry_deadline(reservation)
    return deadline is not None and now > deadline


def should_expire(reservation: Reservation, now: float, *, node_exists: bool = True) -> bool:
    """:func:`needs_expiration`, or placed on a node that no longer exists."""
    if is_failed(reservation) or is_succeeded(reservation):
        return False
    return needs_expiration(reservation, now) or (bool(node_name_of(reservation)) and not node_exists)


def next_sync_after(reservation: Reservation, now: float) -> float:
    """Seconds until the controller looks again (0: no re-check), clamped to 3..15 s."""
    if is_failed(reservation) or is_succeeded(reservation):
        return 0.0
    expires = expires_at(reservation)
    ttl = ttl_seconds(reservation)
    if expires is not None:
        duration = expires - now
    elif ttl:
        created = _time_or_dawn((reservation.get("metadata") or {}).get("creationTimestamp"))
        duration = created + ttl - now
    else:
        return 0.0
    if duration == 0:
        return 0.0
    return min(max(duration, MIN_RETRY_AFTER_S), MAX_RETRY_AFTER_S)


# ---- status transitions --------------------------------------------------------------------


def _condition(kind: str, status: str, reason: str, now: float, message: str = "") -> dict[str, Any]:
    condition: dict[str, Any] = {"type": kind, "status": status, "reason": reason}
    if message:
        condition["message"] = message
    stamp = format_time(now)
    condition["lastProbeTime"] = stamp
    condition["lastTransitionTime"] = stamp
    return condition


def _with_status(reservation: Reservation) -> tuple[dict[str, Any], dict[str, Any]]:
    copied: dict[str, Any] = copy.deepcopy(dict(reservation))
    status: dict[str, Any] = dict(copied.get("status") or {})
    status["conditions"] = [dict(c) for c in status.get("conditions") or ()]
    copied["status"] = status
    return copied, status


def _last_index(conditions: list[dict[str, Any]], kind: str) -> int:
    index = -1
    for i, condition in enumerate(conditions):
        if condition.get("type") == kind:
            index = i
    return index


def set_available(reservation: Reservation, node_name: str, now: float) -> dict[str, Any]:
    """``SetReservationAvailable``: the status written when the reserve pod is bound."""
    allocatable = {**reservation_requests(reservation), **resize_allocatable(reservation)}
    updated, status = _with_status(reservation)
    _set_or_drop(status, "allocatable", resourcelist.to_json(allocatable))
    status["nodeName"] = node_name
    status["phase"] = PHASE_AVAILABLE
    status["conditions"] = [
        _condition(CONDITION_SCHEDULED, CONDITION_TRUE, REASON_SCHEDULED, now),
        _condition(CONDITION_READY, CONDITION_TRUE, REASON_AVAILABLE, now),
    ]
    return updated


def bind(reservation: Reservation, node_name: str, now: float) -> dict[str, Any]:
    """The reservation plug-in's Bind: refuse a Failed reservation, else :func:`set_available`."""
    if is_failed(reservation):
        raise ReservationError(ERR_REASON_RESERVATION_INACTIVE)
    return set_available(reservation, node_name, now)


def set_expired(reservation: Reservation, now: float) -> dict[str, Any]:
    """``SetReservationExpired``: phase Failed; Ready becomes False ``Expired`` (a Ready
    condition that was True is replaced; one already False keeps its transition time)."""
    updated, status = _with_status(reservation)
    status["phase"] = PHASE_FAILED
    conditions: list[dict[str, Any]] = status["conditions"]
    index = _last_index(conditions, CONDITION_READY)
    if index < 0:
        conditions.append(_condition(CONDITION_READY, CONDITION_FALSE, REASON_EXPIRED, now))
    elif conditions[index].get("status") == CONDITION_TRUE:
        conditions[index] = _condition(CONDITION_READY, CONDITION_FALSE, REASON_EXPIRED, now)
    else:
        conditions[index]["reason"] = REASON_EXPIRED
        conditions[index]["lastProbeTime"] = format_time(now)
    return updated


def set_succeeded(reservation: Reservation, now: float) -> dict[str, Any]:
    """``SetReservationSucceeded``: phase Succeeded; Ready False ``Succeeded`` (an existing
    Ready condition keeps its transition time)."""
    updated, status = _with_status(reservation)
    status["phase"] = PHASE_SUCCEEDED
    conditions: list[dict[str, Any]] = status["conditions"]
    index = _last_index(conditions, CONDITION_READY)
    if index < 0:
        conditions.append(_condition(CONDITION_READY, CONDITION_FALSE, REASON_SUCCEEDED, now))
    else:
        conditions[index]["status"] = CONDITION_FALSE
        conditions[index]["reason"] = REASON_SUCCEEDED
        conditions[index]["lastProbeTime"] = format_time(now)
    return updated


def set_unschedulable(reservation: Reservation, message: str, now: float) -> dict[str, Any]:
    """A failed scheduling attempt: Scheduled False ``Unschedulable`` with the message; once
    scheduled only the probe time moves. The phase is left alone."""
    updated, status = _with_status(reservation)
    conditions: list[dict[str, Any]] = status["conditions"]
    index = _last_index(conditions, CONDITION_SCHEDULED)
    if index < 0:
        conditions.append(
            _condition(CONDITION_SCHEDULED, CONDITION_FALSE, REASON_UNSCHEDULABLE, now, message)
        )
    elif conditions[index].get("status") == CONDITION_TRUE:
        conditions[index]["lastProbeTime"] = format_time(now)
    else:
        conditions[index]["reason"] = REASON_UNSCHEDULABLE
        conditions[index]["message"] = message
        conditions[index]["lastProbeTime"] = format_time(now)
    return updated


def _owner_key(owner: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(owner.get("uid") or ""), str(owner.get("namespace") or ""), str(owner.get("name") or ""))


def sync_owners(
    reservation: Reservation, pods: Iterable[Mapping[str, Any]], now: float
) -> dict[str, Any] | None:
    """The controller's owner sync for a placed reservation; ``None`` when already right.

    Owners are the pods on the reservation's node whose ``reservation-allocated`` UID is
    this reservation's, as ``{namespace, name, uid}`` sorted by UID; ``allocated`` is the
    sum of their requests restricted to the keys of ``status.allocatable``.
    """
    node_name = node_name_of(reservation)
    if not node_name:
        return None
    uid = str((reservation.get("metadata") or {}).get("uid") or "")
    owners: list[dict[str, str]] = []
    allocated: resourcelist.ResourceList = {}
    for pod in pods:
        if ((pod.get("spec") or {}).get("nodeName") or "") != node_name:
            continue
        meta = pod.get("metadata") or {}
        try:
            record = get_reservation_allocated(meta.get("annotations"))
        except ValueError:
            continue
        if record is None or record.uid != uid:
            continue
        owner = {
            "namespace": meta.get("namespace") or "",
            "name": meta.get("name") or "",
            "uid": meta.get("uid") or "",
        }
        owners.append({k: v for k, v in owner.items() if v})
        allocated = resourcelist.add(allocated, resourcelist.pod_requests(pod))
    owners.sort(key=_owner_key)
    status = reservation.get("status") or {}
    allocated = resourcelist.mask(allocated, resourcelist.parse(status.get("allocatable")))
    current = sorted(
        ({k: v for k, v in dict(o).items() if v} for o in status.get("currentOwners") or ()), key=_owner_key
    )
    if current == owners and resourcelist.equal(allocated, resourcelist.parse(status.get("allocated"))):
        return None
    updated, new_status = _with_status(reservation)
    _set_or_drop(new_status, "allocated", resourcelist.to_json(allocated))
    _set_or_drop(new_status, "currentOwners", owners)
    if _spec(reservation).get("allocateOnce", True) is not False:
        updated = set_succeeded(updated, now)
    return updated


def _set_or_drop(status: dict[str, Any], key: str, value: Any) -> None:
    if value:
        status[key] = value
    else:
        status.pop(key, None)


# ---- garbage collection --------------------------------------------------------------------


def cleanup_deadline(reservation: Reservation, gc_duration_s: float = DEFAULT_GC_DURATION_S) -> float | None:
    """When an ended reservation may be collected: ``gc_duration_s`` after its Expired
    condition's transition (Succeeded: that condition's last probe); None when it has not
    ended that way."""
    if is_expired(reservation):
        reason, stamp = REASON_EXPIRED, "lastTransitionTime"
    elif is_succeeded(reservation):
        reason, stamp = REASON_SUCCEEDED, "lastProbeTime"
    else:
        return None
    for condition in conditions_of(reservation):
        if condition.get("reason") == reason:
            return _time_or_dawn(condition.get(stamp)) + gc_duration_s
    return None


def needs_cleanup(reservation: Reservation, now: float, gc_duration_s: float = DEFAULT_GC_DURATION_S) -> bool:
    """Finished long enough ago: expired (by the Expired condition's transition time) or
    succeeded (by the Succeeded condition's probe time) more than ``gc_duration_s`` ago."""
    deadline = cleanup_deadline(reservation, gc_duration_s)
    return deadline is not None and now > deadline


def should_garbage_collect(
    reservation: Reservation,
    now: float,
    *,
    gc_duration_s: float = DEFAULT_GC_DURATION_S,
    node_exists: bool = True,
) -> bool:
    """Whether the GC pass deletes the reservation: it is expired or succeeded, and either
    :func:`needs_cleanup` or its node is gone."""
    if not (is_expired(reservation) or is_succeeded(reservation)):
        return False
    if needs_cleanup(reservation, now, gc_duration_s):
        return True
    return bool(node_name_of(reservation)) and not node_exists
