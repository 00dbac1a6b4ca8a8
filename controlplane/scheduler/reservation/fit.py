"""Whether a pod fits into a matched reservation on a node, per allocate policy.

*Node fit* (``fitsNode``, used by Default and Aligned): the pod may take the candidate
reservation's remainder (``allocatable - allocated - reserved``) first and the node's free
resources for the rest, while every other matched reservation keeps its resources: for
each resource ``request <= nodeAllocatable - (podRequested - remainder - Σ matched
allocated - preemptible)``, compared as the scheduler does (cpu in milli-units, everything
else in whole units, only cpu, memory, ephemeral-storage and scalar resources); and the pod
count must stay within the node's ``pods``.

*Reservation fit* (``fitsReservation``, Restricted): for each resource the reservation
declares and the pod requests (non-zero), ``request <= allocatable - reserved -
allocated``; when the reservation reserves ``pods`` explicitly, its owner count plus one
must stay within it. A Restricted reservation must pass both fits.

A reserve pod's allocate policy conflicts with the node's reservations when either side
is Default and the two differ (Default cannot share a node with the other policies).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.reservation.info import (
    ALLOCATE_POLICY_ALIGNED,
    ALLOCATE_POLICY_DEFAULT,
    ALLOCATE_POLICY_RESTRICTED,
    ReservationInfo,
)
from controlplane.scheduler.reservation.messages import (
    ERR_REASON_NO_RESERVATIONS_MEET_REQUIREMENTS,
    ERR_REASON_NODE_NOT_MATCH_RESERVATION,
    ERR_REASON_RESERVATION_AFFINITY,
    ERR_REASON_RESERVATION_ALLOCATE_POLICY_CONFLICT,
    insufficient_by_node,
    reservation_reason,
)
from controlplane.scheduler.reservation.reservepod import reserve_pod_node_name
from controlplane.scheduler.reservation.transformer import NodeReservationState, PodContext
from koordinator.api import resourcelist
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import ResourceList

__all__ = [
    "ERROR",
    "SKIP",
    "SUCCESS",
    "UNSCHEDULABLE",
    "UNSCHEDULABLE_AND_UNRESOLVABLE",
    "Verdict",
    "allocate_policy_conflict",
    "filter_pod",
    "filter_reserve_pod",
    "filter_with_reservations",
    "fits_node",
    "fits_reservation",
    "pre_filter",
    "resource_view",
]

SUCCESS = "Success"
UNSCHEDULABLE = "Unschedulable"
UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
SKIP = "Skip"
ERROR = "Error"

_CPU, _MEMORY, _EPHEMERAL, _PODS = "cpu", "memory", "ephemeral-storage", "pods"


@dataclass(frozen=True)
class Verdict:
    """A framework status: its code and reasons."""

    code: str = SUCCESS
    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code == SUCCESS


def _is_scalar(name: str) -> bool:
    """Extended, prefixed-native, hugepages and attachable-volume resources."""
    if name.startswith("requests."):
        return False
    return "/" in name or name.startswith(("hugepages-", "attachable-volumes-"))


def resource_view(resources: Mapping[str, Quantity]) -> dict[str, int]:
    """A ResourceList as the scheduler's ``framework.Resource`` holds it: cpu in milli-units,
    memory, ephemeral-storage and scalar resources in whole units (rounded up); ``pods``
    and unknown names are dropped."""
    view: dict[str, int] = {}
    for name, quantity in resources.items():
        if name == _CPU:
            view[name] = view.get(name, 0) + quantity.milli_value()
        elif name in (_MEMORY, _EPHEMERAL) or _is_scalar(name):
            view[name] = view.get(name, 0) + quantity.value()
    return view


def fits_node(
    pod_requests: Mapping[str, Quantity],
    node_allocatable: Mapping[str, Quantity],
    state: NodeReservationState,
    rinfo: ReservationInfo | None = None,
    preemptible: Mapping[str, Quantity] | None = None,
) -> list[str]:
    """Names of the resources the node cannot make up (``pods`` first, then cpu, memory,
    ephemeral-storage and scalar resources in name order); empty when the pod fits.

    The pod count compared is ``state.pod_count`` (pods the Filter sees on the node) minus
    the matched reservations plus the pod itself, as upstream counts it.
    """
    short: list[str] = []
    allowed = node_allocatable[_PODS].value() if _PODS in node_allocatable else 0
    if state.pod_count - len(state.matched) + 1 > allowed:
        short.append(_PODS)
    request = resource_view(pod_requests)
    scalars = sorted(name for name in request if _is_scalar(name))
    if not any(request.get(name, 0) for name in (_CPU, _MEMORY, _EPHEMERAL)) and not scalars:
        return short
    remained = resource_view(rinfo.remaining()) if rinfo is not None else {}
    allocatable = resource_view(node_allocatable)
    requested = resource_view(state.pod_requested)
    r_allocated = resource_view(state.r_allocated)
    freed = resource_view(preemptible or {})
    for name in (_CPU, _MEMORY, _EPHEMERAL, *scalars):
        used = requested.get(name, 0) - remained.get(name, 0) - r_allocated.get(name, 0) - freed.get(name, 0)
        if request.get(name, 0) > allocatable.get(name, 0) - used:
            short.append(name)
    return short


def fits_reservation(
    pod_requests: Mapping[str, Quantity],
    rinfo: ReservationInfo,
    preemptible_in_rr: Mapping[str, Quantity] | None = None,
    *,
    detailed: bool = False,
) -> list[str]:
    """``Reservation(s) ...`` reasons why the pod does not fit inside the reservation.

    ``detailed`` (the pod named this reservation) adds the amounts: cpu in milli-units,
    others in whole units, capacity net of ``reserved``.
    """
    allocated: ResourceList = dict(rinfo.allocated)
    if preemptible_in_rr:
        allocated = resourcelist.subtract_non_negative(allocated, preemptible_in_rr)
    allocated = resourcelist.mask(allocated, rinfo.resource_names)
    reserved = resourcelist.mask(rinfo.reserved, rinfo.resource_names)
    requests = resourcelist.mask(pod_requests, rinfo.resource_names)
    reasons: list[str] = []
    if _PODS in rinfo.allocatable:
        pods = rinfo.allocated_pods
        if preemptible_in_rr and _PODS in preemptible_in_rr:
            pods -= preemptible_in_rr[_PODS].value()
        capacity_pods = rinfo.allocatable[_PODS].value()
        if pods + 1 > capacity_pods:
            if detailed:
                reasons.append(
                    reservation_reason(
                        f"Too many pods, requested: 1, used: {pods}, capacity: {capacity_pods}"
                    )
                )
            else:
                reasons.append(reservation_reason("Too many pods"))
    for name in sorted(requests):
        requested = requests[name]
        if requested.is_zero():
            continue
        capacity = rinfo.allocatable.get(name, Quantity())
        if name in reserved:
            capacity = capacity - reserved[name]
        used = allocated.get(name, Quantity())
        if requested <= capacity - used:
            continue
        if not detailed:
            reasons.append(reservation_reason(f"Insufficient {name}"))
            continue
        if name == _CPU:
            amounts = (requested.milli_value(), used.milli_value(), capacity.milli_value())
        else:
            amounts = (requested.value(), used.value(), capacity.value())
        reasons.append(
            reservation_reason(
                f"Insufficient {name}, requested: {amounts[0]}, used: {amounts[1]}, capacity: {amounts[2]}"
            )
        )
    return reasons


#: an extra reservation-level check (other plug-ins' FilterReservation); returns reasons
ReservationCheck = Callable[[ReservationInfo], Sequence[str]]


def filter_with_reservations(
    ctx: PodContext,
    node_allocatable: Mapping[str, Quantity],
    state: NodeReservationState,
    candidates: Iterable[ReservationInfo],
    *,
    required: bool,
    preemptible: Mapping[str, Quantity] | None = None,
    preemptible_in_rrs: Mapping[str, Mapping[str, Quantity]] | None = None,
    extra_check: ReservationCheck | None = None,
) -> Verdict:
    """Success when one candidate fits by its policy; else Unschedulable with every reason
    (node shortfalls first, sorted, then reservation reasons). Nothing is checked when the
    pod is not ``required`` to use a reservation."""
    if not required:
        return Verdict()
    requested_names = set(ctx.requests)
    by_node: set[str] = set()
    by_reservation: list[str] = []
    for rinfo in candidates:
        if not requested_names.intersection(rinfo.resource_names) and not ctx.has_affinity:
            continue
        if ctx.reservation_name and ctx.reservation_name != rinfo.name:
            continue
        detailed = bool(ctx.reservation_name)
        in_rr = (preemptible_in_rrs or {}).get(rinfo.uid) or {}
        freed = resourcelist.add(in_rr, preemptible or {})
        node_short = fits_node(ctx.requests, node_allocatable, state, rinfo, freed)
        by_node.update(node_short)
        policy = rinfo.allocate_policy
        if policy in (ALLOCATE_POLICY_DEFAULT, ALLOCATE_POLICY_ALIGNED):
            reservation_fits = not node_short
        elif policy == ALLOCATE_POLICY_RESTRICTED:
            inside = fits_reservation(ctx.requests, rinfo, in_rr, detailed=detailed)
            reservation_fits = not inside
            by_reservation.extend(inside)
        else:
            reservation_fits = False
        if extra_check is not None:
            extra = list(extra_check(rinfo))
            if extra:
                by_reservation.extend(extra)
                continue
        if not node_short and reservation_fits:
            return Verdict()
    reasons = [insufficient_by_node(name) for name in sorted(by_node)] + by_reservation
    return Verdict(UNSCHEDULABLE, tuple(reasons or (ERR_REASON_NO_RESERVATIONS_MEET_REQUIREMENTS,)))


def allocate_policy_conflict(policy: str, policies_on_node: Iterable[str]) -> bool:
    """Default on either side, and the two differ."""
    return any(
        (policy == ALLOCATE_POLICY_DEFAULT or other == ALLOCATE_POLICY_DEFAULT) and policy != other
        for other in policies_on_node
    )


def filter_reserve_pod(
    reserve_pod: Mapping[str, Any],
    node_name: str,
    allocate_policy: str,
    policies_on_node: Iterable[str],
) -> Verdict:
    """A reserve pod's own checks: the template's pinned node, then the policy conflict
    with the reservations already available on the node."""
    pinned = reserve_pod_node_name(reserve_pod)
    if pinned and pinned != node_name:
        return Verdict(UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_NODE_NOT_MATCH_RESERVATION,))
    if allocate_policy_conflict(allocate_policy, policies_on_node):
        return Verdict(UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_RESERVATION_ALLOCATE_POLICY_CONFLICT,))
    return Verdict()


def filter_pod(
    ctx: PodContext,
    node_allocatable: Mapping[str, Quantity],
    state: NodeReservationState | None,
    *,
    preemptible: Mapping[str, Quantity] | None = None,
    preemptible_in_rrs: Mapping[str, Mapping[str, Quantity]] | None = None,
    extra_check: ReservationCheck | None = None,
) -> Verdict:
    """Filter after :func:`filter_reserve_pod`: a pod with reservation affinity needs a
    matched reservation on the node, and one of them must fit; other pods pass."""
    matched = state.matched if state is not None else []
    if not matched and ctx.has_affinity:
        return Verdict(UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_RESERVATION_AFFINITY,))
    if ctx.reserve_pod or not matched or state is None:
        return Verdict()
    return filter_with_reservations(
        ctx,
        node_allocatable,
        state,
        matched,
        required=ctx.has_affinity,
        preemptible=preemptible,
        preemptible_in_rrs=preemptible_in_rrs,
        extra_check=extra_check,
    )


def pre_filter(
    ctx: PodContext, states: Mapping[str, NodeReservationState]
) -> tuple[Verdict, frozenset[str] | None]:
    """PreFilter for a normal pod: with reservation affinity only nodes holding a matched
    reservation remain (none: UnschedulableAndUnresolvable); without any reservation state
    the plug-in skips. The node set is ``None`` when every node remains."""
    if ctx.reserve_pod:
        return Verdict(), None
    if ctx.has_affinity:
        if not states:
            return Verdict(UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_RESERVATION_AFFINITY,)), None
        return Verdict(), frozenset(states)
    if not states:
        return Verdict(SKIP), None
    return Verdict(), None
