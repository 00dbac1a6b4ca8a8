"""Per-node bookkeeping (node_allocation.go): adding, replacing and releasing pods by uid,
reference counts and exclusive policies per CPU, available CPUs, per-NUMA totals and the
idle/single/shared NUMA states."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from controlplane.scheduler.numa.accumulator import AllocatedCPU
from controlplane.scheduler.numa.allocation import NodeAllocation, PodAllocation
from koordinator.api.cpuset import format_cpuset, parse_cpuset
from koordinator.api.extension.numa import NUMANodeResource
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.numa.builders import TOPO_2S4N

Q = Quantity.parse


def pod(uid: str, cpus: str = "", excl: str = "", numa: Iterable[tuple[int, str]] = ()) -> PodAllocation:
    return PodAllocation(
        uid=uid,
        cpuset=frozenset(parse_cpuset(cpus)),
        cpu_exclusive_policy=excl,
        numa_node_resources=tuple(NUMANodeResource(node=n, resources={"cpu": Q(c)}) for n, c in numa),
    )


def test_add_is_idempotent_by_uid() -> None:
    node = NodeAllocation()
    node.add(pod("a", "0-3", numa=[(0, "4")]))
    node.add(pod("a", "4-7", numa=[(0, "4")]))
    assert node.allocated_cpus() == {cpu: AllocatedCPU(1, "") for cpu in range(4)}
    assert node.allocated_numa_resources() == {0: {"cpu": Q("4")}}


def test_update_replaces_and_release_forgets() -> None:
    node = NodeAllocation()
    node.add(pod("a", "0-3", numa=[(0, "4")]))
    node.update(pod("a", "4-5", numa=[(0, "2")]))
    assert sorted(node.allocated_cpus()) == [4, 5]
    assert node.allocated_numa_resources() == {0: {"cpu": Q("2")}}
    node.release("a")
    node.release("a")
    node.release("unknown")
    assert node.allocated_cpus() == {}
    assert node.allocated_numa_resources() == {0: {"cpu": Q("0")}}
    assert node.get("a") is None


def test_shared_cpus_count_references_and_keep_the_last_exclusive_policy() -> None:
    node = NodeAllocation()
    node.add(pod("a", "0-1", "PCPULevel"))
    node.add(pod("b", "1-2", "NUMANodeLevel"))
    assert node.allocated_cpus() == {
        0: AllocatedCPU(1, "PCPULevel"),
        1: AllocatedCPU(2, "NUMANodeLevel"),
        2: AllocatedCPU(1, "NUMANodeLevel"),
    }
    node.release("b")
    assert node.allocated_cpus() == {0: AllocatedCPU(1, "PCPULevel"), 1: AllocatedCPU(1, "NUMANodeLevel")}


@pytest.mark.parametrize(
    ("max_ref", "reserved", "preferred", "want"),
    [
        pytest.param(1, "", [], "8-31", id="held CPUs are unavailable"),
        pytest.param(1, "30-31", [], "8-29", id="reserved CPUs are unavailable"),
        pytest.param(2, "", [], "0-3,6-31", id="max ref 2: CPUs held once stay available"),
        pytest.param(1, "", ["0-1"], "0-1,8-31", id="a preferred set gives its CPUs back"),
        pytest.param(2, "", ["4-5"], "0-31", id="one reference given back frees doubly held CPUs"),
    ],
)
def test_available_cpus(max_ref: int, reserved: str, preferred: list[str], want: str) -> None:
    node = NodeAllocation()
    node.add(pod("a", "0-7"))
    node.add(pod("b", "4-5"))
    free, _ = node.available_cpus(
        TOPO_2S4N, max_ref, parse_cpuset(reserved), *(parse_cpuset(p) for p in preferred)
    )
    assert format_cpuset(free) == want


def test_available_cpus_view_drops_given_back_references() -> None:
    node = NodeAllocation()
    node.add(pod("a", "0-1", "PCPULevel"))
    _, view = node.available_cpus(TOPO_2S4N, 1, (), parse_cpuset("1"))
    assert view == {0: AllocatedCPU(1, "PCPULevel")}


def test_available_numa_resources_subtract_taken_and_reusable() -> None:
    zones = [
        NUMANodeResource(node=0, resources={"cpu": Q("8")}),
        NUMANodeResource(node=1, resources={"cpu": Q("8")}),
    ]
    node = NodeAllocation()
    node.add(pod("a", numa=[(0, "6")]))
    free, taken = node.available_numa_resources(zones, {0: {"cpu": Q("1")}})
    assert free == {0: {"cpu": Q("3")}, 1: {"cpu": Q("8")}}
    assert taken == {0: {"cpu": Q("5")}}


def test_available_numa_resources_count_bound_cpus_amplified() -> None:
    """Ratio 1.5: a pod bound to 4 CPUs of NUMA 0 (cpu 4 recorded) takes 6 amplified CPUs of 12."""
    zones = [NUMANodeResource(node=0, resources={"cpu": Q("12")})]
    node = NodeAllocation()
    node.add(pod("a", "0-3", numa=[(0, "4")]))
    free, taken = node.available_numa_resources(zones, cpu_amplification_ratio=1.5, topology=TOPO_2S4N)
    assert taken == {0: {"cpu": Q("6")}}
    assert free == {0: {"cpu": Q("6")}}


@pytest.mark.parametrize(
    ("pods", "want"),
    [
        pytest.param([], ["idle"] * 4, id="no pods"),
        pytest.param([pod("a", "0-1")], ["single", "idle", "idle", "idle"], id="pod inside NUMA 0"),
        pytest.param([pod("a", "6-9")], ["shared", "shared", "idle", "idle"], id="pod across NUMA 0 and 1"),
        pytest.param(
            [pod("a", "0-1"), pod("b", "6-9")], ["shared", "shared", "idle", "idle"], id="shared wins"
        ),
        pytest.param(
            [pod("a", numa=[(2, "4")])], ["idle"] * 4, id="NUMA resources without cpuset do not count"
        ),
    ],
)
def test_numa_node_status(pods: list[PodAllocation], want: list[str]) -> None:
    node = NodeAllocation()
    for allocation in pods:
        node.add(allocation)
    assert node.numa_node_status(TOPO_2S4N, 4) == want


def test_pods_are_kept_without_topology() -> None:
    """A bound pod seen before the node's NRT is recorded; its NUMA state resolves later."""
    node = NodeAllocation()
    node.add(pod("a", "8-9"))
    assert node.numa_node_status(None, 2) == ["single", "idle"]
    assert node.numa_node_status(TOPO_2S4N, 2) == ["idle", "single"]
