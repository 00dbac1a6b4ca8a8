"""The LowNodeLoad balance plug-in: one round over each node pool (upstream's
``low_node_load.go`` and ``evictPodsFromSourceNodes`` in ``utilization_util.go``).

Per pool (its nodes are those its ``nodeSelector`` matches that no earlier pool processed as
a source):

1. usage, thresholds (:mod:`.usage`) and upstream's five classes (``classifyNodes``). A node
   under its low thresholds (and schedulable) is *prod-high* when its prod usage is over a
   prod high threshold, else *both-low* when its prod usage is under every prod low threshold,
   else *low*. Any other node is *high* when over a high threshold, else *prod-high*,
   *prod-low* or neither by its prod usage. Without prod thresholds every node is prod-low,
   so a node under its low thresholds is simply *low* and the prod classes are not reported.
2. The underutilized nodes are the low and both-low ones; their detectors are reset (as are
   the prod detectors of the prod-low and both-low ones). Nothing more happens when there is
   none, when they are no more than ``numberOfNodes``, when every node is one, or when no
   node is high or prod-high.
3. A high node is a *source* only once its detector says anomalous, a prod-high node once
   its prod detector does (:mod:`.anomaly`; with ``consecutiveAbnormalities`` 1, at once).
4. Node sources first: the budget is, per resource, the sum over the low and both-low nodes
   of (high threshold - usage), and the pods may go to those nodes. Then prod sources: the
   budget is the prod-low nodes' (prod high threshold - prod usage) plus the both-low nodes'
   share, capped by what the node pass left of the budget, and the prod pods may go to the
   prod-low and both-low nodes.
5. Sources are visited by weighted (prod) usage, highest first; a source's candidates are
   the pods the pod filter keeps (evictor filter, ``podSelectors``, ``evictableNamespaces``;
   on a prod source its prod pods only) and, with ``nodeFit``, that have a PodMetric, fit
   some destination by their requests and whose usage keeps that destination at or under its
   high (prod: prod high) thresholds. Candidates are evicted in :mod:`..sorting` order while
   the node is still over and every budget resource is positive; each eviction subtracts the
   pod's usage (and one pod) from the node and the budget and adds it to the destination it
   fits. A pod without a PodMetric (evicted only without ``nodeFit``) subtracts nothing.
6. Sources are marked normal once after their round; a source no longer over is reset.

``dryRun`` logs what would be evicted instead. Every round leaves a :class:`PoolReport` per
pool in :attr:`LowNodeLoad.reports`, which ``koord-descheduler explain`` prints.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controlplane.descheduler.framework import Handle
from controlplane.descheduler.lownodeload.anomaly import Detector, DetectorCache, State
from controlplane.descheduler.lownodeload.args import LowNodeLoadArgs, NodePool
from controlplane.descheduler.lownodeload.usage import (
    PODS,
    NodeThresholds,
    NodeUsage,
    is_over,
    is_under,
    node_thresholds,
    node_usages,
    percentages,
    pod_key,
    resolve_percents,
)
from controlplane.descheduler.nodefit import misfit
from controlplane.descheduler.sorting import pod_order, usage_score
from koordinator.api.selectors import label_selector_matches
from koordinator.kube.clock import SYSTEM_CLOCK, Clock

__all__ = ["NAME", "LowNodeLoad", "NodeReport", "PoolReport"]

log = logging.getLogger(__name__)

NAME = "LowNodeLoad"
LOW = "low"
HIGH = "high"
PROD_LOW = "prod-low"
PROD_HIGH = "prod-high"
BOTH_LOW = "both-low"
APPROPRIATE = "appropriate"
SKIPPED = "skipped"

Obj = Mapping[str, Any]


@dataclass
class NodeReport:
    name: str
    #: low, both-low, prod-low, high, prod-high, appropriate or skipped
    classification: str
    usage_percent: dict[str, float] = field(default_factory=dict)
    prod_usage_percent: dict[str, float] = field(default_factory=dict)
    #: why the node was skipped, or which resources are over
    detail: str = ""
    #: the detector's state after this round ("" for nodes that are not over)
    anomaly: str = ""
    abnormal_rounds: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "classification": self.classification}
        if self.usage_percent:
            out["usagePercent"] = {k: round(v, 2) for k, v in sorted(self.usage_percent.items())}
        if self.prod_usage_percent:
            out["prodUsagePercent"] = {k: round(v, 2) for k, v in sorted(self.prod_usage_percent.items())}
        if self.detail:
            out["detail"] = self.detail
        if self.anomaly:
            out["anomaly"] = {"state": self.anomaly, "consecutiveAbnormalities": self.abnormal_rounds}
        return out


@dataclass
class Eviction:
    pod: str
    node: str
    reason: str
    #: the destination the pod fits (nodeFit), "" without nodeFit
    destination: str = ""
    #: False when the evictor refused it (filters, limits)
    accepted: bool = True

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pod": self.pod, "node": self.node, "reason": self.reason}
        if self.destination:
            out["fitsNode"] = self.destination
        if not self.accepted:
            out["refused"] = True
        return out


@dataclass
class PoolReport:
    pool: str
    low_thresholds: dict[str, float]
    high_thresholds: dict[str, float]
    prod_low_thresholds: dict[str, float]
    prod_high_thresholds: dict[str, float]
    nodes: list[NodeReport] = field(default_factory=list)
    outcome: str = ""
    #: what the node sources may move onto the low and both-low nodes
    budget: dict[str, int] = field(default_factory=dict)
    #: what the prod sources may move onto the prod-low and both-low nodes (set once the
    #: node sources are done, only with prod thresholds)
    prod_budget: dict[str, int] = field(default_factory=dict)
    evictions: list[Eviction] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        def named(kind: str) -> list[str]:
            return sorted(n.name for n in self.nodes if n.classification == kind)

        return {
            "nodePool": self.pool,
            "lowThresholds": self.low_thresholds,
            "highThresholds": self.high_thresholds,
            "prodLowThresholds": self.prod_low_thresholds,
            "prodHighThresholds": self.prod_high_thresholds,
            "lowNodes": named(LOW),
            "bothLowNodes": named(BOTH_LOW),
            "prodLowNodes": named(PROD_LOW),
            "highNodes": named(HIGH),
            "prodHighNodes": named(PROD_HIGH),
            "anomalousNodes": sorted(n.name for n in self.nodes if n.anomaly == State.ANOMALY),
            "outcome": self.outcome,
            "budget": dict(sorted(self.budget.items())),
            "prodBudget": dict(sorted(self.prod_budget.items())),
            "evictions": [e.to_dict() for e in self.evictions],
            "nodes": [n.to_dict() for n in sorted(self.nodes, key=lambda n: n.name)],
        }


@dataclass
class _Source:
    usage: NodeUsage
    thresholds: NodeThresholds
    #: True: over its prod thresholds (prod pods move); False: over its node thresholds
    prod: bool


def _pod_selector_filter(args: LowNodeLoadArgs) -> Callable[[Obj], bool]:
    selectors = [s.selector for s in args.pod_selectors if s.selector is not None]
    include = set(args.include_namespaces)
    exclude = set(args.exclude_namespaces)

    def keep(pod: Obj) -> bool:
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or ""
        if include and namespace not in include:
            return False
        if namespace in exclude:
            return False
        labels = meta.get("labels") or {}
        return not selectors or any(label_selector_matches(s, labels) for s in selectors)

    return keep


class LowNodeLoad:
    name = NAME

    def __init__(self, args: LowNodeLoadArgs, handle: Handle, clock: Clock = SYSTEM_CLOCK) -> None:
        self.args = args
        self.handle = handle
        self.clock = clock
        self.detectors = DetectorCache(args.detector_cache_timeout_s, clock)
        self.prod_detectors = DetectorCache(args.detector_cache_timeout_s, clock)
        self._selected = _pod_selector_filter(args)
        self.reports: list[PoolReport] = []

    def pod_filter(self, pod: Obj) -> bool:
        return self.handle.evictor.filter(pod) and self._selected(pod)

    async def balance(self, nodes: Sequence[Obj]) -> None:
        self.reports = []
        if self.args.paused:
            log.info("LowNodeLoad is paused and will do nothing")
            return
        processed: set[str] = set()
        for pool in self.args.node_pools:
            self.reports.append(await self._pool(pool, nodes, processed))

    # ---- one pool -------------------------------------------------------------------------

    async def _pool(self, pool: NodePool, all_nodes: Sequence[Obj], processed: set[str]) -> PoolReport:
        low_pct, high_pct = resolve_percents(
            pool.use_deviation_thresholds, pool.low_thresholds, pool.high_thresholds
        )
        prod_enabled = bool(pool.prod_low_thresholds or pool.prod_high_thresholds)
        prod_low_pct, prod_high_pct = (
            resolve_percents(
                pool.use_deviation_thresholds, pool.prod_low_thresholds, pool.prod_high_thresholds, ()
            )
            if prod_enabled
            else ({}, {})
        )
        report = PoolReport(pool.name, low_pct, high_pct, prod_low_pct, prod_high_pct)
        nodes = [
            n
            for n in all_nodes
            if _name(n) not in processed
            and (pool.node_selector is None or label_selector_matches(pool.node_selector, _labels(n)))
        ]
        if not nodes:
            report.outcome = "no nodes to process"
            return report
        resources = list(dict.fromkeys([*low_pct, *prod_low_pct]))
        usages, skipped = node_usages(
            nodes,
            self.handle.pods_on_node,
            self.handle.node_metrics(),
            resources,
            self.args.node_metric_expiration_seconds,
            self.handle.now(),
        )
        report.nodes.extend(NodeReport(name, SKIPPED, detail=why) for name, why in sorted(skipped.items()))
        thresholds = node_thresholds(usages, low_pct, high_pct, pool.use_deviation_thresholds)
        prod_thresholds = (
            node_thresholds(
                usages, prod_low_pct, prod_high_pct, pool.use_deviation_thresholds, lambda u: u.prod_usage
            )
            if prod_enabled
            else {}
        )
        lows: list[NodeUsage] = []
        boths: list[NodeUsage] = []
        prod_lows: list[NodeUsage] = []
        highs: list[_Source] = []
        prod_highs: list[_Source] = []
        by_name: dict[str, NodeReport] = {}
        for name, u in usages.items():
            entry = NodeReport(
                name,
                APPROPRIATE,
                percentages({r: u.usage[r] for r in [*low_pct, PODS] if r in u.usage}, u.allocatable),
                percentages({r: u.prod_usage[r] for r in prod_low_pct if r in u.prod_usage}, u.allocatable)
                if prod_enabled
                else {},
            )
            by_name[name] = entry
            report.nodes.append(entry)
            t = thresholds[name]
            # upstream's classifyNodes; without prod thresholds (prod_t None) a node is never
            # prod-high and always prod-low, which changes nothing: it is reported as low
            prod_t = prod_thresholds.get(name)
            prod_over = is_over(u.prod_usage, prod_t.high) if prod_t is not None else []
            prod_under = prod_t is not None and u.schedulable and is_under(u.prod_usage, prod_t.low)
            prod_source = _Source(u, prod_t, prod=True) if prod_t is not None and prod_over else None
            if u.schedulable and is_under(u.usage, t.low):
                if prod_source is not None:
                    entry.classification = PROD_HIGH
                    entry.detail = "prod over " + ", ".join(prod_over)
                    prod_highs.append(prod_source)
                elif prod_under:
                    entry.classification = BOTH_LOW
                    boths.append(u)
                else:
                    entry.classification = LOW
                    lows.append(u)
                continue
            over = is_over(u.usage, t.high)
            if over:
                entry.classification = HIGH
                entry.detail = "over " + ", ".join(over)
                highs.append(_Source(u, t, prod=False))
            elif prod_source is not None:
                entry.classification = PROD_HIGH
                entry.detail = "prod over " + ", ".join(prod_over)
                prod_highs.append(prod_source)
            elif prod_under:
                entry.classification = PROD_LOW
                prod_lows.append(u)
        # the nodes under the low thresholds: the node sources' destinations
        underutilized = [*lows, *boths]
        log.info(
            "nodePool %r: %d low, %d both-low, %d prod-low, %d high, %d prod-high, of %d nodes",
            pool.name,
            len(lows),
            len(boths),
            len(prod_lows),
            len(highs),
            len(prod_highs),
            len(nodes),
        )
        if not underutilized:
            report.outcome = "no nodes are underutilized, nothing to do here"
            return report
        for cache, reset in ((self.detectors, underutilized), (self.prod_detectors, [*prod_lows, *boths])):
            for u in reset:
                detector = cache.get(u.name)
                if detector is not None:
                    detector.reset()
        if len(underutilized) <= self.args.number_of_nodes:
            report.outcome = (
                f"the number of underutilized nodes ({len(underutilized)}) is at most numberOfNodes "
                f"({self.args.number_of_nodes}), nothing to do here"
            )
            return report
        if len(underutilized) == len(nodes):
            report.outcome = "all nodes are underutilized, nothing to do here"
            return report
        if not highs and not prod_highs:
            report.outcome = "all nodes are under target utilization, nothing to do here"
            return report
        sources = self._anomalous(highs, pool, by_name)
        prod_sources = self._anomalous(prod_highs, pool, by_name)
        if not sources and not prod_sources:
            report.outcome = "none of the nodes were detected as anomalous, nothing to do here"
            return report
        weights = pool.resource_weights
        sources.sort(key=lambda s: usage_score(s.usage.usage, s.usage.allocatable, weights), reverse=True)
        prod_sources.sort(
            key=lambda s: usage_score(s.usage.prod_usage, s.usage.allocatable, weights), reverse=True
        )
        # the destinations' usage and prod usage as this round moves pods onto them
        planned = _Planned(
            {d.name: dict(d.usage) for d in [*underutilized, *prod_lows]},
            {d.name: dict(d.prod_usage) for d in [*underutilized, *prod_lows]},
        )
        budget = _available(underutilized, thresholds, low_pct, prod=False)
        both_budget = _available(boths, thresholds, low_pct, prod=False)
        report.budget = dict(budget)
        highs_of = {name: t.high for name, t in thresholds.items()}
        await self._evict(
            sources, underutilized, highs_of, budget, planned, weights, high_pct, prod_high_pct, report
        )
        if prod_enabled:
            # the both-low nodes serve both passes: the prod sources get their prod room, but
            # no more than what the node sources left of the budget
            prod_budget = _available(prod_lows, prod_thresholds, prod_low_pct, prod=True)
            both_prod = _available(boths, prod_thresholds, prod_low_pct, prod=True)
            for r in prod_budget:
                share = both_prod[r]
                if r in both_budget:
                    share = min(share, both_budget[r], budget[r])
                prod_budget[r] += share
            report.prod_budget = dict(prod_budget)
            prod_highs_of = {name: t.high for name, t in prod_thresholds.items()}
            await self._evict(
                prod_sources,
                [*prod_lows, *boths],
                prod_highs_of,
                prod_budget,
                planned,
                weights,
                high_pct,
                prod_high_pct,
                report,
            )
        for source in [*sources, *prod_sources]:
            self._mark_normal(source)
        for s in [*highs, *prod_highs]:
            processed.add(s.usage.name)
        report.outcome = f"{sum(1 for e in report.evictions if e.accepted)} pod(s) evicted"
        return report

    def _cache(self, prod: bool) -> DetectorCache:
        return self.prod_detectors if prod else self.detectors

    def _mark_normal(self, source: _Source) -> None:
        detector = self._cache(source.prod).get(source.usage.name)
        if detector is not None:
            detector.mark(True)

    def _anomalous(
        self, highs: list[_Source], pool: NodePool, reports: dict[str, NodeReport]
    ) -> list[_Source]:
        condition = pool.anomaly_condition
        if condition.consecutive_abnormalities == 1:
            for s in highs:
                reports[s.usage.name].anomaly = State.ANOMALY
            return list(highs)
        found: list[_Source] = []
        for s in highs:
            cache = self._cache(s.prod)
            detector = cache.get(s.usage.name) or Detector(s.usage.name, condition, self.clock)
            state = detector.mark(False)
            cache.put(detector)
            entry = reports[s.usage.name]
            entry.anomaly = state
            entry.abnormal_rounds = detector.abnormalities
            if state is State.ANOMALY:
                found.append(s)
        return found

    # ---- eviction -------------------------------------------------------------------------

    async def _evict(
        self,
        sources: list[_Source],
        destinations: list[NodeUsage],
        limits: Mapping[str, Mapping[str, int]],
        budget: dict[str, int],
        planned: _Planned,
        weights: Mapping[str, int],
        high_pct: Mapping[str, float],
        prod_high_pct: Mapping[str, float],
        report: PoolReport,
    ) -> None:
        """One of upstream's ``balancePods`` passes: ``sources`` all node sources or all prod
        sources, ``limits`` the destinations' high (or prod high) thresholds."""
        if not sources:
            return
        prod = sources[0].prod
        if not destinations:
            log.info("no %s destination for %d source node(s)", "prod" if prod else "node", len(sources))
            return
        for source in sources:
            u = source.usage
            candidates: list[tuple[Obj, str]] = []
            for pod in u.pods:
                key = pod_key(pod)
                if prod and key not in u.prod_pods:
                    continue
                if not self.pod_filter(pod):
                    continue
                destination = ""
                if self.args.node_fit:
                    usage = u.pod_usage.get(key)
                    if usage is None:
                        # upstream: with nodeFit a pod without a PodMetric is never removable
                        log.debug("no PodMetric for pod %s on node %s", key, u.name)
                        continue
                    destination = self._fitting(pod, usage, destinations, limits, planned.of(prod))
                    if not destination:
                        continue
                candidates.append((pod, destination))
            if not candidates:
                log.info("no removable pods on node %s", u.name)
                continue
            current = u.prod_usage if prod else u.usage
            overage = {r: current.get(r, 0) - limit for r, limit in source.thresholds.high.items()}
            candidates.sort(key=lambda c: pod_order(c[0], u.pod_usage, overage, weights, pod_key(c[0])))
            for pod, destination in candidates:
                current = u.prod_usage if prod else u.usage
                if not is_over(current, source.thresholds.high):
                    detector = self._cache(prod).get(u.name)
                    if detector is not None:
                        detector.reset()
                    break
                if any(value <= 0 for value in budget.values()):
                    break
                key = pod_key(pod)
                if self.args.node_fit:
                    # the destinations filled by earlier evictions of this round
                    destination = self._fitting(pod, u.pod_usage[key], destinations, limits, planned.of(prod))
                    if not destination:
                        continue
                reason = _reason(u, source, high_pct, prod_high_pct)
                if self.args.dry_run:
                    log.info("evict pod %s from node %s in dry run mode", key, u.name)
                    accepted = True
                else:
                    accepted = await self.handle.evictor.evict(pod, reason, NAME)
                report.evictions.append(Eviction(key, u.name, reason, destination, accepted))
                if not accepted:
                    continue
                usage = u.pod_usage.get(key)
                if usage is None:
                    # upstream: an evicted pod without a PodMetric (no nodeFit) moves no usage
                    continue
                moved = {**usage, PODS: 1}
                for r in budget:
                    budget[r] -= moved.get(r, 0)
                is_prod_pod = key in u.prod_pods
                for target in (u.usage, *((u.prod_usage,) if is_prod_pod else ())):
                    for r in list(target):
                        target[r] -= moved.get(r, 0)
                if destination:
                    for into in (planned.usage, *((planned.prod_usage,) if is_prod_pod else ())):
                        for r, value in moved.items():
                            into[destination][r] = into[destination].get(r, 0) + value

    def _fitting(
        self,
        pod: Obj,
        usage: Mapping[str, int],
        destinations: list[NodeUsage],
        limits: Mapping[str, Mapping[str, int]],
        planned: Mapping[str, Mapping[str, int]],
    ) -> str:
        """The first destination the pod fits by requests whose high thresholds (``limits``)
        its usage keeps, counted on ``planned`` (""; none)."""
        moved = {**usage, PODS: 1}
        for d in destinations:
            after = planned[d.name]
            if any(after.get(r, 0) + moved.get(r, 0) > limit for r, limit in limits[d.name].items()):
                continue
            if misfit(pod, d.node, self.handle.pods_on_node(d.name)) is None:
                return d.name
        return ""


@dataclass
class _Planned:
    """The destinations' usage and prod usage as a round moves pods onto them."""

    usage: dict[str, dict[str, int]]
    prod_usage: dict[str, dict[str, int]]

    def of(self, prod: bool) -> dict[str, dict[str, int]]:
        return self.prod_usage if prod else self.usage


def _available(
    destinations: Sequence[NodeUsage],
    thresholds: Mapping[str, NodeThresholds],
    resources: Iterable[str],
    *,
    prod: bool,
) -> dict[str, int]:
    """Upstream's ``targetAvailableUsage``: per resource, the sum over ``destinations`` of
    (high threshold - usage), or of (prod high threshold - prod usage)."""
    return {
        r: sum(
            thresholds[d.name].high[r] - (d.prod_usage if prod else d.usage).get(r, 0) for d in destinations
        )
        for r in resources
    }


def _reason(
    u: NodeUsage, source: _Source, high_pct: Mapping[str, float], prod_high_pct: Mapping[str, float]
) -> str:
    """Upstream's eviction reason: ``node is overutilized, cpu usage(80.00%)>threshold(75.00%)``."""
    current = u.prod_usage if source.prod else u.usage
    over = is_over(current, source.thresholds.high)
    percents = percentages(current, u.allocatable)
    limits = prod_high_pct if source.prod else high_pct
    parts = [f"{r} usage({percents.get(r, 0.0):.2f}%)>threshold({limits.get(r, 0.0):.2f}%)" for r in over]
    prefix = "node is overutilized by prod pods" if source.prod else "node is overutilized"
    return f"{prefix}, {', '.join(parts)}"


def _name(node: Obj) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def _labels(node: Obj) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}
