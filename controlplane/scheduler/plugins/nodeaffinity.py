"""NodeAffinity (filter): ``spec.nodeSelector`` and the required node affinity terms, plus
the scheduler-enforced ``addedAffinity`` of its args.

Each requirement becomes a bit set over the rows from the cluster's label index (In: the
union of its values' rows; NotIn and DoesNotExist: the complement; Gt and Lt: the rows of
the values that compare), terms are ANDed inside and ORed together, as upstream's
``nodeaffinity.NodeSelector``. ``metadata.name`` field requirements select rows by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.kernel.twin import Extra
from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.interface import bits_of, rows_mask
from controlplane.scheduler.podinfo import PodInfo, Requirement, Term, node_selector_terms

NAME = "NodeAffinity"
REASON_POD = "node(s) didn't match Pod's node affinity/selector"
REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _rows(cluster: Cluster, req: Requirement, everything: int) -> int:
    op = req.operator
    if op == "In":
        out = 0
        for value in req.values:
            out |= cluster.rows_with(req.key, value)
        return out
    if op == "NotIn":
        out = 0
        for value in req.values:
            out |= cluster.rows_with(req.key, value)
        return everything & ~out
    if op == "Exists":
        return cluster.rows_with(req.key)
    if op == "DoesNotExist":
        return everything & ~cluster.rows_with(req.key)
    if op in ("Gt", "Lt") and len(req.values) == 1 and _int(req.values[0]) is not None:
        bound = int(req.values[0])
        out = 0
        for value, bits in cluster.labels.get(req.key, {}).items():
            number = _int(value)
            if number is not None and (number > bound if op == "Gt" else number < bound):
                out |= bits
        return out
    return 0  # an operator upstream's validation refuses matches nothing


def _field_rows(cluster: Cluster, req: Requirement, everything: int) -> int:
    if req.key != "metadata.name" or req.operator not in ("In", "NotIn"):
        return 0
    out = 0
    for name in req.values:
        info = cluster.nodes.get(name)
        if info is not None:
            out |= 1 << info.row
    return out if req.operator == "In" else everything & ~out


def terms_rows(cluster: Cluster, terms: tuple[Term, ...], everything: int) -> int:
    """The rows matching any term (an empty term matches nothing)."""
    out = 0
    for term in terms:
        if not term.expressions and not term.fields:
            continue
        rows = everything
        for req in term.expressions:
            rows &= _rows(cluster, req, everything)
        for req in term.fields:
            rows &= _field_rows(cluster, req, everything)
        out |= rows
    return out


def _matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        number, bound = _int(value), _int(req.values[0])
        if number is None or bound is None:
            return False
        return number > bound if op == "Gt" else number < bound
    return False


def _field_matches(req: Requirement, node: NodeInfo) -> bool:
    if req.key != "metadata.name" or req.operator not in ("In", "NotIn"):
        return False
    return (node.name in req.values) == (req.operator == "In")


def term_matches(term: Term, node: NodeInfo) -> bool:
    if not term.expressions and not term.fields:
        return False
    return all(_field_matches(r, node) for r in term.fields) and all(
        _matches(r, node.labels) for r in term.expressions
    )


def added_affinity(raw: Mapping[str, Any] | None, path: str = NAME) -> tuple[Term, ...] | None:
    """NodeAffinityArgs: the ``addedAffinity`` required terms (None: none)."""
    added = (raw or {}).get("addedAffinity")
    if added is None:
        return None
    if not isinstance(added, Mapping):
        raise ArgsError(f"{path}.addedAffinity: must be a NodeAffinity")
    if "preferredDuringSchedulingIgnoredDuringExecution" in added:
        raise ArgsError(
            f"{path}.addedAffinity.preferredDuringSchedulingIgnoredDuringExecution: "
            "not built in koord-scheduler"
        )
    return node_selector_terms(added.get("requiredDuringSchedulingIgnoredDuringExecution"))


class NodeAffinity:
    """The filter, and the score of the preferred terms (each matching term adds its weight;
    normalized so the best node of the window gets 100)."""

    NAME = NAME
    PREEMPTION_HELPS = False
    reverse = False

    def __init__(self, added: tuple[Term, ...] | None = None) -> None:
        self.added = added

    def _pod_rows(self, pod: PodInfo, cluster: Cluster, everything: int) -> int:
        rows = everything
        for key, value in pod.node_selector:
            rows &= cluster.rows_with(key, value)
        if pod.required_terms is not None:
            rows &= terms_rows(cluster, pod.required_terms, everything)
        return rows

    def _bits(self, pod: PodInfo, cluster: Cluster) -> tuple[int, int] | None:
        """(rows passing the enforced affinity, rows passing the pod's own) or None when
        neither restricts."""
        if self.added is None and not pod.node_selector and pod.required_terms is None:
            return None
        everything = (1 << cluster.table.count) - 1
        enforced = everything if self.added is None else terms_rows(cluster, self.added, everything)
        return enforced, self._pod_rows(pod, cluster, everything)

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        bits = self._bits(pod, cluster)
        if bits is None:
            return None
        return rows_mask(bits[0] & bits[1], cluster.table.count)

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        bits = self._bits(pod, cluster)
        if bits is None:
            return {}
        rejected_bits = bits_of(rejected)
        not_enforced = (rejected_bits & ~bits[0]).bit_count()
        counts = {REASON_ENFORCED: not_enforced, REASON_POD: (rejected_bits & bits[0] & ~bits[1]).bit_count()}
        return {reason: n for reason, n in counts.items() if n}

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        if not pod.preferred_terms:
            return None
        everything = (1 << cluster.table.count) - 1
        parts = [
            (rows_mask(terms_rows(cluster, (term,), everything), cluster.table.count), term_weight)
            for term_weight, term in pod.preferred_terms
        ]
        return Extra(NAME, weight, False, parts)

    def raw_score(self, pod: PodInfo, node: NodeInfo) -> int:
        return sum(w for w, term in pod.preferred_terms if term_matches(term, node))

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        if self.added is not None and not any(term_matches(t, node) for t in self.added):
            return REASON_ENFORCED
        if any(node.labels.get(k) != v for k, v in pod.node_selector):
            return REASON_POD
        if pod.required_terms is not None and not any(term_matches(t, node) for t in pod.required_terms):
            return REASON_POD
        return None
