"""Choosing a reservation on each node and scoring the nodes by it.

Nomination (per node, among the matched reservations): a pod with reservation affinity and
a single match takes it; a reservation nominated earlier is kept; otherwise the
candidates that pass the nomination filter (not an allocate-once reservation already
used, and a fit under :func:`~.fit.filter_with_reservations` as if the pod had to use it)
are narrowed to one: the only one left, else the smallest non-zero ``reservation-order``,
else the highest reservation score (first on ties).

Reservation score (``scoreReservation``): MostAllocated over the reservation's non-zero
allocatable, ``Σ_r [req_r <= alloc_r] ⌊100 · req_r / alloc_r⌋ / #resources`` in
milli-units with integer division, where ``req_r`` is the pod's request plus what the
reservation already gave out.

Node score: 0 for reserve pods; 1000 (``mostPreferred``) for the node, in the order the
nodes were given, whose matched reservations include the smallest non-zero order; the
nominated reservation's score elsewhere; 0 without one. Scores are then normalized to
0..100 against the highest (``DefaultNormalizeScore``). ``reservation-ignored`` pods and
pods without any node reservation state skip scoring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from controlplane.scheduler.reservation.fit import ReservationCheck, filter_with_reservations
from controlplane.scheduler.reservation.info import ReservationInfo
from controlplane.scheduler.reservation.transformer import NodeReservationState, PodContext
from controlplane.scheduler.resourcescore import MAX_NODE_SCORE
from koordinator.api import resourcelist
from koordinator.api.quantity import Quantity

__all__ = [
    "MAX_NODE_SCORE",
    "MIN_NODE_SCORE",
    "MOST_PREFERRED_SCORE",
    "NO_ORDER",
    "ScorePlan",
    "most_preferred_by_order",
    "node_score",
    "nominate",
    "normalize_scores",
    "pre_score",
    "preferred_node",
    "reservation_score",
    "score_reservation",
]

MOST_PREFERRED_SCORE = 1000

MIN_NODE_SCORE = 0
#: the order of a node none of whose matched reservations is ordered
NO_ORDER = 2**63 - 1

Quantities = Mapping[str, Quantity]


def most_preferred_by_order(reservations: Sequence[ReservationInfo]) -> tuple[ReservationInfo | None, int]:
    """The reservation with the smallest non-zero order, and that order (:data:`NO_ORDER` when none)."""
    best: ReservationInfo | None = None
    best_order = NO_ORDER
    for rinfo in reservations:
        order = rinfo.order
        if order != 0 and order < best_order:
            best, best_order = rinfo, order
    return best, best_order


def score_reservation(
    pod_requests: Quantities, rinfo: ReservationInfo, allocated: Quantities | None = None
) -> int:
    """MostAllocated over the reservation's non-zero allocatable (see the module docstring)."""
    requested = resourcelist.add(pod_requests, allocated if allocated is not None else rinfo.allocated)
    capacities = {name: value for name, value in rinfo.allocatable.items() if not value.is_zero()}
    if not capacities:
        return 0
    total = 0
    for name, capacity in capacities.items():
        request = requested.get(name, Quantity())
        if request <= capacity:
            total += _go_div(MAX_NODE_SCORE * request.milli_value(), capacity.milli_value())
    return _go_div(total, len(capacities))


def _go_div(numerator: int, denominator: int) -> int:
    """Go's integer division (truncates toward zero)."""
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator >= 0) == (denominator >= 0) else -quotient


def reservation_score(
    pod_requests: Quantities, rinfo: ReservationInfo, preemptible_in_rr: Quantities | None = None
) -> int:
    """``ScoreReservation``: :func:`score_reservation` with preemptible owners' requests given back."""
    allocated: Quantities = rinfo.allocated
    if preemptible_in_rr:
        allocated = resourcelist.mask(
            resourcelist.subtract_non_negative(allocated, preemptible_in_rr), rinfo.resource_names
        )
    return score_reservation(pod_requests, rinfo, allocated)


#: an extra reservation score (other plug-ins' ScoreReservation), added to this plug-in's
ReservationScorer = Callable[[ReservationInfo], int]


def nominate(
    ctx: PodContext,
    node_allocatable: Quantities,
    state: NodeReservationState | None,
    *,
    previous: ReservationInfo | None = None,
    preemptible: Quantities | None = None,
    preemptible_in_rrs: Mapping[str, Quantities] | None = None,
    extra_check: ReservationCheck | None = None,
    extra_score: ReservationScorer | None = None,
) -> ReservationInfo | None:
    """The reservation the pod would use on this node (see the module docstring)."""
    if ctx.reserve_pod or state is None or not state.matched:
        return None
    candidates = state.matched
    if len(candidates) == 1 and ctx.has_affinity:
        return candidates[0]
    if previous is not None:
        return previous
    passing = [
        rinfo
        for rinfo in candidates
        if not (rinfo.allocate_once and rinfo.allocated_pods > 0)
        and filter_with_reservations(
            ctx,
            node_allocatable,
            state,
            [rinfo],
            required=True,
            preemptible=preemptible,
            preemptible_in_rrs=preemptible_in_rrs,
            extra_check=extra_check,
        ).ok
    ]
    if not passing:
        return None
    if len(passing) == 1:
        return passing[0]
    ordered, _ = most_preferred_by_order(passing)
    if ordered is not None:
        return ordered
    best, best_score = passing[0], None
    for rinfo in passing:
        score = reservation_score(ctx.requests, rinfo, (preemptible_in_rrs or {}).get(rinfo.uid))
        if extra_score is not None:
            score += extra_score(rinfo)
        if best_score is None or score > best_score:
            best, best_score = rinfo, score
    return best


def preferred_node(nodes: Sequence[str], states: Mapping[str, NodeReservationState]) -> str | None:
    """The first node (in ``nodes`` order) holding the smallest non-zero reservation order."""
    chosen: str | None = None
    chosen_order = NO_ORDER
    for node in nodes:
        state = states.get(node)
        if state is None or not state.matched:
            continue
        _, order = most_preferred_by_order(state.matched)
        if order != 0 and order < chosen_order:
            chosen, chosen_order = node, order
    return chosen


@dataclass
class ScorePlan:
    """PreScore's result: the most preferred node and each node's nominated reservation."""

    preferred_node: str | None = None
    nominated: dict[str, ReservationInfo] = field(default_factory=dict)


def pre_score(
    ctx: PodContext,
    nodes: Sequence[str],
    states: Mapping[str, NodeReservationState],
    node_allocatables: Mapping[str, Quantities],
    *,
    previous: Mapping[str, ReservationInfo] | None = None,
) -> ScorePlan | None:
    """Nominate on every node; ``None`` (skip scoring) for reserve pods,
    ``reservation-ignored`` pods and pods without any reservation state."""
    if ctx.reserve_pod or ctx.ignored or not states:
        return None
    plan = ScorePlan(preferred_node=preferred_node(nodes, states))
    for node in nodes:
        state = states.get(node)
        nominated = nominate(ctx, node_allocatables.get(node, {}), state, previous=(previous or {}).get(node))
        if nominated is not None:
            plan.nominated[node] = nominated
    return plan


def node_score(ctx: PodContext, node: str, plan: ScorePlan | None) -> int:
    """Score: 0 for reserve pods, 1000 for the preferred node, else the nominated
    reservation's score (0 without one)."""
    if ctx.reserve_pod or plan is None:
        return MIN_NODE_SCORE
    if plan.preferred_node == node:
        return MOST_PREFERRED_SCORE
    rinfo = plan.nominated.get(node)
    if rinfo is None:
        return MIN_NODE_SCORE
    return reservation_score(ctx.requests, rinfo)


def normalize_scores(scores: Mapping[str, int], *, reserve_pod: bool = False) -> dict[str, int]:
    """``DefaultNormalizeScore(100)``: scale so the best node gets 100 (all 0 stays 0).
    Reserve pods' scores are left as they are."""
    result = dict(scores)
    if reserve_pod:
        return result
    highest = max(result.values(), default=0)
    if highest == 0:
        return result
    return {node: _go_div(MAX_NODE_SCORE * score, highest) for node, score in result.items()}
