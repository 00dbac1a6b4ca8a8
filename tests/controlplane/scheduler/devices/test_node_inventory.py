"""A node's device inventory: healthy totals, topology, VFs, bookings (upstream ``device_cache.go``)."""

from __future__ import annotations

import pytest

from controlplane.scheduler.devices.inventory import NodeDevices
from koordinator.api.extension.device import DeviceAllocation, DeviceAllocationExtension, VirtualFunction
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.devices.builders import (
    GPU_80G,
    GiB,
    allocated,
    device,
    gpu,
    mixed_node,
    rdma,
)

CORE = "koordinator.sh/gpu-core"
MEM = "koordinator.sh/gpu-memory"
RATIO = "koordinator.sh/gpu-memory-ratio"
RDMA = "koordinator.sh/rdma"
WHOLE_GPU = {CORE: 100, MEM: GPU_80G, RATIO: 100}


def test_totals_keep_unhealthy_minors_empty():
    """Healthy devices carry their resources; an unhealthy one is known but has nothing."""
    node = mixed_node()
    assert node.total["gpu"] == {0: WHOLE_GPU, 1: WHOLE_GPU, 2: WHOLE_GPU, 3: {}}
    assert node.total["rdma"] == {1: {RDMA: 100}, 2: {RDMA: 100}}


def test_gpu_memory_is_bytes_whatever_the_quantity_format():
    node = NodeDevices.from_device(device(gpu(0) | {"resources": {MEM: "80Gi", CORE: "100", RATIO: "100"}}))
    assert node.total["gpu"][0][MEM] == 80 * GiB


def test_deprecated_names_in_the_device_object_are_renamed():
    info = gpu(0) | {"resources": {"kubernetes.io/gpu-core": "100", "kubernetes.io/gpu-memory": "1Gi"}}
    node = NodeDevices.from_device(device(info))
    assert node.total["gpu"][0] == {CORE: 100, MEM: GiB}


def test_topology_and_virtual_functions_come_from_the_device_infos():
    node = mixed_node()
    gpu2, nic1 = node.info("gpu", 2), node.info("rdma", 1)
    assert gpu2 is not None
    assert gpu2.topology is not None
    assert nic1 is not None
    topology = gpu2.topology
    assert (topology.socket_id, topology.node_id, topology.pcie_id) == (1, 1, "pci1")
    vfs = nic1.vf_groups[0].vfs
    assert [(vf.minor, vf.bus_id) for vf in vfs] == [(0, "0000:1f:00.2"), (1, "0000:1f:00.3")]
    assert node.has_virtual_functions("rdma")
    assert not node.has_virtual_functions("gpu")


@pytest.mark.parametrize(
    ("infos", "has_tree"),
    [
        pytest.param([gpu(0), gpu(1, numa=1, pcie="pci1")], True, id="every-gpu-has-topology"),
        pytest.param([gpu(0), gpu(1, numa=None)], False, id="one-gpu-without-topology"),
        pytest.param([rdma(1)], False, id="no-gpus"),
    ],
)
def test_gpu_topology_tree_needs_every_gpu_placed(infos, has_tree):
    node = NodeDevices.from_device(device(*infos))
    assert (node.gpu_topology is not None) == has_tree


def test_free_subtracts_the_bookings():
    node = mixed_node()
    assert node.free("gpu")[1] == {CORE: 50, MEM: 40 * GiB, RATIO: 50}
    assert node.free("gpu")[0] == WHOLE_GPU
    assert node.free("gpu")[3] == {}


def test_restoring_a_pod_twice_books_it_once():
    """Adding a pod that is already booked changes nothing (upstream ``isValid``)."""
    node = mixed_node()
    again = allocated({"gpu": [{"minor": 1, "resources": {CORE: "50", MEM: "40Gi", RATIO: "50"}}]})
    assert node.restore_pod("pod-a", again) is False
    assert node.used["gpu"] == {1: {CORE: 50, MEM: 40 * GiB, RATIO: 50}}


def test_removing_a_pod_frees_its_devices_and_is_idempotent():
    node = mixed_node()
    assert node.remove_pod("pod-a") is True
    assert node.free("gpu")[1] == WHOLE_GPU
    assert "gpu" not in node.used
    assert node.remove_pod("pod-a") is False


def test_restore_reads_deprecated_names_in_the_annotation():
    """Old pods wrote ``kubernetes.io/gpu-*`` keys; they count as the current names."""
    node = NodeDevices.from_device(device(gpu(0)))
    annotation = allocated(
        {
            "gpu": [
                {"minor": 0, "resources": {"kubernetes.io/gpu-core": "60", "kubernetes.io/gpu-memory": "8Gi"}}
            ]
        }
    )
    node.restore_pod("old", annotation)
    assert node.used["gpu"][0] == {CORE: 60, MEM: 8 * GiB}


def test_virtual_functions_are_booked_and_released_with_the_pod():
    node = mixed_node()
    vf = VirtualFunction(minor=0, bus_id="0000:1f:00.2")
    item = DeviceAllocation(
        minor=1,
        resources={RDMA: Quantity.from_int(1)},
        extension=DeviceAllocationExtension(virtual_functions=[vf]),
    )
    node.add_pod("pod-b", {"rdma": [item]})
    assert node.vf_allocated == {"rdma": {1: {"0000:1f:00.2"}}}
    assert node.pod_allocations("pod-b") == {"rdma": [item]}
    node.remove_pod("pod-b")
    assert node.vf_allocated == {}


def test_a_new_device_object_keeps_the_bookings():
    node = mixed_node()
    node.update_device(
        device(gpu(0), gpu(1), labels={"node.koordinator.sh/secondary-device-well-planned": "true"})
    )
    assert node.free("gpu")[1][CORE] == 50
    assert node.secondary_device_well_planned
    assert node.total["rdma"] == {}
