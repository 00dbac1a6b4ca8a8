"""Picking a number of CPUs by topology, as upstream's ``TakeByTopology``
(``pkg/koordlet/util/kubelet/cpu_assignment.go``, the kubelet's NUMA-packed CPU
accumulator with sockets taken before NUMA nodes).

The koordlet uses it where only a count is known: the node reservation
``{"resources": {"cpu": "2"}}`` and the kubelet's static-policy reserved CPUs without
``reservedSystemCPUs``. The rule, best fit from the top of the hierarchy down:

1. whole sockets, while at least a socket's worth is still needed, then whole NUMA
   nodes, while at least a NUMA node's worth is;
2. whole cores, while at least a core's worth is;
3. single CPUs, filling partly taken cores first.

Every level is visited in the accumulator's order: sockets by their count of available
CPUs (fewest first), then id; within each socket its NUMA nodes, within each NUMA node
its cores, ordered the same way; the CPUs of a core by id. On a hyper-threaded machine
two reserved CPUs are therefore the two threads of the first core (``0,4`` on 2 sockets x
2 cores x 2 threads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

from koordlet.system.topology import CPUTopology, Processor

__all__ = ["take_by_topology"]


class _Accumulator:
    """Upstream's ``cpuAccumulator`` with ``socketsFirst``: ``details`` are the CPUs still
    available, ``needed`` how many are still to take."""

    def __init__(self, topology: CPUTopology, available: Iterable[int], needed: int) -> None:
        self.topology = {p.cpu: p for p in topology.processors}
        wanted = set(available)
        self.details = {cpu: p for cpu, p in self.topology.items() if cpu in wanted}
        self.needed = needed
        self.result: set[int] = set()
        processors = self.topology.values()
        sockets = len({p.socket for p in processors})
        cores = len({p.core for p in processors})
        self.cpus_per_socket = len(self.topology) // sockets if sockets else 0
        self.cpus_per_core = len(self.topology) // cores if cores else 0

    # --- the CPUs of a socket, NUMA node or core ----------------------------------------

    @staticmethod
    def _cpus(processors: Iterable[Processor], key: Callable[[Processor], int], ident: int) -> set[int]:
        return {p.cpu for p in processors if key(p) == ident}

    def _available(self, key: Callable[[Processor], int], ident: int) -> set[int]:
        return self._cpus(self.details.values(), key, ident)

    def _all(self, key: Callable[[Processor], int], ident: int) -> set[int]:
        return self._cpus(self.topology.values(), key, ident)

    def _sorted(self, ids: Iterable[int], key: Callable[[Processor], int]) -> list[int]:
        """``ids`` by their count of available CPUs, fewest first, then by id."""
        return sorted(set(ids), key=lambda ident: (len(self._available(key, ident)), ident))

    # --- orders (socketsFirst) ----------------------------------------------------------

    def sockets(self) -> list[int]:
        return self._sorted((p.socket for p in self.details.values()), _socket)

    def numa_nodes(self) -> list[int]:
        out: list[int] = []
        for socket in self.sockets():
            nodes = (p.node for p in self.details.values() if p.socket == socket)
            out.extend(self._sorted(nodes, _node))
        return out

    def cores(self) -> list[int]:
        out: list[int] = []
        for node in self.numa_nodes():
            cores = (p.core for p in self.details.values() if p.node == node)
            out.extend(self._sorted(cores, _core))
        return out

    def cpus(self) -> list[int]:
        out: list[int] = []
        for core in self.cores():
            out.extend(sorted(self._available(_core, core)))
        return out

    # --- taking -------------------------------------------------------------------------

    def take(self, cpus: set[int]) -> None:
        self.result |= cpus
        self.details = {cpu: p for cpu, p in self.details.items() if cpu not in self.result}
        self.needed -= len(cpus)

    def satisfied(self) -> bool:
        return self.needed < 1

    def failed(self) -> bool:
        return self.needed > len(self.details)

    def take_full_sockets(self) -> None:
        free = [s for s in self.sockets() if len(self._available(_socket, s)) == self.cpus_per_socket]
        for socket in free:
            cpus = self._all(_socket, socket)
            if self.needed >= len(cpus):
                self.take(cpus)

    def take_full_numa_nodes(self) -> None:
        free = [n for n in self.numa_nodes() if len(self._available(_node, n)) == len(self._all(_node, n))]
        for node in free:
            cpus = self._all(_node, node)
            if self.needed >= len(cpus):
                self.take(cpus)

    def take_full_cores(self) -> None:
        free = [c for c in self.cores() if len(self._available(_core, c)) == self.cpus_per_core]
        for core in free:
            cpus = self._all(_core, core)
            if self.needed >= len(cpus):
                self.take(cpus)

    def take_remaining_cpus(self) -> None:
        for cpu in self.cpus():
            self.take({cpu})
            if self.satisfied():
                return


def _socket(p: Processor) -> int:
    return p.socket


def _node(p: Processor) -> int:
    return p.node


def _core(p: Processor) -> int:
    return p.core


def take_by_topology(topology: CPUTopology, available: Iterable[int], count: int) -> frozenset[int] | None:
    """``count`` CPUs of ``available`` picked by upstream's ``TakeByTopology``; None when
    there are not enough (upstream's "not enough cpus available to satisfy request").

    The answer depends on nothing else, and the reporters ask the same question on every
    sync, so the last few answers are kept."""
    return _take(topology, frozenset(available), count)


@lru_cache(maxsize=8)
def _take(topology: CPUTopology, available: frozenset[int], count: int) -> frozenset[int] | None:
    acc = _Accumulator(topology, available, count)
    if acc.satisfied():
        return frozenset(acc.result)
    if acc.failed():
        return None
    for step in (
        acc.take_full_sockets,
        acc.take_full_numa_nodes,
        acc.take_full_cores,
        acc.take_remaining_cpus,
    ):
        step()
        if acc.satisfied():
            return frozenset(acc.result)
    return None
