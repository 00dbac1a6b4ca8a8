"""Choosing the logical CPUs of a cpuset (upstream ``cpu_accumulator.go``, kubelet-style).

:func:`take_cpus` tries, in this order, and returns at the first step that satisfies the
request (``N`` CPUs):

FullPCPUs (or any policy on a machine with one thread per core), whole free cores only:

1. one NUMA node whose free whole cores hold ``N`` CPUs (only when ``N`` fits a NUMA node),
   first avoiding NUMA nodes used by ``NUMANodeLevel``-exclusive pods, then not; NUMA nodes
   in the order of the NUMA allocate strategy: LeastAllocated (anything but MostAllocated)
   prefers the most free CPUs, MostAllocated the fewest; ties by the socket's free CPUs
   (same direction), then the lowest id. Inside a node, cores with more free CPUs first,
   then (when CPUs may be shared) the least referenced, then the lowest core id;
2. one socket likewise (only when ``N`` fits a socket; no exclusivity filter);
3. whole sockets' free cores, the socket with most free cores first, as long as all of them
   are still needed; the rest are kept;
4. if at least a core is still needed, core by core from those kept sockets, the socket with
   fewest free cores first.

SpreadByPCPUs only (FullPCPUs left unfinished above goes straight to the final fallback):

5. one NUMA node with ``N`` free CPUs taking one CPU per core round-robin across cores
   (first avoiding cores of ``PCPULevel``- and NUMA nodes of ``NUMANodeLevel``-exclusive pods,
   where only one CPU per core is offered; then any free CPU);
6. one socket likewise (the exclusivity filter there is ``PCPULevel`` only).

Finally, for every policy: the free CPUs ordered by sockets already holding chosen CPUs, the
socket's and the NUMA node's free CPUs (strategy direction), cores with fewer free CPUs
first, then socket, reference count and core ids, spread one CPU per core per round; taken
one by one, first avoiding exclusive cores/NUMA nodes, then not.

Exclusivity: a pod asking ``PCPULevel`` avoids cores holding a ``PCPULevel`` pod's CPU and
``NUMANodeLevel`` avoids NUMA nodes holding a ``NUMANodeLevel`` pod's CPU; CPUs taken during
the call count too. With ``max_ref_count > 1`` a CPU may be handed out again until that many
pods hold it, and less referenced cores and CPUs are preferred.

Every ordering is a total order, so the result is deterministic (upstream's unstable sorts
have no ties to break, and its two length-only sorts run on at most a dozen sockets, where
Go's insertion sort is stable, as Python's sort is).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controlplane.scheduler.numa.status import ERR_FAILED_TO_ALLOCATE_CPUS, ERR_NOT_ENOUGH_CPUS
from controlplane.scheduler.numa.topology import CPUDetail, NodeCPUTopology

__all__ = [
    "CPU_BIND_POLICY_FULL_PCPUS",
    "CPU_BIND_POLICY_SPREAD_BY_PCPUS",
    "CPU_EXCLUSIVE_NONE",
    "CPU_EXCLUSIVE_NUMA_NODE_LEVEL",
    "CPU_EXCLUSIVE_PCPU_LEVEL",
    "AllocatedCPU",
    "CPUAllocationError",
    "take_cpus",
    "take_preferred_cpus",
]

CPU_BIND_POLICY_FULL_PCPUS = "FullPCPUs"
CPU_BIND_POLICY_SPREAD_BY_PCPUS = "SpreadByPCPUs"
CPU_EXCLUSIVE_NONE = "None"
CPU_EXCLUSIVE_PCPU_LEVEL = "PCPULevel"
CPU_EXCLUSIVE_NUMA_NODE_LEVEL = "NUMANodeLevel"
_MOST_ALLOCATED = "MostAllocated"


class CPUAllocationError(ValueError):
    """The request cannot be met from the CPUs offered (upstream's error text)."""


@dataclass(frozen=True, slots=True)
class AllocatedCPU:
    """A CPU already handed out: how many pods hold it and the exclusive policy it was taken with."""

    ref_count: int = 0
    exclusive_policy: str = ""


class _Accumulator:
    def __init__(
        self,
        topology: NodeCPUTopology,
        max_ref_count: int,
        available: Iterable[int],
        allocated: Mapping[int, AllocatedCPU],
        needed: int,
        exclusive_policy: str,
        strategy: str,
    ) -> None:
        self.topology = topology
        self.cpc = topology.cpus_per_core()
        self.max_ref_count = max_ref_count
        self.needed = needed
        self.exclusive_policy = exclusive_policy
        self.exclusive = exclusive_policy in (CPU_EXCLUSIVE_PCPU_LEVEL, CPU_EXCLUSIVE_NUMA_NODE_LEVEL)
        self.most = strategy == _MOST_ALLOCATED
        self.exclusive_cores: set[int] = set()
        self.exclusive_nodes: set[int] = set()
        for cpu, info in allocated.items():
            detail = topology.details.get(cpu)
            if detail is None:
                continue
            if info.exclusive_policy == CPU_EXCLUSIVE_PCPU_LEVEL:
                self.exclusive_cores.add(detail.core)
            elif info.exclusive_policy == CPU_EXCLUSIVE_NUMA_NODE_LEVEL:
                self.exclusive_nodes.add(detail.node)
        # allocatable CPU -> its reference count (only tracked when CPUs may be shared)
        self.allocatable: dict[int, int] = {}
        for cpu in available:
            if cpu in topology.details:
                ref = allocated[cpu].ref_count if max_ref_count > 1 and cpu in allocated else 0
                self.allocatable[cpu] = ref
        self.result: set[int] = set()

    # ---- bookkeeping ----------------------------------------------------------------------
    def take(self, cpus: Iterable[int]) -> None:
        cpus = list(cpus)
        self.result.update(cpus)
        for cpu in cpus:
            self.allocatable.pop(cpu, None)
            if self.exclusive:
                detail = self.topology.details[cpu]
                if self.exclusive_policy == CPU_EXCLUSIVE_PCPU_LEVEL:
                    self.exclusive_cores.add(detail.core)
                else:
                    self.exclusive_nodes.add(detail.node)
        self.needed -= len(cpus)

    def needs(self, n: int) -> bool:
        return self.needed >= n

    def satisfied(self) -> bool:
        return self.needed < 1

    def failed(self) -> bool:
        return self.needed > len(self.allocatable)

    def sorted_result(self) -> list[int]:
        return sorted(self.result)

    # ---- predicates and small helpers -----------------------------------------------------
    def excluded_core(self, detail: CPUDetail) -> bool:
        return self.exclusive_policy == CPU_EXCLUSIVE_PCPU_LEVEL and detail.core in self.exclusive_cores

    def excluded_node(self, detail: CPUDetail) -> bool:
        return self.exclusive_policy == CPU_EXCLUSIVE_NUMA_NODE_LEVEL and detail.node in self.exclusive_nodes

    def by_strategy(self, free: int) -> int:
        """A sort key: fewer free first under MostAllocated, more free first otherwise."""
        return free if self.most else -free

    def core_ref_count(self, core: int) -> int:
        return sum(self.allocatable.get(cpu, 0) for cpu in self.topology.cpus_in_cores(core))

    def order_cpus(self, cpus: Iterable[int]) -> list[int]:
        """Ascending ids; less referenced first when CPUs may be shared."""
        if self.max_ref_count > 1:
            return sorted(cpus, key=lambda cpu: (self.allocatable.get(cpu, 0), cpu))
        return sorted(cpus)

    def one_per_core(self, cpus: list[int]) -> list[int]:
        seen: set[int] = set()
        picked: list[int] = []
        for cpu in cpus:
            core = self.topology.details[cpu].core
            if core not in seen:
                seen.add(core)
                picked.append(cpu)
        return picked

    def spread(self, cpus: list[int]) -> list[int]:
        """Round-robin over cores: the first CPU of every core, then the second, ..."""
        if len(cpus) <= self.cpc:
            return cpus
        result: list[int] = []
        pending = cpus
        while pending:
            seen: set[int] = set()
            later: list[int] = []
            for cpu in pending:
                core = self.topology.details[cpu].core
                if core in seen:
                    later.append(cpu)
                else:
                    seen.add(core)
                    result.append(cpu)
            pending = later
        return result

    def sorted_cores(self, cores: list[int], cpus_in_cores: Mapping[int, list[int]]) -> list[int]:
        if self.max_ref_count > 1:
            return sorted(
                cores, key=lambda core: (-len(cpus_in_cores[core]), self.core_ref_count(core), core)
            )
        return sorted(cores, key=lambda core: (-len(cpus_in_cores[core]), core))

    # ---- candidate lists ------------------------------------------------------------------
    def free_cores_in_nodes(self, filter_exclusive: bool) -> list[list[int]]:
        """Per NUMA node, the CPUs of its wholly free cores, nodes in strategy order."""
        cpus_in_cores: dict[int, list[int]] = {}
        socket_free: Counter[int] = Counter()
        for cpu in self.allocatable:
            detail = self.topology.details[cpu]
            if filter_exclusive and self.excluded_node(detail):
                continue
            cpus_in_cores.setdefault(detail.core, []).append(cpu)
            socket_free[detail.socket] += 1
        cores_in_nodes: dict[int, list[int]] = {}
        for core, cpus in cpus_in_cores.items():
            if len(cpus) != self.cpc:
                continue
            cores_in_nodes.setdefault(self.topology.details[cpus[0]].node, []).append(core)
        cpus_in_nodes: dict[int, list[int]] = {}
        for node, cores in cores_in_nodes.items():
            cpus_in_nodes[node] = [
                cpu for core in self.sorted_cores(cores, cpus_in_cores) for cpu in sorted(cpus_in_cores[core])
            ]

        def node_key(node: int) -> tuple[int, int, int]:
            socket = self.topology.details[cpus_in_nodes[node][0]].socket
            return (self.by_strategy(len(cpus_in_nodes[node])), self.by_strategy(socket_free[socket]), node)

        return [cpus_in_nodes[node] for node in sorted(cpus_in_nodes, key=node_key)]

    def free_cores_in_sockets(self) -> list[list[int]]:
        """Per socket, the CPUs of its wholly free cores, sockets in strategy order."""
        cpus_in_cores: dict[int, list[int]] = {}
        for cpu in self.allocatable:
            cpus_in_cores.setdefault(self.topology.details[cpu].core, []).append(cpu)
        cores_in_sockets: dict[int, list[int]] = {}
        for core, cpus in cpus_in_cores.items():
            if len(cpus) != self.cpc:
                continue
            cores_in_sockets.setdefault(self.topology.details[cpus[0]].socket, []).append(core)
        cpus_in_sockets = {
            socket: [
                cpu for core in self.sorted_cores(cores, cpus_in_cores) for cpu in sorted(cpus_in_cores[core])
            ]
            for socket, cores in cores_in_sockets.items()
        }
        order = sorted(cpus_in_sockets, key=lambda s: (self.by_strategy(len(cpus_in_sockets[s])), s))
        return [cpus_in_sockets[socket] for socket in order]

    def free_cpus_in_nodes(self, filter_exclusive: bool) -> list[list[int]]:
        """Per NUMA node, its free CPUs (one per core when filtering), nodes in strategy order
        of their free CPUs counted before that thinning."""
        cpus_in_nodes: dict[int, list[int]] = {}
        node_free: Counter[int] = Counter()
        socket_free: Counter[int] = Counter()
        node_socket: dict[int, int] = {}
        for cpu in self.allocatable:
            detail = self.topology.details[cpu]
            if filter_exclusive and (self.excluded_core(detail) or self.excluded_node(detail)):
                continue
            cpus_in_nodes.setdefault(detail.node, []).append(cpu)
            node_free[detail.node] += 1
            socket_free[detail.socket] += 1
            node_socket[detail.node] = detail.socket
        for node, cpus in cpus_in_nodes.items():
            ordered = self.order_cpus(cpus)
            cpus_in_nodes[node] = self.one_per_core(ordered) if filter_exclusive else ordered
        order = sorted(
            cpus_in_nodes,
            key=lambda n: (self.by_strategy(node_free[n]), self.by_strategy(socket_free[node_socket[n]]), n),
        )
        return [cpus_in_nodes[node] for node in order]

    def free_cpus_in_sockets(self, filter_exclusive: bool) -> list[list[int]]:
        """Per socket, its free CPUs (one per core when filtering), in strategy order of the
        lists' lengths."""
        cpus_in_sockets: dict[int, list[int]] = {}
        for cpu in self.allocatable:
            detail = self.topology.details[cpu]
            if filter_exclusive and self.excluded_core(detail):
                continue
            cpus_in_sockets.setdefault(detail.socket, []).append(cpu)
        for socket, cpus in cpus_in_sockets.items():
            ordered = self.order_cpus(cpus)
            cpus_in_sockets[socket] = self.one_per_core(ordered) if filter_exclusive else ordered
        order = sorted(cpus_in_sockets, key=lambda s: (self.by_strategy(len(cpus_in_sockets[s])), s))
        return [cpus_in_sockets[socket] for socket in order]

    def free_cpus(self, filter_exclusive: bool) -> list[int]:
        """All free CPUs, core by core, in the final fallback's order."""
        cpus_in_cores: dict[int, list[int]] = {}
        core_socket: dict[int, int] = {}
        core_node: dict[int, int] = {}
        node_free: Counter[int] = Counter()
        socket_free: Counter[int] = Counter()
        for cpu in self.allocatable:
            detail = self.topology.details[cpu]
            if filter_exclusive and (self.excluded_core(detail) or self.excluded_node(detail)):
                continue
            cpus_in_cores.setdefault(detail.core, []).append(cpu)
            core_socket[detail.core] = detail.socket
            core_node[detail.core] = detail.node
            node_free[detail.node] += 1
            socket_free[detail.socket] += 1
        colocated = {
            socket: len(self.topology.cpus_in_sockets(socket) & self.result) for socket in socket_free
        }

        def core_key(core: int) -> tuple[int, ...]:
            socket = core_socket[core]
            return (
                -colocated[socket],
                self.by_strategy(socket_free[socket]),
                self.by_strategy(node_free[core_node[core]]),
                len(cpus_in_cores[core]),
                socket,
                self.core_ref_count(core) if self.max_ref_count > 1 else 0,
                core,
            )

        return [
            cpu
            for core in sorted(cpus_in_cores, key=core_key)
            for cpu in self.order_cpus(cpus_in_cores[core])
        ]

    # ---- the steps ------------------------------------------------------------------------
    def take_whole_cores(self) -> bool:
        """Steps 1-4; True when satisfied."""
        needed = self.needed
        if needed <= self.topology.cpus_per_node():
            for filter_exclusive in (True, False):
                for cpus in self.free_cores_in_nodes(filter_exclusive):
                    if len(cpus) >= self.needed:
                        self.take(cpus[: self.needed])
                        return True
        if self.needed <= self.topology.cpus_per_socket():
            for cpus in self.free_cores_in_sockets():
                if len(cpus) >= self.needed:
                    self.take(cpus[: self.needed])
                    return True
        kept: list[list[int]] = []
        for cpus in sorted(self.free_cores_in_sockets(), key=len, reverse=True):
            if not self.needs(len(cpus)):
                kept.append(cpus)
                continue
            self.take(cpus)
            if self.satisfied():
                return True
        if self.needs(self.cpc):
            for cpus in sorted(kept, key=len):
                for start in range(0, len(cpus), self.cpc):
                    self.take(cpus[start : start + self.cpc])
                    if self.satisfied():
                        return True
                    if not self.needs(self.cpc):
                        break
        return False

    def take_spread_in_one_domain(self) -> bool:
        """Steps 5-6; True when satisfied."""
        if self.needed <= self.topology.cpus_per_node():
            for filter_exclusive in (True, False):
                for cpus in self.free_cpus_in_nodes(filter_exclusive):
                    if len(cpus) >= self.needed:
                        self.take(self.spread(cpus)[: self.needed])
                        return True
        if self.needed <= self.topology.cpus_per_socket():
            for filter_exclusive in (True, False):
                for cpus in self.free_cpus_in_sockets(filter_exclusive):
                    if len(cpus) >= self.needed:
                        self.take(self.spread(cpus)[: self.needed])
                        return True
        return False

    def take_any(self) -> bool:
        """The final fallback; True when satisfied."""
        for filter_exclusive in (True, False):
            for cpu in self.spread(self.free_cpus(filter_exclusive)):
                if self.needs(1):
                    self.take([cpu])
                if self.satisfied():
                    return True
        return False


def take_cpus(
    topology: NodeCPUTopology,
    max_ref_count: int,
    available_cpus: Iterable[int],
    allocated_cpus: Mapping[int, AllocatedCPU],
    num_cpus_needed: int,
    cpu_bind_policy: str,
    cpu_exclusive_policy: str,
    numa_allocate_strategy: str,
) -> list[int]:
    """``num_cpus_needed`` CPUs out of ``available_cpus``, ascending (upstream ``takeCPUs``).

    ``allocated_cpus`` are the CPUs already held on the node (reference counts and exclusive
    policies). Raises :class:`CPUAllocationError` with upstream's text when fewer CPUs are
    available than needed or no step finds enough."""
    acc = _Accumulator(
        topology,
        max_ref_count,
        available_cpus,
        allocated_cpus,
        num_cpus_needed,
        cpu_exclusive_policy,
        numa_allocate_strategy,
    )
    if acc.satisfied():
        return acc.sorted_result()
    if acc.failed():
        raise CPUAllocationError(ERR_NOT_ENOUGH_CPUS)
    full_pcpus = cpu_bind_policy == CPU_BIND_POLICY_FULL_PCPUS
    if (full_pcpus or acc.cpc == 1) and acc.take_whole_cores():
        return acc.sorted_result()
    if not full_pcpus and acc.take_spread_in_one_domain():
        return acc.sorted_result()
    if acc.take_any():
        return acc.sorted_result()
    raise CPUAllocationError(ERR_FAILED_TO_ALLOCATE_CPUS)


def take_preferred_cpus(
    topology: NodeCPUTopology,
    max_ref_count: int,
    available_cpus: Iterable[int],
    preferred_cpus: Iterable[int],
    allocated_cpus: Mapping[int, AllocatedCPU],
    num_cpus_needed: int,
    cpu_bind_policy: str,
    cpu_exclusive_policy: str,
    numa_allocate_strategy: str,
) -> list[int]:
    """Like :func:`take_cpus`, but the available CPUs among ``preferred_cpus`` (those a
    reservation holds for the pod) are used up first (upstream ``takePreferredCPUs``)."""
    available = frozenset(available_cpus)
    preferred = available & frozenset(preferred_cpus)
    args = (cpu_bind_policy, cpu_exclusive_policy, numa_allocate_strategy)
    if not preferred:
        return take_cpus(topology, max_ref_count, available, allocated_cpus, num_cpus_needed, *args)
    if num_cpus_needed <= len(preferred):
        return take_cpus(topology, max_ref_count, preferred, allocated_cpus, num_cpus_needed, *args)
    first = take_cpus(topology, max_ref_count, preferred, allocated_cpus, len(preferred), *args)
    rest = take_cpus(
        topology, max_ref_count, available - preferred, allocated_cpus, num_cpus_needed - len(first), *args
    )
    return sorted(set(first) | set(rest))
