"""The ``resource-status`` annotation (plugin.go preBindObject, pod_eventhandler.go): the exact
JSON PreBind writes, and the allocation restored from a bound pod into the node's books."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.scheduler.numa.allocation import NodeAllocation, PodAllocation
from controlplane.scheduler.numa.resourcestatus import (
    allocation_from_pod,
    pod_is_terminated,
    resource_status,
    resource_status_json,
)
from koordinator.api.extension.numa import NUMANodeResource, get_resource_status
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.numa.builders import TOPO_2S4N, make_pod

Q = Quantity.parse


@pytest.mark.parametrize(
    ("allocation", "text"),
    [
        pytest.param(
            PodAllocation(uid="u", cpuset=frozenset({0, 1, 2, 3, 8})),
            '{"cpuset":"0-3,8"}',
            id="cpuset only, canonical list form",
        ),
        pytest.param(
            PodAllocation(
                uid="u",
                cpuset=frozenset({8, 9}),
                numa_node_resources=(
                    NUMANodeResource(node=1, resources={"memory": Q("4Gi"), "cpu": Q("2")}),
                ),
            ),
            '{"cpuset":"8-9","numaNodeResources":[{"node":1,"resources":{"cpu":"2","memory":"4Gi"}}]}',
            id="cpuset and NUMA resources, names sorted",
        ),
        pytest.param(
            PodAllocation(
                uid="u",
                numa_node_resources=(
                    NUMANodeResource(node=0, resources={"cpu": Q("1750m")}),
                    NUMANodeResource(node=1, resources={"cpu": Q("1750m")}),
                ),
            ),
            '{"numaNodeResources":[{"node":0,"resources":{"cpu":"1750m"}},{"node":1,"resources":{"cpu":"1750m"}}]}',
            id="no cpuset: field omitted, node 0 kept",
        ),
        pytest.param(PodAllocation(uid="u"), "{}", id="nothing allocated"),
    ],
)
def test_resource_status_json(allocation: PodAllocation, text: str) -> None:
    assert resource_status_json(allocation) == text


def test_round_trip_through_the_annotation() -> None:
    allocation = PodAllocation(
        uid="uid-p",
        namespace="default",
        name="p",
        cpuset=frozenset({4, 5}),
        cpu_exclusive_policy="PCPULevel",
        numa_node_resources=(NUMANodeResource(node=0, resources={"cpu": Q("2")}),),
    )
    pod = (
        make_pod("p")
        .on("node-1")
        .resource_spec(preferredCPUExclusivePolicy="PCPULevel")
        .resource_status(resource_status_json(allocation))
        .build()
    )
    assert allocation_from_pod(pod) == allocation
    assert get_resource_status(pod["metadata"]["annotations"]) == resource_status(allocation)


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(make_pod().resource_status({"cpuset": "0-1"}).build(), id="not bound to a node"),
        pytest.param(make_pod().on("n").build(), id="no resource-status"),
        pytest.param(make_pod().on("n").resource_status({}).build(), id="empty resource-status"),
        pytest.param(make_pod().on("n").resource_status({"cpuset": "1-x"}).build(), id="bad cpuset"),
        pytest.param(make_pod().on("n").resource_status("{").build(), id="bad JSON"),
    ],
)
def test_pods_holding_nothing_restore_nothing(pod: dict[str, Any]) -> None:
    assert allocation_from_pod(pod) is None


def test_restored_pods_fill_the_books_once() -> None:
    """Restoring the same pod twice (informer resync) counts its CPUs once."""
    pod = make_pod("p").on("node-1").resource_status({"cpuset": "0-3"}).build()
    node = NodeAllocation()
    for _ in range(2):
        restored = allocation_from_pod(pod)
        assert restored is not None
        node.update(restored)
    free, _ = node.available_cpus(TOPO_2S4N, 1, ())
    assert min(free) == 4
    assert len(free) == 28


@pytest.mark.parametrize(
    ("phase", "terminated"),
    [
        pytest.param("Succeeded", True, id="Succeeded"),
        pytest.param("Failed", True, id="Failed"),
        pytest.param("Running", False, id="Running"),
    ],
)
def test_pod_is_terminated(phase: str, terminated: bool) -> None:
    assert pod_is_terminated(make_pod().phase(phase).build()) is terminated
