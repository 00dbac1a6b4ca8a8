"""NUMA-level batch resources: batch-cpu and batch-memory of every zone of a NodeResourceTopology.

The koordlet reports one zone per NUMA node (``node-0``, ``node-1`` ...) with its ``cpu``
and ``memory``. BatchResource computes the node formula of :mod:`.batch` once per zone and
writes ``kubernetes.io/batch-cpu`` (milli-cores) and ``kubernetes.io/batch-memory``
(bytes) into the zone's ``resources`` (``capacity``, ``allocatable`` and ``available``
alike), leaving every other entry as it is. Upstream's approximations, kept:

* the zone's *allocatable* cpu and memory are its capacity; its safety margin is taken from
  them with the reclaim thresholds;
* the system usage (with the host applications above batch priority) and the node's
  reservation (``max(kubelet reserved, reservation annotation)``) are split evenly over
  the zones, every share rounded up to a milli-unit;
* a pod's request and usage go to the NUMA nodes of its ``resource-status`` allocation
  (split evenly between them; ids beyond the zones are ignored), or are split evenly over
  all zones when it has none; a pod without a metric uses its request -- also in
  ``sum(max(request, used))``, as at node level here;
* pod metrics of pods no longer listed ("dangling", not batch or free) are split evenly;
* zones are matched to NUMA nodes by their position in ``zones`` (the koordlet writes them
  in NUMA order).

Beyond upstream: ``batchCPUThresholdPercent``/``batchMemoryThresholdPercent`` cap each
zone at that share of the zone's allocatable, so the zones never offer more than the node.

The batch-cpu of a zone is scaled by the node's CPU normalization ratio when above 1, like
the node's. The NodeResourceTopology is written when a zone's value appears or moves by more
than ``resourceDiffThreshold`` (``|new - old| > old x threshold``), or when the last write
is older than ``updateTimeThresholdSeconds``; such a write carries every zone's exact value
(upstream's timed write only carries the values that moved beyond the threshold, so small
drifts never reach the object).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.manager.controllers.noderesource.batch import (
    BatchAllocatable,
    by_policy,
    host_apps_above,
    safety_margin,
)
from controlplane.manager.controllers.noderesource.views import (
    CPUMemory,
    NodeMetricView,
    NodeView,
    PodView,
    milli_value,
    quantity_nanos,
    scale_milli,
    scale_value,
)
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.priority import PriorityClass
from koordinator.api.extension.qos import QoSClass
from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY
from koordinator.api.extension.topology import CPUBasicInfo, get_cpu_basic_info
from koordinator.api.model import ModelError
from koordinator.api.quantity import Format, Quantity, QuantityError
from koordinator.api.sloconfig.types import ColocationStrategy

__all__ = [
    "NRTView",
    "ZoneView",
    "calculate_zone_batch",
    "nrt_view",
    "reset_quantities",
    "scaled_zone_cpu",
    "updated_zones",
    "zone_quantities",
]

_LOW_PRIORITY = frozenset({PriorityClass.BATCH, PriorityClass.FREE})
_LOW_PRIORITY_NAMES = frozenset({PriorityClass.BATCH.value, PriorityClass.FREE.value})
_NANO_PER_MILLI = 10**6
ZONE_RESOURCES = (BATCH_CPU, BATCH_MEMORY)

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ZoneView:
    """A zone's name and its cpu/memory allocatable (nano-units; absent is zero)."""

    name: str
    allocatable: CPUMemory
    #: the zone has a cpu or a memory entry
    has_cpu_memory: bool


@dataclass(frozen=True, slots=True)
class NRTView:
    """What the noderesource controller reads of a node's NodeResourceTopology.

    ``zones_json`` is the ``zones`` list as stored (read-only: a write builds a new one).
    ``basic_info_problem`` says why ``basic_info`` is ``None`` when the annotation is there
    but unreadable.
    """

    name: str
    resource_version: str = ""
    basic_info: CPUBasicInfo | None = None
    basic_info_problem: str = ""
    zones: tuple[ZoneView, ...] = ()
    zones_json: tuple[Obj, ...] = ()

    @property
    def has_cpu_memory(self) -> bool:
        """Upstream's ``isNRTResourcesCreated``: some zone reports cpu or memory."""
        return any(zone.has_cpu_memory for zone in self.zones)

    def basic_info_key(self) -> tuple[object, ...]:
        info = self.basic_info
        if info is None:
            return (None, self.basic_info_problem)
        return (info.cpu_model, info.hyper_thread_enabled, info.turbo_enabled)

    def cpu_memory_key(self) -> tuple[ZoneView, ...]:
        return self.zones


def _zone_view(zone: Mapping[str, Any]) -> ZoneView:
    cpu = memory = 0
    found = False
    for info in zone.get("resources") or ():
        if not isinstance(info, Mapping) or info.get("name") not in ("cpu", "memory"):
            continue
        found = True
        try:
            value = quantity_nanos(info.get("allocatable") or "0")
        except QuantityError:
            value = 0
        if info["name"] == "cpu":
            cpu = value
        else:
            memory = value
    return ZoneView(str(zone.get("name") or ""), CPUMemory(cpu, memory), found)


def nrt_view(nrt: Mapping[str, Any]) -> NRTView:
    """The record of a NodeResourceTopology dict."""
    meta = nrt.get("metadata") or {}
    problem = ""
    try:
        info = get_cpu_basic_info(meta.get("annotations"))
    except (AnnotationError, ModelError) as exc:
        info, problem = None, f"failed to parse CPUBasicInfo: {exc}"
    raw_zones = [zone for zone in nrt.get("zones") or () if isinstance(zone, dict)]
    return NRTView(
        name=str(meta.get("name") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        basic_info=info,
        basic_info_problem=problem,
        zones=tuple(_zone_view(zone) for zone in raw_zones),
        zones_json=tuple(raw_zones),
    )


# ---- the per-zone formula ---------------------------------------------------------------------


def _divide(nanos: int, divisor: int) -> int:
    """``DivideResourceList``: ``ceil(MilliValue / divisor)`` milli-units, in nano-units."""
    return math.ceil(float(milli_value(nanos)) / divisor) * _NANO_PER_MILLI


def _split(amounts: CPUMemory, divisor: int) -> CPUMemory:
    return CPUMemory(_divide(amounts.cpu, divisor), _divide(amounts.memory, divisor))


def _pod_shares(numa_nodes: Sequence[int], zone_count: int) -> tuple[list[int], int]:
    """The zones a pod's amounts go to, and between how many they are split."""
    bound = [node for node in numa_nodes if 0 <= node < zone_count]
    if not bound:
        return list(range(zone_count)), zone_count
    return bound, len(bound)


def calculate_zone_batch(
    strategy: ColocationStrategy,
    node: NodeView,
    metric: NodeMetricView,
    pods: Iterable[PodView],
    zones: Sequence[ZoneView],
) -> dict[str, BatchAllocatable]:
    """batch-cpu (milli-cores) and batch-memory (bytes) of each zone, by zone name."""
    count = len(zones)
    if count == 0:
        return {}
    zero = CPUMemory()
    requested = [zero] * count
    used = [zero] * count
    max_used = [zero] * count
    usages = metric.pods
    listed: set[str] = set()
    for pod in pods:
        if not pod.active:
            continue
        usage = usages.get(pod.key)
        request = CPUMemory(pod.cpu_request, pod.memory_request)
        if usage is not None:
            listed.add(pod.key)
        if pod.priority in _LOW_PRIORITY:
            continue
        targets, divisor = _pod_shares(pod.numa_nodes, count)
        zone_request = _split(request, divisor)
        if usage is None:
            zone_used = zone_max = zone_request
        else:
            zone_usage = _split(CPUMemory(usage.cpu, usage.memory), divisor)
            # an LSE pod's CPUs are its own: it counts its CPU request whatever it uses
            zone_used = (
                CPUMemory(zone_request.cpu, zone_usage.memory) if pod.qos is QoSClass.LSE else zone_usage
            )
            zone_max = zone_usage.max(zone_request)
        for index in targets:
            requested[index] = requested[index] + zone_request
            used[index] = used[index] + zone_used
            max_used[index] = max_used[index] + zone_max
    for key, usage in usages.items():
        if key in listed or usage.priority in _LOW_PRIORITY_NAMES:
            continue
        share = _split(CPUMemory(usage.cpu, usage.memory), count)
        for index in range(count):
            used[index] = used[index] + share
            max_used[index] = max_used[index] + share

    host_apps, _ = host_apps_above(metric, PriorityClass.BATCH)
    system_share = _split(metric.system_usage + host_apps, count)
    reserved_share = _split(node.kubelet_reserved.max(node.annotation_reserved), count)
    system_or_reserved = system_share.max(reserved_share)
    cpu_percent = strategy.batch_cpu_threshold_percent
    memory_percent = strategy.batch_memory_threshold_percent
    out: dict[str, BatchAllocatable] = {}
    for index, zone in enumerate(zones):
        capacity = zone.allocatable
        margin = safety_margin(strategy, capacity)
        by_usage = (capacity - margin - system_or_reserved - used[index]).floor()
        by_request = (capacity - margin - reserved_share - requested[index]).floor()
        by_max = (capacity - margin - system_or_reserved - max_used[index]).floor()
        cpu, memory = by_policy(strategy, by_usage, by_request, by_max)
        if cpu_percent is not None:
            cpu = min(cpu, scale_milli(capacity.cpu, cpu_percent / 100) // _NANO_PER_MILLI)
        if memory_percent is not None:
            memory = min(memory, scale_value(capacity.memory, memory_percent / 100) // 10**9)
        out[zone.name] = BatchAllocatable(cpu, memory)
    return out


def scaled_zone_cpu(milli: int, ratio: float | None) -> Quantity:
    """A zone's batch-cpu quantity: milli-cores as an integer, times the normalization ratio
    when above 1 (``MultiplyMilliQuant``: the product truncated to a milli-unit)."""
    if ratio is None or ratio <= 1:
        return Quantity.from_int(milli)
    return Quantity.from_milli(int(float(milli * 1000) * ratio))


# ---- the write ------------------------------------------------------------------------------------


def _diff(old: Any, new: Quantity, threshold: float) -> bool:
    """``IsQuantityDiff`` (an unreadable old value always differs)."""
    try:
        old_q = Quantity.from_json(old)
    except QuantityError:
        return True
    old_milli, new_milli = old_q.milli_value(), new.milli_value()
    return abs(float(new_milli - old_milli)) > float(old_milli) * threshold


def _same(old: Any, new: Quantity) -> bool:
    try:
        return Quantity.from_json(old) == new
    except QuantityError:
        return False


def updated_zones(
    zones_json: Sequence[Mapping[str, Any]],
    desired: Mapping[str, Mapping[str, Quantity]],
    *,
    threshold: float,
    force: bool,
    add: bool = True,
) -> list[Obj] | None:
    """The ``zones`` to write (``None``: no write needed).

    ``desired`` maps a zone name to its batch quantities. With ``force`` (the last write is
    older than ``updateTimeThresholdSeconds``) every entry that differs gets its exact
    value; otherwise an existing entry is rewritten only when it moved beyond ``threshold``.
    Zones already holding exactly these values need no write. Without ``add`` only entries
    that exist are rewritten (the reset to zero of :func:`reset_quantities`). Entries are
    added in name order, as upstream sorts a zone's resources when it adds one.
    """
    changed = False
    out: list[Obj] = []
    for zone in zones_json:
        wanted = desired.get(str(zone.get("name") or ""))
        if not wanted:
            out.append(dict(zone))
            continue
        resources = [dict(info) for info in zone.get("resources") or () if isinstance(info, Mapping)]
        added = False
        for name, quantity in wanted.items():
            text = str(quantity)
            entry = next((info for info in resources if info.get("name") == name), None)
            if entry is None:
                if not add:
                    continue
                resources.append({"name": name, "capacity": text, "allocatable": text, "available": text})
                changed = added = True
                continue
            for key in ("capacity", "allocatable", "available"):
                old = entry.get(key)
                if _diff(old, quantity, threshold) or (force and not _same(old, quantity)):
                    entry[key] = text
                    changed = True
        if added:
            resources.sort(key=lambda info: str(info.get("name") or ""))
        out.append({**zone, "resources": resources})
    return out if changed else None


def reset_quantities() -> dict[str, Quantity]:
    """A zone's batch entries when the node's batch resources are removed (colocation
    disabled, NodeMetric stale): zero, as upstream resets zones it has no value for.
    Upstream leaves the last values in every zone then; zero keeps the zones from offering
    what the node no longer has."""
    return {BATCH_CPU: Quantity.from_int(0), BATCH_MEMORY: Quantity.from_int(0, Format.BINARY_SI)}


def zone_quantities(batch: BatchAllocatable, ratio: float | None) -> dict[str, Quantity]:
    """The two zone entries of one zone's batch resources."""
    return {
        BATCH_CPU: scaled_zone_cpu(batch.cpu, ratio),
        BATCH_MEMORY: Quantity.from_int(batch.memory, Format.BINARY_SI),
    }
