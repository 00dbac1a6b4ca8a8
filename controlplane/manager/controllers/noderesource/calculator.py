"""One node's batch and mid resources from the slo-controller-config, its Node, NodeMetric and pods.

This is the whole calculation, shared by the noderesource controller and
``koord-manager explain-node`` (which passes a :class:`Trace` to get every step). It does
no I/O and imports no framework code; time is passed in.

Order of decisions, as upstream's noderesource reconciler takes them:

1. the node's colocation strategy: defaults, the cluster fields of ``colocation-config``,
   the first matching node entry, the node annotation and the ratio labels;
2. colocation disabled (cluster ``enable`` false, or the node's strategy ``enable`` false):
   batch and mid resources are removed;
3. NodeMetric missing, without ``status.updateTime``, or older than ``degradeTimeMinutes``:
   batch and mid resources are removed (degraded);
4. otherwise :mod:`.mid` and :mod:`.batch` compute the four quantities; batch-cpu is then
   scaled by the node's CPU normalization ratio when it is above 1 (``MultiplyMilliQuant``
   then rounded up to a whole milli-core, as upstream's prepare step; mid-cpu is not
   scaled); batch-memory and batch-cpu then lose what third-party allocations of batch
   priority hold on the node (``node.koordinator.sh/thirdPartyAllocations``, floor zero),
   the value before that (after scaling, as upstream) being recorded in
   ``node.koordinator.sh/originExtendedAllocatable``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from controlplane.manager.controllers.noderesource.batch import BatchAllocatable, calculate_batch
from controlplane.manager.controllers.noderesource.mid import MidAllocatable, calculate_mid
from controlplane.manager.controllers.noderesource.steps import Step, Trace
from controlplane.manager.controllers.noderesource.views import NodeMetricView, NodeView, PodView
from koordinator.api.extension.node import (
    ANNOTATION_NODE_COLOCATION_STRATEGY,
    LABEL_CPU_RECLAIM_RATIO,
    LABEL_MEMORY_RECLAIM_RATIO,
    LABEL_MID_STATIC_CPU_RESERVED_RATIO,
    LABEL_MID_STATIC_MEMORY_RESERVED_RATIO,
    OriginAllocatable,
)
from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY
from koordinator.api.quantity import Format, Quantity, ceil_div_away
from koordinator.api.sloconfig.config import (
    SLOControllerConfig,
    cluster_colocation_strategy,
    colocation_strategy_for_node,
)
from koordinator.api.sloconfig.types import ColocationStrategy
from koordinator.kube.timeutil import format_time

__all__ = [
    "DEGRADED_BATCH_MESSAGE",
    "DEGRADED_MID_MESSAGE",
    "DISABLED_MESSAGE",
    "Calculation",
    "StrategyResolver",
    "calculate",
    "degrade_reason",
    "normalized_batch_cpu",
    "origin_annotation",
    "selector_keys",
]

DISABLED_MESSAGE = "node colocation is disabled in Config, reason: DisableInConfig"
DEGRADED_BATCH_MESSAGE = (
    "degrade node resource because of abnormal nodeMetric, reason: degradedByBatchResource"
)
DEGRADED_MID_MESSAGE = (
    "degrade node Mid resource because of abnormal nodeMetric, reason: degradedByMidResource"
)

_RATIO_LABELS = (
    LABEL_CPU_RECLAIM_RATIO,
    LABEL_MEMORY_RECLAIM_RATIO,
    LABEL_MID_STATIC_CPU_RESERVED_RATIO,
    LABEL_MID_STATIC_MEMORY_RESERVED_RATIO,
)
_CACHE_LIMIT = 10000


def selector_keys(selector: Any) -> set[str]:
    """The label keys a node entry's selector reads."""
    if selector is None:
        return set()
    data = selector.to_dict()
    keys = set((data.get("matchLabels") or {}).keys())
    keys.update(str(e.get("key")) for e in data.get("matchExpressions") or () if isinstance(e, dict))
    return keys


class StrategyResolver:
    """The per-node colocation strategies of one parsed config, memoised.

    A node's strategy depends only on the labels the node entries select on, the ratio
    labels and the ``colocation-strategy`` annotation, so nodes that agree on those share
    one resolved strategy (treat it as read-only).
    """

    def __init__(self, config: SLOControllerConfig) -> None:
        self.config = config
        self.cluster = cluster_colocation_strategy(config)
        keys: set[str] = set(_RATIO_LABELS)
        for entry in config.colocation.node_configs:
            keys |= selector_keys(entry.node_selector)
        self._keys = tuple(sorted(keys))
        self._cache: dict[tuple[object, ...], tuple[ColocationStrategy, tuple[str, ...]]] = {}

    def key(self, node: NodeView) -> tuple[object, ...]:
        """What the node's strategy depends on: nodes with equal keys share one strategy."""
        labels = node.labels
        return (tuple((key, labels.get(key)) for key in self._keys), node.strategy_annotation)

    def source(self, node: NodeView) -> dict[str, Any]:
        """The node reduced to what its strategy depends on, as a node dict."""
        labels = node.labels
        meta: dict[str, Any] = {
            "name": node.name,
            "labels": {key: labels[key] for key in self._keys if key in labels},
        }
        if node.strategy_annotation is not None:
            meta["annotations"] = {ANNOTATION_NODE_COLOCATION_STRATEGY: node.strategy_annotation}
        return {"metadata": meta}

    def for_node(self, node: NodeView) -> tuple[ColocationStrategy, tuple[str, ...]]:
        """The node's strategy and the node metadata it had to ignore (malformed overrides)."""
        cache_key = self.key(node)
        found = self._cache.get(cache_key)
        if found is None:
            problems: list[str] = []
            strategy = colocation_strategy_for_node(self.config, self.source(node), problems)
            found = (strategy, tuple(problems))
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[cache_key] = found
        return found


def degrade_reason(strategy: ColocationStrategy, metric: NodeMetricView | None, now: float) -> str:
    """Why the NodeMetric cannot be trusted ("" when it can)."""
    if metric is None:
        return "NodeMetric not found"
    if metric.update_time is None:
        return "NodeMetric has no status.updateTime (never reported)"
    minutes = strategy.degrade_time_minutes or 0
    if now > metric.update_time + minutes * 60:
        age = now - metric.update_time
        return (
            f"NodeMetric last updated {format_time(metric.update_time)} ({age:.0f}s ago), "
            f"more than degradeTimeMinutes={minutes} ago"
        )
    return ""


@dataclass
class Calculation:
    """The result for one node. ``batch``/``mid`` ``None`` means: remove those resources."""

    node: str
    strategy: ColocationStrategy
    enabled: bool
    degraded: str = ""
    batch: BatchAllocatable | None = None
    mid: MidAllocatable | None = None
    #: batch resources before third-party allocations were taken off (nodes that have some)
    origin_batch: BatchAllocatable | None = None
    reset_message: str = ""
    problems: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    def desired(self) -> dict[str, Quantity | None]:
        """The four node status resources, as they should be written (``None``: removed)."""
        batch, mid = self.batch, self.mid
        return {
            BATCH_CPU: Quantity.from_int(batch.cpu) if batch is not None else None,
            BATCH_MEMORY: Quantity.from_int(batch.memory, Format.BINARY_SI) if batch is not None else None,
            MID_CPU: Quantity.from_int(mid.cpu) if mid is not None else None,
            MID_MEMORY: Quantity.from_int(mid.memory, Format.BINARY_SI) if mid is not None else None,
        }

    def to_dict(self) -> dict[str, Any]:
        """``{"batch": {...} | null, "mid": {...} | null, "steps": [...]}`` (quantities as in node status)."""
        desired = self.desired()

        def pair(cpu: str, memory: str) -> dict[str, str] | None:
            cpu_q, memory_q = desired[cpu], desired[memory]
            if cpu_q is None or memory_q is None:
                return None
            return {cpu: str(cpu_q), memory: str(memory_q)}

        return {
            "batch": pair(BATCH_CPU, BATCH_MEMORY),
            "mid": pair(MID_CPU, MID_MEMORY),
            "steps": [step.to_dict() for step in self.steps],
        }


def normalized_batch_cpu(milli: int, ratio: float) -> int:
    """batch-cpu (milli-cores) x ``ratio``: ``MultiplyMilliQuant`` (truncated to a milli-unit of
    the milli-core count), then rounded up to an integer as node status requires."""
    return ceil_div_away(int(float(milli * 1000) * ratio), 1000)


def origin_annotation(origin: BatchAllocatable) -> str:
    """The ``originExtendedAllocatable`` annotation value for batch resources before third parties."""
    return OriginAllocatable(
        resources={
            BATCH_CPU: Quantity.from_int(max(origin.cpu, 0)),
            BATCH_MEMORY: Quantity.from_int(max(origin.memory, 0), Format.BINARY_SI),
        }
    ).to_json()


def _strategy_note(strategy: ColocationStrategy, cluster_enabled: bool) -> str:
    return (
        f"cluster enable={str(cluster_enabled).lower()}, node enable={str(bool(strategy.enable)).lower()}; "
        f"cpuReclaimThresholdPercent={strategy.cpu_reclaim_threshold_percent} "
        f"memoryReclaimThresholdPercent={strategy.memory_reclaim_threshold_percent} "
        f"cpuCalculatePolicy={strategy.cpu_calculate_policy} "
        f"memoryCalculatePolicy={strategy.memory_calculate_policy} "
        f"degradeTimeMinutes={strategy.degrade_time_minutes} "
        f"updateTimeThresholdSeconds={strategy.update_time_threshold_seconds} "
        f"resourceDiffThreshold={strategy.resource_diff_threshold} "
        f"midReclaimMode={strategy.mid_reclaim_mode or 'dynamic'}"
    )


def calculate(
    config: SLOControllerConfig,
    node: NodeView,
    metric: NodeMetricView | None,
    pods: Iterable[PodView],
    now: float,
    *,
    resolver: StrategyResolver | None = None,
    trace: Trace | None = None,
    cpu_normalization_ratio: float | None = None,
) -> Calculation:
    """Batch and mid resources for ``node`` at time ``now`` (seconds since the epoch).

    ``cpu_normalization_ratio`` is the ratio batch-cpu is scaled by; without it, the node's
    own ``cpu-normalization-ratio`` annotation (the controller passes the ratio it writes
    in the same reconcile).
    """
    if resolver is None or resolver.config is not config:
        resolver = StrategyResolver(config)
    strategy, strategy_problems = resolver.for_node(node)
    cluster_enabled = bool(resolver.cluster.enable)
    enabled = cluster_enabled and bool(strategy.enable)
    problems = [*node.problems, *strategy_problems]
    if metric is not None:
        problems.extend(metric.problems)
    result = Calculation(node=node.name, strategy=strategy, enabled=enabled, problems=problems)
    if trace is not None:
        for problem in problems:
            trace.note("problem", problem)
        trace.note(
            "colocation",
            ("enabled: " if enabled else "disabled: ") + _strategy_note(strategy, cluster_enabled),
        )
    if not enabled:
        result.reset_message = DISABLED_MESSAGE
        if trace is not None:
            trace.note("result", f"batch and mid resources removed: {DISABLED_MESSAGE}")
            result.steps = trace.steps
        return result
    reason = degrade_reason(strategy, metric, now)
    if reason or metric is None:
        result.degraded = reason
        result.reset_message = f"{DEGRADED_BATCH_MESSAGE}; {DEGRADED_MID_MESSAGE}"
        if trace is not None:
            trace.note("nodemetric", f"degraded: {reason}")
            trace.note("result", f"batch and mid resources removed: {result.reset_message}")
            result.steps = trace.steps
        return result
    if trace is not None:
        updated = metric.update_time or 0.0
        trace.note(
            "nodemetric",
            f"fresh: updated {format_time(updated)}, {now - updated:.0f}s "
            f"before {format_time(now)} (degrade after {strategy.degrade_time_minutes}m); "
            f"{len(metric.pods)} pod metric(s)",
        )
    pod_list = pods if isinstance(pods, list | tuple) else list(pods)
    batch = calculate_batch(strategy, node, metric, pod_list, trace)
    ratio = node.cpu_normalization_ratio if cpu_normalization_ratio is None else cpu_normalization_ratio
    if ratio is not None and ratio > 1:
        batch = BatchAllocatable(normalized_batch_cpu(batch.cpu, ratio), batch.memory)
        if trace is not None:
            trace.values(
                "batch.cpuNormalization",
                batch.cpu,
                None,
                f"batch-cpu x cpu-normalization-ratio {ratio:.2f} "
                "(node.koordinator.sh/cpu-normalization-ratio)",
            )
    third_party = node.third_party_batch
    if third_party is not None:
        result.origin_batch = batch
        batch = BatchAllocatable(
            max(batch.cpu - third_party.milli_cpu, 0), max(batch.memory - third_party.memory_bytes, 0)
        )
        if trace is not None:
            trace.values(
                "batch.thirdPartyAllocated",
                third_party.milli_cpu,
                third_party.memory_bytes,
                "node annotation node.koordinator.sh/thirdPartyAllocations of batch priority",
            )
            trace.values(
                "batch.afterThirdParty", batch.cpu, batch.memory, "max(result - thirdPartyAllocated, 0)"
            )
    result.batch = batch
    result.mid = calculate_mid(strategy, node, metric, pod_list, trace)
    if trace is not None:
        result.steps = trace.steps
    return result
