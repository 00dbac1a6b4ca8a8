"""What the control plane keeps of a NodeMetric (``slo.koordinator.sh/v1alpha1``): the koordlet's
last usage report for a node, as LoadAwareScheduling and LowNodeLoad read it.

Usages are integers per resource (CPU in milli-cores, everything else in units); the
aggregated percentiles are keyed by (window in seconds, aggregation type). A pod's entry
keeps its usage and the priority class the koordlet reported for it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordinator.api import resourcelist
from koordinator.api.goparse import GoParseError, parse_duration_seconds
from koordinator.kube.timeutil import parse_time

log = logging.getLogger(__name__)

#: koordlet's report period when the NodeMetric's collect policy does not say
DEFAULT_REPORT_INTERVAL_S = 60.0

Usage = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class PodUsage:
    usage: Usage
    #: the priority class the koordlet reported (``koord-prod`` ...; "" when none)
    priority: str = ""


@dataclass(frozen=True, slots=True)
class NodeMetricRecord:
    node: str
    #: ``status.updateTime`` in seconds since the epoch (None: never reported)
    update_time: float | None
    report_interval_s: float = DEFAULT_REPORT_INTERVAL_S
    #: ``status.nodeMetric.nodeUsage`` (None: the report carries no ``nodeMetric`` at all)
    node_usage: Usage | None = None
    system_usage: Usage = field(default_factory=dict)
    #: (window seconds, aggregation type) -> the node's usage at that percentile
    aggregated: Mapping[tuple[float, str], Usage] = field(default_factory=dict)
    #: ``namespace/name`` -> the pod's reported usage
    pods: Mapping[str, PodUsage] = field(default_factory=dict)


def _usage(resource_map: Any) -> dict[str, int]:
    if not isinstance(resource_map, Mapping):
        return {}
    parsed = resourcelist.parse(resource_map.get("resources"))
    return {name: (q.milli_value() if name == "cpu" else q.value()) for name, q in parsed.items()}


def _seconds(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_duration_seconds(text)
    except GoParseError:
        return None


def node_metric_record(obj: Mapping[str, Any]) -> NodeMetricRecord:
    """The compact record of a NodeMetric object; ValueError for quantities or times that
    do not parse."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    policy = spec.get("metricCollectPolicy") or {}
    interval = policy.get("reportIntervalSeconds")
    raw_time = status.get("updateTime")
    info = status.get("nodeMetric")
    aggregated: dict[tuple[float, str], Usage] = {}
    node_usage: Usage | None = None
    system_usage: Usage = {}
    if isinstance(info, Mapping):
        node_usage = _usage(info.get("nodeUsage"))
        system_usage = _usage(info.get("systemUsage"))
        for entry in info.get("aggregatedNodeUsages") or ():
            window = _seconds(entry.get("duration")) if isinstance(entry, Mapping) else None
            if window is None:
                continue
            for kind, resource_map in (entry.get("usage") or {}).items():
                aggregated[(window, str(kind))] = _usage(resource_map)
    pods: dict[str, PodUsage] = {}
    for entry in status.get("podsMetric") or ():
        if not isinstance(entry, Mapping):
            continue
        key = f"{entry.get('namespace') or ''}/{entry.get('name') or ''}"
        pods[key] = PodUsage(_usage(entry.get("podUsage")), str(entry.get("priority") or ""))
    return NodeMetricRecord(
        node=str(meta.get("name") or ""),
        update_time=parse_time(raw_time) if isinstance(raw_time, str) and raw_time else None,
        report_interval_s=float(interval)
        if isinstance(interval, int) and interval > 0
        else DEFAULT_REPORT_INTERVAL_S,
        node_usage=node_usage,
        system_usage=system_usage,
        aggregated=aggregated,
        pods=pods,
    )


def node_metric_record_or_none(obj: Mapping[str, Any]) -> NodeMetricRecord | None:
    """:func:`node_metric_record`, or None (with a warning) for a NodeMetric whose quantities
    or times do not parse: an informer transform."""
    try:
        return node_metric_record(obj)
    except ValueError as err:
        log.warning("NodeMetric %s ignored: %s", (obj.get("metadata") or {}).get("name"), err)
        return None
