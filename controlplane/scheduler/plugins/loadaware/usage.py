"""One node's load as LoadAwareScheduling sees it: what the node can give, what it uses
(the NodeMetric plus the pods placed since the report, still estimated), and its
thresholds. Computed per node when its NodeMetric, its placed pods or its object change.

The estimated usage of the pods on a node (upstream's assign cache): a placed pod is still
estimated when the report has no usage for it, when it was scheduled less than one report
interval before the report (or after it), or until its estimation deadline; such a pod
adds what its estimate exceeds its reported usage by (all of it without a report) to the
node's usage. A node whose report lacks the usage asked for (an aggregation window it does
not carry) counts every placed pod at its full estimate instead. Prod pods under
``prodUsageThresholds`` see the reported usage of the pods that are prod both in their
spec and in the report, plus what those still estimated exceed it by, plus the full
estimate of every other prod pod.

Filter and score compare, per resource, ``used + estimate of the incoming pod`` with the
node's allocatable (the ``raw-allocatable`` annotation over ``status.allocatable``, to undo
amplification): the filter passes while ``round(total / allocatable * 100)`` stays within
the threshold, so each thresholded resource has a headroom: the largest estimate that
still passes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from controlplane.scheduler.cluster import NodeInfo
from controlplane.scheduler.kernel.twin import MAX_NODE_SCORE, go_round
from controlplane.scheduler.plugins.loadaware.args import Aggregated, LoadAwareArgs
from controlplane.scheduler.plugins.loadaware.estimate import (
    Estimate,
    estimate_pod,
    estimated_deadline,
    scheduled_time,
)
from controlplane.scheduler.podinfo import PodInfo
from koordinator.api.extension.annotations import AnnotationError, get_resource_list
from koordinator.api.extension.node import ANNOTATION_NODE_RAW_ALLOCATABLE
from koordinator.api.extension.priority import PriorityClass
from koordinator.api.extension.scheduling import CustomUsageThresholds, get_custom_usage_thresholds
from koordinator.api.goparse import GoParseError, parse_duration_seconds
from koordinator.nodemetrics import NodeMetricRecord, Usage

PROD = PriorityClass.PROD.value
#: no threshold on a resource: any estimate passes
UNLIMITED = math.inf

REASON_EXPIRED = "node(s) nodeMetric expired"


def usage_reason(resource: str, aggregated: bool) -> str:
    """Upstream's ``ErrReasonUsageExceedThreshold`` / ``ErrReasonAggregatedUsageExceedThreshold``."""
    return (
        f"node(s) {resource} aggregated usage exceed threshold"
        if aggregated
        else f"node(s) {resource} usage exceed threshold"
    )


@dataclass(frozen=True, slots=True)
class FilterProfile:
    """The thresholds a node holds pods to: its ``usage-thresholds`` annotation over the args
    (upstream's ``generateUsageThresholdsFilterProfile``)."""

    usage_thresholds: Mapping[str, int]
    prod_usage_thresholds: Mapping[str, int]
    aggregated: Aggregated | None


def filter_profile(node: NodeInfo, args: LoadAwareArgs) -> FilterProfile:
    try:
        custom: CustomUsageThresholds | None = get_custom_usage_thresholds(node.annotations)
    except AnnotationError:
        custom = None
    default_aggregated = args.aggregated if args.aggregated is not None and args.aggregated.filters else None
    if custom is None:
        return FilterProfile(args.usage_thresholds, args.prod_usage_thresholds, default_aggregated)
    aggregated = default_aggregated
    mine = custom.aggregated_usage
    if mine is not None and mine.usage_thresholds and mine.usage_aggregation_type:
        duration = 0.0
        if mine.usage_aggregated_duration:
            try:
                duration = parse_duration_seconds(mine.usage_aggregated_duration)
            except GoParseError:
                duration = 0.0
        aggregated = Aggregated(mine.usage_thresholds, mine.usage_aggregation_type, duration)
    return FilterProfile(
        custom.usage_thresholds or args.usage_thresholds,
        custom.prod_usage_thresholds or args.prod_usage_thresholds,
        aggregated,
    )


def target_aggregated_usage(record: NodeMetricRecord, duration: float, kind: str) -> Usage | None:
    """Upstream's ``getTargetAggregatedUsage``: the usage at ``kind`` over the window of
    ``duration`` seconds, or with no duration the longest window reporting it, falling back
    to the node's plain usage when none does (None: the report has no such usage, or no
    ``nodeMetric`` at all)."""
    if record.node_usage is None:
        return None
    if not duration:
        longest = max(
            (window for (window, k), usage in record.aggregated.items() if k == kind and usage), default=None
        )
        if longest is None:
            return record.node_usage
        return record.aggregated[(longest, kind)]
    return record.aggregated.get((duration, kind)) or None


def node_allocatable(node: NodeInfo, resources: Iterable[str]) -> tuple[int, ...]:
    """``status.allocatable`` with the ``raw-allocatable`` annotation's values over it (a
    malformed annotation is ignored, as upstream falls back to the allocatable)."""
    values = dict(node.allocatable)
    try:
        raw = get_resource_list(node.annotations, ANNOTATION_NODE_RAW_ALLOCATABLE)
    except AnnotationError:
        raw = None
    for name, quantity in (raw or {}).items():
        values[name] = quantity.milli_value() if name == "cpu" else quantity.value()
    return tuple(values.get(name, 0) for name in resources)


def headroom(threshold: int, allocatable: int, used: int) -> float:
    """The largest estimate with ``round((used + estimate) / allocatable * 100) <= threshold``
    (upstream's float arithmetic), or :data:`UNLIMITED` when the resource is not held."""
    if threshold <= 0 or allocatable <= 0:
        return UNLIMITED
    total = (threshold * allocatable + allocatable // 2) // 100 + 1
    while total >= 0 and go_round(float(total) / float(allocatable) * 100) > threshold:
        total -= 1
    while go_round(float(total + 1) / float(allocatable) * 100) <= threshold:
        total += 1
    return total - used


def least_used_score(used: int, capacity: int) -> int:
    if capacity == 0 or used > capacity:
        return 0
    return (capacity - used) * MAX_NODE_SCORE // capacity


def load_score(
    weights: Iterable[tuple[int, int]], dominant_weight: int, used: Estimate, alloc: Estimate
) -> int:
    """Upstream's ``loadAwareSchedulingScorer``: the weighted least-used scores, plus the
    lowest of them weighted by ``dominantResourceWeight``; ``weights`` are (resource index,
    weight)."""
    total = 0
    weight_sum = dominant_weight
    dominant = MAX_NODE_SCORE if dominant_weight else 0
    for i, weight in weights:
        score = least_used_score(used[i], alloc[i])
        total += score * weight
        weight_sum += weight
        dominant = min(dominant, score)
    total += dominant * dominant_weight
    return total // weight_sum if weight_sum > 0 else 0


@dataclass(frozen=True, slots=True)
class Limits:
    """A filter class's per-resource headroom and the reason each resource fails with."""

    headroom: tuple[float, ...]
    aggregated: bool


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """One node as the plug-in filters and scores it."""

    row: int
    alloc: Estimate
    #: a NodeMetric exists for the node
    reported: bool = False
    #: it is past ``nodeMetricExpirationSeconds`` (or was never updated)
    expired: bool = False
    #: the node holds non-prod pods to thresholds (usage or aggregated ones, any above 0),
    #: and prod pods to prod thresholds (else prod pods are held as the others are)
    filters: bool = False
    prod_filters: bool = False
    #: filter limits for non-prod pods, and for prod pods under prod thresholds; None
    #: (the report has no ``nodeMetric``) passes every pod
    limits: Limits | None = None
    prod_limits: Limits | None = None
    #: the existing estimated usage scores compare (without the incoming pod), for
    #: non-prod pods and for prod pods when ``scoreAccordingProdUsage``
    score_used: Estimate | None = None
    prod_score_used: Estimate | None = None

    def passes(self, estimate: Estimate, prod: bool, args: LoadAwareArgs) -> bool:
        return self.failing(estimate, prod, args) is None

    def failing(self, estimate: Estimate, prod: bool, args: LoadAwareArgs) -> str | None:
        """Why the filter rejects a pod of this estimate (None: it passes). As upstream's
        Filter: thresholds all off pass before the report is looked at, then an expired
        report rejects, then a report without ``nodeMetric`` passes."""
        if not self.reported:
            return None
        if prod and self.prod_filters:
            limits = self.prod_limits
        elif self.filters:
            limits = self.limits
        else:
            return None
        if self.expired and args.filter_expired_node_metrics:
            return None if args.enable_schedule_when_node_metrics_expired else REASON_EXPIRED
        if limits is None:
            return None
        for i, room in enumerate(limits.headroom):
            if estimate[i] > room:
                return usage_reason(args.resources[i], limits.aggregated)
        return None

    def shifted(self, delta: Estimate, prod_delta: Estimate) -> NodeLoad:
        """The load with still-estimated pods that the report has no usage for added (or,
        negative, taken off): their estimates summed (``delta``; ``prod_delta`` for the prod
        ones) move what each class counts, and nothing else."""

        def used(values: Estimate | None, moved: Estimate) -> Estimate | None:
            if values is None:
                return None
            return tuple(v + d for v, d in zip(values, moved, strict=True))

        def room(limits: Limits | None, moved: Estimate) -> Limits | None:
            if limits is None:
                return None
            return Limits(
                tuple(r - d for r, d in zip(limits.headroom, moved, strict=True)), limits.aggregated
            )

        # built directly: dataclasses.replace costs more than the arithmetic, once per pod placed
        return NodeLoad(
            row=self.row,
            alloc=self.alloc,
            reported=self.reported,
            expired=self.expired,
            filters=self.filters,
            prod_filters=self.prod_filters,
            limits=room(self.limits, delta),
            prod_limits=room(self.prod_limits, prod_delta),
            score_used=used(self.score_used, delta),
            prod_score_used=used(self.prod_score_used, prod_delta),
        )

    def score(
        self, estimate: Estimate, prod: bool, args: LoadAwareArgs, weights: Iterable[tuple[int, int]]
    ) -> int:
        used = self.prod_score_used if prod and args.score_according_prod_usage else self.score_used
        if not self.reported or self.expired or used is None:
            return 0
        total = tuple(u + e for u, e in zip(used, estimate, strict=True))
        return load_score(weights, args.dominant_resource_weight, total, self.alloc)


def _sum(resources: tuple[str, ...], usages: Iterable[Usage]) -> list[int]:
    out = [0] * len(resources)
    for usage in usages:
        for i, name in enumerate(resources):
            out[i] += usage.get(name, 0)
    return out


def thresholds_active(thresholds: Mapping[str, int], resources: Iterable[str]) -> bool:
    """Whether ``thresholds`` hold any compared resource (upstream's ``!Empty()`` of the
    threshold vector: a threshold of 0, or on a resource not compared, holds nothing)."""
    return any(thresholds.get(name, 0) for name in resources)


Estimator = Callable[[PodInfo], Estimate]


def still_estimated(
    pod: PodInfo,
    record: NodeMetricRecord,
    reported: bool,
    first_seen: Mapping[str, float],
    args: LoadAwareArgs,
) -> bool:
    """Whether the report does not cover the pod yet (upstream's assign cache): it has no
    usage there, was scheduled less than one report interval before the report (or after
    it), or its estimation deadline is past the report."""
    if not reported:
        return True
    updated = record.update_time or 0.0
    assumed = first_seen.get(pod.key, 0.0)
    if (scheduled_time(pod) or assumed) > updated - record.report_interval_s:
        return True
    deadline = estimated_deadline(pod, args, assumed)
    return deadline is not None and deadline > updated


def existing_usage(
    args: LoadAwareArgs,
    record: NodeMetricRecord,
    pods: Iterable[PodInfo],
    first_seen: Mapping[str, float],
    *,
    prod: bool,
    usage: Usage | None,
    include_sys: bool = False,
    estimate_of: Estimator | None = None,
) -> Estimate:
    """Upstream's ``GetNodeMetricAndEstimatedOfExisting``: what the pods placed on the node
    use, without the incoming pod.

    Non-prod (``usage``: the plain or aggregated node usage chosen): that usage plus, for
    each still-estimated pod, what its estimate exceeds its reported usage by; without such
    a usage, the full estimate of every pod. Prod: the reported usage of the pods that are
    prod both in their spec and in the report (and the system's with ``prodUsageIncludeSys``)
    plus what the still-estimated ones exceed it by, plus the full estimate of every other
    pod of the prod class (upstream counts a reported usage for prod only when the koordlet
    reports the pod as prod too)."""
    resources = args.resources
    width = len(resources)

    def estimate(pod: PodInfo) -> Estimate:
        return estimate_of(pod) if estimate_of is not None else estimate_pod(pod, args)

    if prod:
        out = _sum(resources, [record.system_usage]) if include_sys else [0] * width
    elif usage is None:
        total = [0] * width
        for pod in pods:
            for i, value in enumerate(estimate(pod)):
                total[i] += value
        return tuple(total)
    else:
        out = [usage.get(name, 0) for name in resources]
    for pod in pods:
        if prod and pod.priority_class != PROD:
            continue
        entry = record.pods.get(pod.key)
        reported = entry.usage if entry is not None and entry.usage else None
        if prod:
            if entry is None or reported is None or entry.priority != PROD:
                for i, value in enumerate(estimate(pod)):
                    out[i] += value
                continue
            for i, name in enumerate(resources):
                out[i] += reported.get(name, 0)
        if not still_estimated(pod, record, reported is not None, first_seen, args):
            continue
        for i, value in enumerate(estimate(pod)):
            if reported is not None:
                value -= reported.get(resources[i], 0)
            if value > 0:
                out[i] += value
    return tuple(out)


def node_load(
    node: NodeInfo,
    record: NodeMetricRecord | None,
    pods: list[PodInfo],
    first_seen: Mapping[str, float],
    args: LoadAwareArgs,
    now: float,
    estimate_of: Estimator | None = None,
    parts: tuple[Estimate, FilterProfile] | None = None,
) -> NodeLoad:
    """The node's load from its object, its NodeMetric and the pods placed on it (``parts``:
    the node's allocatable and filter profile when the caller kept them)."""
    resources = args.resources
    alloc, profile = parts if parts is not None else node_parts(node, args)
    if record is None:
        return NodeLoad(node.row, alloc)
    expired = record.update_time is None or now - record.update_time >= args.node_metric_expiration_s
    window = profile.aggregated
    thresholds = window.usage_thresholds if window is not None else profile.usage_thresholds
    filters = thresholds_active(thresholds, resources)
    prod_filters = thresholds_active(profile.prod_usage_thresholds, resources)
    if record.node_usage is None:
        # no ``nodeMetric`` in the report: upstream's Filter passes and Score gives 0
        return NodeLoad(
            node.row, alloc, reported=True, expired=expired, filters=filters, prod_filters=prod_filters
        )
    usage_of = functools.partial(existing_usage, args, record, pods, first_seen, estimate_of=estimate_of)
    #: usage source -> the non-prod existing usage computed from it (by identity: the
    #: filter and the score often read the same one)
    computed: dict[int, Estimate] = {}

    def non_prod(usage: Usage | None) -> Estimate:
        key = id(usage)
        if key not in computed:
            computed[key] = usage_of(prod=False, usage=usage)
        return computed[key]

    prod_used: Estimate | None = None

    def prod_usage() -> Estimate:
        nonlocal prod_used
        if prod_used is None:
            prod_used = usage_of(prod=True, usage=None, include_sys=args.prod_usage_include_sys)
        return prod_used

    limits = prod_limits = None
    if filters:
        if window is not None:
            usage = target_aggregated_usage(
                record, window.usage_aggregated_duration, window.usage_aggregation_type
            )
        else:
            usage = record.node_usage
        limits = Limits(_headrooms(resources, thresholds, alloc, non_prod(usage)), window is not None)
    if prod_filters:
        prod_limits = Limits(_headrooms(resources, profile.prod_usage_thresholds, alloc, prod_usage()), False)
    scoring = args.aggregated if args.aggregated is not None and args.aggregated.scores else None
    if scoring is not None:
        score_usage = target_aggregated_usage(
            record, scoring.score_aggregated_duration, scoring.score_aggregation_type
        )
    else:
        score_usage = record.node_usage
    score_used = non_prod(score_usage)
    prod_score_used = prod_usage() if args.score_according_prod_usage else None
    return NodeLoad(
        node.row,
        alloc,
        reported=True,
        expired=expired,
        filters=filters,
        prod_filters=prod_filters,
        limits=limits,
        prod_limits=prod_limits,
        score_used=score_used,
        prod_score_used=prod_score_used,
    )


def node_parts(node: NodeInfo, args: LoadAwareArgs) -> tuple[Estimate, FilterProfile]:
    """What of the load comes from the Node object alone: its allocatable and thresholds."""
    return node_allocatable(node, args.resources), filter_profile(node, args)


def _headrooms(
    resources: tuple[str, ...], thresholds: Mapping[str, int], alloc: Estimate, used: Estimate
) -> tuple[float, ...]:
    return tuple(headroom(thresholds.get(name, 0), alloc[i], used[i]) for i, name in enumerate(resources))
