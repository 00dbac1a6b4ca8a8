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

import random
from array import array
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler import kernel
from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import Profile
from controlplane.scheduler.kernel.table import PodVector, ScoreConfig
from controlplane.scheduler.kernel.twin import FIRST_RESOURCE, TOO_MANY_PODS, Extra, node_fails, normalized
from controlplane.scheduler.plugins import noderesources
from controlplane.scheduler.plugins.defaultpreemption import Candidate, preempt
from controlplane.scheduler.plugins.interface import MaskFilter, NormalizedScore, and_masks, and_not
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.registry import REGISTRY
from controlplane.scheduler.sampling import num_feasible_nodes_to_find

NO_NODES = "no nodes available to schedule pods"


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


def fit_error(all_nodes: int, reasons: dict[str, int]) -> str:
    """Upstream's ``FitError.Error()``: reasons as "<count> <reason>", sorted as strings."""
    text = f"0/{all_nodes} nodes are available:"
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    if histogram:
        text += f" {', '.join(histogram)}."
    return text


class Framework:
    def __init__(
        self, profile: Profile, cluster: Cluster, *, percentage: int | None = None, seed: int | None = None
    ):
        self.profile = profile
        self.cluster = cluster
        self.percentage = (
            profile.percentage_of_nodes_to_score
            if profile.percentage_of_nodes_to_score is not None
            else percentage
        )
        plugins: dict[str, MaskFilter] = {}
        for name in (*profile.filters, *profile.scores):
            factory = REGISTRY[name].mask
            if factory is not None and name not in plugins:
                plugins[name] = factory(profile.args.get(name))
        self.filters = [plugins[name] for name in profile.filters if name in plugins]
        #: score plug-ins outside the kernel, with their weights
        self.scorers: list[tuple[NormalizedScore, int]] = [
            (plugins[name], weight)  # type: ignore[misc]
            for name, weight in profile.scores.items()
            if name in plugins and weight
        ]
        self.fit_weight = profile.scores.get(noderesources.FIT, 0)
        self.balanced_weight = profile.scores.get(noderesources.BALANCED, 0)
        self.next_start = 0
        self.random = array("Q", [seed if seed is not None else random.getrandbits(63) | 1])
        self.rng = random.Random(seed)
        self._cfg: ScoreConfig | None = None
        self._cfg_width = -1

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
        return [(plugin, plugin.mask(pod, self.cluster)) for plugin in self.filters]

    def candidates(self, pod: PodInfo, masks: list[tuple[MaskFilter, bytes | None]] | None = None) -> bytes:
        """The rows every mask filter passes."""
        mask = bytes(self.cluster.table.live())
        for _, narrowed in self.masks(pod) if masks is None else masks:
            if narrowed is not None:
                mask = and_masks(mask, narrowed)
        return mask

    def extras(self, pod: PodInfo) -> list[Extra]:
        """The normalized score plug-ins' parts for ``pod`` (those that do not skip it)."""
        out = []
        for plugin, weight in self.scorers:
            extra = plugin.extra(pod, self.cluster, weight)
            if extra is not None:
                out.append(extra)
        return out

    @property
    def has_scoring(self) -> bool:
        return bool(self.profile.scores)

    # --- the cycle -----------------------------------------------------------------------

    def schedule(self, pod: PodInfo) -> ScheduleResult:
        """Filter and score ``pod``; the chosen node, or why none fits. Nothing is assumed."""
        all_nodes = len(self.cluster.nodes)
        if all_nodes == 0:
            return ScheduleResult(pod.key, None, NO_NODES)
        table = self.cluster.table
        vector = self.pod_vector(pod)
        cfg = self.score_config()
        masks = self.masks(pod)
        mask = self.candidates(pod, masks)
        want = num_feasible_nodes_to_find(self.percentage, all_nodes, has_scoring=self.has_scoring)
        start = self.next_start % table.count
        extras = self.extras(pod)
        chosen, feasible, processed, _ = kernel.find(
            table, vector, cfg, mask, start, want, self.random, extras
        )
        self.next_start = (start + processed) % table.count
        if chosen >= 0:
            return ScheduleResult(pod.key, table.names[chosen], feasible=feasible, processed=processed)
        reasons, plugins = self.diagnose(pod, vector, cfg, masks)
        message = fit_error(all_nodes, reasons)
        candidate = None
        if self.profile.preemption:
            outcome = preempt(self.cluster, pod, vector, self.static_mask(masks), self.rng)
            candidate = outcome.candidate
            if outcome.message:
                message += f" preemption: {outcome.message}."
        return ScheduleResult(pod.key, None, message, reasons, 0, processed, plugins, candidate)

    def static_mask(self, masks: list[tuple[MaskFilter, bytes | None]]) -> bytes:
        """The rows that every filter eviction cannot change passes."""
        mask = bytes(self.cluster.table.live())
        for plugin, narrowed in masks:
            if not plugin.PREEMPTION_HELPS and narrowed is not None:
                mask = and_masks(mask, narrowed)
        return mask

    def diagnose(
        self, pod: PodInfo, vector: PodVector, cfg: ScoreConfig, masks: list[tuple[MaskFilter, bytes | None]]
    ) -> tuple[dict[str, int], frozenset[str]]:
        """Every node counted for the first plug-in that rejects it, with all that plug-in's
        reasons; and the plug-ins that rejected some node."""
        remaining = bytes(self.cluster.table.live())
        reasons: dict[str, int] = {}
        plugins: set[str] = set()
        for plugin, narrowed in masks:
            if narrowed is None:
                continue
            rejected = and_not(remaining, narrowed)
            if rejected.count(1):
                plugins.add(plugin.NAME)
                for reason, count in plugin.reasons(pod, self.cluster, rejected).items():
                    reasons[reason] = reasons.get(reason, 0) + count
            remaining = and_masks(remaining, narrowed)
        counts = kernel.diagnose(self.cluster.table, vector, cfg, remaining)
        for reason, count in noderesources.reason_texts(self.cluster.table, counts).items():
            plugins.add(noderesources.FIT)
            reasons[reason] = reasons.get(reason, 0) + count
        return reasons, frozenset(plugins)

    # --- simulate ------------------------------------------------------------------------

    def explain(self, pod: PodInfo) -> dict[str, Any]:
        """Per node why it was filtered, and the scores of the nodes this cycle would score
        (the same window from the same start as :meth:`schedule`, which it does not run)."""
        table = self.cluster.table
        vector = self.pod_vector(pod)
        cfg = self.score_config()
        filtered: dict[str, list[str]] = {}
        feasible_rows: list[int] = []
        for info in self.cluster.nodes.values():
            why = next((r for r in (f.explain(pod, info, self.cluster) for f in self.filters) if r), None)
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
            else:
                feasible_rows.append(info.row)
        want = num_feasible_nodes_to_find(
            self.percentage, len(self.cluster.nodes), has_scoring=self.has_scoring
        )
        start = self.next_start % table.count if table.count else 0
        order = sorted(feasible_rows, key=lambda row: (row - start) % table.count)[:want]
        scoring = {extra.name for extra in self.extras(pod)}
        active = [(p, w) for p, w in self.scorers if p.NAME in scoring]
        raws = {p.NAME: [p.raw_score(pod, self.cluster.by_row[row]) for row in order] for p, _ in active}  # type: ignore[arg-type]
        scores: dict[str, dict[str, int]] = {}
        for k, row in enumerate(order):
            fit, balanced = kernel.score(table, row, vector, cfg)
            entry: dict[str, int] = {}
            if self.fit_weight:
                entry[noderesources.FIT] = fit
            if self.balanced_weight:
                entry[noderesources.BALANCED] = max(balanced, 0)
            total = fit * self.fit_weight + max(balanced, 0) * self.balanced_weight
            for plugin, weight in active:
                score = normalized(raws[plugin.NAME][k], max(raws[plugin.NAME], default=0), plugin.reverse)
                entry[plugin.NAME] = score
                total += weight * score
            entry["total"] = total
            scores[table.names[row]] = entry
        return {"filtered": filtered, "scores": scores}
