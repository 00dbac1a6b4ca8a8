"""Per-node inputs of NodeNUMAResource (upstream ``topology_options.go`` and ``util.go``): what the
NodeResourceTopology (NRT) object and the Node's labels and annotations say.

:func:`new_topology_options` reads the NRT (a plain dict as the API returns it):

* the CPU topology (``node.koordinator.sh/cpu-topology``);
* the CPUs no pod may be bound to, upstream's ``ReservedCPUs``: kubelet-managed pod cpusets
  (``node.koordinator.sh/pod-cpu-allocs`` entries with ``managedByKubelet``, a uid and a
  cpuset), the kubelet's reserved CPUs (``kubelet.koordinator.sh/cpu-manager-policy``
  ``reservedCPUs``), the node reservation's ``reservedCPUs`` (``node.koordinator.sh/reservation``
  as the koordlet copies it onto the NRT) and the system-QoS cpuset when it is exclusive
  (``node.koordinator.sh/system-qos-resource``);
* the NUMA zones (``type: Node``, name ``node-<id>``) with their allocatable resources, sorted by
  id; with ``subtract_unavailable_cpus`` (the default, per the spec) each zone's cpu is reduced
  by 1000m per unavailable CPU of that NUMA node;
* the kubelet topology-manager policy from ``topologyPolicies`` (BestEffort, Restricted,
  SingleNUMANodePodLevel; anything else is none).

Annotations that do not parse are treated as absent, as upstream logs and goes on; the reason is
kept in :attr:`TopologyOptions.problems`. Given the Node's annotations, the NUMA zones are
amplified by ``node.koordinator.sh/resource-amplification-ratio`` (upstream
``amplifyNUMANodeResources``).

Node-level policies: :func:`node_cpu_bind_policy` (label ``node.koordinator.sh/cpu-bind-policy``
or a static kubelet with ``full-pcpus-only``), :func:`node_numa_topology_policy` (label
``node.koordinator.sh/numa-topology-policy``, else the kubelet's), :func:`merge_topology_policy`
(node vs pod) and :func:`numa_allocate_strategy` (label
``node.koordinator.sh/numa-allocate-strategy``, else the plug-in default).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from controlplane.scheduler.numa.status import (
    ERR_NOT_MATCH_NUMA_TOPOLOGY,
    UNSCHEDULABLE_AND_UNRESOLVABLE,
    RejectionError,
)
from controlplane.scheduler.numa.topology import NodeCPUTopology
from koordinator.api.cpuset import CPUSetError, parse_cpuset
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.node import get_node_reservation, get_resource_amplification_ratios
from koordinator.api.extension.numa import (
    LABEL_NODE_CPU_BIND_POLICY,
    LABEL_NODE_NUMA_ALLOCATE_STRATEGY,
    LABEL_NUMA_TOPOLOGY_POLICY,
    NUMANodeResource,
)
from koordinator.api.extension.topology import (
    KubeletCPUManagerPolicy,
    get_cpu_topology,
    get_kubelet_cpu_manager_policy,
    get_pod_cpu_allocs,
    get_system_qos_resource,
)
from koordinator.api.quantity import Format, Quantity, QuantityError
from koordinator.api.resourcelist import ResourceList

__all__ = [
    "NODE_CPU_BIND_POLICY_FULL_PCPUS_ONLY",
    "NODE_CPU_BIND_POLICY_NONE",
    "NODE_CPU_BIND_POLICY_SPREAD_BY_PCPUS",
    "NUMA_LEAST_ALLOCATED",
    "NUMA_MOST_ALLOCATED",
    "NodePolicies",
    "TopologyOptions",
    "amplify",
    "amplify_resource_list",
    "copy_options",
    "default_numa_allocate_strategy",
    "merge_topology_policy",
    "new_topology_options",
    "node_cpu_bind_policy",
    "node_numa_topology_policy",
    "node_policies",
    "numa_allocate_strategy",
    "with_amplification",
]

NODE_CPU_BIND_POLICY_NONE = "None"
NODE_CPU_BIND_POLICY_FULL_PCPUS_ONLY = "FullPCPUsOnly"
NODE_CPU_BIND_POLICY_SPREAD_BY_PCPUS = "SpreadByPCPUs"
NUMA_MOST_ALLOCATED = "MostAllocated"
NUMA_LEAST_ALLOCATED = "LeastAllocated"

_KUBELET_STATIC = "static"
_FULL_PCPUS_ONLY_OPTION = "full-pcpus-only"
#: NRT ``topologyPolicies`` value -> NUMA topology policy (others mean none)
_NRT_POLICIES = {
    "BestEffort": "BestEffort",
    "Restricted": "Restricted",
    "SingleNUMANodePodLevel": "SingleNUMANode",
}

T = TypeVar("T")


@dataclass
class TopologyOptions:
    """What NodeNUMAResource knows of one node (upstream ``TopologyOptions``).

    ``cpu_topology`` is ``None`` for a node without NRT; ``reserved_cpus`` are the CPUs no pod
    may be bound to; ``max_ref_count`` is how many pods may share a CPU (1 unless another
    plug-in raises it)."""

    cpu_topology: NodeCPUTopology | None = None
    reserved_cpus: frozenset[int] = frozenset()
    max_ref_count: int = 1
    kubelet_policy: KubeletCPUManagerPolicy | None = None
    numa_topology_policy: str = ""
    numa_node_resources: list[NUMANodeResource] = field(default_factory=list)
    amplification_ratios: dict[str, float] | None = None
    problems: tuple[str, ...] = ()

    def numa_nodes(self) -> list[int]:
        """The NUMA node ids of the reported zones, in zone order (sorted)."""
        return [zone.node for zone in self.numa_node_resources]

    def numa_resources_of(self, node: int) -> ResourceList:
        """The (first) zone entry of NUMA node ``node``; empty when not reported."""
        for zone in self.numa_node_resources:
            if zone.node == node:
                return zone.resources
        return {}

    def cpu_amplification_ratio(self) -> float:
        return (self.amplification_ratios or {}).get("cpu", 0.0)


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _read(problems: list[str], read: Callable[[], T]) -> T | None:
    try:
        return read()
    except (AnnotationError, CPUSetError, ValueError) as exc:
        problems.append(str(exc))
        return None


def _cpus(problems: list[str], what: str, text: str) -> frozenset[int]:
    try:
        return frozenset(parse_cpuset(text))
    except CPUSetError as exc:
        problems.append(f"{what}: {exc}")
        return frozenset()


def _kubelet_managed_cpus(annotations: Mapping[str, str], problems: list[str]) -> frozenset[int]:
    allocs = _read(problems, lambda: get_pod_cpu_allocs(annotations)) or []
    cpus: set[int] = set()
    for alloc in allocs:
        if not alloc.managed_by_kubelet or not alloc.uid or not alloc.cpuset:
            continue
        try:
            cpus.update(parse_cpuset(alloc.cpuset))
        except CPUSetError:
            continue
    return frozenset(cpus)


def _numa_zones(nrt: Mapping[str, Any], problems: list[str]) -> list[NUMANodeResource]:
    zones: list[NUMANodeResource] = []
    for zone in nrt.get("zones") or ():
        if not isinstance(zone, Mapping) or zone.get("type") != "Node":
            continue
        parts = str(zone.get("name", "")).split("node-")
        if len(parts) != 2:
            continue
        try:
            node_id = int(parts[1])
        except ValueError:
            problems.append(f"zone name {zone.get('name')!r} is not node-<id>")
            continue
        resources: ResourceList = {}
        for res in zone.get("resources") or ():
            try:
                resources[str(res.get("name", ""))] = Quantity.from_json(res.get("allocatable"))
            except QuantityError as exc:
                problems.append(f"zone {zone.get('name')}: {exc}")
        zones.append(NUMANodeResource(node=node_id, resources=resources))
    zones.sort(key=lambda zone: zone.node)
    return zones


def _nrt_policy(nrt: Mapping[str, Any]) -> str:
    for policy in nrt.get("topologyPolicies") or ():
        if policy in _NRT_POLICIES:
            return _NRT_POLICIES[policy]
    return ""


def _subtract_unavailable(
    zones: list[NUMANodeResource], topology: NodeCPUTopology, unavailable: frozenset[int]
) -> list[NUMANodeResource]:
    result: list[NUMANodeResource] = []
    for zone in zones:
        resources = dict(zone.resources)
        taken = len(unavailable & topology.cpus_in_nodes(zone.node))
        cpu = resources.get("cpu")
        if cpu is not None and taken:
            milli = max(cpu.milli_value() - taken * 1000, 0)
            resources["cpu"] = Quantity.from_milli(milli, cpu.format)
        result.append(NUMANodeResource(node=zone.node, resources=resources))
    return result


def new_topology_options(
    nrt: Mapping[str, Any],
    *,
    node_annotations: Mapping[str, str] | None = None,
    subtract_unavailable_cpus: bool = True,
) -> TopologyOptions:
    """The options of the node named by ``nrt`` (upstream ``NewTopologyOptions``)."""
    annotations = _annotations(nrt)
    problems: list[str] = []

    reported = _read(problems, lambda: get_cpu_topology(annotations))
    topology = NodeCPUTopology.from_annotation(reported)

    unavailable = set(_kubelet_managed_cpus(annotations, problems))
    kubelet_policy = _read(problems, lambda: get_kubelet_cpu_manager_policy(annotations))
    if kubelet_policy is not None:
        unavailable |= _cpus(problems, "kubelet reservedCPUs", kubelet_policy.reserved_cpus)
    reservation = _read(problems, lambda: get_node_reservation(annotations))
    if reservation is not None:
        unavailable |= _cpus(problems, "node reservation reservedCPUs", reservation.reserved_cpus)
    system_qos = _read(problems, lambda: get_system_qos_resource(annotations))
    if system_qos is not None and system_qos.is_cpuset_exclusive():
        unavailable |= _cpus(problems, "system-qos-resource cpuset", system_qos.cpuset)
    reserved = frozenset(unavailable)

    zones = _numa_zones(nrt, problems)
    if subtract_unavailable_cpus and reserved and topology.is_valid():
        zones = _subtract_unavailable(zones, topology, reserved)

    options = TopologyOptions(
        cpu_topology=topology,
        reserved_cpus=reserved,
        max_ref_count=1,
        kubelet_policy=kubelet_policy,
        numa_topology_policy=_nrt_policy(nrt),
        numa_node_resources=zones,
        problems=tuple(problems),
    )
    if node_annotations is not None:
        options = with_amplification(options, node_annotations)
    return options


# ---- amplification ---------------------------------------------------------------------------


def amplify(origin: int, ratio: float) -> int:
    """``extension.Amplify``: ``ceil(origin * ratio)`` when the ratio is above 1."""
    if ratio <= 1:
        return origin
    return math.ceil(float(origin) * float(ratio))


def amplify_resource_list(
    resources: Mapping[str, Quantity], ratios: Mapping[str, float], names: Iterable[str] | None = None
) -> ResourceList:
    """``extension.AmplifyResourceList`` on a copy: cpu in milli, memory and ephemeral storage
    as binary quantities, anything else as decimal whole units; zero values stay."""
    result = dict(resources)
    for name in list(names) if names is not None else list(result):
        ratio = ratios.get(name, 0.0)
        quantity = result.get(name, Quantity())
        if ratio <= 1 or quantity.is_zero():
            continue
        if name == "cpu":
            result[name] = Quantity.from_milli(amplify(quantity.milli_value(), ratio), Format.DECIMAL_SI)
        elif name in ("memory", "ephemeral-storage"):
            result[name] = Quantity.from_int(amplify(quantity.value(), ratio), Format.BINARY_SI)
        else:
            result[name] = Quantity.from_int(amplify(quantity.value(), ratio), Format.DECIMAL_SI)
    return result


def with_amplification(options: TopologyOptions, node_annotations: Mapping[str, str]) -> TopologyOptions:
    """A copy whose NUMA zones are amplified by the node's ratios (``amplifyNUMANodeResources``);
    options already carrying ratios are returned unchanged. A malformed ratio annotation raises
    :class:`~koordinator.api.extension.annotations.AnnotationError`."""
    if options.amplification_ratios is not None:
        return options
    ratios = get_resource_amplification_ratios(node_annotations)
    zones = [
        NUMANodeResource(node=zone.node, resources=amplify_resource_list(zone.resources, ratios))
        for zone in options.numa_node_resources
    ]
    return replace(options, amplification_ratios=dict(ratios), numa_node_resources=zones)


def copy_options(options: TopologyOptions) -> TopologyOptions:
    """A copy safe to modify (zones are copied)."""
    return replace(options, numa_node_resources=copy.deepcopy(options.numa_node_resources))


# ---- node-level policies ---------------------------------------------------------------------


def node_cpu_bind_policy(
    node_labels: Mapping[str, str] | None, kubelet_policy: KubeletCPUManagerPolicy | None
) -> str:
    """``GetNodeCPUBindPolicy``: FullPCPUsOnly (label, or a static kubelet with
    ``full-pcpus-only=true``), SpreadByPCPUs (label) or None."""
    label = (node_labels or {}).get(LABEL_NODE_CPU_BIND_POLICY, "")
    static_full_pcpus = (
        kubelet_policy is not None
        and kubelet_policy.policy == _KUBELET_STATIC
        and kubelet_policy.options.get(_FULL_PCPUS_ONLY_OPTION) == "true"
    )
    if label == NODE_CPU_BIND_POLICY_FULL_PCPUS_ONLY or static_full_pcpus:
        return NODE_CPU_BIND_POLICY_FULL_PCPUS_ONLY
    if label == NODE_CPU_BIND_POLICY_SPREAD_BY_PCPUS:
        return label
    return NODE_CPU_BIND_POLICY_NONE


def node_numa_topology_policy(node_labels: Mapping[str, str] | None, kubelet_policy: str) -> str:
    """``getNUMATopologyPolicy``: the node label when set, else the kubelet's (from the NRT)."""
    label = (node_labels or {}).get(LABEL_NUMA_TOPOLOGY_POLICY, "")
    return label if label else kubelet_policy


def merge_topology_policy(node_policy: str, pod_policy: str) -> str:
    """``mergeTopologyPolicy``: the pod's policy wins when the node has none or the same one;
    two different policies raise ``node(s) NUMA Topology policy not match``."""
    if node_policy and pod_policy and pod_policy != node_policy:
        raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_NOT_MATCH_NUMA_TOPOLOGY)
    return pod_policy or node_policy


def default_numa_allocate_strategy(numa_scoring_strategy: str | None) -> str:
    """``GetDefaultNUMAAllocateStrategy``: MostAllocated when the NUMA scoring strategy is
    MostAllocated, LeastAllocated otherwise."""
    return NUMA_MOST_ALLOCATED if numa_scoring_strategy == NUMA_MOST_ALLOCATED else NUMA_LEAST_ALLOCATED


def numa_allocate_strategy(node_labels: Mapping[str, str] | None, default: str) -> str:
    """``GetNUMAAllocateStrategy``: the node label's value when non-empty, else ``default``."""
    value = (node_labels or {}).get(LABEL_NODE_NUMA_ALLOCATE_STRATEGY, "")
    return value or default


@dataclass(frozen=True)
class NodePolicies:
    """A node's resolved policies: bind (None, FullPCPUsOnly, SpreadByPCPUs), NUMA topology
    (label, else kubelet's) and NUMA allocate strategy (label, else the plug-in default)."""

    cpu_bind_policy: str
    numa_topology_policy: str
    numa_allocate_strategy: str


def node_policies(
    node_labels: Mapping[str, str] | None,
    options: TopologyOptions,
    default_strategy: str = NUMA_LEAST_ALLOCATED,
) -> NodePolicies:
    """The three node-level policies from the Node's labels and the node's options."""
    return NodePolicies(
        cpu_bind_policy=node_cpu_bind_policy(node_labels, options.kubelet_policy),
        numa_topology_policy=node_numa_topology_policy(node_labels, options.numa_topology_policy),
        numa_allocate_strategy=numa_allocate_strategy(node_labels, default_strategy),
    )
