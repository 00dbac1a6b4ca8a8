"""One scheduling profile over the cluster: the filter and score part of a scheduling cycle.

For a pod: every mask filter plug-in narrows the rows that hold a node (in profile order),
then one kernel call runs NodeResourcesFit's filter and the kernel's score plug-ins from
the rotating start until enough feasible nodes were found (upstream's sampling), and picks
the best with a random tie-break. Nothing here loops over nodes in Python on the way to a
placement; :meth:`Framework.explain` (``koord-scheduler simulate``) does, to say per node
why it was filtered and how it scored.

When no node fits, the reasons are counted over every node as upstream's FitError does --
each node counted for the first plug-in (in filter order) that rejected it, every reason
of that plug-in -- into ``0/N nodes are available: ...``.
"""

from __future__ import annotations

import contextlib
import random
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler import kernel
from controlplane.scheduler.binding import BindingPoints
from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import Profile
from controlplane.scheduler.kernel.table import PodVector, ScoreConfig
from controlplane.scheduler.kernel.twin import FIRST_RESOURCE, TOO_MANY_PODS, Extra, node_fails, normalized
from controlplane.scheduler.metrics import PLUGIN_SAMPLE_EVERY, SchedulerMetrics
from controlplane.scheduler.plugins import noderesources
from controlplane.scheduler.plugins.defaultpreemption import Candidate, Checks, Outcome, preempt
from controlplane.scheduler.plugins.interface import (
    Handle,
    MaskFilter,
    NormalizedScore,
    PostFilterPlugin,
    PreFilterPlugin,
    Restorer,
    and_masks,
    and_not,
    rows_mask,
)
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.registry import POST_FILTER, PRE_FILTER, REGISTRY
from controlplane.scheduler.sampling import num_feasible_nodes_to_find
from koordinator.api.features import FeatureGates

NO_NODES = "no nodes available to schedule pods"
#: the kernel filters and scores in one pass: its time, with the mask plug-ins', is reported
#: as the Filter extension point (Score's share cannot be told apart)
FILTER_AND_SCORE = "Filter"


@dataclass
class ScheduleResult:
    pod: str
    node: str | None
    #: upstream's FitError text when no node fits ("" when placed)
    message: str = ""
    #: reason -> nodes, when no node fits
    reasons: dict[str, int] = field(default_factory=dict)
    feasible: int = 0
    processed: int = 0
    #: the plug-ins that rejected some node, when no node fits (the queue's move rules)
    rejected_by: frozenset[str] = frozenset()
    #: the node and victims DefaultPreemption chose, when no node fits and it found some
    preemption: Candidate | None = None
    #: DefaultPreemption found no node for an eligible pod: a nomination it had is void
    clears_nomination: bool = False


@dataclass(frozen=True)
class PreFiltered:
    """The PreFilter step's outcome for a pod."""

    #: the plug-in rejecting the pod on every node, and its message
    plugin: str | None = None
    message: str | None = None
    #: the rows the PreFilter results leave (None: all), and the plug-ins that narrowed them
    rows: int | None = None
    narrowing: tuple[str, ...] = ()
    #: the rejection may be lifted by preemption (see :class:`PreFilterResult`)
    resolvable: bool = False


def _suffix(notes: list[str], outcome: Outcome | None) -> str:
    """What PostFilter adds to the FitError text: each plug-in's message in order, then
    preemption's (upstream joins them with ", ")."""
    parts = list(notes)
    if outcome is not None and outcome.message:
        parts.append(f"preemption: {outcome.message}.")
    return f" {', '.join(parts)}" if parts else ""


def fit_error(all_nodes: int, reasons: dict[str, int]) -> str:
    """Upstream's ``FitError.Error()``: reasons as "<count> <reason>", sorted as strings."""
    text = f"0/{all_nodes} nodes are available:"
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    if histogram:
        text += f" {', '.join(histogram)}."
    return text


class Framework:
    def __init__(
        self,
        profile: Profile,
        cluster: Cluster,
        *,
        percentage: int | None = None,
        seed: int | None = None,
        metrics: SchedulerMetrics | None = None,
        gates: FeatureGates | None = None,
    ):
        self.profile = profile
        self.cluster = cluster
        self.percentage = (
            profile.percentage_of_nodes_to_score
            if profile.percentage_of_nodes_to_score is not None
            else percentage
        )
        plugins: dict[str, Any] = {}
        names = (*profile.filters, *profile.scores, *(n for point in profile.points.values() for n in point))
        #: every plug-in the profile enables, at any point
        self.enabled = frozenset(names)
        for name in names:
            factory = REGISTRY[name].factory
            if factory is not None and name not in plugins:
                plugins[name] = factory(profile.args.get(name))
        #: the points after a node is chosen, PreEnqueue and the ForgetPod hooks
        self.points = BindingPoints(profile.points, plugins)
        self.filters = [plugins[name] for name in profile.filters if name in plugins]
        #: the mask filters after NodeResourcesFit in the profile: a node it rejects is counted
        #: for it (upstream runs filters in order), and they explain only the nodes it passes
        fit_at = profile.filters.index(noderesources.FIT) if noderesources.FIT in profile.filters else -1
        self.after_fit = frozenset(profile.filters[fit_at + 1 :] if fit_at >= 0 else ())
        #: the filters whose rejections evicting pods can lift, asked again by preemption
        self.eviction_checks = Checks(
            [f for f in self.filters if f.PREEMPTION_HELPS and f.NAME not in self.after_fit],
            [f for f in self.filters if f.PREEMPTION_HELPS and f.NAME in self.after_fit],
        )
        #: every plug-in object of the profile, by name
        self.plugins: dict[str, Any] = plugins
        if gates is not None:
            for plugin in plugins.values():
                use = getattr(plugin, "use_feature_gates", None)
                if callable(use):
                    use(gates)
        for plugin in plugins.values():
            # plug-ins that follow the nodes from the start, before any cycle (ElasticQuota's
            # cluster total, which its controller needs while no pod is scheduled)
            follow_cluster = getattr(plugin, "bind_cluster", None)
            if callable(follow_cluster):
                follow_cluster(cluster)
        #: the PreFilter plug-ins, in order (VolumeBinding, Coscheduling ...): one may reject
        #: the pod everywhere or narrow the nodes before any filter runs
        self.pre_filters: list[PreFilterPlugin] = [
            plugins[name]
            for name in profile.points.get(PRE_FILTER, ())
            if name in plugins and callable(getattr(plugins[name], "pre_filter", None))
        ]
        #: the PostFilter plug-ins other than DefaultPreemption, in order (Coscheduling ...)
        self.post_filters: list[PostFilterPlugin] = [
            plugins[name]
            for name in profile.points.get(POST_FILTER, ())
            if name in plugins and callable(getattr(plugins[name], "post_filter", None))
        ]
        #: plug-ins limiting preemption's victims (ElasticQuota: the pod's own quota)
        self.victim_rulers = [p for p in plugins.values() if callable(getattr(p, "victim_rules", None))]
        #: the plug-in owning reserve pods (Reservation), and whether they may preempt
        self.reserve_pod_owners = [p for p in plugins.values() if hasattr(p, "reserve_pods_preempt")]
        #: plug-ins told of every pod the scheduler's informer sees (gangs, quotas)
        self.pod_listeners = [p for p in plugins.values() if callable(getattr(p, "on_pod", None))]
        #: plug-ins giving some of a node's requests back for the pod being scheduled
        #: (Reservation: the matched reservations' room), upstream's BeforePreFilter
        self.restorers: list[Restorer] = [
            p for p in plugins.values() if callable(getattr(p, "restore", None))
        ]
        #: score plug-ins outside the kernel, with their weights
        self.scorers: list[tuple[NormalizedScore, int]] = [
            (plugins[name], weight) for name, weight in profile.scores.items() if name in plugins and weight
        ]
        self.fit_weight = profile.scores.get(noderesources.FIT, 0)
        self.balanced_weight = profile.scores.get(noderesources.BALANCED, 0)
        self.next_start = 0
        self.random = array("Q", [seed if seed is not None else random.getrandbits(63) | 1])
        self.rng = random.Random(seed)
        self.metrics = metrics
        self.cycles = 0
        #: this cycle measures each plug-in's duration (one in PLUGIN_SAMPLE_EVERY)
        self._sampled = False
        self._cfg: ScoreConfig | None = None
        self._cfg_width = -1

    def bind_handle(self, handle: Handle) -> None:
        """Give the plug-ins that act on the running scheduler (waiting pods, the queue) its handle."""
        for plugin in self.plugins.values():
            bind = getattr(plugin, "bind_handle", None)
            if callable(bind):
                bind(handle)

    def on_pod(self, old: PodInfo | None, new: PodInfo | None) -> None:
        """A pod was added (``old`` None), changed, or deleted (``new`` None)."""
        for plugin in self.pod_listeners:
            plugin.on_pod(old, new)

    # --- the pieces ----------------------------------------------------------------------

    def score_config(self) -> ScoreConfig:
        table = self.cluster.table
        if self._cfg is None or self._cfg_width != table.width:
            balanced = self.profile.balanced if noderesources.BALANCED in self.profile.scores else None
            self._cfg = noderesources.score_config(
                table, self.profile.fit, self.fit_weight, balanced, self.balanced_weight
            )
            self._cfg_width = table.width
        return self._cfg

    def pod_vector(self, pod: PodInfo) -> PodVector:
        fit = self.profile.fit
        requests = {k: v for k, v in pod.requests.items() if not fit.ignores(k)}
        return self.cluster.table.pod_vector(requests)

    def masks(self, pod: PodInfo) -> list[tuple[MaskFilter, bytes | None]]:
        """Each mask filter with its mask for ``pod`` (None: it rejects no node), in profile
        order: built once per cycle, then combined, diagnosed and narrowed for preemption."""
        if not self._sampled:
            return [(plugin, plugin.mask(pod, self.cluster)) for plugin in self.filters]
        out = []
        for plugin in self.filters:
            started = time.perf_counter()
            out.append((plugin, plugin.mask(pod, self.cluster)))
            self._observe_plugin(plugin.NAME, "Filter", started)
        return out

    def _observe_plugin(self, name: str, point: str, started: float) -> None:
        if self.metrics is not None:
            self.metrics.of(self.metrics.plugin_duration, name, point, "Success").observe(
                time.perf_counter() - started
            )

    def _observe_point(self, point: str, status: str, started: float) -> None:
        if self.metrics is not None:
            self.metrics.of(
                self.metrics.extension_point_duration, point, status, self.profile.scheduler_name
            ).observe(time.perf_counter() - started)

    def candidates(self, pod: PodInfo, masks: list[tuple[MaskFilter, bytes | None]] | None = None) -> bytes:
        """The rows every mask filter passes."""
        mask = bytes(self.cluster.table.live())
        for _, narrowed in self.masks(pod) if masks is None else masks:
            if narrowed is not None:
                mask = and_masks(mask, narrowed)
        return mask

    def extras(self, pod: PodInfo, feasible: Callable[[int], bool] | None = None) -> list[Extra]:
        """The normalized score plug-ins' parts for ``pod`` (those that do not skip it).
        ``feasible`` tells whether a row passes every filter this cycle, for the plug-ins
        that choose among feasible nodes (``extra_among``: Reservation's most preferred
        node); they ask it only of the few rows they care about."""
        out = []
        for plugin, weight in self.scorers:
            started = time.perf_counter()
            among = getattr(plugin, "extra_among", None) if feasible is not None else None
            if among is not None:
                extra = among(pod, self.cluster, weight, feasible)
            else:
                extra = plugin.extra(pod, self.cluster, weight)
            if self._sampled:
                self._observe_plugin(plugin.NAME, "PreScore", started)
            if extra is not None:
                out.append(extra)
        return out

    @property
    def has_scoring(self) -> bool:
        return bool(self.profile.scores)

    # --- the cycle -----------------------------------------------------------------------

    def schedule(self, pod: PodInfo, nominated: Iterable[tuple[str, PodInfo]] = ()) -> ScheduleResult:
        """Filter and score ``pod``; the chosen node, or why none fits. Nothing is assumed.

        ``nominated``: pods waiting for room on a node (their preemption's victims leaving),
        as (node, pod). Those at least as important as ``pod`` count on their nodes for this
        cycle, so it does not take their room (upstream's ``addNominatedPods``); a pod with a
        nominated node of its own tries that node first."""
        counted = []
        for node, other in nominated:
            info = self.cluster.nodes.get(node)
            if info is not None and other.key != pod.key and other.priority >= pod.priority:
                counted.append((info.row, self.cluster.table.pod_vector(other.requests), other.host_ports))
        for row, vector, ports in counted:
            self.cluster.account(row, vector, ports, 1)
        self.cycles += 1
        self._sampled = self.metrics is not None and self.cycles % PLUGIN_SAMPLE_EVERY == 0
        try:
            with self.restored(pod):
                return self._schedule(pod)
        finally:
            for row, vector, ports in counted:
                self.cluster.account(row, vector, ports, -1)

    @contextlib.contextmanager
    def restored(self, pod: PodInfo) -> Iterator[None]:
        """The nodes as ``pod`` sees them while it is scheduled: what the restorers give
        back is taken off their rows, and put back afterwards (the nodes are told changed
        both times, so that the plug-ins' per-node caches do not keep the pod's view)."""
        given: list[tuple[str, int, PodVector]] = []
        for plugin in self.restorers:
            for node, vector in plugin.restore(pod, self.cluster):
                info = self.cluster.nodes.get(node)
                if info is not None:
                    given.append((node, info.row, vector))
        for node, row, vector in given:
            self.cluster.account(row, vector, (), -1)
            self.cluster.touched(node)
        try:
            yield
        finally:
            for node, row, vector in given:
                self.cluster.account(row, vector, (), 1)
                self.cluster.touched(node)

    def _schedule(self, pod: PodInfo) -> ScheduleResult:
        all_nodes = len(self.cluster.nodes)
        if all_nodes == 0:
            return ScheduleResult(pod.key, None, NO_NODES)
        table = self.cluster.table
        vector = self.pod_vector(pod)
        cfg = self.score_config()
        started = time.perf_counter()
        pre = self.pre_filter(pod)
        if pre.message is not None:
            self._observe_point("PreFilter", "UnschedulableAndUnresolvable", started)
            return self._rejected_everywhere(pod, vector, pre)
        masks = self.masks(pod)
        mask = self.candidates(pod, masks)
        # the nodes a PreFilter result leaves out are not filtered, scored or preempted on
        kept = rows_mask(pre.rows, table.count) if pre.rows is not None else None
        if kept is not None:
            mask = and_masks(mask, kept)
        want = num_feasible_nodes_to_find(self.percentage, all_nodes, has_scoring=self.has_scoring)
        start = self.next_start % table.count
        extras = self.extras(pod, lambda row: bool(mask[row]) and not node_fails(table, row, vector))
        home = self.cluster.nodes.get(pod.nominated_node) if pod.nominated_node else None
        if home is not None and mask[home.row]:
            only = bytearray(len(mask))
            only[home.row] = 1
            chosen, _, _, _ = kernel.find(table, vector, cfg, only, home.row, 1, self.random, extras)
            if chosen >= 0:
                self._observe_point(FILTER_AND_SCORE, "Success", started)
                return ScheduleResult(pod.key, home.name, feasible=1, processed=1)
        chosen, feasible, processed, _ = kernel.find(
            table, vector, cfg, mask, start, want, self.random, extras
        )
        self.next_start = (start + processed) % table.count
        self._observe_point(FILTER_AND_SCORE, "Success" if chosen >= 0 else "Unschedulable", started)
        if chosen >= 0:
            return ScheduleResult(pod.key, table.names[chosen], feasible=feasible, processed=processed)
        reasons, plugins = self.diagnose(pod, vector, cfg, masks, pre)
        message = fit_error(all_nodes, reasons)
        notes = self._post_filter_plugins(pod, message)
        static = self.static_mask(masks, pod)
        outcome = self._post_filter(pod, vector, and_masks(static, kept) if kept is not None else static)
        message += _suffix(notes, outcome)
        return ScheduleResult(
            pod.key,
            None,
            message,
            reasons,
            0,
            processed,
            plugins,
            outcome.candidate if outcome else None,
            bool(outcome and outcome.clears_nomination),
        )

    def pre_filter(self, pod: PodInfo) -> PreFiltered:
        """The PreFilter step: the first plug-in rejecting the pod everywhere, or the rows the
        plug-ins narrow it to (upstream's merged PreFilterResult)."""
        rows: int | None = None
        narrowing: list[str] = []
        for plugin in self.pre_filters:
            result = plugin.pre_filter(pod, self.cluster)
            if result is None:
                continue
            if result.message is not None:
                return PreFiltered(plugin.NAME, result.message, resolvable=result.resolvable)
            if result.rows is not None:
                rows = result.rows if rows is None else rows & result.rows
                narrowing.append(plugin.NAME)
                if not rows and len(narrowing) > 1:
                    message = f"node(s) didn't satisfy plugin(s) [{' '.join(narrowing)}] simultaneously"
                    return PreFiltered(plugin.NAME, message)
        return PreFiltered(rows=rows, narrowing=tuple(narrowing))

    def _rejected_everywhere(self, pod: PodInfo, vector: PodVector, pre: PreFiltered) -> ScheduleResult:
        """A PreFilter rejection: upstream's FitError carries its message instead of the
        per-node histogram; preemption helps on no node, unless the rejection is resolvable
        (over a quota: evicting the quota's own pods may make room)."""
        message = f"0/{len(self.cluster.nodes)} nodes are available: {pre.message}."
        notes = self._post_filter_plugins(pod, message)
        # an Unschedulable rejection leaves preemption every node the other filters allow
        static = self.static_mask(self.masks(pod), pod) if pre.resolvable else bytes(self.cluster.table.count)
        outcome = self._post_filter(pod, vector, static)
        message += _suffix(notes, outcome)
        plugins = frozenset({pre.plugin}) if pre.plugin else frozenset()
        clears = bool(outcome and outcome.clears_nomination)
        candidate = outcome.candidate if outcome is not None else None
        return ScheduleResult(pod.key, None, message, {}, 0, 0, plugins, candidate, clears)

    def _post_filter_plugins(self, pod: PodInfo, fit_error: str) -> list[str]:
        """Run the PostFilter plug-ins before DefaultPreemption: what each adds to the text."""
        return [note for plugin in self.post_filters if (note := plugin.post_filter(pod, fit_error))]

    def _post_filter(self, pod: PodInfo, vector: PodVector, static: bytes) -> Outcome | None:
        """DefaultPreemption, when the profile runs it."""
        if not self.profile.preemption:
            return None
        if pod.reservation and not any(p.reserve_pods_preempt for p in self.reserve_pod_owners):
            return None  # a reserve pod preempts only with Reservation's enablePreemption
        started = time.perf_counter()
        rules = next((r for p in self.victim_rulers if (r := p.victim_rules(pod)) is not None), None)
        outcome = preempt(self.cluster, pod, vector, static, self.rng, self.eviction_checks, rules)
        self._observe_point("PostFilter", "Success" if outcome.candidate else "Unschedulable", started)
        return outcome

    def static_mask(self, masks: list[tuple[MaskFilter, bytes | None]], pod: PodInfo | None = None) -> bytes:
        """The rows that every filter eviction cannot change passes. A plug-in whose
        rejections are partly unresolvable (PodTopologySpread's missing label,
        InterPodAffinity's required affinity) says which rows with ``resolvable``."""
        mask = bytes(self.cluster.table.live())
        for plugin, narrowed in masks:
            if narrowed is None:
                continue
            if not plugin.PREEMPTION_HELPS:
                mask = and_masks(mask, narrowed)
            elif pod is not None and (resolvable := getattr(plugin, "resolvable", None)) is not None:
                rows = resolvable(pod, self.cluster)
                if rows is not None:
                    mask = and_masks(mask, rows)
        return mask

    def diagnose(
        self,
        pod: PodInfo,
        vector: PodVector,
        cfg: ScoreConfig,
        masks: list[tuple[MaskFilter, bytes | None]],
        pre: PreFiltered | None = None,
    ) -> tuple[dict[str, int], frozenset[str]]:
        """Every node counted for the first plug-in that rejects it, with all that plug-in's
        reasons; and the plug-ins that rejected some node. Nodes a PreFilter result left out
        come first, as upstream never runs the filters on them."""
        remaining = bytes(self.cluster.table.live())
        reasons: dict[str, int] = {}
        plugins: set[str] = set()
        if pre is not None and pre.rows is not None:
            kept = rows_mask(pre.rows, self.cluster.table.count)
            absent = and_not(remaining, kept).count(1)
            if absent:
                reasons[f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(pre.narrowing))}]"] = absent
                plugins.update(pre.narrowing)
            remaining = and_masks(remaining, kept)

        def count(phase: list[tuple[MaskFilter, bytes | None]]) -> None:
            nonlocal remaining
            for plugin, narrowed in phase:
                if narrowed is None:
                    continue
                rejected = and_not(remaining, narrowed)
                if rejected.count(1):
                    plugins.add(plugin.NAME)
                    for reason, n in plugin.reasons(pod, self.cluster, rejected).items():
                        reasons[reason] = reasons.get(reason, 0) + n
                remaining = and_masks(remaining, narrowed)

        count([m for m in masks if m[0].NAME not in self.after_fit])
        counts = kernel.diagnose(self.cluster.table, vector, cfg, remaining)
        for reason, n in noderesources.reason_texts(self.cluster.table, counts).items():
            plugins.add(noderesources.FIT)
            reasons[reason] = reasons.get(reason, 0) + n
        after = [m for m in masks if m[0].NAME in self.after_fit]
        if after:  # the filters after NodeResourcesFit see only the rows it passes
            remaining = kernel.fit_mask(self.cluster.table, vector, cfg, remaining)
            count(after)
        return reasons, frozenset(plugins)

    # --- simulate ------------------------------------------------------------------------

    def explain(self, pod: PodInfo) -> dict[str, Any]:
        """Per node why it was filtered, and the scores of the nodes this cycle would score
        (the same window from the same start as :meth:`schedule`, which it does not run)."""
        with self.restored(pod):
            return self._explain(pod)

    def _explain(self, pod: PodInfo) -> dict[str, Any]:
        table = self.cluster.table
        vector = self.pod_vector(pod)
        cfg = self.score_config()
        filtered: dict[str, list[str]] = {}
        feasible_rows: list[int] = []
        before = [f for f in self.filters if f.NAME not in self.after_fit]
        after = [f for f in self.filters if f.NAME in self.after_fit]
        for info in self.cluster.nodes.values():
            why = next((r for r in (f.explain(pod, info, self.cluster) for f in before) if r), None)
            if why is not None:
                filtered[info.name] = [why]
                continue
            fails = node_fails(table, info.row, vector)
            if fails:
                filtered[info.name] = [
                    "Too many pods"
                    if code == TOO_MANY_PODS
                    else f"Insufficient {table.resources[code - FIRST_RESOURCE]}"
                    for code in fails
                ]
                continue
            why = next((r for r in (f.explain(pod, info, self.cluster) for f in after) if r), None)
            if why is not None:
                filtered[info.name] = [why]
            else:
                feasible_rows.append(info.row)
        want = num_feasible_nodes_to_find(
            self.percentage, len(self.cluster.nodes), has_scoring=self.has_scoring
        )
        start = self.next_start % table.count if table.count else 0
        order = sorted(feasible_rows, key=lambda row: (row - start) % table.count)[:want]
        by_plugin = self.plugin_scores(pod, order)
        scores: dict[str, dict[str, int]] = {}
        for k, row in enumerate(order):
            fit, balanced = kernel.score(table, row, vector, cfg)
            entry: dict[str, int] = {}
            if self.fit_weight:
                entry[noderesources.FIT] = fit
            if self.balanced_weight:
                entry[noderesources.BALANCED] = max(balanced, 0)
            total = fit * self.fit_weight + max(balanced, 0) * self.balanced_weight
            for name, (weight, plugin_scores) in by_plugin.items():
                entry[name] = plugin_scores[k]
                total += weight * plugin_scores[k]
            entry["total"] = total
            scores[table.names[row]] = entry
        return {"filtered": filtered, "scores": scores}

    def plugin_scores(self, pod: PodInfo, rows: list[int]) -> dict[str, tuple[int, list[int]]]:
        """The final score (0-100) of each row of ``rows`` by every score plug-in outside the
        kernel that scores the pod, with its weight: normalized over ``rows`` as one
        scoring window."""
        scoring = {extra.name for extra in self.extras(pod)}
        out: dict[str, tuple[int, list[int]]] = {}
        for plugin, weight in self.scorers:
            if plugin.NAME not in scoring:
                continue
            # plug-ins whose normalization needs the window (PodTopologySpread, ...) or that
            # upstream does not normalize score it themselves; the others give raw scores
            # for DefaultNormalizeScore
            window = getattr(plugin, "window_scores", None)
            if window is not None:
                out[plugin.NAME] = (weight, list(window(pod, self.cluster, rows)))
                continue
            raws = [plugin.raw_score(pod, self.cluster.by_row[row]) for row in rows]  # type: ignore[arg-type]
            highest = max(raws, default=0)
            out[plugin.NAME] = (weight, [normalized(raw, highest, plugin.reverse) for raw in raws])
        return out

    # --- kube-scheduler's extender --------------------------------------------------------

    def extender_filter(
        self, pod: PodInfo, names: list[str]
    ) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """The filter verb: of ``names`` (nodes a stock kube-scheduler found feasible), those
        this profile's PreFilter and filter plug-ins pass, and the others with their reason,
        apart (the second map) where preemption cannot help."""
        with self.restored(pod):
            passing: list[str] = []
            failed: dict[str, str] = {}
            unresolvable: dict[str, str] = {}
            pre = self.pre_filter(pod)
            masks = self.masks(pod) if pre.message is None else []
            for name in names:
                info = self.cluster.nodes.get(name)
                if info is None:
                    unresolvable[name] = f"node {name!r} not found"
                elif pre.message is not None:
                    (failed if pre.resolvable else unresolvable)[name] = pre.message
                elif pre.rows is not None and not pre.rows >> info.row & 1:
                    unresolvable[name] = (
                        f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(pre.narrowing))}]"
                    )
                else:
                    rejecting = next((p for p, m in masks if m is not None and not m[info.row]), None)
                    if rejecting is None:
                        passing.append(name)
                        continue
                    why = (
                        rejecting.explain(pod, info, self.cluster)
                        or f"node(s) didn't satisfy {rejecting.NAME}"
                    )
                    (failed if rejecting.PREEMPTION_HELPS else unresolvable)[name] = why
            return passing, failed, unresolvable

    def extender_scores(self, pod: PodInfo, names: list[str]) -> dict[str, int]:
        """The prioritize verb: the weighted mean (0-100) of this profile's score plug-ins
        outside the kernel over ``names``, normalized over them as one window."""
        with self.restored(pod):
            known = [self.cluster.nodes[n] for n in names if n in self.cluster.nodes]
            by_plugin = self.plugin_scores(pod, [info.row for info in known])
            total_weight = sum(weight for weight, _ in by_plugin.values())
            out = dict.fromkeys(names, 0)
            for k, info in enumerate(known):
                weighted = sum(weight * scores[k] for weight, scores in by_plugin.values())
                out[info.name] = weighted // total_weight if total_weight else 0
            return out
