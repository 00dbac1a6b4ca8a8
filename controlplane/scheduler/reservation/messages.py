"""The Reservation plug-in's status reasons, worded exactly as koord-scheduler words them.

Node-level reasons (``node(s) ...``) go into Filter and PreFilter statuses; reasons about
one reservation carry the ``Reservation(s) `` prefix, which PostFilter uses to tell them
apart from node reasons; :func:`post_filter_reasons` rebuilds PostFilter's summary of why
no matched reservation could be used. Go iterates maps in random order where the summary
lists taints and node reasons; here they come sorted so the text is stable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "ERR_REASON_ALLOCATE_ONCE_ALLOCATED",
    "ERR_REASON_NODE_NOT_MATCH_RESERVATION",
    "ERR_REASON_NO_RESERVATIONS_MEET_REQUIREMENTS",
    "ERR_REASON_PREEMPTION_FAILED",
    "ERR_REASON_PREFIX",
    "ERR_REASON_RESERVATION_AFFINITY",
    "ERR_REASON_RESERVATION_ALLOCATE_POLICY_CONFLICT",
    "ERR_REASON_RESERVATION_INACTIVE",
    "NodeDiagnosis",
    "insufficient_by_node",
    "is_reservation_reason",
    "post_filter_reasons",
    "reservation_reason",
    "taint_key",
]

#: a pod with reservation affinity found no matching reservation (on this node)
ERR_REASON_RESERVATION_AFFINITY = "node(s) no reservations match reservation affinity"
#: a reserve pod whose template pins another node
ERR_REASON_NODE_NOT_MATCH_RESERVATION = "node(s) didn't match the nodeName specified by reservation"
#: the Default allocate policy met another policy on the node
ERR_REASON_RESERVATION_ALLOCATE_POLICY_CONFLICT = "node(s) reservation allocate policy conflict"
#: Bind of a reserve pod whose Reservation has already failed
ERR_REASON_RESERVATION_INACTIVE = "reservation is not active"
#: no reservation gave a reason, yet none fits
ERR_REASON_NO_RESERVATIONS_MEET_REQUIREMENTS = "node(s) no reservation(s) to meet the requirements"
ERR_REASON_PREEMPTION_FAILED = "node(s) preemption failed due to insufficient resources"
#: the nominator's filter: an allocate-once reservation that already has an owner
ERR_REASON_ALLOCATE_ONCE_ALLOCATED = "reservation has allocateOnce enabled and has already been allocated"
#: marks a reason about one reservation rather than about the node
ERR_REASON_PREFIX = "Reservation(s) "


def reservation_reason(message: str) -> str:
    """A reservation-level reason: ``Reservation(s) <message>``."""
    return ERR_REASON_PREFIX + message


def is_reservation_reason(reason: str) -> bool:
    return reason.startswith(ERR_REASON_PREFIX)


def insufficient_by_node(resource: str) -> str:
    """The node could not make up what the reservation lacks."""
    return f"Insufficient {resource} by node"


def taint_key(key: str, value: str) -> str:
    """How PostFilter names an untolerated reservation taint: ``{key: value}``."""
    return f"{{{key}: {value}}}"


@dataclass
class NodeDiagnosis:
    """Why the reservations of one node were or were not matched by the scheduling pod.

    ``owner_matched`` counts reservations whose owners match; the other counters split
    those by the first check that turned them away (``name_matched`` counts the ones the
    pod named and that matched).
    """

    ignored: int = 0
    owner_matched: int = 0
    name_matched: int = 0
    name_unmatched: int = 0
    unschedulable_unmatched: int = 0
    affinity_unmatched: int = 0
    not_exact_matched: int = 0
    taints_unmatched: int = 0
    taints_unmatched_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def relevant(self) -> bool:
        """Upstream keeps a node's diagnosis only when something was ignored or owner-matched."""
        return self.ignored > 0 or self.owner_matched > 0

    def remaining(self) -> int:
        """Owner-matched reservations that passed every matching check."""
        return (
            self.owner_matched
            - self.name_unmatched
            - self.unschedulable_unmatched
            - self.affinity_unmatched
            - self.not_exact_matched
            - self.taints_unmatched
        )


def post_filter_reasons(
    diagnoses: Mapping[str, NodeDiagnosis],
    node_reasons: Mapping[str, Iterable[str]],
    *,
    has_affinity: bool,
) -> list[str]:
    """PostFilter's summary: counts per rejection cause, then ``N Reservation(s) matched owner total``.

    ``node_reasons`` holds each node's Filter failure reasons. For a node with matched
    reservations left over, every non-reservation reason counts once per such reservation
    (reservation-level reasons each use one up). Nothing is said when no reservation's
    owners matched and the pod has no reservation affinity.
    """
    owner_matched = name_matched = name_unmatched = affinity_unmatched = 0
    unschedulable = not_exact = 0
    taints: dict[str, int] = {}
    by_node: dict[str, int] = {}
    for node_name, diagnosis in diagnoses.items():
        owner_matched += diagnosis.owner_matched
        name_matched += diagnosis.name_matched
        unschedulable += diagnosis.unschedulable_unmatched
        affinity_unmatched += diagnosis.affinity_unmatched
        not_exact += diagnosis.not_exact_matched
        name_unmatched += diagnosis.name_unmatched
        for key, count in diagnosis.taints_unmatched_reasons.items():
            taints[key] = taints.get(key, 0) + count
        remain = diagnosis.remaining()
        if remain <= 0:
            continue
        counted: dict[str, int] = {}
        for reason in node_reasons.get(node_name, ()):
            if is_reservation_reason(reason):
                remain -= 1
                continue
            counted[reason] = counted.get(reason, 0) + 1
        if remain <= 0:
            continue
        for reason, count in counted.items():
            by_node[reason] = by_node.get(reason, 0) + remain * count
    if owner_matched <= 0 and not has_affinity:
        return []
    reasons: list[str] = []
    if name_matched > 0:
        reasons.append(f"{name_matched} Reservation(s) exactly matches the requested reservation name")
    if name_unmatched > 0:
        reasons.append(f"{name_unmatched} Reservation(s) didn't match the requested reservation name")
    if affinity_unmatched > 0:
        reasons.append(f"{affinity_unmatched} Reservation(s) didn't match affinity rules")
    if unschedulable > 0:
        reasons.append(f"{unschedulable} Reservation(s) is unschedulable")
    if not_exact > 0:
        reasons.append(f"{not_exact} Reservation(s) is not exact matched")
    for key in sorted(taints):
        reasons.append(f"{taints[key]} Reservation(s) had untolerated taint {key}")
    for reason in sorted(by_node):
        reasons.append(f"{by_node[reason]} Reservation(s) for node reason that {reason}")
    reasons.append(f"{owner_matched} Reservation(s) matched owner total")
    return reasons
