"""Node labels and annotations (prefix ``node.koordinator.sh/``) and their JSON shapes.

Node reservation (``node.koordinator.sh/reservation``) tells every component what to keep
off-limits: resources and/or explicit CPUs. Other keys record ratios the slo-controller
writes (CPU normalization, resource amplification) and what it computed before third-party
subtraction or amplification.
"""

from __future__ import annotations

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.cpuset import CPUSetError, parse_cpuset
from koordinator.api.extension.annotations import AnnotationError, decode_json, get_model
from koordinator.api.extension.constants import NODE_DOMAIN_PREFIX
from koordinator.api.goparse import GoParseError, parse_float
from koordinator.api.jsonutil import marshal
from koordinator.api.model import Model, field
from koordinator.api.quantity import Format, Quantity
from koordinator.api.types.core import ResourceList

__all__ = [
    "ANNOTATION_CPU_NORMALIZATION_RATIO",
    "ANNOTATION_NETWORK_BANDWIDTH",
    "ANNOTATION_NODE_COLOCATION_STRATEGY",
    "ANNOTATION_NODE_RAW_ALLOCATABLE",
    "ANNOTATION_NODE_RESERVATION",
    "ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO",
    "ANNOTATION_NODE_THIRD_PARTY_ALLOCATIONS",
    "ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE",
    "LABEL_CPU_NORMALIZATION_ENABLED",
    "LABEL_CPU_RECLAIM_RATIO",
    "LABEL_ENABLE_NUMA_RESERVATION",
    "LABEL_MEMORY_RECLAIM_RATIO",
    "LABEL_MID_STATIC_CPU_RESERVED_RATIO",
    "LABEL_MID_STATIC_MEMORY_RESERVED_RATIO",
    "NODE_RESERVATION_APPLY_POLICIES",
    "NodeReservation",
    "OriginAllocatable",
    "ThirdPartyAllocation",
    "ThirdPartyAllocations",
    "format_ratio",
    "get_cpu_normalization_ratio",
    "get_node_reservation",
    "get_origin_extended_allocatable",
    "get_resource_amplification_ratios",
    "get_third_party_allocations",
    "node_reserved_resources",
    "set_resource_amplification_ratios",
]

_P = NODE_DOMAIN_PREFIX + "/"
ANNOTATION_NODE_RESERVATION = _P + "reservation"
ANNOTATION_NODE_COLOCATION_STRATEGY = _P + "colocation-strategy"
LABEL_CPU_RECLAIM_RATIO = _P + "cpu-reclaim-ratio"
LABEL_MEMORY_RECLAIM_RATIO = _P + "memory-reclaim-ratio"
LABEL_MID_STATIC_CPU_RESERVED_RATIO = _P + "mid-static-cpu-reserved-ratio"
LABEL_MID_STATIC_MEMORY_RESERVED_RATIO = _P + "mid-static-memory-reserved-ratio"
ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE = _P + "originExtendedAllocatable"
ANNOTATION_NODE_THIRD_PARTY_ALLOCATIONS = _P + "thirdPartyAllocations"
ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO = _P + "resource-amplification-ratio"
ANNOTATION_NODE_RAW_ALLOCATABLE = _P + "raw-allocatable"
ANNOTATION_CPU_NORMALIZATION_RATIO = _P + "cpu-normalization-ratio"
LABEL_CPU_NORMALIZATION_ENABLED = _P + "cpu-normalization-enabled"
ANNOTATION_NETWORK_BANDWIDTH = _P + "network-bandwidth"
LABEL_ENABLE_NUMA_RESERVATION = _P + "enable-numa-reservation"

NODE_RESERVATION_APPLY_POLICIES = ("Default", "ReservedCPUsOnly")


@dataclass
class NodeReservation(Model):
    """``node.koordinator.sh/reservation``: resources and CPUs kept away from pods."""

    resources: ResourceList = field("resources", factory=dict)
    reserved_cpus: str = field("reservedCPUs", default="")
    apply_policy: str = field("applyPolicy", default="")


@dataclass
class OriginAllocatable(Model):
    resources: ResourceList = field("resources", factory=dict)


@dataclass
class ThirdPartyAllocation(Model):
    name: str = field("name", default="", omitempty=False)
    priority: str = field("priority", default="", omitempty=False)
    resources: ResourceList = field("resources", factory=dict, omitempty=False)


@dataclass
class ThirdPartyAllocations(Model):
    allocations: list[ThirdPartyAllocation] = field("allocations", factory=list)


def get_node_reservation(annotations: Mapping[str, Any] | None) -> NodeReservation | None:
    return get_model(annotations, ANNOTATION_NODE_RESERVATION, NodeReservation)


def get_origin_extended_allocatable(annotations: Mapping[str, Any] | None) -> OriginAllocatable | None:
    return get_model(annotations, ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE, OriginAllocatable)


def get_third_party_allocations(annotations: Mapping[str, Any] | None) -> ThirdPartyAllocations | None:
    return get_model(annotations, ANNOTATION_NODE_THIRD_PARTY_ALLOCATIONS, ThirdPartyAllocations)


def node_reserved_resources(annotations: Mapping[str, Any] | None) -> ResourceList:
    """cpu and memory the node reservation keeps: explicit CPUs count over ``resources.cpu``."""
    reservation = get_node_reservation(annotations)
    if reservation is None:
        return {}
    result: ResourceList = {}
    try:
        cpus = parse_cpuset(reservation.reserved_cpus)
    except CPUSetError as exc:
        raise AnnotationError(ANNOTATION_NODE_RESERVATION, str(exc)) from None
    if cpus:
        result["cpu"] = Quantity.from_int(len(cpus), Format.DECIMAL_SI)
    elif "cpu" in reservation.resources:
        result["cpu"] = reservation.resources["cpu"]
    if "memory" in reservation.resources:
        result["memory"] = reservation.resources["memory"]
    return result


def format_ratio(ratio: float) -> str:
    """A ratio with two decimals, as the slo-controller writes ``cpu-normalization-ratio``."""
    return f"{ratio:.2f}"


def get_cpu_normalization_ratio(annotations: Mapping[str, str] | None) -> float | None:
    """``cpu-normalization-ratio`` (``None`` when absent); must be a positive number or -1 (disabled)."""
    raw = (annotations or {}).get(ANNOTATION_CPU_NORMALIZATION_RATIO)
    if raw is None:
        return None
    try:
        value = parse_float(raw)
    except GoParseError as exc:
        raise AnnotationError(ANNOTATION_CPU_NORMALIZATION_RATIO, str(exc)) from None
    if not math.isfinite(value) or (value <= 0 and value != -1):
        raise AnnotationError(ANNOTATION_CPU_NORMALIZATION_RATIO, f"{raw} is not a positive ratio")
    return value


def get_resource_amplification_ratios(annotations: Mapping[str, str] | None) -> dict[str, float]:
    """``resource-amplification-ratio``: resource -> ratio (empty when absent)."""
    data = decode_json(annotations, ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO)
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in data.values()
    ):
        raise AnnotationError(
            ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO, "expected a JSON object of numbers"
        )
    return {str(k): float(v) for k, v in data.items()}


def set_resource_amplification_ratios(annotations: dict[str, str], ratios: Mapping[str, float]) -> str:
    """Write ratios rounded to two decimals (keys sorted, as Go marshals maps)."""
    text = marshal({name: round(ratios[name], 2) for name in sorted(ratios)})
    annotations[ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO] = text
    return text
