"""A node's CPU topology as NodeNUMAResource sees it: logical CPUs grouped into physical
cores, NUMA nodes and sockets (upstream ``cpu_topology.go`` and ``convertCPUTopology``).

It is built from the koordlet's ``node.koordinator.sh/cpu-topology`` annotation. As upstream
does, a core id is made unique across sockets (``socket << 16 | core``) while NUMA node and
socket ids are kept as reported; when the same CPU id is reported twice the later entry wins
but both were counted, so such a report yields an inconsistent (though maybe "valid") shape.

Validity is upstream's and nothing more: a topology is valid when it has at least one socket,
NUMA node, core and CPU. An absent or unparsable annotation gives an empty, invalid topology.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from koordinator.api.extension.topology import CPUTopology

__all__ = ["CPUDetail", "NodeCPUTopology", "is_valid_topology"]


@dataclass(frozen=True, slots=True)
class CPUDetail:
    """Where one logical CPU sits: ``core`` is the node-unique core id (``socket << 16 | core``)."""

    cpu: int
    core: int
    node: int
    socket: int


class NodeCPUTopology:
    """Logical CPUs of a node with their core, NUMA node and socket, plus upstream's counts."""

    __slots__ = ("_by_core", "_by_node", "_by_socket", "details", "num_cores", "num_nodes", "num_sockets")

    def __init__(
        self,
        details: Mapping[int, CPUDetail],
        *,
        num_sockets: int,
        num_nodes: int,
        num_cores: int,
    ) -> None:
        self.details: dict[int, CPUDetail] = dict(details)
        self.num_sockets = num_sockets
        self.num_nodes = num_nodes
        self.num_cores = num_cores
        self._by_core: dict[int, set[int]] = {}
        self._by_node: dict[int, set[int]] = {}
        self._by_socket: dict[int, set[int]] = {}
        for cpu, detail in self.details.items():
            self._by_core.setdefault(detail.core, set()).add(cpu)
            self._by_node.setdefault(detail.node, set()).add(cpu)
            self._by_socket.setdefault(detail.socket, set()).add(cpu)

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def empty(cls) -> NodeCPUTopology:
        return cls({}, num_sockets=0, num_nodes=0, num_cores=0)

    @classmethod
    def from_cpu_infos(cls, infos: Iterable[tuple[int, int, int, int]]) -> NodeCPUTopology:
        """From reported ``(socket, node, core, cpu)`` tuples, counted as upstream's builder counts:
        sockets, (socket, node) pairs and (socket, node, core) triples."""
        details: dict[int, CPUDetail] = {}
        sockets: set[int] = set()
        nodes: set[tuple[int, int]] = set()
        cores: set[tuple[int, int, int]] = set()
        for socket, node, core, cpu in infos:
            unique_core = socket << 16 | core
            details[cpu] = CPUDetail(cpu=cpu, core=unique_core, node=node, socket=socket)
            sockets.add(socket)
            nodes.add((socket, node))
            cores.add((socket, node, unique_core))
        return cls(details, num_sockets=len(sockets), num_nodes=len(nodes), num_cores=len(cores))

    @classmethod
    def from_annotation(cls, topology: CPUTopology | None) -> NodeCPUTopology:
        """From the decoded ``cpu-topology`` annotation (``None``: empty)."""
        if topology is None:
            return cls.empty()
        return cls.from_cpu_infos((info.socket, info.node, info.core, info.id) for info in topology.detail)

    @classmethod
    def uniform(
        cls, sockets: int, nodes_per_socket: int, cores_per_node: int, cpus_per_core: int
    ) -> NodeCPUTopology:
        """A regular machine numbered like upstream's test builder: CPU ids run core by core,
        so the threads of one core are consecutive (``0,1`` is core 0 with 2 threads)."""
        infos: list[tuple[int, int, int, int]] = []
        cpu = core = node = 0
        for socket in range(sockets):
            for _ in range(nodes_per_socket):
                for _ in range(cores_per_node):
                    for _ in range(cpus_per_core):
                        infos.append((socket, node, core, cpu))
                        cpu += 1
                    core += 1
                node += 1
        return cls.from_cpu_infos(infos)

    # ---- shape ----------------------------------------------------------------------------
    @property
    def num_cpus(self) -> int:
        return len(self.details)

    def is_valid(self) -> bool:
        return self.num_sockets != 0 and self.num_nodes != 0 and self.num_cores != 0 and self.num_cpus != 0

    def cpus_per_core(self) -> int:
        return self.num_cpus // self.num_cores if self.num_cores else 0

    def cpus_per_socket(self) -> int:
        return self.num_cpus // self.num_sockets if self.num_sockets else 0

    def cpus_per_node(self) -> int:
        return self.num_cpus // self.num_nodes if self.num_nodes else 0

    # ---- lookups --------------------------------------------------------------------------
    def cpus(self) -> frozenset[int]:
        return frozenset(self.details)

    def numa_nodes(self) -> list[int]:
        return sorted(self._by_node)

    def cpus_in_nodes(self, *nodes: int) -> frozenset[int]:
        return frozenset().union(*(self._by_node.get(node, ()) for node in nodes))

    def cpus_in_sockets(self, *sockets: int) -> frozenset[int]:
        return frozenset().union(*(self._by_socket.get(socket, ()) for socket in sockets))

    def cpus_in_cores(self, *cores: int) -> frozenset[int]:
        return frozenset().union(*(self._by_core.get(core, ()) for core in cores))

    def cores_of(self, cpus: Iterable[int]) -> frozenset[int]:
        """The cores holding ``cpus`` (CPUs unknown to the topology are ignored)."""
        return frozenset(self.details[cpu].core for cpu in cpus if cpu in self.details)

    def __repr__(self) -> str:
        return (
            f"NodeCPUTopology(sockets={self.num_sockets}, nodes={self.num_nodes}, "
            f"cores={self.num_cores}, cpus={self.num_cpus})"
        )


def is_valid_topology(topology: NodeCPUTopology | None) -> bool:
    """Upstream's ``CPUTopology.IsValid`` that also answers for a node without topology."""
    return topology is not None and topology.is_valid()
