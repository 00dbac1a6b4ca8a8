"""Before PreFilter: which reservations of a node the scheduling pod may use, and the node
as that pod should see it (upstream's ``BeforePreFilter`` transformer).

For each node the reservations are sorted into *matched or ignored* and *unmatched*:

* skipped altogether: not Available, unparsable, or allocate-once with an owner already
  (the controller has not marked it Succeeded yet, but it is used up);
* a reserve pod matches nothing (reservations do not nest);
* a ``reservation-ignored`` pod takes every reservation as ignored (it may use all of it);
* otherwise the owners must match, then -- first failing check wins -- the affinity
  ``name`` (which, when given, replaces the checks below except exact-match), the
  reservation's ``unschedulable`` flag, its taints, the affinity selector/terms, and
  ``exact-match-reservation``;
* a reservation that is not matched counts as unmatched only when owners hold part of it.

:func:`restore_node` then gives the matched reservations' resources back: their reserve
pods leave the node (resources and pod count) while their owner pods stay; for an
unmatched reservation whose owners are already counted as pods, only the part its
owners have not taken stays reserved, so nothing is counted twice. ``pod_requested``
keeps the node's requests between the two steps: the Aligned/Default fit measures
against it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from controlplane.scheduler.reservation.info import ReservationInfo
from controlplane.scheduler.reservation.matching import (
    RequiredReservationAffinity,
    exact_match,
    exact_match_resources,
)
from controlplane.scheduler.reservation.messages import NodeDiagnosis, taint_key
from controlplane.scheduler.reservation.reservepod import is_reserve_pod
from koordinator.api import resourcelist
from koordinator.api.extension.reservation import is_reservation_ignored
from koordinator.api.resourcelist import ResourceList

__all__ = [
    "MatchOutcome",
    "NodeMatch",
    "NodeReservationState",
    "PodContext",
    "classify",
    "match_on_node",
    "restore_node",
]

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class PodContext:
    """What the reservation checks need to know about the scheduling pod."""

    pod: Obj
    requests: ResourceList
    reserve_pod: bool = False
    ignored: bool = False
    affinity: RequiredReservationAffinity | None = None
    exact_resources: tuple[str, ...] | None = None

    @classmethod
    def of(cls, pod: Obj) -> PodContext:
        """Parse the pod's annotations; a malformed one raises ``ReservationError``."""
        exact = exact_match_resources(pod)
        return cls(
            pod=pod,
            requests=resourcelist.pod_requests(pod),
            reserve_pod=is_reserve_pod(pod),
            ignored=is_reservation_ignored((pod.get("metadata") or {}).get("labels")),
            affinity=RequiredReservationAffinity.from_pod(pod),
            exact_resources=tuple(exact) if exact is not None else None,
        )

    @property
    def has_affinity(self) -> bool:
        return self.affinity is not None

    @property
    def reservation_name(self) -> str:
        return self.affinity.name if self.affinity is not None else ""


class MatchOutcome(StrEnum):
    MATCHED = "Matched"
    IGNORED = "Ignored"
    RESERVE_POD = "ReservePod"
    OWNER_UNMATCHED = "OwnerUnmatched"
    NAME_UNMATCHED = "NameUnmatched"
    NOT_EXACT_MATCHED = "NotExactMatched"
    UNSCHEDULABLE = "Unschedulable"
    TAINT_UNTOLERATED = "TaintUntolerated"
    AFFINITY_UNMATCHED = "AffinityUnmatched"

    @property
    def usable(self) -> bool:
        return self in (MatchOutcome.MATCHED, MatchOutcome.IGNORED)


def classify(
    ctx: PodContext,
    rinfo: ReservationInfo,
    node_labels: Mapping[str, str],
    diagnosis: NodeDiagnosis | None = None,
) -> MatchOutcome:
    """One reservation for one pod, counting the outcome into ``diagnosis``."""
    diag = diagnosis if diagnosis is not None else NodeDiagnosis()
    if ctx.reserve_pod:
        return MatchOutcome.RESERVE_POD
    if ctx.ignored:
        diag.ignored += 1
        return MatchOutcome.IGNORED
    if not rinfo.match_owners(ctx.pod):
        return MatchOutcome.OWNER_UNMATCHED
    diag.owner_matched += 1
    affinity = ctx.affinity
    exact = exact_match(ctx.requests, rinfo.allocatable, ctx.exact_resources)
    if affinity is not None and affinity.name:
        if not affinity.match_name(rinfo.name):
            diag.name_unmatched += 1
            return MatchOutcome.NAME_UNMATCHED
        if not exact:
            diag.not_exact_matched += 1
            return MatchOutcome.NOT_EXACT_MATCHED
        diag.name_matched += 1
        return MatchOutcome.MATCHED
    if rinfo.unschedulable:
        diag.unschedulable_unmatched += 1
        return MatchOutcome.UNSCHEDULABLE
    taint = affinity.untolerated_taint(rinfo.taints) if affinity is not None else None
    if taint is not None:
        diag.taints_unmatched += 1
        key = taint_key(str(taint.get("key") or ""), str(taint.get("value") or ""))
        diag.taints_unmatched_reasons[key] = diag.taints_unmatched_reasons.get(key, 0) + 1
        return MatchOutcome.TAINT_UNTOLERATED
    if affinity is not None and not affinity.match_affinity(rinfo.name, rinfo.labels, node_labels):
        diag.affinity_unmatched += 1
        return MatchOutcome.AFFINITY_UNMATCHED
    if not exact:
        diag.not_exact_matched += 1
        return MatchOutcome.NOT_EXACT_MATCHED
    return MatchOutcome.MATCHED


@dataclass
class NodeMatch:
    """The reservations of one node sorted for one pod."""

    matched: list[ReservationInfo] = field(default_factory=list)
    unmatched: list[ReservationInfo] = field(default_factory=list)
    diagnosis: NodeDiagnosis = field(default_factory=NodeDiagnosis)
    has_affinity: bool = False

    @property
    def relevant(self) -> bool:
        """Whether upstream keeps a state for the node: something matched, or something to
        un-double-count while the pod has no reservation affinity."""
        if self.matched:
            return True
        return bool(self.unmatched) and not self.has_affinity


def match_on_node(
    ctx: PodContext, reservations: Iterable[ReservationInfo], node_labels: Mapping[str, str]
) -> NodeMatch:
    """Sort a node's reservations into matched-or-ignored and unmatched (see the module docstring)."""
    result = NodeMatch(has_affinity=ctx.has_affinity)
    for rinfo in reservations:
        if not rinfo.is_available() or rinfo.parse_error is not None:
            continue
        if rinfo.allocate_once and rinfo.allocated_pods > 0:
            continue
        if classify(ctx, rinfo, node_labels, result.diagnosis).usable:
            result.matched.append(rinfo.clone())
        elif rinfo.allocated_pods > 0:
            result.unmatched.append(rinfo.clone())
    return result


@dataclass
class NodeReservationState:
    """A node after its reservations were restored for one pod."""

    node_name: str
    matched: list[ReservationInfo]
    unmatched: list[ReservationInfo]
    #: the node's requests with unmatched reservations trimmed, matched ones still held
    pod_requested: ResourceList
    #: Σ allocated of the matched reservations
    r_allocated: ResourceList
    #: the node's requests the other plug-ins see (matched reserve pods gone)
    requested: ResourceList
    #: pods on the node after the matched reserve pods left
    pod_count: int


def restore_node(
    node_name: str,
    requested: Mapping[str, Any],
    pod_count: int,
    matched: Sequence[ReservationInfo],
    unmatched: Sequence[ReservationInfo] = (),
) -> NodeReservationState:
    """Give the matched reservations back to the node (``requested``: everything on the node,
    reserve pods and owner pods included; ``pod_count`` counts both kinds)."""
    current: ResourceList = dict(requested)
    for rinfo in unmatched:
        if rinfo.allocated_pods == 0:
            continue
        current = resourcelist.subtract(current, rinfo.allocatable)
        current = resourcelist.add(
            current, resourcelist.subtract_non_negative(rinfo.allocatable, rinfo.allocated)
        )
    pod_requested = dict(current)
    r_allocated: ResourceList = {}
    for rinfo in matched:
        current = resourcelist.subtract(current, rinfo.allocatable)
        r_allocated = resourcelist.add(r_allocated, rinfo.allocated)
    return NodeReservationState(
        node_name=node_name,
        matched=list(matched),
        unmatched=list(unmatched),
        pod_requested=pod_requested,
        r_allocated=r_allocated,
        requested=current,
        pod_count=pod_count - len(matched),
    )
