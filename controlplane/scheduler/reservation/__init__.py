"""The Reservation plug-in's core, as a library: no framework imports and no I/O.

Reservations and pods are the API's dicts; time is passed in as epoch seconds.

Modules: :mod:`.phases` (phase/condition vocabulary and predicates), :mod:`.reservepod`
(the reserve pod and the way back, validation), :mod:`.lifecycle` (Bind, expiry, owner
sync, garbage collection), :mod:`.matching` (owners, reservation affinity, taints,
exact match), :mod:`.info` (``ReservationInfo``), :mod:`.transformer` (matched/unmatched
reservations per node and the node as the pod sees it), :mod:`.fit` (Filter and
PreFilter by allocate policy), :mod:`.scoring` (nomination and node scores),
:mod:`.prebind` (the ``reservation-allocated`` annotation), :mod:`.messages` (upstream's
wording).
"""

from controlplane.scheduler.reservation.fit import (
    Verdict,
    allocate_policy_conflict,
    filter_pod,
    filter_reserve_pod,
    filter_with_reservations,
    fits_node,
    fits_reservation,
    pre_filter,
)
from controlplane.scheduler.reservation.info import ReservationInfo
from controlplane.scheduler.reservation.lifecycle import (
    bind,
    needs_expiration,
    set_expired,
    set_succeeded,
    set_unschedulable,
    should_expire,
    should_garbage_collect,
    sync_owners,
)
from controlplane.scheduler.reservation.matching import OwnerMatcher, RequiredReservationAffinity
from controlplane.scheduler.reservation.phases import (
    is_active,
    is_available,
    is_expired,
    is_failed,
    is_succeeded,
)
from controlplane.scheduler.reservation.prebind import with_reservation_allocated
from controlplane.scheduler.reservation.reservepod import (
    ReservationError,
    is_reserve_pod,
    reservation_name_of,
    reserve_pod,
    validate_reservation,
)
from controlplane.scheduler.reservation.scoring import node_score, nominate, normalize_scores, pre_score
from controlplane.scheduler.reservation.transformer import (
    NodeReservationState,
    PodContext,
    match_on_node,
    restore_node,
)

#: the plug-in's upstream name
NAME = "Reservation"

__all__ = [
    "NAME",
    "NodeReservationState",
    "OwnerMatcher",
    "PodContext",
    "RequiredReservationAffinity",
    "ReservationError",
    "ReservationInfo",
    "Verdict",
    "allocate_policy_conflict",
    "bind",
    "filter_pod",
    "filter_reserve_pod",
    "filter_with_reservations",
    "fits_node",
    "fits_reservation",
    "is_active",
    "is_available",
    "is_expired",
    "is_failed",
    "is_reserve_pod",
    "is_succeeded",
    "match_on_node",
    "needs_expiration",
    "node_score",
    "nominate",
    "normalize_scores",
    "pre_filter",
    "pre_score",
    "reservation_name_of",
    "reserve_pod",
    "restore_node",
    "set_expired",
    "set_succeeded",
    "set_unschedulable",
    "should_expire",
    "should_garbage_collect",
    "sync_owners",
    "validate_reservation",
    "with_reservation_allocated",
]
