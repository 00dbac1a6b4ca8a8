"""Models of the ``slo-controller-config`` ConfigMap keys (``apis/configuration``).

Most keys have the shape ``{"clusterStrategy": {...}, "nodeStrategies": [{"name",
"nodeSelector", ...strategy fields}]}``. ``colocation-config``, ``cpu-normalization-config``
and ``resource-amplification-config`` put the cluster fields inline next to ``nodeConfigs``;
``host-application-config`` has ``applications`` and ``nodeConfigs``. A node entry applies to
the nodes its ``nodeSelector`` matches; the first matching entry wins.
"""

from __future__ import annotations

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from koordinator.api.model import Model, field
from koordinator.api.types.core import LabelSelector
from koordinator.api.types.slo import (
    AggregatePolicy,
    CPUBurstStrategy,
    HostApplicationSpec,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
)

__all__ = [
    "CPUBurstCfg",
    "CPUNormalizationCfg",
    "CPUNormalizationStrategy",
    "ColocationCfg",
    "ColocationStrategy",
    "HostApplicationCfg",
    "ModelRatioCfg",
    "NodeCPUBurstCfg",
    "NodeCPUNormalizationCfg",
    "NodeColocationCfg",
    "NodeHostApplicationCfg",
    "NodeResourceAmplificationCfg",
    "NodeResourceQOSStrategy",
    "NodeResourceThresholdStrategy",
    "NodeSystemStrategy",
    "ResourceAmplificationCfg",
    "ResourceAmplificationStrategy",
    "ResourceQOSCfg",
    "ResourceThresholdCfg",
    "SystemCfg",
]

_NODE_SELECTOR_HELP = "Nodes this entry applies to; the first matching entry in the list wins."


# ---- colocation-config ---------------------------------------------------------------------------


@dataclass
class ColocationStrategy(Model):
    enable: bool | None = field("enable", description="Turns colocation (batch/mid resources) on.")
    metric_aggregate_duration_seconds: int | None = field("metricAggregateDurationSeconds", minimum=1)
    metric_report_interval_seconds: int | None = field("metricReportIntervalSeconds", minimum=1)
    metric_aggregate_policy: AggregatePolicy | None = field("metricAggregatePolicy")
    metric_memory_collect_policy: str | None = field(
        "metricMemoryCollectPolicy",
        enum=("usageWithoutPageCache", "usageWithHotPageCache", "usageWithPageCache"),
    )
    cpu_reclaim_threshold_percent: int | None = field("cpuReclaimThresholdPercent", minimum=0)
    cpu_calculate_policy: str | None = field("cpuCalculatePolicy", enum=("usage", "maxUsageRequest"))
    memory_reclaim_threshold_percent: int | None = field("memoryReclaimThresholdPercent", minimum=0)
    memory_calculate_policy: str | None = field(
        "memoryCalculatePolicy", enum=("usage", "request", "maxUsageRequest")
    )
    degrade_time_minutes: int | None = field("degradeTimeMinutes", minimum=1)
    update_time_threshold_seconds: int | None = field("updateTimeThresholdSeconds", minimum=1)
    resource_diff_threshold: float | None = field(
        "resourceDiffThreshold", minimum=0, exclusive_minimum=True, maximum=1
    )
    mid_reclaim_mode: str | None = field("midReclaimMode", enum=("static",))
    mid_cpu_threshold_percent: int | None = field("midCPUThresholdPercent", minimum=0, maximum=100)
    mid_memory_threshold_percent: int | None = field("midMemoryThresholdPercent", minimum=0, maximum=100)
    mid_unallocated_percent: int | None = field("midUnallocatedPercent", minimum=0, maximum=100)
    mid_static_cpu_reserved_percent: int | None = field("midStaticCPUReservedPercent", minimum=0, maximum=100)
    mid_static_memory_reserved_percent: int | None = field(
        "midStaticMemoryReservedPercent", minimum=0, maximum=100
    )
    batch_cpu_threshold_percent: int | None = field("batchCPUThresholdPercent", minimum=0)
    batch_memory_threshold_percent: int | None = field("batchMemoryThresholdPercent", minimum=0)

    def is_valid(self) -> bool:
        """``IsColocationStrategyValid``: no field breaks its rule (:meth:`invalid_fields`)."""
        return not self.invalid_fields()

    def invalid_fields(self) -> list[str]:
        """The JSON names of the fields that break ``IsColocationStrategyValid``, in its order.

        An unset field passes. Set, the durations and ``resourceDiffThreshold`` must be above
        0; the reclaim, static-reserved and batch percents 0 or more; the other mid percents
        0 to 100; ``metricMemoryCollectPolicy`` not empty. The ConfigMap's own ranges are at
        least as strict: the rule matters for what they do not check, the node's
        ``colocation-strategy`` annotation and ratio labels.
        """
        return [
            name
            for name, attr, rule in _VALIDITY
            if (value := getattr(self, attr)) is not None and not rule(value)
        ]


def _positive(value: float) -> bool:
    return value > 0


def _non_negative(value: float) -> bool:
    return value >= 0


def _percent(value: float) -> bool:
    return 0 <= value <= 100


def _non_empty(value: str) -> bool:
    return value != ""


#: ``IsColocationStrategyValid``, in its order: (JSON name, attribute, rule of a set value).
_VALIDITY: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
    ("metricAggregateDurationSeconds", "metric_aggregate_duration_seconds", _positive),
    ("metricReportIntervalSeconds", "metric_report_interval_seconds", _positive),
    ("cpuReclaimThresholdPercent", "cpu_reclaim_threshold_percent", _non_negative),
    ("midStaticCPUReservedPercent", "mid_static_cpu_reserved_percent", _non_negative),
    ("memoryReclaimThresholdPercent", "memory_reclaim_threshold_percent", _non_negative),
    ("midStaticMemoryReservedPercent", "mid_static_memory_reserved_percent", _non_negative),
    ("degradeTimeMinutes", "degrade_time_minutes", _positive),
    ("updateTimeThresholdSeconds", "update_time_threshold_seconds", _positive),
    ("resourceDiffThreshold", "resource_diff_threshold", _positive),
    ("metricMemoryCollectPolicy", "metric_memory_collect_policy", _non_empty),
    ("midCPUThresholdPercent", "mid_cpu_threshold_percent", _percent),
    ("midMemoryThresholdPercent", "mid_memory_threshold_percent", _percent),
    ("midUnallocatedPercent", "mid_unallocated_percent", _percent),
    ("batchCPUThresholdPercent", "batch_cpu_threshold_percent", _non_negative),
    ("batchMemoryThresholdPercent", "batch_memory_threshold_percent", _non_negative),
)


@dataclass
class NodeColocationCfg(ColocationStrategy):
    name: str = field("name", default="")
    node_selector: LabelSelector | None = field("nodeSelector", description=_NODE_SELECTOR_HELP)


@dataclass
class ColocationCfg(ColocationStrategy):
    node_configs: list[NodeColocationCfg] = field("nodeConfigs", factory=list)


# ---- keys with clusterStrategy / nodeStrategies ------------------------------------------------------


@dataclass
class NodeResourceThresholdStrategy(ResourceThresholdStrategy):
    name: str = field("name", default="")
    node_selector: LabelSelector | None = field("nodeSelector", description=_NODE_SELECTOR_HELP)


@dataclass
class ResourceThresholdCfg(Model):
    cluster_strategy: ResourceThresholdStrategy | None = field("clusterStrategy")
    node_strategies: list[NodeResourceThresholdStrategy] = field("nodeStrategies", factory=list)


@dataclass
class NodeResourceQOSStrategy(ResourceQOSStrategy):
    name: str = field("name", default="")
    node_selector: LabelSelector | None = field("nodeSelector", description=_NODE_SELECTOR_HELP)


@dataclass
class ResourceQOSCfg(Model):
    cluster_strategy: ResourceQOSStrategy | None = field("clusterStrategy")
    node_strategies: list[NodeResourceQOSStrategy] = field("nodeStrategies", factory=list)


@dataclass
class NodeCPUBurstCfg(CPUBurstStrategy):
    name: str = field("name", default="")
    node_selector: LabelSelector | None = field("nodeSelector", description=_NODE_SELECTOR_HELP)


@dataclass
class CPUBurstCfg(Model):
    cluster_strategy: CPUBurstStrategy | None = field("clusterStrategy")
    node_strategies: list[NodeCPUBurstCfg] = field("nodeStrategies", factory=list)


@dataclass
class NodeSystemStrategy(SystemStrategy):
    name: str = field("name", default="")
    node_selector: LabelSelector | None = field("nodeSelector", description=_NODE_SELECTOR_HELP)


@dataclass
class SystemCfg(Model):
    cluster_strategy: SystemStrategy | None = field("clusterStrategy")
    node_strategies: list[NodeSystemStrategy] = field("nodeStrategies", factory=list)


# ---- host-application-config -----------------------------------------------------------------------


@dataclass
class NodeHostApplicationCfg(Model):
    name: str = field("name", default="")
    node_selector: LabelSelector | None = field("nodeSelector", description=_NODE_SELECTOR_HELP)
    applications: list[HostApplicationSpec] = field("applications", factory=list)


@dataclass
class HostApplicationCfg(Model):
    applications: list[HostApplicationSpec] = field("applications", factory=list)
    node_configs: list[NodeHostApplicationCfg] = field("nodeConfigs", factory=list)


# ---- cpu-normalization-config ------------------------------------------------------------------------


@dataclass
class ModelRatioCfg(Model):
    base_ratio: float | None = field("baseRatio", minimum=0, exclusive_minimum=True)
    hyper_thread_enabled_ratio: float | None = field(
        "hyperThreadEnabledRatio", minimum=0, exclusive_minimum=True
    )
    turbo_enabled_ratio: float | None = field("turboEnabledRatio", minimum=0, exclusive_minimum=True)
    hyper_thread_turbo_enabled_ratio: float | None = field(
        "hyperThreadTurboEnabledRatio", minimum=0, exclusive_minimum=True
    )


@dataclass
class CPUNormalizationStrategy(Model):
    enable: bool | None = field("enable")
    default_ratio: float | None = field("defaultRatio", minimum=0, exclusive_minimum=True)
    ratio_model: dict[str, ModelRatioCfg] = field(
        "ratioModel", factory=dict, description="Keyed by CPU model name."
    )


@dataclass
class NodeCPUNormalizationCfg(CPUNormalizationStrategy):
    name: str = field("name", default="")
    node_selector: LabelSelector | None = field("nodeSelector", description=_NODE_SELECTOR_HELP)


@dataclass
class CPUNormalizationCfg(CPUNormalizationStrategy):
    node_configs: list[NodeCPUNormalizationCfg] = field("nodeConfigs", factory=list)


# ---- resource-amplification-config ---------------------------------------------------------------


@dataclass
class ResourceAmplificationStrategy(Model):
    enable: bool | None = field("enable")
    resource_amplification_ratio: dict[str, float] = field(
        "resourceAmplificationRatio", factory=dict, description="Resource name -> ratio (at least 1)."
    )


@dataclass
class NodeResourceAmplificationCfg(ResourceAmplificationStrategy):
    name: str = field("name", default="")
    node_selector: LabelSelector | None = field("nodeSelector", description=_NODE_SELECTOR_HELP)


@dataclass
class ResourceAmplificationCfg(ResourceAmplificationStrategy):
    node_configs: list[NodeResourceAmplificationCfg] = field("nodeConfigs", factory=list)
