"""Picking CPUs by topology: upstream's ``TakeByTopology`` cases (the kubelet's CPU
accumulator tests in ``pkg/koordlet/util/kubelet/cpu_assignment_test.go``)."""

from __future__ import annotations

import pytest

from koordinator.api.cpuset import format_cpuset, parse_cpuset
from koordlet.statesinformer.cpu_assignment import take_by_topology
from koordlet.system.topology import CPUTopology, Processor


def _topology(*cpus: tuple[int, int, int, int]) -> CPUTopology:
    """(cpu, core, socket, NUMA node) of every CPU."""
    return CPUTopology(tuple(Processor(node, socket, core, cpu) for cpu, core, socket, node in cpus))


# 1 socket, 4 cores, 2 threads: CPU n and n+4 share core n
SINGLE_SOCKET_HT = _topology(*((cpu, cpu % 4, 0, 0) for cpu in range(8)))
# 2 sockets (one NUMA node each), 6 cores: even CPUs on socket 0, odd ones on socket 1,
# CPU n and n+6 share core n % 6
DUAL_SOCKET_HT = _topology(*((cpu, cpu % 6, cpu % 2, cpu % 2) for cpu in range(12)))
# 2 sockets of 2 NUMA nodes, 40 cores: CPUs 0-39 the first threads, 40-79 their siblings;
# NUMA node n holds cores 10n..10n+9, sockets 0 and 1 NUMA nodes 0-1 and 2-3
DUAL_SOCKET_MULTI_NUMA_HT = _topology(
    *((cpu, cpu % 40, (cpu % 40) // 20, (cpu % 40) // 10) for cpu in range(80))
)

CASES = {
    "more than available": (SINGLE_SOCKET_HT, "0,2,4,6", 5, None),
    "zero": (SINGLE_SOCKET_HT, "0-7", 0, ""),
    "one": (SINGLE_SOCKET_HT, "0-7", 1, "0"),
    "one, some taken": (SINGLE_SOCKET_HT, "1,3,5-7", 1, "6"),
    "two: a whole core": (SINGLE_SOCKET_HT, "0-7", 2, "0,4"),
    "all": (SINGLE_SOCKET_HT, "0-7", 8, "0-7"),
    "two, one core free": (SINGLE_SOCKET_HT, "0-3,6", 2, "2,6"),
    "a socket": (DUAL_SOCKET_HT, "0-11", 6, "0,2,4,6,8,10"),
    "one, from the fuller socket": (DUAL_SOCKET_HT, "1-5,7-11", 1, "2"),
    "a socket and a core": (DUAL_SOCKET_HT, "0-11", 8, "0-2,4,6-8,10"),
    "a socket of multi-NUMA": (DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 40, "0-19,40-59"),
    "a NUMA node": (DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 20, "0-9,40-49"),
    "a NUMA node, one taken": (DUAL_SOCKET_MULTI_NUMA_HT, "10-39,50-79", 20, "10-19,50-59"),
    "a socket and a NUMA node": (DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 60, "0-29,40-69"),
    "a socket and a NUMA node, a core taken": (DUAL_SOCKET_MULTI_NUMA_HT, "1-39,41-79", 60, "10-39,50-79"),
    "three NUMA nodes and two cores": (DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 64, "0-31,40-71"),
}


@pytest.mark.parametrize(("topology", "available", "count", "expected"), CASES.values(), ids=list(CASES))
def test_take_by_topology(topology, available, count, expected):
    taken = take_by_topology(topology, parse_cpuset(available), count)
    assert (None if taken is None else format_cpuset(taken)) == expected
