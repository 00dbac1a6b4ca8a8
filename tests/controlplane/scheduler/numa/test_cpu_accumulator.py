"""Which CPUs ``take_cpus`` picks (cpu_accumulator.go): the order of preference for FullPCPUs
and SpreadByPCPUs, the NUMA allocate strategy, exclusivity, shared CPUs and errors. Every
expected set is worked out by hand from the rules in the accumulator's docstring; ids name
the rule."""

from __future__ import annotations

import pytest

from controlplane.scheduler.numa.accumulator import (
    AllocatedCPU,
    CPUAllocationError,
    take_cpus,
    take_preferred_cpus,
)
from controlplane.scheduler.numa.allocation import NodeAllocation, PodAllocation
from controlplane.scheduler.numa.topology import NodeCPUTopology
from koordinator.api.cpuset import format_cpuset, parse_cpuset
from tests.controlplane.scheduler.numa.builders import TOPO_1S8C_HT, TOPO_2S4N

FULL = "FullPCPUs"
SPREAD = "SpreadByPCPUs"
MOST = "MostAllocated"
LEAST = "LeastAllocated"


def take(
    topo: NodeCPUTopology,
    taken: str,
    needed: int,
    policy: str,
    strategy: str,
    *,
    exclusive: str = "None",
    taken_exclusive: str = "",
) -> str:
    """Take ``needed`` CPUs when the CPUs ``taken`` are held by a pod with ``taken_exclusive``."""
    held = parse_cpuset(taken)
    allocated = {cpu: AllocatedCPU(1, taken_exclusive) for cpu in held}
    free = topo.cpus() - set(held)
    return format_cpuset(take_cpus(topo, 1, free, allocated, needed, policy, exclusive, strategy))


U1_1_4_2 = NodeCPUTopology.uniform(1, 1, 4, 2)
U2_1_4_2 = NodeCPUTopology.uniform(2, 1, 4, 2)
U2_1_8_2 = NodeCPUTopology.uniform(2, 1, 8, 2)
U2_2_2_2 = NodeCPUTopology.uniform(2, 2, 2, 2)


@pytest.mark.parametrize(
    ("topo", "taken", "needed", "strategy", "want"),
    [
        pytest.param(U1_1_4_2, "", 2, MOST, "0-1", id="one free core is the lowest core"),
        pytest.param(U1_1_4_2, "0-1", 2, MOST, "2-3", id="held core skipped"),
        pytest.param(U2_1_4_2, "", 8, MOST, "0-7", id="whole NUMA node when it fits"),
        pytest.param(
            U2_1_4_2, "", 12, MOST, "0-11", id="beyond a socket: fullest socket first then core by core"
        ),
        pytest.param(U2_1_4_2, "0-1", 8, MOST, "8-15", id="only the untouched NUMA node has 8 free"),
        pytest.param(
            TOPO_2S4N, "0-1", 4, MOST, "2-5", id="MostAllocated picks the NUMA node with fewest free"
        ),
        pytest.param(
            TOPO_2S4N, "0-1", 4, LEAST, "16-19", id="LeastAllocated: most free, tie to the freer socket"
        ),
        pytest.param(TOPO_2S4N, "0-5,16-23", 6, MOST, "24-29", id="MostAllocated: smallest NUMA that fits"),
        pytest.param(
            TOPO_2S4N, "0-5,16-23", 6, LEAST, "8-13", id="LeastAllocated: idle NUMA, lower id on ties"
        ),
        pytest.param(TOPO_2S4N, "0-5,16-23", 12, LEAST, "6-15,24-25", id="12 fit a socket: socket 0 first"),
        pytest.param(TOPO_2S4N, "0-3,8-11", 4, MOST, "4-7", id="MostAllocated prefers the busy socket"),
        pytest.param(TOPO_2S4N, "0-3,8-11", 4, LEAST, "16-19", id="LeastAllocated prefers the idle socket"),
        pytest.param(TOPO_2S4N, "", 10, LEAST, "0-9", id="10 exceed a NUMA node: one socket"),
        pytest.param(
            TOPO_2S4N, "", 20, LEAST, "0-19", id="20 exceed a socket: a socket then cores of the other"
        ),
        pytest.param(U2_2_2_2, "0,2,4,8,12", 4, MOST, "10-11,14-15", id="only NUMA 3 has two free cores"),
        pytest.param(
            U2_2_2_2, "0,2,4,8,10,12", 6, MOST, "5-7,13-15", id="no whole cores enough: spread fallback"
        ),
        pytest.param(
            U2_2_2_2, "0,2,4,8,10,12", 6, LEAST, "1,3,6-7,14-15", id="fallback by socket free, Least"
        ),
        pytest.param(
            U2_2_2_2, "0,2,4,8-10,12", 6, MOST, "6-7,11,13-15", id="fallback fills whole cores first"
        ),
    ],
)
def test_full_pcpus(topo: NodeCPUTopology, taken: str, needed: int, strategy: str, want: str) -> None:
    assert take(topo, taken, needed, FULL, strategy) == want


@pytest.mark.parametrize(
    ("topo", "taken", "needed", "strategy", "want"),
    [
        pytest.param(U1_1_4_2, "", 4, MOST, "0,2,4,6", id="one CPU per core"),
        pytest.param(U2_1_4_2, "0,2", 4, MOST, "1,3-4,6", id="MostAllocated stays on the busy NUMA node"),
        pytest.param(
            U2_1_4_2, "0,2", 4, LEAST, "8,10,12,14", id="LeastAllocated moves to the idle NUMA node"
        ),
        pytest.param(U2_1_4_2, "0-3", 4, MOST, "8,10,12,14", id="busy node has only 2 cores with free CPUs"),
        pytest.param(U2_1_4_2, "0,2", 6, MOST, "1,3-7", id="6 > cores: second round on the same node"),
        pytest.param(
            U2_1_4_2, "0,2", 6, LEAST, "8-12,14", id="6 > cores on the idle node: siblings of 8, 10"
        ),
        pytest.param(
            TOPO_2S4N, "0-1", 4, MOST, "8,10,12,14", id="busy NUMA lacks cores: tie to busier socket"
        ),
    ],
)
def test_spread_by_pcpus(topo: NodeCPUTopology, taken: str, needed: int, strategy: str, want: str) -> None:
    assert take(topo, taken, needed, SPREAD, strategy) == want


@pytest.mark.parametrize(
    ("needed", "policy", "taken", "want"),
    [
        pytest.param(4, FULL, "", "0-1,8-9", id="FullPCPUs: siblings c and c+8 come together"),
        pytest.param(4, FULL, "0", "1-2,9-10", id="FullPCPUs: the half-used core 0 is skipped"),
        pytest.param(3, FULL, "", "0-1,8", id="FullPCPUs, odd count (not required): one and a half cores"),
        pytest.param(4, SPREAD, "", "0-3", id="SpreadByPCPUs: first thread of four cores"),
        pytest.param(10, SPREAD, "", "0-9", id="SpreadByPCPUs beyond the cores: second round 8, 9"),
    ],
)
def test_single_socket_hyperthreads_numbered_like_linux(
    needed: int, policy: str, taken: str, want: str
) -> None:
    assert take(TOPO_1S8C_HT, taken, needed, policy, LEAST) == want


@pytest.mark.parametrize(
    ("topo", "taken", "taken_excl", "excl", "policy", "needed", "want"),
    [
        pytest.param(
            U2_1_4_2,
            "0,2",
            "PCPULevel",
            "PCPULevel",
            SPREAD,
            4,
            "8,10,12,14",
            id="PCPULevel avoids shared cores",
        ),
        pytest.param(
            U2_1_4_2, "", "", "PCPULevel", SPREAD, 10, "0-4,6,8,10,12,14", id="PCPULevel counts own picks"
        ),
        pytest.param(
            U2_1_8_2, "0,2", "PCPULevel", "PCPULevel", SPREAD, 4, "4,6,8,10", id="PCPULevel on a big node"
        ),
        pytest.param(
            U2_1_8_2, "0,2", "PCPULevel", "None", SPREAD, 4, "1,3-4,6", id="no exclusivity: siblings ok"
        ),
        pytest.param(
            U2_1_4_2, "0,2", "NUMANodeLevel", "NUMANodeLevel", SPREAD, 4, "8,10,12,14", id="NUMA-exclusive"
        ),
        pytest.param(
            U2_1_4_2, "0,2", "NUMANodeLevel", "None", SPREAD, 4, "1,3-4,6", id="NUMA-exclusive pod ignored"
        ),
        pytest.param(
            U2_1_4_2, "0,2", "NUMANodeLevel", "NUMANodeLevel", FULL, 4, "8-11", id="NUMA-exclusive, cores"
        ),
        pytest.param(
            U2_1_4_2, "0,2", "NUMANodeLevel", "None", FULL, 4, "4-7", id="cores next to a NUMA-exclusive pod"
        ),
        pytest.param(
            TOPO_2S4N, "0", "PCPULevel", "PCPULevel", SPREAD, 2, "2,4", id="sibling 1 of an exclusive core"
        ),
        pytest.param(
            TOPO_2S4N, "0", "PCPULevel", "None", SPREAD, 2, "1-2", id="sibling 1 is fine without policy"
        ),
        pytest.param(
            TOPO_2S4N, "0", "NUMANodeLevel", "NUMANodeLevel", FULL, 4, "8-11", id="skips NUMA 0 entirely"
        ),
    ],
)
def test_exclusive_policies(
    topo: NodeCPUTopology, taken: str, taken_excl: str, excl: str, policy: str, needed: int, want: str
) -> None:
    assert take(topo, taken, needed, policy, MOST, exclusive=excl, taken_exclusive=taken_excl) == want


def test_one_thread_per_core_spread_takes_whole_cores_path() -> None:
    """Without hyper-threads SpreadByPCPUs goes through the whole-core steps (NUMA strategy)."""
    topo = NodeCPUTopology.uniform(1, 2, 4, 1)
    assert take(topo, "0", 2, SPREAD, LEAST) == "4-5"
    assert take(topo, "0", 2, SPREAD, MOST) == "1-2"


@pytest.mark.parametrize(
    "sequence",
    [
        pytest.param(
            [(4, FULL, "0-3"), (5, FULL, "0,4-7"), (4, FULL, "2-5")],
            id="max ref count 2: CPUs handed out twice, least referenced cores first",
        ),
        pytest.param(
            [
                (16, SPREAD, "0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30"),
                (16, FULL, "0-15"),
                (16, SPREAD, "1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31"),
                (16, FULL, "16-31"),
            ],
            id="max ref count 2: unreferenced threads preferred, node full after 4 pods",
        ),
    ],
)
def test_shared_cpus_with_max_ref_count(sequence: list[tuple[int, str, str]]) -> None:
    topo = NodeCPUTopology.uniform(1, 1, 4 if len(sequence) == 3 else 16, 2)
    node = NodeAllocation()
    for i, (needed, policy, want) in enumerate(sequence):
        free, allocated = node.available_cpus(topo, 2, ())
        got = take_cpus(topo, 2, free, allocated, needed, policy, "None", MOST)
        assert format_cpuset(got) == want
        node.add(PodAllocation(uid=str(i), cpuset=frozenset(got), cpu_exclusive_policy="PCPULevel"))
    if len(sequence) == 4:
        assert node.available_cpus(topo, 2, ())[0] == frozenset()


@pytest.mark.parametrize(
    ("available", "preferred", "needed", "want"),
    [
        pytest.param("0-63", "", 2, "0,2", id="no preference: plain take"),
        pytest.param("0-63", "0,2", 2, "0,2", id="preferred CPUs cover the request"),
        pytest.param("1,3-63", "", 2, "1,3", id="after 0,2 are gone"),
        pytest.param("0-63", "11,13,15,17", 2, "11,13", id="taken from the preferred CPUs only"),
        pytest.param("0-63", "5", 3, "0,2,5", id="preferred first, the rest from the others"),
    ],
)
def test_preferred_cpus_come_first(available: str, preferred: str, needed: int, want: str) -> None:
    topo = NodeCPUTopology.uniform(2, 1, 16, 2)
    got = take_preferred_cpus(
        topo, 1, parse_cpuset(available), parse_cpuset(preferred), {}, needed, SPREAD, "None", MOST
    )
    assert format_cpuset(got) == want


@pytest.mark.parametrize(
    ("taken", "needed", "message"),
    [
        pytest.param("0-29", 4, "not enough cpus available to satisfy request", id="fewer free than needed"),
        pytest.param("", 33, "not enough cpus available to satisfy request", id="more than the machine"),
    ],
)
def test_errors(taken: str, needed: int, message: str) -> None:
    with pytest.raises(CPUAllocationError, match=message):
        take(TOPO_2S4N, taken, needed, FULL, LEAST)


def test_zero_cpus_needed_is_an_empty_set() -> None:
    assert take(TOPO_2S4N, "", 0, FULL, LEAST) == ""
