"""LoadAwareSchedulingArgs: every field with upstream's defaults and validation
(``pkg/scheduler/apis/config/v1beta3/defaults.go`` and ``validation``).

Thresholds and weights are per resource name; durations are Go durations (``5m``). A
configuration upstream refuses raises :class:`ArgsError` naming the field.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler.plugins.args import ArgsError, boolean, duration
from koordinator.api.extension.scheduling import AGGREGATION_TYPES

NAME = "LoadAwareScheduling"
DEFAULT_EXPIRATION_S = 180
DEFAULT_RESOURCE_WEIGHTS = {"cpu": 1, "memory": 1}
DEFAULT_USAGE_THRESHOLDS = {"cpu": 65, "memory": 95}
DEFAULT_SCALING_FACTORS = {"cpu": 85, "memory": 70}

_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "filterExpiredNodeMetrics",
        "nodeMetricExpirationSeconds",
        "enableScheduleWhenNodeMetricsExpired",
        "resourceWeights",
        "dominantResourceWeight",
        "usageThresholds",
        "prodUsageThresholds",
        "prodUsageIncludeSys",
        "scoreAccordingProdUsage",
        "estimatedScalingFactors",
        "estimatedSecondsAfterPodScheduled",
        "estimatedSecondsAfterInitialized",
        "allowCustomizeEstimation",
        "estimator",
        "aggregated",
    }
)
_AGGREGATED_FIELDS = frozenset(
    {
        "usageThresholds",
        "usageAggregationType",
        "usageAggregatedDuration",
        "scoreAggregationType",
        "scoreAggregatedDuration",
    }
)


@dataclass(frozen=True)
class Aggregated:
    """``aggregated``: thresholds and scores over the NodeMetric's percentiles."""

    usage_thresholds: Mapping[str, int] = field(default_factory=dict)
    usage_aggregation_type: str = ""
    #: seconds; 0: the longest window the NodeMetric reports for the type
    usage_aggregated_duration: float = 0.0
    score_aggregation_type: str = ""
    score_aggregated_duration: float = 0.0

    @property
    def filters(self) -> bool:
        """Upstream's ``filterWithAggregation``."""
        return bool(self.usage_thresholds) and bool(self.usage_aggregation_type)

    @property
    def scores(self) -> bool:
        """Upstream's ``scoreWithAggregation``."""
        return bool(self.score_aggregation_type)


@dataclass(frozen=True)
class LoadAwareArgs:
    filter_expired_node_metrics: bool = True
    node_metric_expiration_s: int = DEFAULT_EXPIRATION_S
    enable_schedule_when_node_metrics_expired: bool = False
    resource_weights: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_RESOURCE_WEIGHTS))
    dominant_resource_weight: int = 0
    usage_thresholds: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_USAGE_THRESHOLDS))
    prod_usage_thresholds: Mapping[str, int] = field(default_factory=dict)
    prod_usage_include_sys: bool = False
    score_according_prod_usage: bool = False
    estimated_scaling_factors: Mapping[str, int] = field(
        default_factory=lambda: dict(DEFAULT_SCALING_FACTORS)
    )
    estimated_seconds_after_pod_scheduled: int | None = None
    estimated_seconds_after_initialized: int | None = None
    allow_customize_estimation: bool = False
    aggregated: Aggregated | None = None

    @functools.cached_property
    def resources(self) -> tuple[str, ...]:
        """The resources estimated and compared: CPU and memory first, then the others by name."""
        names = {
            *self.resource_weights,
            *self.usage_thresholds,
            *self.prod_usage_thresholds,
            *self.estimated_scaling_factors,
            *(self.aggregated.usage_thresholds if self.aggregated else {}),
        }
        return tuple(sorted(names, key=lambda n: (n not in ("cpu", "memory"), n != "cpu", n)))


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgsError(f"{where}: must be an integer, got {value!r}")
    return value


def _per_resource(raw: Any, where: str, low: int, high: int) -> dict[str, int]:
    """A resource -> integer map, each value within [low, high]."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ArgsError(f"{where}: must be a map of resource names to integers")
    out = {}
    for name, value in raw.items():
        number = _int(value, f"{where}[{name}]")
        if not low <= number <= high:
            raise ArgsError(f"{where}[{name}]: Invalid value: {number}: must be between {low} and {high}")
        out[str(name)] = number
    return out


def _duration(raw: Any, where: str) -> float:
    if raw is None or raw == "":
        return 0.0
    seconds = duration(raw, where, "5m")
    if seconds < 0:
        raise ArgsError(f"{where}: Invalid value: {raw!r}: must not be negative")
    return seconds


def _aggregation_type(raw: Any, where: str) -> str:
    if raw in (None, ""):
        return ""
    if raw not in AGGREGATION_TYPES:
        raise ArgsError(
            f"{where}: Unsupported value: {raw!r}: supported values: {', '.join(AGGREGATION_TYPES)}"
        )
    return str(raw)


def _aggregated(raw: Any, path: str) -> Aggregated | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ArgsError(f"{path}: must be a mapping")
    unknown = set(raw) - _AGGREGATED_FIELDS
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {sorted(unknown)}")
    return Aggregated(
        usage_thresholds=_per_resource(raw.get("usageThresholds"), f"{path}.usageThresholds", 0, 100),
        usage_aggregation_type=_aggregation_type(
            raw.get("usageAggregationType"), f"{path}.usageAggregationType"
        ),
        usage_aggregated_duration=_duration(
            raw.get("usageAggregatedDuration"), f"{path}.usageAggregatedDuration"
        ),
        score_aggregation_type=_aggregation_type(
            raw.get("scoreAggregationType"), f"{path}.scoreAggregationType"
        ),
        score_aggregated_duration=_duration(
            raw.get("scoreAggregatedDuration"), f"{path}.scoreAggregatedDuration"
        ),
    )


def _seconds(raw: Mapping[str, Any], key: str, path: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    number = _int(value, f"{path}.{key}")
    if number <= 0:
        raise ArgsError(f"{path}.{key}: Invalid value: {number}: must be a positive number of seconds")
    return number


def load_aware_args(raw: Mapping[str, Any] | None, path: str = NAME) -> LoadAwareArgs:
    """LoadAwareSchedulingArgs, defaulted and validated as upstream (``ArgsError``)."""
    raw = raw or {}
    unknown = set(raw) - _FIELDS
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {sorted(unknown)}")
    estimator = raw.get("estimator")
    if estimator not in (None, "", "default"):
        raise ArgsError(f"{path}.estimator: Unsupported value: {estimator!r}: supported values: default")
    expiration = raw.get("nodeMetricExpirationSeconds", DEFAULT_EXPIRATION_S)
    expiration = (
        DEFAULT_EXPIRATION_S
        if expiration is None
        else _int(expiration, f"{path}.nodeMetricExpirationSeconds")
    )
    if expiration <= 0:
        raise ArgsError(
            f"{path}.nodeMetricExpirationSeconds: Invalid value: {expiration}: must be a positive number"
        )
    dominant = _int(raw.get("dominantResourceWeight") or 0, f"{path}.dominantResourceWeight")
    if not 0 <= dominant <= 100:
        raise ArgsError(
            f"{path}.dominantResourceWeight: Invalid value: {dominant}: must be between 0 and 100"
        )
    weights = _per_resource(raw.get("resourceWeights"), f"{path}.resourceWeights", 1, 100)
    if not weights and not dominant:
        weights = dict(DEFAULT_RESOURCE_WEIGHTS)
    # an empty map is defaulted as upstream does (Go cannot tell it from an absent one)
    thresholds = _per_resource(raw.get("usageThresholds"), f"{path}.usageThresholds", 0, 100)
    if not thresholds:
        thresholds = dict(DEFAULT_USAGE_THRESHOLDS)
    prod = _per_resource(raw.get("prodUsageThresholds"), f"{path}.prodUsageThresholds", 0, 100)
    for name, value in prod.items():
        limit = thresholds.get(name, 0)
        if value and limit and value > limit:
            raise ArgsError(
                f"{path}.prodUsageThresholds[{name}]: Invalid value: {value}: "
                f"must not exceed usageThresholds[{name}] ({limit})"
            )
    factors = {
        **DEFAULT_SCALING_FACTORS,
        **_per_resource(raw.get("estimatedScalingFactors"), f"{path}.estimatedScalingFactors", 1, 100),
    }
    return LoadAwareArgs(
        filter_expired_node_metrics=boolean(raw, "filterExpiredNodeMetrics", path, True),
        node_metric_expiration_s=expiration,
        enable_schedule_when_node_metrics_expired=boolean(raw, "enableScheduleWhenNodeMetricsExpired", path),
        resource_weights=weights,
        dominant_resource_weight=dominant,
        usage_thresholds=thresholds,
        prod_usage_thresholds=prod,
        prod_usage_include_sys=boolean(raw, "prodUsageIncludeSys", path, False),
        score_according_prod_usage=boolean(raw, "scoreAccordingProdUsage", path, False),
        estimated_scaling_factors=factors,
        estimated_seconds_after_pod_scheduled=_seconds(raw, "estimatedSecondsAfterPodScheduled", path),
        estimated_seconds_after_initialized=_seconds(raw, "estimatedSecondsAfterInitialized", path),
        allow_customize_estimation=boolean(raw, "allowCustomizeEstimation", path, False),
        aggregated=_aggregated(raw.get("aggregated"), f"{path}.aggregated"),
    )
