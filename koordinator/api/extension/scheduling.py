"""Scheduler annotations outside NUMA, devices and reservations: load-aware thresholds and estimation,
descheduling costs, preemption labels.
"""

from __future__ import annotations

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.annotations import AnnotationError, decode_json, get_model
from koordinator.api.extension.constants import INTERNAL_SCHEDULING_DOMAIN_PREFIX, SCHEDULING_DOMAIN_PREFIX
from koordinator.api.goparse import GoParseError, parse_int
from koordinator.api.model import Model, field
from koordinator.api.types.core import DURATION_PATTERN

__all__ = [
    "AGGREGATION_TYPES",
    "ANNOTATION_CUSTOM_USAGE_THRESHOLDS",
    "ANNOTATION_EVICTION_COST",
    "ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS",
    "ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_INITIALIZED",
    "ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED",
    "ANNOTATION_SCHEDULING_HINT",
    "ANNOTATION_SOFT_EVICTION",
    "LABEL_DISABLE_PREEMPTIBLE",
    "LABEL_PREEMPTION_POLICY",
    "LABEL_SCHEDULER_NAME",
    "CustomAggregatedUsage",
    "CustomUsageThresholds",
    "get_custom_usage_thresholds",
    "get_estimated_scaling_factors",
    "get_eviction_cost",
    "get_int_annotation",
]

#: Node annotation overriding LoadAwareScheduling thresholds.
ANNOTATION_CUSTOM_USAGE_THRESHOLDS = SCHEDULING_DOMAIN_PREFIX + "/usage-thresholds"
ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS = SCHEDULING_DOMAIN_PREFIX + "/load-estimated-scaling-factors"
ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED = (
    SCHEDULING_DOMAIN_PREFIX + "/load-estimated-seconds-after-pod-scheduled"
)
ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_INITIALIZED = (
    SCHEDULING_DOMAIN_PREFIX + "/load-estimated-seconds-after-initialized"
)
ANNOTATION_EVICTION_COST = SCHEDULING_DOMAIN_PREFIX + "/eviction-cost"
ANNOTATION_SOFT_EVICTION = SCHEDULING_DOMAIN_PREFIX + "/soft-eviction"
LABEL_PREEMPTION_POLICY = SCHEDULING_DOMAIN_PREFIX + "/preemption-policy"
LABEL_DISABLE_PREEMPTIBLE = SCHEDULING_DOMAIN_PREFIX + "/disable-preemptible"
LABEL_SCHEDULER_NAME = SCHEDULING_DOMAIN_PREFIX + "/scheduler-name"
ANNOTATION_SCHEDULING_HINT = INTERNAL_SCHEDULING_DOMAIN_PREFIX + "/scheduling-hint"

#: Aggregations a NodeMetric reports and LoadAware can use.
AGGREGATION_TYPES = ("avg", "p50", "p90", "p95", "p99")


@dataclass
class CustomAggregatedUsage(Model):
    usage_thresholds: dict[str, int] = field("usageThresholds", factory=dict)
    usage_aggregation_type: str = field("usageAggregationType", default="", enum=AGGREGATION_TYPES)
    usage_aggregated_duration: str | None = field("usageAggregatedDuration", pattern=DURATION_PATTERN)


@dataclass
class CustomUsageThresholds(Model):
    """``usage-thresholds``: per-node LoadAware thresholds (percent per resource)."""

    usage_thresholds: dict[str, int] = field("usageThresholds", factory=dict)
    prod_usage_thresholds: dict[str, int] = field("prodUsageThresholds", factory=dict)
    aggregated_usage: CustomAggregatedUsage | None = field("aggregatedUsage")


def get_custom_usage_thresholds(annotations: Mapping[str, Any] | None) -> CustomUsageThresholds | None:
    return get_model(annotations, ANNOTATION_CUSTOM_USAGE_THRESHOLDS, CustomUsageThresholds)


def get_estimated_scaling_factors(annotations: Mapping[str, Any] | None) -> dict[str, int]:
    """Per-resource estimation factors (percent) a pod asks for; empty when absent."""
    data = decode_json(annotations, ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS)
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in data.values()
    ):
        raise AnnotationError(ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS, "expected a JSON object of integers")
    return {str(k): int(v) for k, v in data.items()}


def get_int_annotation(annotations: Mapping[str, str] | None, key: str, bits: int = 64) -> int | None:
    """An integer-valued annotation (``None`` when absent; :class:`AnnotationError` when malformed)."""
    raw = (annotations or {}).get(key)
    if raw is None:
        return None
    try:
        return parse_int(raw, 10, bits)
    except GoParseError as exc:
        raise AnnotationError(key, str(exc)) from None


def get_eviction_cost(annotations: Mapping[str, str] | None) -> int:
    """``eviction-cost`` (int32, 0 when absent)."""
    return get_int_annotation(annotations, ANNOTATION_EVICTION_COST, 32) or 0
