"""InterPodAffinity (filter and score): a pod's required and preferred affinity and
anti-affinity to the pods already placed, and theirs to it, as kube-scheduler v1.34's
``interpodaffinity`` plug-in.

**Terms.** A term selects pods by label selector in its namespaces (the pod's own when it
names none and has no ``namespaceSelector``) or in the namespaces its
``namespaceSelector`` selects (``{}``: all). For the incoming pod's terms, the namespaces a
non-empty ``namespaceSelector`` selects are merged into ``namespaces`` first
(``mergeAffinityTermNamespacesIfNotEmpty``); a placed pod's ``namespaceSelector`` is
matched against the incoming pod's namespace labels. Namespace labels come from the
cluster's namespace records (the scheduler's Namespace informer); a namespace not known
there is taken to carry just ``kubernetes.io/metadata.name``, which the apiserver puts on
every namespace.

**Filter**, per node, in upstream's order:

* required affinity: the node has every term's topology key and, for each term, some
  placed pod matching all the terms sits in the node's domain -- or no placed pod matches
  them all anywhere and the pod matches its own terms (the first pod of a group), then
  having the keys is enough. "node(s) didn't match pod affinity rules",
  UnschedulableAndUnresolvable.
* required anti-affinity: no placed pod a term matches sits in the node's domain of that
  term's key. "node(s) didn't match pod anti-affinity rules", Unschedulable.
* placed pods' required anti-affinity: no placed pod whose term matches the incoming pod
  sits in the node's domain of that term's key. "node(s) didn't satisfy existing pods
  anti-affinity rules", Unschedulable.

**Score**, per topology domain: + weight for each placed pod matching one of the pod's
preferred affinity terms, - weight for its preferred anti-affinity terms, and for the
placed pods' terms matching the incoming pod: + ``hardPodAffinityWeight`` (args, default
1) per required affinity term, + / - weight per preferred (anti-)affinity term
(``ignorePreferredTermsOfExistingPods`` skips the placed pods' terms when the pod has no
preferred terms of its own). A node scores the sum over its labels' domains; the window is
normalized ``100 * (s - min) / (max - min)`` in float64, truncated
(:data:`~controlplane.scheduler.kernel.twin.MIN_MAX`). The pods are found through the
cluster's pod index and the placed pods' terms through its term index (each distinct
term evaluated once per cycle); nothing walks every node.

:meth:`InterPodAffinity.explain`, :meth:`~InterPodAffinity.window_scores` and
:meth:`~InterPodAffinity.rejects_without` follow upstream's code node by node.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.kernel.twin import MIN_MAX, Domains, Extra
from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.interface import bits_of, passing_mask
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.podterms import NAMESPACE_NAME_LABEL, AffinityTerm, WeightedTerm
from controlplane.scheduler.topology import (
    PREFERRED_AFFINITY,
    PREFERRED_ANTI,
    REQUIRED_AFFINITY,
    REQUIRED_ANTI,
)

NAME = "InterPodAffinity"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
MAX_NODE_SCORE = 100
MAX_HARD_POD_AFFINITY_WEIGHT = 100

Pair = tuple[str, str]


@dataclass(frozen=True)
class AffinityArgs:
    hard_pod_affinity_weight: int = 1
    ignore_preferred_terms_of_existing_pods: bool = False


def affinity_args(raw: Mapping[str, Any] | None, path: str = NAME) -> AffinityArgs:
    """InterPodAffinityArgs, defaulted and validated as upstream (``ArgsError``)."""
    raw = raw or {}
    unknown = set(raw) - {"apiVersion", "kind", "hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"}
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {sorted(unknown)}")
    weight = raw.get("hardPodAffinityWeight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise ArgsError(f"{path}.hardPodAffinityWeight: Invalid value: {weight!r}: must be an integer")
    if not 0 <= weight <= MAX_HARD_POD_AFFINITY_WEIGHT:
        raise ArgsError(
            f"{path}.hardPodAffinityWeight: Invalid value: {weight}: "
            f"not in valid range [0-{MAX_HARD_POD_AFFINITY_WEIGHT}]"
        )
    ignore = raw.get("ignorePreferredTermsOfExistingPods", False)
    if not isinstance(ignore, bool):
        raise ArgsError(
            f"{path}.ignorePreferredTermsOfExistingPods: Invalid value: {ignore!r}: must be a boolean"
        )
    return AffinityArgs(weight, ignore)


def namespace_labels(cluster: Cluster, namespace: str) -> Mapping[str, str]:
    labels = cluster.namespace_labels.get(namespace)
    return labels if labels is not None else {NAMESPACE_NAME_LABEL: namespace}


def _known_namespaces(cluster: Cluster, pod: PodInfo) -> set[str]:
    return {*cluster.namespace_labels, *cluster.pod_index.in_namespace, pod.namespace}


def merged(term: AffinityTerm, cluster: Cluster, pod: PodInfo) -> AffinityTerm:
    """Upstream's ``mergeAffinityTermNamespacesIfNotEmpty`` for the incoming pod's terms:
    the namespaces a non-empty namespaceSelector selects join ``namespaces``."""
    selector = term.namespace_selector
    if selector is None or (not selector.requirements and not selector.controller):
        return term
    names = set(term.namespaces)
    for namespace in _known_namespaces(cluster, pod):
        if selector.matches(namespace_labels(cluster, namespace)):
            names.add(namespace)
    return AffinityTerm(frozenset(names), term.selector, term.topology_key, None)


def _own_terms(pod: PodInfo, cluster: Cluster) -> tuple[list[AffinityTerm], list[AffinityTerm]]:
    affinity = pod.affinity
    if affinity is None:
        return [], []
    return (
        [merged(t, cluster, pod) for t in affinity.required],
        [merged(t, cluster, pod) for t in affinity.required_anti],
    )


def _own_preferred(pod: PodInfo, cluster: Cluster) -> tuple[list[WeightedTerm], list[WeightedTerm]]:
    affinity = pod.affinity
    if affinity is None:
        return [], []
    return (
        [WeightedTerm(w.weight, merged(w.term, cluster, pod)) for w in affinity.preferred],
        [WeightedTerm(w.weight, merged(w.term, cluster, pod)) for w in affinity.preferred_anti],
    )


def _matches_incoming(term: AffinityTerm, other: PodInfo) -> bool:
    """An incoming pod's (merged) term against a placed pod (no namespace labels needed)."""
    return term.matches(other.namespace, other.labels, {})


def matches_all(terms: Sequence[AffinityTerm], other: PodInfo) -> bool:
    """Upstream's ``podMatchesAllAffinityTerms`` (false for no terms)."""
    return bool(terms) and all(_matches_incoming(t, other) for t in terms)


def term_pods(cluster: Cluster, term: AffinityTerm) -> Iterator[tuple[PodInfo, NodeInfo]]:
    """The placed pods on known nodes an incoming pod's (merged) term matches."""
    selector = term.selector
    if selector is None:
        return
    if term.namespace_selector is not None:  # {}: every namespace
        namespaces: Collection[str] = list(cluster.pod_index.in_namespace)
    else:
        namespaces = term.namespaces
    for namespace in namespaces:
        keys, exact = cluster.pod_index.select(namespace, selector)
        for key in keys:
            node, _, other = cluster.placed[key]
            if exact or _matches_incoming(term, other):
                info = cluster.nodes.get(node)
                if info is not None:
                    yield other, info


@dataclass
class _Verdicts:
    affinity: int
    anti: int
    existing: int

    @property
    def rejected(self) -> int:
        return self.affinity | self.anti | self.existing


def _pair_rows(cluster: Cluster, pairs: Collection[Pair]) -> int:
    rows = 0
    for key, value in pairs:
        rows |= cluster.rows_with(key, value)
    return rows


class InterPodAffinity:
    NAME = NAME
    #: evicting pods can lift an anti-affinity rejection; required affinity is unresolvable
    #: (see :meth:`resolvable`)
    PREEMPTION_HELPS = True
    reverse = False

    def __init__(self, args: AffinityArgs | None = None) -> None:
        self.args = args or AffinityArgs()
        self._verdict_cache: tuple[PodInfo, int, _Verdicts | None] | None = None
        self._explain_cache: tuple[PodInfo, int, _Reference | None] | None = None

    # --- filter --------------------------------------------------------------------------

    def _verdicts(self, pod: PodInfo, cluster: Cluster) -> _Verdicts | None:
        if pod.affinity is None and not cluster.pod_index.terms[REQUIRED_ANTI]:
            return None  # nothing to check (the common case, without a cache entry)
        cached = self._verdict_cache
        if cached is not None and cached[0] is pod and cached[1] == cluster.generation:
            return cached[2]
        verdicts = self._compute_verdicts(pod, cluster)
        self._verdict_cache = (pod, cluster.generation, verdicts)
        return verdicts

    def _compute_verdicts(self, pod: PodInfo, cluster: Cluster) -> _Verdicts | None:
        required, required_anti = _own_terms(pod, cluster)
        labels_of_namespace = namespace_labels(cluster, pod.namespace)
        existing: set[Pair] = set()
        for (_, term), nodes in cluster.pod_index.terms[REQUIRED_ANTI].items():
            if not term.matches(pod.namespace, pod.labels, labels_of_namespace):
                continue
            for node in nodes:
                info = cluster.nodes.get(node)
                value = info.labels.get(term.topology_key) if info is not None else None
                if value is not None:
                    existing.add((term.topology_key, value))
        if not existing and not required and not required_anti:
            return None  # upstream's PreFilter Skip
        live = bits_of(bytes(cluster.table.live()))
        affinity_fail = 0
        if required:
            pairs: set[Pair] = set()
            for other, info in term_pods(cluster, required[0]):
                if matches_all(required, other):
                    for t in required:
                        value = info.labels.get(t.topology_key)
                        if value is not None:
                            pairs.add((t.topology_key, value))
            has_keys = live
            for t in required:
                has_keys &= cluster.rows_with(t.topology_key)
            passing = has_keys
            if pairs or not matches_all(required, pod):
                for t in required:
                    passing &= _pair_rows(cluster, [p for p in pairs if p[0] == t.topology_key])
            affinity_fail = live & ~passing
        anti: set[Pair] = set()
        for t in required_anti:
            for _, info in term_pods(cluster, t):
                value = info.labels.get(t.topology_key)
                if value is not None:
                    anti.add((t.topology_key, value))
        return _Verdicts(
            affinity_fail, live & _pair_rows(cluster, anti), live & _pair_rows(cluster, existing)
        )

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        verdicts = self._verdicts(pod, cluster)
        if verdicts is None or not verdicts.rejected:
            return None
        n = cluster.table.count
        return passing_mask(verdicts.rejected, n)

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        verdicts = self._verdicts(pod, cluster)
        if verdicts is None:
            return {}
        remaining = bits_of(rejected)
        counts = {}
        for reason, rows in (
            (REASON_AFFINITY, verdicts.affinity),
            (REASON_ANTI_AFFINITY, verdicts.anti),
            (REASON_EXISTING_ANTI_AFFINITY, verdicts.existing),
        ):
            hit = remaining & rows
            counts[reason] = hit.bit_count()
            remaining &= ~hit
        return {reason: count for reason, count in counts.items() if count}

    def resolvable(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        """1 for the rows this plug-in passes or rejects for anti-affinity (Unschedulable); 0
        for those failing the pod's required affinity (UnschedulableAndUnresolvable)."""
        verdicts = self._verdicts(pod, cluster)
        if verdicts is None or not verdicts.affinity:
            return None
        n = cluster.table.count
        return passing_mask(verdicts.affinity, n)

    # --- score ---------------------------------------------------------------------------

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        index = cluster.pod_index.terms
        if not cluster.nodes or (
            pod.affinity is None
            and not index[PREFERRED_AFFINITY]
            and not index[PREFERRED_ANTI]
            and not (index[REQUIRED_AFFINITY] and self.args.hard_pod_affinity_weight > 0)
        ):
            return None  # no term could score (the common case)
        preferred, preferred_anti = _own_preferred(pod, cluster)
        has_constraints = bool(preferred or preferred_anti)
        if self.args.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return None
        scores: dict[str, dict[str, int]] = {}

        def add(info: NodeInfo | None, key: str, amount: int) -> None:
            value = info.labels.get(key) if info is not None else None
            if value is not None:
                of_key = scores.setdefault(key, {})
                of_key[value] = of_key.get(value, 0) + amount

        for sign, terms in ((1, preferred), (-1, preferred_anti)):
            for w in terms:
                for _, info in term_pods(cluster, w.term):
                    add(info, w.term.topology_key, sign * w.weight)
        labels_of_namespace = namespace_labels(cluster, pod.namespace)
        for kind, sign in ((REQUIRED_AFFINITY, 1), (PREFERRED_AFFINITY, 1), (PREFERRED_ANTI, -1)):
            if kind == REQUIRED_AFFINITY and self.args.hard_pod_affinity_weight <= 0:
                continue
            for (term_weight, term), nodes in index[kind].items():
                if not term.matches(pod.namespace, pod.labels, labels_of_namespace):
                    continue
                amount = sign * (
                    self.args.hard_pod_affinity_weight if kind == REQUIRED_AFFINITY else term_weight
                )
                for node, count in nodes.items():
                    add(cluster.nodes.get(node), term.topology_key, amount * count)
        if not scores:
            return None  # upstream's PreScore Skip: no node got a topology score
        domains = []
        for key, values in scores.items():
            column = cluster.domain_column(key)
            per_domain = array("q", bytes(8 * len(column.values)))
            for value, score in values.items():
                domain = column.id_of(value)
                if domain >= 0:
                    per_domain[domain] += score
            domains.append(Domains(column.ids, per_domain))
        return Extra(NAME, weight, False, normalize=MIN_MAX, domains=domains)

    # --- node by node (simulate, preemption) --------------------------------------------

    def _reference(self, pod: PodInfo, cluster: Cluster, removed: Collection[str] = ()) -> _Reference | None:
        """Upstream's PreFilter: the topology pairs of each check, from every placed pod."""
        if pod.affinity is None and not cluster.pod_index.terms[REQUIRED_ANTI]:
            return None  # nothing to check: no walk over the placed pods
        required, required_anti = _own_terms(pod, cluster)
        labels_of_namespace = namespace_labels(cluster, pod.namespace)
        ref = _Reference(required, required_anti, {}, {}, {})
        for info in cluster.nodes.values():
            for key in cluster.on_node.get(info.name, ()):
                if key in removed:
                    continue
                other = cluster.placed[key][2]
                if other.affinity is not None:
                    for t in other.affinity.required_anti:
                        if t.matches(pod.namespace, pod.labels, labels_of_namespace):
                            _count(ref.existing, info, t.topology_key)
                if matches_all(required, other):
                    for t in required:
                        _count(ref.affinity, info, t.topology_key)
                for t in required_anti:
                    if _matches_incoming(t, other):
                        _count(ref.anti, info, t.topology_key)
        if not ref.existing and not required and not required_anti:
            return None
        return ref

    @staticmethod
    def _check(pod: PodInfo, node: NodeInfo, ref: _Reference) -> str | None:
        """Upstream's ``Filter`` of one node."""
        exist = True
        for t in ref.required:
            value = node.labels.get(t.topology_key)
            if value is None:
                return REASON_AFFINITY
            if ref.affinity.get((t.topology_key, value), 0) <= 0:
                exist = False
        if not exist and not (not ref.affinity and matches_all(ref.required, pod)):
            return REASON_AFFINITY
        for t in ref.required_anti:
            value = node.labels.get(t.topology_key)
            if value is not None and ref.anti.get((t.topology_key, value), 0) > 0:
                return REASON_ANTI_AFFINITY
        if any(ref.existing.get(pair, 0) > 0 for pair in node.labels.items()):
            return REASON_EXISTING_ANTI_AFFINITY
        return None

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        cached = self._explain_cache
        if cached is None or cached[0] is not pod or cached[1] != cluster.generation:
            cached = (pod, cluster.generation, self._reference(pod, cluster))
            self._explain_cache = cached
        ref = cached[2]
        return None if ref is None else self._check(pod, node, ref)

    def applies(self, pod: PodInfo, cluster: Cluster) -> bool:
        return pod.affinity is not None or bool(cluster.pod_index.terms[REQUIRED_ANTI])

    def rejects_without(
        self, pod: PodInfo, cluster: Cluster, node: str, removed: Collection[str]
    ) -> str | None:
        """Why ``node`` fails this filter once the placed pods ``removed`` are gone (None: it passes)."""
        ref = self._reference(pod, cluster, removed)
        return None if ref is None else self._check(pod, cluster.nodes[node], ref)

    def window_scores(self, pod: PodInfo, cluster: Cluster, rows: Sequence[int]) -> list[int]:
        """Upstream's PreScore, Score and NormalizeScore over the window ``rows``, node by node."""
        preferred, preferred_anti = _own_preferred(pod, cluster)
        labels_of_namespace = namespace_labels(cluster, pod.namespace)
        hard = self.args.hard_pod_affinity_weight
        topology: dict[Pair, int] = {}
        for info in cluster.nodes.values():
            for key in cluster.on_node.get(info.name, ()):
                other = cluster.placed[key][2]
                for sign, terms in ((1, preferred), (-1, preferred_anti)):
                    for w in terms:
                        if _matches_incoming(w.term, other):
                            _count(topology, info, w.term.topology_key, sign * w.weight)
                if other.affinity is None:
                    continue
                if hard > 0:
                    for t in other.affinity.required:
                        if t.matches(pod.namespace, pod.labels, labels_of_namespace):
                            _count(topology, info, t.topology_key, hard)
                for sign, weighted in ((1, other.affinity.preferred), (-1, other.affinity.preferred_anti)):
                    for w in weighted:
                        if w.term.matches(pod.namespace, pod.labels, labels_of_namespace):
                            _count(topology, info, w.term.topology_key, sign * w.weight)
        raws = []
        for row in rows:
            node = cluster.by_row[row]
            raws.append(sum(topology.get(pair, 0) for pair in node.labels.items()) if node is not None else 0)
        if not topology:
            return [0] * len(raws)
        lowest, highest = min(raws, default=0), max(raws, default=0)
        diff = highest - lowest
        return [int(MAX_NODE_SCORE * ((raw - lowest) / diff)) if diff > 0 else 0 for raw in raws]


def _count(pairs: dict[Pair, int], node: NodeInfo, key: str, amount: int = 1) -> None:
    value = node.labels.get(key)
    if value is not None:
        pairs[(key, value)] = pairs.get((key, value), 0) + amount


@dataclass
class _Reference:
    required: list[AffinityTerm]
    required_anti: list[AffinityTerm]
    #: topology pair -> placed pods there matching all required affinity terms / an
    #: anti-affinity term / whose required anti-affinity term matches the incoming pod
    affinity: dict[Pair, int]
    anti: dict[Pair, int]
    existing: dict[Pair, int]
