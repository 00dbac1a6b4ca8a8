"""Turning a pod's request into an allocation on one node (upstream ``resource_manager.go``
``Allocate``): the resources taken per NUMA node of the chosen hint, then the cpuset.

* Per-NUMA split (``tryBestToDistributeEvenly``): for every requested resource the hint's NUMA
  nodes are visited from the least available upwards, each given an even share of what is
  still requested (cpu in milli; whole CPUs when binding, whole physical cores for a required
  FullPCPUs policy; other resources in whole units) capped by what it has left; anything left
  over rejects with ``Insufficient NUMA <resource>``. The visiting order reproduces upstream's
  comparator, which compares the availability of NUMA nodes numbered by *position* in the
  hint (exact for hints over NUMA nodes 0 and 1, which is the common case).
* When the CPU bind policy is required, NUMA cpu is capped by the CPUs that policy can still
  use there (whole free cores for FullPCPUs, one CPU per core for SpreadByPCPUs).
* Cpuset: NUMA node by node, as many CPUs as that node's cpu share, then any rest from the
  whole node; a required policy must hold for the result
  (``insufficient CPUs to satisfy required cpu bind policy <policy>``).

Reservations are not modelled here: ``preferred_cpus``, ``preemptible_cpus``,
``reusable_resources`` and ``required_resources`` of :class:`ResourceOptions` carry whatever the
caller restores for the pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from controlplane.scheduler.numa.accumulator import (
    CPU_BIND_POLICY_FULL_PCPUS,
    CPU_BIND_POLICY_SPREAD_BY_PCPUS,
    AllocatedCPU,
    CPUAllocationError,
    take_preferred_cpus,
)
from controlplane.scheduler.numa.allocation import NodeAllocation, PodAllocation
from controlplane.scheduler.numa.hints import NUMATopologyHint
from controlplane.scheduler.numa.options import NUMA_LEAST_ALLOCATED, TopologyOptions
from controlplane.scheduler.numa.scoring import ResourceAllocationScorer
from controlplane.scheduler.numa.status import (
    ERR_INSUFFICIENT_RESOURCES_ON_NUMA,
    ERR_INVALID_CPU_TOPOLOGY,
    ERR_NOT_ENOUGH_CPUS,
    UNSCHEDULABLE,
    UNSCHEDULABLE_AND_UNRESOLVABLE,
    RejectionError,
    insufficient_numa,
    required_policy_unsatisfied,
)
from controlplane.scheduler.numa.topology import NodeCPUTopology
from koordinator.api.extension.numa import NUMANodeResource
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import ResourceList

__all__ = [
    "ResourceOptions",
    "allocate",
    "allocate_cpuset",
    "allocate_numa_resources",
    "available_cpus",
    "distribute_evenly",
    "filter_cpus_by_required_policy",
    "satisfies_required_policy",
    "split_quantity",
    "trim_numa_resources",
]


@dataclass(frozen=True)
class ResourceOptions:
    """How to allocate one pod on one node (upstream ``ResourceOptions``).

    ``requests`` are amplified when binding on a node with a cpu amplification ratio;
    ``original_requests`` are not (``None``: same as ``requests``). ``required_cpu_bind_policy``
    tells whether ``cpu_bind_policy`` must hold. ``hint`` is the NUMA affinity (``None``
    affinity: no NUMA allocation). ``numa_allocate_strategy`` is the node's (label or default)."""

    requests: ResourceList
    num_cpus_needed: int = 0
    request_cpu_bind: bool = False
    original_requests: ResourceList | None = None
    required_cpu_bind_policy: bool = False
    cpu_bind_policy: str = ""
    cpu_exclusive_policy: str = ""
    numa_allocate_strategy: str = NUMA_LEAST_ALLOCATED
    hint: NUMATopologyHint = field(default_factory=NUMATopologyHint)
    preferred_cpus: frozenset[int] = frozenset()
    preemptible_cpus: frozenset[int] = frozenset()
    reusable_resources: Mapping[int, ResourceList] = field(default_factory=dict)
    required_resources: Mapping[int, ResourceList] | None = None
    numa_scorer: ResourceAllocationScorer | None = None

    @property
    def unamplified_requests(self) -> ResourceList:
        return self.requests if self.original_requests is None else self.original_requests

    def with_hint(self, hint: NUMATopologyHint) -> ResourceOptions:
        return replace(self, hint=hint, required_resources=None)


# ---- CPUs --------------------------------------------------------------------------------


def available_cpus(
    options: TopologyOptions, node: NodeAllocation, *preferred: Iterable[int]
) -> tuple[frozenset[int], dict[int, AllocatedCPU]]:
    """The node's free CPUs and allocated-CPU view (``resourceManager.GetAvailableCPUs``): none
    without an NRT, ``node(s) invalid CPU Topology`` when the reported topology is invalid."""
    if options.cpu_topology is None:
        return frozenset(), {}
    if not options.cpu_topology.is_valid():
        raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_INVALID_CPU_TOPOLOGY)
    return node.available_cpus(options.cpu_topology, options.max_ref_count, options.reserved_cpus, *preferred)


def filter_cpus_by_required_policy(
    policy: str, cpus: Iterable[int], topology: NodeCPUTopology
) -> frozenset[int]:
    """The CPUs a required policy can use: whole free cores (FullPCPUs) or one CPU per core, the
    lowest id (SpreadByPCPUs); other policies keep all."""
    cpus = frozenset(cpus)
    by_core: dict[int, list[int]] = {}
    for cpu in cpus:
        if cpu in topology.details:
            by_core.setdefault(topology.details[cpu].core, []).append(cpu)
    if policy == CPU_BIND_POLICY_FULL_PCPUS:
        per_core = topology.cpus_per_core()
        return frozenset(cpu for members in by_core.values() if len(members) == per_core for cpu in members)
    if policy == CPU_BIND_POLICY_SPREAD_BY_PCPUS:
        return frozenset(min(members) for members in by_core.values())
    return cpus


def satisfies_required_policy(policy: str, cpus: Iterable[int], topology: NodeCPUTopology) -> bool:
    """FullPCPUs: the CPUs fill whole cores; SpreadByPCPUs: no two share a core."""
    cpus = frozenset(cpus)
    cores = topology.cores_of(cpus)
    if policy == CPU_BIND_POLICY_FULL_PCPUS:
        return len(cores) * topology.cpus_per_core() == len(cpus)
    if policy == CPU_BIND_POLICY_SPREAD_BY_PCPUS:
        return len(cores) == len(cpus)
    return True


def allocate_cpuset(
    options: TopologyOptions,
    node: NodeAllocation,
    ro: ResourceOptions,
    numa_allocations: Iterable[NUMANodeResource] = (),
) -> frozenset[int]:
    """The pod's cpuset (``allocateCPUSet``); raises :class:`RejectionError` (Unschedulable with
    the accumulator's message) when it cannot be found."""
    free, allocated = available_cpus(options, node, ro.preferred_cpus, ro.preemptible_cpus)
    topology = options.cpu_topology
    if topology is None:
        if ro.num_cpus_needed > 0:
            raise RejectionError(UNSCHEDULABLE, ERR_NOT_ENOUGH_CPUS)
        return frozenset()
    if ro.required_cpu_bind_policy:
        free = filter_cpus_by_required_policy(ro.cpu_bind_policy, free, topology)
    if len(free) < ro.num_cpus_needed:
        raise RejectionError(UNSCHEDULABLE, ERR_NOT_ENOUGH_CPUS)

    def take(cpus: frozenset[int], count: int) -> set[int]:
        try:
            chosen = take_preferred_cpus(
                topology,
                options.max_ref_count,
                cpus,
                ro.preferred_cpus,
                allocated,
                count,
                ro.cpu_bind_policy,
                ro.cpu_exclusive_policy,
                ro.numa_allocate_strategy,
            )
        except CPUAllocationError as exc:
            raise RejectionError(UNSCHEDULABLE, str(exc)) from None
        return set(chosen)

    result: set[int] = set()
    needed = ro.num_cpus_needed
    zones = list(numa_allocations)
    if zones:
        for zone in zones:
            in_node = free & topology.cpus_in_nodes(zone.node)
            share = zone.resources.get("cpu", Quantity()).milli_value() // 1000
            result |= take(in_node, min(len(in_node), share))
        needed -= len(result)
        if needed != 0:
            raise RejectionError(UNSCHEDULABLE, ERR_NOT_ENOUGH_CPUS)
    if needed > 0:
        result |= take(free - result, needed)
    if ro.required_cpu_bind_policy and not satisfies_required_policy(ro.cpu_bind_policy, result, topology):
        raise RejectionError(UNSCHEDULABLE, required_policy_unsatisfied(ro.cpu_bind_policy))
    return frozenset(result)


# ---- NUMA resources ------------------------------------------------------------------------


def trim_numa_resources(
    options: TopologyOptions, node: NodeAllocation, available: Mapping[int, ResourceList], ro: ResourceOptions
) -> dict[int, ResourceList]:
    """``trimNUMANodeResources``: with a required bind policy, a NUMA node's available cpu is at
    most 1000m per CPU that policy can use there."""
    result = {numa: dict(resources) for numa, resources in available.items()}
    if not ro.required_cpu_bind_policy:
        return result
    free, _ = available_cpus(options, node, ro.preferred_cpus, ro.preemptible_cpus)
    topology = options.cpu_topology
    if topology is None:
        return result
    for numa, resources in result.items():
        cpu = resources.get("cpu")
        if cpu is None or cpu.is_zero():
            continue
        usable = filter_cpus_by_required_policy(
            ro.cpu_bind_policy, free & topology.cpus_in_nodes(numa), topology
        )
        if len(usable) * 1000 < cpu.milli_value():
            resources["cpu"] = Quantity.from_milli(len(usable) * 1000, cpu.format)
    return result


def split_quantity(
    name: str, quantity: Quantity, parts: int, ro: ResourceOptions, cpus_per_core: int
) -> Quantity:
    """One NUMA node's even share of ``quantity`` over ``parts`` NUMA nodes (``splitQuantity``)."""
    if name != "cpu":
        return Quantity.from_int(quantity.value() // parts, quantity.format)
    if not ro.request_cpu_bind:
        return Quantity.from_milli(quantity.milli_value() // parts, quantity.format)
    if ro.required_cpu_bind_policy and ro.cpu_bind_policy == CPU_BIND_POLICY_FULL_PCPUS and cpus_per_core:
        cores = quantity.value() // cpus_per_core
        return Quantity.from_int(cores // parts * cpus_per_core, quantity.format)
    return Quantity.from_int(quantity.value() // parts, quantity.format)


def _go_positional_insertion_order(
    nodes: list[int], available: Mapping[int, ResourceList], name: str
) -> list[int]:
    """Upstream sorts the hint's nodes with ``less(i, j) = avail[i] < avail[j]`` where ``i, j`` are
    slice positions read as NUMA ids; Go runs insertion sort on such short slices."""

    def avail(position: int) -> Quantity:
        return available.get(position, {}).get(name, Quantity())

    order = list(nodes)
    for i in range(1, len(order)):
        j = i
        while j > 0 and avail(j) < avail(j - 1):
            order[j], order[j - 1] = order[j - 1], order[j]
            j -= 1
    return order


def distribute_evenly(
    requests: Mapping[str, Quantity],
    available: Mapping[int, ResourceList],
    hint_nodes: Iterable[int],
    ro: ResourceOptions,
    cpus_per_core: int,
) -> tuple[list[NUMANodeResource], list[str]]:
    """``tryBestToDistributeEvenly``: the per-NUMA split of ``requests`` over ``hint_nodes`` and
    the ``Insufficient NUMA <resource>`` reasons (resources no NUMA node reports are ignored)."""
    nodes = sorted(hint_nodes)
    names_by_numa = {name for resources in available.values() for name in resources}
    taken: dict[int, ResourceList] = {}
    reasons: list[str] = []
    for name in sorted(requests):
        remaining = requests[name]
        if name in names_by_numa:
            for i, numa in enumerate(_go_positional_insertion_order(nodes, available, name)):
                share = split_quantity(name, remaining, len(nodes) - i, ro, cpus_per_core)
                have = available.get(numa, {}).get(name, Quantity())
                got = share if have > share else have
                if not got.is_zero():
                    taken.setdefault(numa, {})[name] = got
                    remaining = remaining - got
            if not remaining.is_zero():
                reasons.append(insufficient_numa(name))
    result = [NUMANodeResource(node=numa, resources=taken[numa]) for numa in sorted(taken)]
    return result, reasons


def allocate_numa_resources(
    options: TopologyOptions, node: NodeAllocation, ro: ResourceOptions
) -> list[NUMANodeResource]:
    """The per-NUMA resources for ``ro.hint`` (``allocateResourcesByHint``)."""
    if not options.numa_node_resources:
        raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_INSUFFICIENT_RESOURCES_ON_NUMA)
    if ro.required_resources:
        available: Mapping[int, ResourceList] = ro.required_resources
    else:
        available, _ = node.available_numa_resources(
            options.numa_node_resources,
            ro.reusable_resources,
            cpu_amplification_ratio=options.cpu_amplification_ratio(),
            topology=options.cpu_topology,
        )
    available = trim_numa_resources(options, node, available, ro)
    requests = ro.unamplified_requests if ro.request_cpu_bind else ro.requests
    cpus_per_core = options.cpu_topology.cpus_per_core() if options.cpu_topology is not None else 0
    assert ro.hint.affinity is not None
    result, reasons = distribute_evenly(requests, available, ro.hint.affinity, ro, cpus_per_core)
    if reasons:
        raise RejectionError(UNSCHEDULABLE, *reasons)
    return result


def allocate(
    options: TopologyOptions,
    node: NodeAllocation,
    ro: ResourceOptions,
    *,
    uid: str = "",
    namespace: str = "",
    name: str = "",
) -> PodAllocation:
    """The pod's allocation on the node (``resourceManager.Allocate``): NUMA resources when
    ``ro.hint`` has an affinity, a cpuset when ``ro.request_cpu_bind``. Raises
    :class:`RejectionError`."""
    zones: list[NUMANodeResource] = []
    if ro.hint.affinity is not None:
        zones = allocate_numa_resources(options, node, ro)
    cpuset: frozenset[int] = frozenset()
    if ro.request_cpu_bind:
        cpuset = allocate_cpuset(options, node, ro, zones)
    return PodAllocation(
        uid=uid,
        namespace=namespace,
        name=name,
        cpuset=cpuset,
        cpu_exclusive_policy=ro.cpu_exclusive_policy,
        numa_node_resources=tuple(zones),
    )
