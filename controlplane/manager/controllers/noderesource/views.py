"""The inputs of the batch and mid calculation, read once from Node, NodeMetric and Pod dicts
(and the node's device amounts, for the device plug-ins).

The controller's informers store these compact records instead of decoded objects (a
recompute of every node then touches only integers), and ``koord-manager explain-node``
builds the same records from YAML files, so both run the calculation on identical inputs.
Nothing here performs I/O.

Quantities are exact integers of nano-units (``Quantity.nanos``): CPU in nano-cores,
memory in nano-bytes. Sums and differences stay exact, as Go's ``resource.Quantity``
arithmetic does; values are rounded only where upstream rounds (``MilliValue``/``Value``,
both rounding up away from zero).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from controlplane.manager.controllers.noderesource.devices import DEVICE_RESOURCE_NAMES
from koordinator.api import resourcelist
from koordinator.api.extension.annotations import AnnotationError, get_resource_list
from koordinator.api.extension.node import (
    ANNOTATION_CPU_NORMALIZATION_RATIO,
    ANNOTATION_NODE_COLOCATION_STRATEGY,
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
    ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE,
    get_cpu_normalization_ratio,
    get_third_party_allocations,
    node_reserved_resources,
)
from koordinator.api.extension.numa import ANNOTATION_RESOURCE_STATUS, get_resource_status
from koordinator.api.extension.priority import PriorityClass, get_pod_priority_class_with_default
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_with_default
from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY
from koordinator.api.model import ModelError
from koordinator.api.quantity import Quantity, QuantityError, ceil_div_away
from koordinator.kube.timeutil import parse_time

__all__ = [
    "EXTENDED_RESOURCES",
    "NANO",
    "CPUMemory",
    "HostAppUsage",
    "NodeMetricView",
    "NodeView",
    "PodUsage",
    "PodView",
    "milli_value",
    "node_metric_view",
    "node_view",
    "pod_view",
    "quantity_nanos",
    "scale_milli",
    "scale_value",
    "value_of",
]

NANO = 10**9
_NANO_PER_MILLI = 10**6
#: The node status resources this calculation owns, in the order they are reported.
EXTENDED_RESOURCES = (BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY)
_ACTIVE_PHASES = frozenset({"Running", "Pending"})


def milli_value(nanos: int) -> int:
    """``MilliValue()`` of a quantity held in nano-units."""
    return ceil_div_away(nanos, _NANO_PER_MILLI)


def value_of(nanos: int) -> int:
    """``Value()`` of a quantity held in nano-units."""
    return ceil_div_away(nanos, NANO)


def scale_milli(nanos: int, factor: float) -> int:
    """``MultiplyMilliQuant``: ``int64(float64(MilliValue) * factor)`` milli-units, back in nano-units.

    The float multiplication and the truncation toward zero are upstream's, so a result
    can be one milli-unit below the exact product, exactly as upstream computes it.
    """
    return int(float(milli_value(nanos)) * factor) * _NANO_PER_MILLI


def scale_value(nanos: int, factor: float) -> int:
    """``MultiplyQuant``: ``int64(float64(Value) * factor)`` whole units, back in nano-units."""
    return int(float(value_of(nanos)) * factor) * NANO


def _nanos(quantity: Quantity | None) -> int:
    return quantity.nanos if quantity is not None else 0


# Quantities as the koordlet and the kubelet write them ("1250m", "2", "600Mi", "8263450624")
# are read without building Quantity objects; anything else goes through the full parser.
# A NodeMetric carries dozens of them and arrives for every node every minute.
_PLAIN = re.compile(r"([0-9]{1,18})(m|k|M|G|Ki|Mi|Gi|Ti)?")
_PLAIN_FACTOR: dict[str | None, int] = {
    None: NANO,
    "m": 10**6,
    "k": 10**12,
    "M": 10**15,
    "G": 10**18,
    "Ki": NANO << 10,
    "Mi": NANO << 20,
    "Gi": NANO << 30,
    "Ti": NANO << 40,
}
_MAX_NANOS = ((1 << 63) - 1) * NANO
_PARSED: dict[str, int] = {}
_PARSED_LIMIT = 1 << 16


def quantity_nanos(raw: Any) -> int:
    """The nano-units of a JSON quantity value (``Quantity.from_json(raw).nanos``, memoised)."""
    if type(raw) is not str:
        return Quantity.from_json(raw).nanos
    found = _PARSED.get(raw)
    if found is not None:
        return found
    match = _PLAIN.fullmatch(raw)
    value = int(match.group(1)) * _PLAIN_FACTOR[match.group(2)] if match is not None else -1
    if match is None or value > _MAX_NANOS:
        value = Quantity.from_json(raw).nanos
    if len(_PARSED) >= _PARSED_LIMIT:
        _PARSED.clear()
    _PARSED[raw] = value
    return value


@dataclass(frozen=True, slots=True)
class CPUMemory:
    """A CPU and a memory amount in nano-units; an absent resource is zero (``quotav1`` semantics)."""

    cpu: int = 0
    memory: int = 0

    @classmethod
    def of(cls, resources: Mapping[str, Quantity] | None) -> CPUMemory:
        if not resources:
            return ZERO
        return cls(_nanos(resources.get("cpu")), _nanos(resources.get("memory")))

    @classmethod
    def parse(cls, data: Mapping[str, Any] | None) -> CPUMemory:
        """From the JSON form (``{"cpu": "2", "memory": "4Gi", ...}``; other names are ignored).

        Raises :class:`QuantityError` for a value that is not a quantity.
        """
        if not data:
            return ZERO
        cpu, memory = data.get("cpu"), data.get("memory")
        return cls(
            quantity_nanos(cpu) if cpu is not None else 0,
            quantity_nanos(memory) if memory is not None else 0,
        )

    def __add__(self, other: CPUMemory) -> CPUMemory:
        return CPUMemory(self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: CPUMemory) -> CPUMemory:
        return CPUMemory(self.cpu - other.cpu, self.memory - other.memory)

    def max(self, other: CPUMemory) -> CPUMemory:
        return CPUMemory(max(self.cpu, other.cpu), max(self.memory, other.memory))

    def min(self, other: CPUMemory) -> CPUMemory:
        return CPUMemory(min(self.cpu, other.cpu), min(self.memory, other.memory))

    def floor(self) -> CPUMemory:
        """Negative amounts become zero."""
        return CPUMemory(max(self.cpu, 0), max(self.memory, 0))

    @property
    def milli_cpu(self) -> int:
        return milli_value(self.cpu)

    @property
    def memory_bytes(self) -> int:
        return value_of(self.memory)


ZERO = CPUMemory()


# ---- pods -----------------------------------------------------------------------------------------


class PodView(NamedTuple):
    """What the calculation needs of one pod (a tuple: 150000 of them are held in memory)."""

    key: str
    node: str
    active: bool
    priority: PriorityClass
    qos: QoSClass
    cpu_request: int
    memory_request: int
    #: the NUMA nodes of the pod's ``resource-status`` allocation (empty: not bound, or unreadable)
    numa_nodes: tuple[int, ...] = ()


def _numa_nodes(annotations: Mapping[str, Any] | None) -> tuple[int, ...]:
    """The NUMA node ids the scheduler allocated to the pod; empty when none or unreadable
    (upstream then spreads the pod evenly over the zones, as one not bound to any)."""
    if not annotations or ANNOTATION_RESOURCE_STATUS not in annotations:
        return ()
    try:
        status = get_resource_status(annotations)
    except (AnnotationError, ModelError):
        return ()
    return tuple(sorted({int(numa.node) for numa in status.numa_node_resources}))


def pod_view(pod: Mapping[str, Any]) -> PodView:
    """The record of a pod dict. Requests that do not parse count as zero (the apiserver
    validated them, so this only happens with hand-written files)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    try:
        requests = resourcelist.pod_requests(pod)
        cpu, memory = _nanos(requests.get("cpu")), _nanos(requests.get("memory"))
    except (resourcelist.ResourceListError, QuantityError):
        cpu = memory = 0
    return PodView(
        key=f"{meta.get('namespace') or ''}/{meta.get('name') or ''}",
        node=str(spec.get("nodeName") or ""),
        active=status.get("phase") in _ACTIVE_PHASES,
        priority=get_pod_priority_class_with_default(pod),
        qos=get_pod_qos_class_with_default(pod),
        cpu_request=cpu,
        memory_request=memory,
        numa_nodes=_numa_nodes(meta.get("annotations")),
    )


# ---- NodeMetric -------------------------------------------------------------------------------------


class PodUsage(NamedTuple):
    cpu: int
    memory: int
    #: the priority class the koordlet reported for the pod ("" when none)
    priority: str


class HostAppUsage(NamedTuple):
    name: str
    priority: str
    cpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class NodeMetricView:
    """The status of a NodeMetric, as far as the calculation reads it.

    ``node_usage`` is ``None`` unless both cpu and memory were reported; ``prod_reclaimable``
    is ``None`` when the koordlet reported no prod-reclaimable metric. ``problems`` lists
    parts of the status that could not be read (and were left out).
    """

    name: str
    update_time: float | None = None
    node_usage: CPUMemory | None = None
    system_usage: CPUMemory = ZERO
    pods: Mapping[str, PodUsage] = field(default_factory=dict)
    host_apps: tuple[HostAppUsage, ...] = ()
    prod_reclaimable: CPUMemory | None = None
    problems: tuple[str, ...] = ()


def _parse_cpu_memory(data: Mapping[str, Any] | None, where: str, problems: list[str]) -> CPUMemory:
    """:meth:`CPUMemory.parse`, or zero with the failure named in ``problems``."""
    try:
        return CPUMemory.parse(data)
    except (resourcelist.ResourceListError, QuantityError) as exc:
        problems.append(f"{where}: {exc}")
        return ZERO


def _usage_map(container: Any, key: str = "resources") -> Mapping[str, Any] | None:
    """The ``{"resources": {...}}`` map of a ``ResourceMap`` (``None`` when absent)."""
    if not isinstance(container, Mapping):
        return None
    resources = container.get(key)
    return resources if isinstance(resources, Mapping) else None


def node_metric_view(metric: Mapping[str, Any]) -> NodeMetricView:
    """The record of a NodeMetric dict; unreadable parts are left out and named in ``problems``."""
    name = str((metric.get("metadata") or {}).get("name") or "")
    status = metric.get("status")
    if not isinstance(status, Mapping):
        return NodeMetricView(name=name)
    problems: list[str] = []
    parse = partial(_parse_cpu_memory, problems=problems)
    update_time: float | None = None
    raw_time = status.get("updateTime")
    if isinstance(raw_time, str) and raw_time:
        try:
            update_time = parse_time(raw_time)
        except ValueError as exc:
            problems.append(f"status.updateTime: {exc}")
    node_metric = status.get("nodeMetric")
    node_usage: CPUMemory | None = None
    system_usage = ZERO
    if isinstance(node_metric, Mapping):
        usage = _usage_map(node_metric.get("nodeUsage"))
        if usage is not None and "cpu" in usage and "memory" in usage:
            node_usage = parse(usage, "status.nodeMetric.nodeUsage")
        system_usage = parse(_usage_map(node_metric.get("systemUsage")), "status.nodeMetric.systemUsage")
    pods: dict[str, PodUsage] = {}
    # the hot loop of every NodeMetric update: no intermediate objects per pod
    nanos = quantity_nanos
    for info in status.get("podsMetric") or ():
        if type(info) is not dict:
            continue
        get = info.get
        key = f"{get('namespace') or ''}/{get('name') or ''}"
        usage = get("podUsage")
        resources = usage.get("resources") if type(usage) is dict else None
        cpu = memory = 0
        if type(resources) is dict:
            raw_cpu, raw_memory = resources.get("cpu"), resources.get("memory")
            try:
                cpu = nanos(raw_cpu) if raw_cpu is not None else 0
                memory = nanos(raw_memory) if raw_memory is not None else 0
            except QuantityError as exc:
                problems.append(f"status.podsMetric[{key}]: {exc}")
                cpu = memory = 0
            if cpu < 0 or memory < 0:  # a usage cannot be negative: it would add batch resources
                problems.append(f"status.podsMetric[{key}]: negative usage counted as 0")
                cpu, memory = max(cpu, 0), max(memory, 0)
        pods[key] = PodUsage(cpu, memory, get("priority") or "")
    host_apps: list[HostAppUsage] = []
    for info in status.get("hostApplicationMetric") or ():
        if not isinstance(info, Mapping):
            continue
        app = str(info.get("name") or "")
        usage_cm = parse(_usage_map(info.get("usage")), f"status.hostApplicationMetric[{app}]")
        host_apps.append(HostAppUsage(app, str(info.get("priority") or ""), usage_cm.cpu, usage_cm.memory))
    prod_reclaimable: CPUMemory | None = None
    reclaimable = _usage_map(status.get("prodReclaimableMetric"), "resource")
    if reclaimable is not None:
        resources = _usage_map(reclaimable)
        if resources is not None:
            prod_reclaimable = parse(resources, "status.prodReclaimableMetric")
    return NodeMetricView(
        name=name,
        update_time=update_time,
        node_usage=node_usage,
        system_usage=system_usage,
        pods=pods,
        host_apps=tuple(host_apps),
        prod_reclaimable=prod_reclaimable,
        problems=tuple(problems),
    )


# ---- Node -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the calculation and the update decision read from a Node.

    ``allocatable_ext``/``capacity_ext`` hold the node's current batch and mid resources
    (only those present), ``device_allocatable``/``device_capacity`` the amounts of the
    device plug-ins' resources (``Value()``: gpu-memory in bytes). ``labels`` and
    ``strategy_annotation`` feed the per-node colocation strategy
    (:class:`~.calculator.StrategyResolver`); the device plug-ins compare the GPU labels.
    ``third_party_batch`` sums the ``thirdPartyAllocations`` of batch priority (``None``
    when the node has none). ``normalization_annotation``/``amplification_annotation`` are
    the raw ``cpu-normalization-ratio`` and ``resource-amplification-ratio`` values, and
    ``cpu_normalization_ratio`` the first one read (``None`` when absent or unreadable).
    ``kubelet_allocatable`` is what the kubelet reports as allocatable: ``status.allocatable``
    with the ``raw-allocatable`` annotation's cpu and memory over it, since the node webhook
    replaces ``status.allocatable`` by the amplified amounts.
    """

    name: str
    resource_version: str = ""
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    strategy_annotation: str | None = None
    capacity: CPUMemory = ZERO
    allocatable: CPUMemory = ZERO
    kubelet_allocatable: CPUMemory = ZERO
    annotation_reserved: CPUMemory = ZERO
    third_party_batch: CPUMemory | None = None
    origin_annotation: str | None = None
    allocatable_ext: Mapping[str, Quantity] = field(default_factory=dict)
    capacity_ext: Mapping[str, Quantity] = field(default_factory=dict)
    device_allocatable: Mapping[str, int] = field(default_factory=dict)
    device_capacity: Mapping[str, int] = field(default_factory=dict)
    normalization_annotation: str | None = None
    amplification_annotation: str | None = None
    cpu_normalization_ratio: float | None = None
    problems: tuple[str, ...] = ()

    @property
    def kubelet_reserved(self) -> CPUMemory:
        """``max(capacity - kubelet allocatable, 0)``: what the kubelet keeps for itself.

        Upstream subtracts ``status.allocatable``, which on an amplified node (the node
        webhook writes ``raw x ratio`` there, above capacity) makes the reservation vanish
        and batch and mid resources grow by it; the kubelet's own figure is kept in the
        ``raw-allocatable`` annotation, and that is what is subtracted here."""
        return (self.capacity - self.kubelet_allocatable).floor()

    def identity(self) -> tuple[object, ...]:
        """Everything but the resourceVersion: two views with equal identities need no recompute."""
        return (
            self.labels,
            self.strategy_annotation,
            self.capacity,
            self.allocatable,
            self.kubelet_allocatable,
            self.annotation_reserved,
            self.third_party_batch,
            self.origin_annotation,
            self.allocatable_ext,
            self.capacity_ext,
            self.device_allocatable,
            self.device_capacity,
            self.normalization_annotation,
            self.amplification_annotation,
        )


def _extended(resources: Mapping[str, Any] | None, problems: list[str], where: str) -> dict[str, Quantity]:
    out: dict[str, Quantity] = {}
    for name in EXTENDED_RESOURCES:
        raw = (resources or {}).get(name)
        if raw is None:
            continue
        try:
            out[name] = Quantity.from_json(raw)
        except QuantityError as exc:
            problems.append(f"{where}[{name}]: {exc}")
    return out


def _device_amounts(resources: Mapping[str, Any] | None, problems: list[str], where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    if not resources:
        return out
    for name in DEVICE_RESOURCE_NAMES:
        raw = resources.get(name)
        if raw is None:
            continue
        try:
            out[name] = Quantity.from_json(raw).value()
        except QuantityError as exc:
            problems.append(f"{where}[{name}]: {exc}")
    return out


def node_view(node: Mapping[str, Any]) -> NodeView:
    """The record of a Node dict; unreadable parts are left out and named in ``problems``."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    annotations = meta.get("annotations") or {}
    problems: list[str] = []
    parse = partial(_parse_cpu_memory, problems=problems)
    try:
        reserved = CPUMemory.of(node_reserved_resources(annotations))
    except (AnnotationError, ModelError, QuantityError) as exc:
        problems.append(f"ignoring node annotation: {exc}")
        reserved = ZERO
    third_party: CPUMemory | None = None
    try:
        allocations = get_third_party_allocations(annotations)
    except (AnnotationError, ModelError) as exc:
        problems.append(f"ignoring node annotation: {exc}")
        allocations = None
    if allocations is not None:
        batch = [a for a in allocations.allocations if a.priority == PriorityClass.BATCH.value]
        if batch:
            third_party = _sum_batch(a.resources for a in batch)
    capacity = status.get("capacity")
    allocatable = status.get("allocatable")
    node_allocatable = parse(allocatable, "status.allocatable")
    try:
        raw = get_resource_list(annotations, ANNOTATION_NODE_RAW_ALLOCATABLE) or {}
    except AnnotationError as exc:
        problems.append(f"ignoring node annotation: {exc}")
        raw = {}
    kubelet_allocatable = CPUMemory(
        raw["cpu"].nanos if "cpu" in raw else node_allocatable.cpu,
        raw["memory"].nanos if "memory" in raw else node_allocatable.memory,
    )
    try:
        normalization = get_cpu_normalization_ratio(annotations)
    except AnnotationError as exc:
        problems.append(f"ignoring node annotation: {exc}")
        normalization = None
    return NodeView(
        name=str(meta.get("name") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        uid=str(meta.get("uid") or ""),
        labels=dict(meta.get("labels") or {}),
        strategy_annotation=annotations.get(ANNOTATION_NODE_COLOCATION_STRATEGY),
        capacity=parse(capacity, "status.capacity"),
        allocatable=node_allocatable,
        kubelet_allocatable=kubelet_allocatable,
        annotation_reserved=reserved,
        third_party_batch=third_party,
        origin_annotation=annotations.get(ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE),
        allocatable_ext=_extended(allocatable, problems, "status.allocatable"),
        capacity_ext=_extended(capacity, problems, "status.capacity"),
        device_allocatable=_device_amounts(allocatable, problems, "status.allocatable"),
        device_capacity=_device_amounts(capacity, problems, "status.capacity"),
        normalization_annotation=annotations.get(ANNOTATION_CPU_NORMALIZATION_RATIO),
        amplification_annotation=annotations.get(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO),
        cpu_normalization_ratio=normalization,
        problems=tuple(problems),
    )


def _sum_batch(lists: Iterable[Mapping[str, Quantity]]) -> CPUMemory:
    """Third-party allocations are written in batch resource names: batch-cpu in milli-cores."""
    cpu = memory = 0
    for resources in lists:
        cpu += _nanos(resources.get(BATCH_CPU)) // 1000  # milli-core units -> nano-cores
        memory += _nanos(resources.get(BATCH_MEMORY))
    return CPUMemory(cpu, memory)
