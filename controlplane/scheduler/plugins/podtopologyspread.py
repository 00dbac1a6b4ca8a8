"""PodTopologySpread (filter and score): pods spread evenly over topology domains, as
kube-scheduler v1.34's ``podtopologyspread`` plug-in.

**Constraints.** A pod's ``topologySpreadConstraints`` (``DoNotSchedule`` ones filter,
``ScheduleAnyway`` ones score); a pod without any gets the plug-in's default constraints
(args ``defaultingType`` System: hostname maxSkew 3 and zone maxSkew 5, both
ScheduleAnyway; List: ``defaultConstraints``). ``matchLabelKeys`` adds ``key = <the pod's
value>`` to the selector; ``minDomains`` defaults to 1, ``nodeAffinityPolicy`` to Honor
and ``nodeTaintsPolicy`` to Ignore. The pods counted are the placed, non-terminating pods
of the pod's namespace the selector matches.

Default constraints take their selector from the Services, ReplicationControllers,
ReplicaSets and StatefulSets selecting the pod upstream. koord-scheduler watches none of
those, so it derives the selector from what the pod itself says: a pod controlled by a
ReplicaSet, StatefulSet or ReplicationController spreads against the placed pods of the
same controller (its controller UID); other pods get no default constraints (upstream
would still spread a bare pod that a Service selects).

**Filter.** Eligible domains are the values, on the nodes that have every constraint's
topology key and pass the inclusion policies (Honor nodeAffinityPolicy: the pod's
nodeSelector and required node affinity; Honor nodeTaintsPolicy: its tolerations of
NoSchedule and NoExecute taints), of the constraint's key. A node lacking a key is
rejected for good ("... (missing required label)", UnschedulableAndUnresolvable); one
where ``pods matching in its domain + 1 if the pod matches itself - the global minimum``
exceeds maxSkew is rejected, Unschedulable (evicting pods may help). The global minimum is
0 when fewer than minDomains domains are eligible. Counting walks the pods the selector
matches (the cluster's pod index), never every node.

**Score.** For the nodes found feasible (the window), each ScheduleAnyway constraint adds
``count * log(domains + 2) + maxSkew - 1`` (count: matching pods in the node's domain on
eligible nodes, or on the node itself for ``kubernetes.io/hostname``; domains: distinct
domains among the window's nodes, or its node count for hostname), rounded; nodes lacking
a key are ignored and score 0 (unless System defaulting, which lets zone-less nodes still
spread by hostname); then ``100 * (max + min - score) / max``. The kernel computes it from
per-domain counts (:data:`~controlplane.scheduler.kernel.twin.SPREAD`), since the domain
count depends on the window.

:meth:`PodTopologySpread.explain`, :meth:`~PodTopologySpread.window_scores` and
:meth:`~PodTopologySpread.rejects_without` follow upstream's code node by node (for
``simulate``, and for preemption to ask whether evicting some pods lifts a rejection).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.kernel.twin import SPREAD, Domains, Extra, go_round
from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.interface import bits_of, passing_mask, rows_mask
from controlplane.scheduler.plugins.nodeaffinity import term_matches, terms_rows
from controlplane.scheduler.plugins.tainttoleration import TaintToleration, first_untolerated
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.podterms import Selector, SpreadConstraint, spread_constraint
from koordinator.api.selectors import SelectorError, validate_label_selector

NAME = "PodTopologySpread"
REASON = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL = f"{REASON} (missing required label)"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE, SCHEDULE_ANYWAY = "DoNotSchedule", "ScheduleAnyway"
HONOR, IGNORE = "Honor", "Ignore"
SYSTEM_DEFAULTING, LIST_DEFAULTING = "System", "List"
#: upstream's systemDefaultConstraints
SYSTEM_DEFAULT_CONSTRAINTS = (
    SpreadConstraint(3, HOSTNAME, SCHEDULE_ANYWAY, None),
    SpreadConstraint(5, ZONE, SCHEDULE_ANYWAY, None),
)
#: the controllers (apiVersion, kind) whose selector upstream's DefaultSelector reads
SELECTOR_CONTROLLERS = frozenset(
    {("v1", "ReplicationController"), ("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet")}
)
_MAX_INT32 = (1 << 31) - 1
MAX_NODE_SCORE = 100


@dataclass(frozen=True)
class SpreadArgs:
    defaulting_type: str = SYSTEM_DEFAULTING
    default_constraints: tuple[SpreadConstraint, ...] = ()

    @property
    def system_defaulted(self) -> bool:
        return self.defaulting_type == SYSTEM_DEFAULTING

    @property
    def defaults(self) -> tuple[SpreadConstraint, ...]:
        return SYSTEM_DEFAULT_CONSTRAINTS if self.system_defaulted else self.default_constraints


def _supported(path: str, value: Any, supported: Sequence[str]) -> ArgsError:
    listed = ", ".join(f'"{v}"' for v in supported)
    return ArgsError(f'{path}: Unsupported value: "{value}": supported values: {listed}')


def spread_args(raw: Mapping[str, Any] | None, path: str = NAME) -> SpreadArgs:
    """PodTopologySpreadArgs, defaulted and validated as upstream (``ArgsError``)."""
    raw = raw or {}
    unknown = set(raw) - {"apiVersion", "kind", "defaultingType", "defaultConstraints"}
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {sorted(unknown)}")
    defaulting = raw.get("defaultingType") or SYSTEM_DEFAULTING
    if defaulting not in (SYSTEM_DEFAULTING, LIST_DEFAULTING):
        raise _supported(f"{path}.defaultingType", defaulting, (SYSTEM_DEFAULTING, LIST_DEFAULTING))
    listed = raw.get("defaultConstraints") or []
    if not isinstance(listed, list):
        raise ArgsError(f"{path}.defaultConstraints: must be a list of TopologySpreadConstraints")
    if defaulting == SYSTEM_DEFAULTING and listed:
        raise ArgsError(
            f'{path}.defaultingType: Invalid value: "System": when .defaultConstraints are not empty'
        )
    constraints: list[SpreadConstraint] = []
    for i, item in enumerate(listed):
        where = f"{path}.defaultConstraints[{i}]"
        if not isinstance(item, Mapping):
            raise ArgsError(f"{where}: must be a TopologySpreadConstraint")
        skew = item.get("maxSkew")
        if isinstance(skew, bool) or not isinstance(skew, int) or skew <= 0:
            raise ArgsError(f"{where}.maxSkew: Invalid value: {skew!r}: not in valid range (0, inf)")
        key = item.get("topologyKey")
        if not key:
            raise ArgsError(f"{where}.topologyKey: Required value: can not be empty")
        try:
            validate_label_selector({"matchExpressions": [{"key": key, "operator": "Exists"}]})
        except SelectorError as err:
            raise ArgsError(f"{where}.topologyKey: Invalid value: {key!r}: {err}") from None
        when = item.get("whenUnsatisfiable")
        if not when:
            raise ArgsError(f"{where}.whenUnsatisfiable: Required value: can not be empty")
        if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            raise _supported(f"{where}.whenUnsatisfiable", when, (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY))
        if item.get("labelSelector") is not None:
            raise ArgsError(
                f"{where}.labelSelector: Forbidden: constraint must not define a selector, "
                "as they deduced for each pod"
            )
        if any(c.topology_key == key and c.when_unsatisfiable == when for c in constraints):
            raise ArgsError(f'{where}: Duplicate value: "{{{key}, {when}}}"')
        try:
            constraints.append(spread_constraint(item, with_selector=False))
        except (TypeError, ValueError):
            raise ArgsError(f"{where}.minDomains: must be an integer") from None
    return SpreadArgs(defaulting, tuple(constraints))


@dataclass(frozen=True, slots=True)
class Constraint:
    """Upstream's internal ``topologySpreadConstraint``: defaults applied, selector merged."""

    max_skew: int
    key: str
    #: None selects no pod
    selector: Selector | None
    min_domains: int
    honor_affinity: bool
    honor_taints: bool


def _controller_uid(pod: PodInfo) -> str:
    return pod.controller.uid if pod.controller is not None else ""


def default_selector(pod: PodInfo) -> Selector | None:
    """The selector default constraints use: the pod's controller, when it is one of the
    kinds upstream reads a selector from (None: no default constraints)."""
    owner = pod.controller
    if owner is None or not owner.uid or (owner.api_version, owner.kind) not in SELECTOR_CONTROLLERS:
        return None
    return Selector((), owner.uid)


def _constraint(c: SpreadConstraint, labels: Mapping[str, str], selector: Selector | None) -> Constraint:
    if c.match_label_keys:
        matched = {k: labels[k] for k in c.match_label_keys if k in labels}
        if matched:  # upstream's mergeLabelSetWithSelector (a nil selector gives just these)
            selector = (selector or Selector()).with_labels(matched)
    return Constraint(
        c.max_skew,
        c.topology_key,
        selector,
        c.min_domains if c.min_domains is not None else 1,
        c.node_affinity_policy != IGNORE,
        c.node_taints_policy == HONOR,
    )


def _selects(selector: Selector | None, pod: PodInfo) -> bool:
    return selector is not None and selector.matches(pod.labels, _controller_uid(pod))


class _NodeRows:
    """The rows a constraint's inclusion policies admit, computed once per cycle."""

    def __init__(self, pod: PodInfo, cluster: Cluster, live: int) -> None:
        self.pod = pod
        self.cluster = cluster
        self.live = live
        self._affinity: int | None = None
        self._tolerated: int | None = None

    def affinity(self) -> int:
        """Upstream's ``GetRequiredNodeAffinity(pod).Match``: nodeSelector and required terms."""
        if self._affinity is None:
            rows = self.live
            for key, value in self.pod.node_selector:
                rows &= self.cluster.rows_with(key, value)
            if self.pod.required_terms is not None:
                rows &= terms_rows(self.cluster, self.pod.required_terms, self.live)
            self._affinity = rows
        return self._affinity

    def tolerated(self) -> int:
        """The rows whose NoSchedule and NoExecute taints the pod tolerates."""
        if self._tolerated is None:
            mask = TaintToleration().mask(self.pod, self.cluster)
            self._tolerated = self.live if mask is None else bits_of(mask) & self.live
        return self._tolerated

    def eligible(self, c: Constraint) -> int:
        rows = self.live
        if c.honor_affinity:
            rows &= self.affinity()
        if c.honor_taints:
            rows &= self.tolerated()
        return rows


def included(pod: PodInfo, node: NodeInfo, c: Constraint) -> bool:
    """Upstream's ``matchNodeInclusionPolicies`` for one node."""
    if c.honor_affinity:
        if any(node.labels.get(k) != v for k, v in pod.node_selector):
            return False
        if pod.required_terms is not None and not any(term_matches(t, node) for t in pod.required_terms):
            return False
    return not (c.honor_taints and first_untolerated(pod, node.taints) is not None)


def count_on_node(
    pod: PodInfo, cluster: Cluster, node: str, selector: Selector | None, removed: Collection[str] = ()
) -> int:
    """Upstream's ``countPodsMatchSelector`` over the pods placed on ``node``."""
    if selector is None:
        return 0
    count = 0
    for key in cluster.on_node.get(node, ()):
        other = cluster.placed[key][2]
        if key in removed or other.terminating or other.namespace != pod.namespace:
            continue
        if selector.matches(other.labels, _controller_uid(other)):
            count += 1
    return count


@dataclass
class _Verdicts:
    #: per constraint: the rows lacking its topology key, and those its skew rejects
    missing: list[int]
    skewed: list[int]
    #: the rows whose first failing check is a missing label (preemption cannot help)
    unresolvable: int
    rejected: int


class PodTopologySpread:
    NAME = NAME
    #: evicting matching pods can lift a skew rejection; a missing label is unresolvable
    #: (see :meth:`resolvable`)
    PREEMPTION_HELPS = True
    reverse = False

    def __init__(self, args: SpreadArgs | None = None) -> None:
        self.args = args or SpreadArgs()
        self._defaults = {
            action: [c for c in self.args.defaults if c.when_unsatisfiable == action]
            for action in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY)
        }
        self._verdict_cache: tuple[PodInfo, int, _Verdicts | None] | None = None
        self._explain_cache: (
            tuple[PodInfo, int, tuple[list[Constraint], list[dict[str, int]]] | None] | None
        ) = None

    # --- constraints ---------------------------------------------------------------------

    def constraints(self, pod: PodInfo, action: str) -> list[Constraint]:
        """Upstream's ``getConstraints`` (DoNotSchedule) and PreScore's (ScheduleAnyway)."""
        if pod.spread:
            return [
                _constraint(c, pod.labels, c.selector) for c in pod.spread if c.when_unsatisfiable == action
            ]
        defaults = self._defaults[action]
        selector = default_selector(pod) if defaults else None
        if selector is None:
            return []
        # upstream merges matchLabelKeys into the defaults' (nil) selector, then replaces it
        return [_constraint(c, {}, selector) for c in defaults]

    def _matching_rows(
        self, pod: PodInfo, cluster: Cluster, selector: Selector | None, memo: dict[Selector, list[int]]
    ) -> list[int]:
        """The rows of the known nodes holding each matching pod (one entry per pod)."""
        if selector is None:
            return []
        found = memo.get(selector)
        if found is not None:
            return found
        out = []
        keys, exact = cluster.pod_index.select(pod.namespace, selector)
        placed, rows = cluster.placed, cluster.table.index
        for key in keys:
            node, _, other = placed[key]
            if other.terminating or other.namespace != pod.namespace:
                continue
            if not exact and not selector.matches(other.labels, _controller_uid(other)):
                continue
            row = rows.get(node)
            if row is not None:
                out.append(row)
        memo[selector] = out
        return out

    # --- filter --------------------------------------------------------------------------

    def _verdicts(self, pod: PodInfo, cluster: Cluster) -> _Verdicts | None:
        cached = self._verdict_cache
        if cached is not None and cached[0] is pod and cached[1] == cluster.generation:
            return cached[2]
        verdicts = self._compute_verdicts(pod, cluster)
        self._verdict_cache = (pod, cluster.generation, verdicts)
        return verdicts

    def _compute_verdicts(self, pod: PodInfo, cluster: Cluster) -> _Verdicts | None:
        constraints = self.constraints(pod, DO_NOT_SCHEDULE)
        if not constraints:
            return None
        n = cluster.table.count
        live = bits_of(bytes(cluster.table.live()))
        has_all = live
        for c in constraints:
            has_all &= cluster.rows_with(c.key)
        node_rows = _NodeRows(pod, cluster, live)
        memo: dict[Selector, list[int]] = {}
        missing, skewed = [], []
        for c in constraints:
            eligible_rows = has_all & node_rows.eligible(c)
            eligible = rows_mask(eligible_rows, n)
            counts: dict[str, int] = {}
            for row in self._matching_rows(pod, cluster, c.selector, memo):
                if eligible[row]:
                    value = cluster.by_row[row].labels[c.key]  # type: ignore[union-attr]
                    counts[value] = counts.get(value, 0) + 1
            covered = 0
            for value in counts:
                covered |= cluster.rows_with(c.key, value)
            # an eligible domain without a matching pod makes the global minimum 0, and so do
            # fewer eligible domains than minDomains
            zero_domain = bool(eligible_rows & ~covered)
            if zero_domain or len(counts) < c.min_domains:
                minimum = 0
            else:
                minimum = min(counts.values()) if counts else _MAX_INT32
            self_match = 1 if _selects(c.selector, pod) else 0
            bad = 0
            for value, count in counts.items():
                if count + self_match - minimum > c.max_skew:
                    bad |= cluster.rows_with(c.key, value)
            if self_match - minimum > c.max_skew:  # domains without a matching pod
                bad |= cluster.rows_with(c.key) & ~covered
            missing.append(live & ~cluster.rows_with(c.key))
            skewed.append(bad & live)
        remaining, unresolvable = live, 0
        for lacking, bad in zip(missing, skewed, strict=True):
            unresolvable |= remaining & lacking
            remaining &= ~lacking & ~bad
        return _Verdicts(missing, skewed, unresolvable, live & ~remaining)

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
        lacking_count = skewed_count = 0
        for lacking, bad in zip(verdicts.missing, verdicts.skewed, strict=True):
            hit = remaining & lacking
            lacking_count += hit.bit_count()
            remaining &= ~hit
            hit = remaining & bad
            skewed_count += hit.bit_count()
            remaining &= ~hit
        counts = {REASON_MISSING_LABEL: lacking_count, REASON: skewed_count}
        return {reason: count for reason, count in counts.items() if count}

    def resolvable(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        """1 for the rows this plug-in passes or rejects only for skew (Unschedulable); 0 for
        those it rejects for a missing label (UnschedulableAndUnresolvable)."""
        verdicts = self._verdicts(pod, cluster)
        if verdicts is None or not verdicts.unresolvable:
            return None
        n = cluster.table.count
        return passing_mask(verdicts.unresolvable, n)

    # --- score ---------------------------------------------------------------------------

    def _require_all(self, pod: PodInfo) -> bool:
        """Nodes must have every topology key to be scored, except under System defaulting."""
        return bool(pod.spread) or not self.args.system_defaulted

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        if not cluster.nodes:
            return None
        constraints = self.constraints(pod, SCHEDULE_ANYWAY)
        if not constraints:
            return None
        require_all = self._require_all(pod)
        n = cluster.table.count
        live = bits_of(bytes(cluster.table.live()))
        has_all = live
        for c in constraints:
            has_all &= cluster.rows_with(c.key)
        node_rows = _NodeRows(pod, cluster, live)
        memo: dict[Selector, list[int]] = {}
        domains = []
        for c in constraints:
            column = cluster.domain_column(c.key)
            rows = self._matching_rows(pod, cluster, c.selector, memo)
            if c.key == HOSTNAME:  # counted per node at Score, every pod of the node
                per_row = array("q", bytes(8 * n))
                for row in rows:
                    per_row[row] += 1
                domains.append(Domains(column.ids, per_row, c.max_skew, by_row=True))
                continue
            eligible = rows_mask(node_rows.eligible(c) & (has_all if require_all else live), n)
            empty = column.id_of("")
            # a node lacking the key is in domain "" for the domain count (System defaulting)
            absent = -1 if require_all else (empty if empty >= 0 else len(column.values))
            counts = array("q", bytes(8 * (len(column.values) + 1)))
            for row in rows:
                if eligible[row]:
                    domain = column.ids[row]
                    if domain < 0:
                        domain = absent
                    if domain >= 0:
                        counts[domain] += 1
            domains.append(Domains(column.ids, counts, c.max_skew, absent=absent))
        ignored = live & ~has_all if require_all else 0
        return Extra(
            NAME,
            weight,
            False,
            normalize=SPREAD,
            domains=domains,
            ignored=rows_mask(ignored, n) if ignored else b"",
        )

    # --- node by node (simulate, preemption) --------------------------------------------

    def _reference(
        self, pod: PodInfo, cluster: Cluster, removed: Collection[str] = ()
    ) -> tuple[list[Constraint], list[dict[str, int]]] | None:
        """Upstream's ``calPreFilterState``: per constraint, matching pods per eligible
        domain (``removed``: pod keys to leave out, as preemption's RemovePod)."""
        constraints = self.constraints(pod, DO_NOT_SCHEDULE)
        if not constraints:
            return None
        counts: list[dict[str, int]] = [{} for _ in constraints]
        for info in cluster.nodes.values():
            if not all(c.key in info.labels for c in constraints):
                continue
            for i, c in enumerate(constraints):
                if not included(pod, info, c):
                    continue
                value = info.labels[c.key]
                counts[i][value] = counts[i].get(value, 0) + count_on_node(
                    pod, cluster, info.name, c.selector, removed
                )
        return constraints, counts

    @staticmethod
    def _check(
        pod: PodInfo, node: NodeInfo, state: tuple[list[Constraint], list[dict[str, int]]]
    ) -> str | None:
        """Upstream's ``Filter`` of one node."""
        for c, counts in zip(*state, strict=True):
            if c.key not in node.labels:
                return REASON_MISSING_LABEL
            minimum = min(counts.values()) if counts else _MAX_INT32
            if len(counts) < c.min_domains:
                minimum = 0
            self_match = 1 if _selects(c.selector, pod) else 0
            if counts.get(node.labels[c.key], 0) + self_match - minimum > c.max_skew:
                return REASON
        return None

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        cached = self._explain_cache
        if cached is None or cached[0] is not pod or cached[1] != cluster.generation:
            cached = (pod, cluster.generation, self._reference(pod, cluster))
            self._explain_cache = cached
        state = cached[2]
        return None if state is None else self._check(pod, node, state)

    def applies(self, pod: PodInfo, cluster: Cluster) -> bool:
        return bool(self.constraints(pod, DO_NOT_SCHEDULE))

    def rejects_without(
        self, pod: PodInfo, cluster: Cluster, node: str, removed: Collection[str]
    ) -> str | None:
        """Why ``node`` fails this filter once the placed pods ``removed`` are gone (None: it passes)."""
        state = self._reference(pod, cluster, removed)
        return None if state is None else self._check(pod, cluster.nodes[node], state)

    def window_scores(self, pod: PodInfo, cluster: Cluster, rows: Sequence[int]) -> list[int]:
        """Upstream's PreScore, Score and NormalizeScore over the window ``rows``, node by node."""
        constraints = self.constraints(pod, SCHEDULE_ANYWAY)
        require_all = self._require_all(pod)
        nodes = [cluster.by_row[row] for row in rows]
        window = [info for info in nodes if info is not None]
        ignored = {
            info.name for info in window if require_all and not all(c.key in info.labels for c in constraints)
        }
        counts: list[dict[str, int]] = [{} for _ in constraints]
        for info in window:
            if info.name in ignored:
                continue
            for i, c in enumerate(constraints):
                if c.key != HOSTNAME:
                    counts[i].setdefault(info.labels.get(c.key, ""), 0)
        weights = [
            math.log((len(window) - len(ignored) if c.key == HOSTNAME else len(counts[i])) + 2)
            for i, c in enumerate(constraints)
        ]
        for info in cluster.nodes.values():
            if require_all and not all(c.key in info.labels for c in constraints):
                continue
            for i, c in enumerate(constraints):
                value = info.labels.get(c.key, "")
                if included(pod, info, c) and value in counts[i]:
                    counts[i][value] += count_on_node(pod, cluster, info.name, c.selector)
        raw: dict[str, int] = {}
        for info in window:
            if info.name in ignored:
                continue
            total = 0.0
            for i, c in enumerate(constraints):
                if c.key in info.labels:
                    if c.key == HOSTNAME:
                        count = count_on_node(pod, cluster, info.name, c.selector)
                    else:
                        count = counts[i][info.labels[c.key]]
                    total += count * weights[i] + (c.max_skew - 1)
            raw[info.name] = go_round(total)
        lowest = min(raw.values(), default=0)
        highest = max(0, max(raw.values(), default=0))
        out = []
        for node in nodes:
            if node is None or node.name not in raw:
                out.append(0)
            elif highest == 0:
                out.append(MAX_NODE_SCORE)
            else:
                out.append(MAX_NODE_SCORE * (highest + lowest - raw[node.name]) // highest)
        return out
