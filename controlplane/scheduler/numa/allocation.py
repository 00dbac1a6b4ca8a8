"""What NodeNUMAResource has handed out on one node (upstream ``node_allocation.go``): the
cpuset and per-NUMA resources of every pod, the resulting per-CPU reference counts and
exclusive policies, and the per-NUMA totals.

Adding a pod whose uid is already recorded does nothing, :meth:`NodeAllocation.update`
replaces it, releasing an unknown uid does nothing. Nothing here needs the CPU topology to
record a pod (so a bound pod seen before its node's NRT is kept); the topology is asked for
only when a question depends on it (NUMA node of a CPU). As upstream, a CPU keeps the
exclusive policy of the last pod that took it until no pod holds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controlplane.scheduler.numa.accumulator import AllocatedCPU
from controlplane.scheduler.numa.options import amplify
from controlplane.scheduler.numa.topology import NodeCPUTopology
from koordinator.api import resourcelist
from koordinator.api.extension.numa import NUMANodeResource
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import ResourceList

__all__ = [
    "NUMA_NODE_IDLE",
    "NUMA_NODE_SHARED",
    "NUMA_NODE_SINGLE",
    "NodeAllocation",
    "PodAllocation",
]

#: NUMA node states for the pod-level ``singleNUMANodeExclusive`` policy
NUMA_NODE_IDLE = "idle"
NUMA_NODE_SHARED = "shared"
NUMA_NODE_SINGLE = "single"


@dataclass(frozen=True)
class PodAllocation:
    """One pod's share of a node: its cpuset and the resources taken per NUMA node."""

    uid: str
    namespace: str = ""
    name: str = ""
    cpuset: frozenset[int] = frozenset()
    cpu_exclusive_policy: str = ""
    numa_node_resources: tuple[NUMANodeResource, ...] = field(default=())


class NodeAllocation:
    """The allocations on one node, keyed by pod uid."""

    def __init__(self, node_name: str = "") -> None:
        self.node_name = node_name
        self._pods: dict[str, PodAllocation] = {}
        self._cpus: dict[int, AllocatedCPU] = {}
        self._numa: dict[int, ResourceList] = {}

    # ---- changes --------------------------------------------------------------------------
    def add(self, allocation: PodAllocation) -> None:
        """Record ``allocation`` unless its uid is already recorded."""
        if allocation.uid in self._pods:
            return
        self._pods[allocation.uid] = allocation
        for cpu in allocation.cpuset:
            ref = self._cpus[cpu].ref_count if cpu in self._cpus else 0
            self._cpus[cpu] = AllocatedCPU(ref + 1, allocation.cpu_exclusive_policy)
        for zone in allocation.numa_node_resources:
            self._numa[zone.node] = resourcelist.add(self._numa.get(zone.node, {}), zone.resources)

    def update(self, allocation: PodAllocation) -> None:
        """Replace whatever the uid held by ``allocation``."""
        self.release(allocation.uid)
        self.add(allocation)

    def release(self, uid: str) -> None:
        """Forget the pod's allocation (nothing when unknown)."""
        allocation = self._pods.pop(uid, None)
        if allocation is None:
            return
        for cpu in allocation.cpuset:
            info = self._cpus.get(cpu)
            if info is None:
                continue
            if info.ref_count <= 1:
                del self._cpus[cpu]
            else:
                self._cpus[cpu] = AllocatedCPU(info.ref_count - 1, info.exclusive_policy)
        for zone in allocation.numa_node_resources:
            if zone.node in self._numa:
                self._numa[zone.node] = resourcelist.subtract_non_negative(
                    self._numa[zone.node], zone.resources
                )

    # ---- questions ------------------------------------------------------------------------
    def get(self, uid: str) -> PodAllocation | None:
        return self._pods.get(uid)

    def pods(self) -> dict[str, PodAllocation]:
        return dict(self._pods)

    def allocated_cpus(self) -> dict[int, AllocatedCPU]:
        """CPU -> how many pods hold it and the exclusive policy it was last taken with."""
        return dict(self._cpus)

    def bound_cpu_count(self) -> int:
        """How many CPUs cpusets hold on the node (each counted once, however many pods share
        it): upstream's ``allocated.CPUs().Size()``."""
        return len(self._cpus)

    def allocated_numa_resources(self) -> dict[int, ResourceList]:
        return {node: dict(resources) for node, resources in self._numa.items()}

    def available_cpus(
        self,
        topology: NodeCPUTopology,
        max_ref_count: int,
        reserved_cpus: Iterable[int],
        *preferred: Iterable[int],
    ) -> tuple[frozenset[int], dict[int, AllocatedCPU]]:
        """The CPUs a new pod may take, and the allocated CPUs as the accumulator should see them
        (upstream ``getAvailableCPUs``).

        Each set in ``preferred`` gives back one reference of its CPUs (a reservation restored
        for the pod, a preemption victim): a CPU listed in two sets is returned twice. A CPU is
        unavailable when ``max_ref_count`` pods hold it, or when it is reserved."""
        allocated = dict(self._cpus)
        for cpus in preferred:
            for cpu in cpus:
                info = allocated.get(cpu)
                if info is None:
                    continue
                if info.ref_count <= 1:
                    del allocated[cpu]
                else:
                    allocated[cpu] = AllocatedCPU(info.ref_count - 1, info.exclusive_policy)
        full = {cpu for cpu, info in allocated.items() if info.ref_count >= max_ref_count}
        available = topology.cpus() - full - frozenset(reserved_cpus)
        return frozenset(available), allocated

    def available_numa_resources(
        self,
        numa_node_resources: Iterable[NUMANodeResource],
        reusable: Mapping[int, ResourceList] | None = None,
        *,
        cpu_amplification_ratio: float = 0.0,
        topology: NodeCPUTopology | None = None,
    ) -> tuple[dict[int, ResourceList], dict[int, ResourceList]]:
        """Per NUMA node, what is left and what is taken (upstream
        ``getAvailableNUMANodeResources``).

        ``reusable`` is given back per NUMA node (reservations or preemption victims). With a
        cpu amplification ratio above 1 the CPUs bound on a NUMA node count amplified (their
        pods asked for amplified cpu but hold whole CPUs); this needs ``topology``. A NUMA
        node without any allocation record has no "taken" entry."""
        reusable = reusable or {}
        available: dict[int, ResourceList] = {}
        taken: dict[int, ResourceList] = {}
        for zone in numa_node_resources:
            allocated = self._numa.get(zone.node)
            if allocated is not None:
                if cpu_amplification_ratio > 1 and topology is not None:
                    bound = 1000 * len(topology.cpus_in_nodes(zone.node) & self._cpus.keys())
                    cpu = allocated.get("cpu")
                    milli = (
                        (cpu.milli_value() if cpu is not None else 0)
                        - bound
                        + amplify(bound, cpu_amplification_ratio)
                    )
                    allocated = {**allocated, "cpu": Quantity.from_milli(milli)}
                allocated = resourcelist.subtract_non_negative(allocated, reusable.get(zone.node, {}))
                taken[zone.node] = allocated
            available[zone.node] = resourcelist.subtract_non_negative(zone.resources, allocated or {})
        return available, taken

    def numa_node_status(self, topology: NodeCPUTopology | None, count: int) -> list[str]:
        """The state of NUMA nodes ``0 .. count-1`` (upstream ``GetAllNUMANodeStatus``): idle, single
        (only pods bound within that one NUMA node) or shared (a pod bound across NUMA nodes).
        Only cpusets count; a CPU unknown to the topology counts as NUMA node 0."""
        single: set[int] = set()
        shared: set[int] = set()
        details = topology.details if topology is not None else {}
        for allocation in self._pods.values():
            used = {details[cpu].node if cpu in details else 0 for cpu in allocation.cpuset}
            if len(used) > 1:
                shared |= used
            elif used:
                single |= used
        states: list[str] = []
        for node in range(count):
            if node in shared:
                states.append(NUMA_NODE_SHARED)
            elif node in single:
                states.append(NUMA_NODE_SINGLE)
            else:
                states.append(NUMA_NODE_IDLE)
        return states
