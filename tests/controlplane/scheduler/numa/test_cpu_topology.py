"""The CPU topology built from ``cpu-topology``: counts, per-core/socket/node sizes, unique
core ids across sockets, and upstream's validity rule (cpu_topology.go, topology_options.go)."""

from __future__ import annotations

import pytest

from controlplane.scheduler.numa.topology import CPUDetail, NodeCPUTopology, is_valid_topology
from koordinator.api.extension.topology import CPUInfo, CPUTopology
from tests.controlplane.scheduler.numa.builders import TOPO_1S8C_HT, TOPO_2S4N


def test_uniform_machine_counts_and_sizes() -> None:
    """2 sockets x 2 NUMA x 4 cores x 2 threads: 32 CPUs, 16 cores, 4 NUMA nodes."""
    topo = TOPO_2S4N
    assert (topo.num_sockets, topo.num_nodes, topo.num_cores, topo.num_cpus) == (2, 4, 16, 32)
    assert (topo.cpus_per_core(), topo.cpus_per_node(), topo.cpus_per_socket()) == (2, 8, 16)
    assert topo.cpus_in_nodes(1) == frozenset(range(8, 16))
    assert topo.cpus_in_sockets(1) == frozenset(range(16, 32))
    assert topo.numa_nodes() == [0, 1, 2, 3]
    assert topo.is_valid()


def test_core_ids_are_made_unique_per_socket() -> None:
    """Core 0 of socket 1 is not core 0 of socket 0: its id is ``1 << 16 | 0``."""
    reported = CPUTopology(
        detail=[
            CPUInfo(id=0, core=0, socket=0, node=0),
            CPUInfo(id=1, core=0, socket=0, node=0),
            CPUInfo(id=2, core=0, socket=1, node=1),
            CPUInfo(id=3, core=0, socket=1, node=1),
        ]
    )
    topo = NodeCPUTopology.from_annotation(reported)
    assert topo.details[2] == CPUDetail(cpu=2, core=1 << 16, node=1, socket=1)
    assert (topo.num_cores, topo.cpus_per_core()) == (2, 2)
    assert topo.cpus_in_cores(1 << 16) == frozenset({2, 3})


def test_linux_sibling_numbering() -> None:
    """Siblings c and c+8 share a core, whatever the CPU numbering."""
    assert TOPO_1S8C_HT.cpus_in_cores(TOPO_1S8C_HT.details[3].core) == frozenset({3, 11})
    assert TOPO_1S8C_HT.cpus_per_core() == 2


@pytest.mark.parametrize(
    ("infos", "valid"),
    [
        pytest.param([], False, id="empty annotation is invalid"),
        pytest.param([(0, 0, 0, 0)], True, id="one CPU is a valid machine"),
    ],
)
def test_validity_needs_sockets_nodes_cores_and_cpus(
    infos: list[tuple[int, int, int, int]], valid: bool
) -> None:
    assert NodeCPUTopology.from_cpu_infos(infos).is_valid() is valid


def test_missing_annotation_gives_empty_invalid_topology() -> None:
    assert not NodeCPUTopology.from_annotation(None).is_valid()
    assert not is_valid_topology(None)
    assert is_valid_topology(TOPO_2S4N)


def test_duplicate_cpu_report_counts_both_but_keeps_the_last() -> None:
    """Upstream's builder counts a CPU reported twice under two cores as two cores: the later
    entry wins the CPU, so cpus-per-core drops to 0 (an inconsistent but 'valid' shape)."""
    topo = NodeCPUTopology.from_cpu_infos([(0, 0, 0, 0), (0, 0, 1, 0)])
    assert topo.num_cpus == 1
    assert topo.num_cores == 2
    assert topo.details[0].core == 1
    assert topo.cpus_per_core() == 0
    assert topo.is_valid()


def test_sizes_of_an_empty_topology_are_zero() -> None:
    empty = NodeCPUTopology.empty()
    assert (empty.cpus_per_core(), empty.cpus_per_node(), empty.cpus_per_socket()) == (0, 0, 0)
