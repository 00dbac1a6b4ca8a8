"""Parity with upstream's ``TestAutopilotAllocator`` table (``device_allocator_test.go``).

Node: upstream's ``fakeDeviceCR`` (8 GPUs, 4 RDMA NICs, 2 GPUs + 1 NIC per PCIe switch, two
switches per NUMA node). Pod: ``nvidia.com/gpu: N`` plus ``koordinator.sh/rdma: 1``, an RDMA
hint selecting ``type=fakeW`` NICs and VFs of type ``general``/``fakeG``, and a GPU+RDMA joint
allocation; the allocator runs without a scorer, as upstream's Filter does.
"""

from __future__ import annotations

import pytest

from controlplane.scheduler.devices.allocator import allocate
from controlplane.scheduler.devices.inventory import NodeDevices
from tests.controlplane.scheduler.devices.builders import allocated, claim, hints, joint, upstream_node

RDMA_HINT = {
    "selector": {"matchLabels": {"type": "fakeW"}},
    "vfSelector": {"matchExpressions": [{"key": "type", "operator": "In", "values": ["general", "fakeG"]}]},
}
WHOLE = {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100"}


def picks(result) -> tuple[list[int], list[tuple[int, str]]]:
    gpus = [item.minor for item in result.get("gpu", [])]
    nics = [
        (item.minor, item.extension.virtual_functions[0].bus_id if item.extension else "")
        for item in result.get("rdma", [])
    ]
    return gpus, nics


def assigned_gpu0_and_vf(node: NodeDevices) -> NodeDevices:
    node.restore_pod(
        "assigned",
        allocated(
            {
                "gpu": [{"minor": 0, "resources": WHOLE}],
                "rdma": [
                    {
                        "minor": 1,
                        "resources": {"koordinator.sh/rdma": "1"},
                        "extension": {"vfs": [{"busID": "0000:1f:00.2", "minor": 0}]},
                    }
                ],
            }
        ),
    )
    return node


@pytest.mark.parametrize(
    ("gpus", "expected_gpus", "expected_nics"),
    [
        pytest.param(1, [0], [(1, "0000:1f:00.2")], id="1-gpu-1-vf"),
        pytest.param(2, [0, 1], [(1, "0000:1f:00.2")], id="2-gpu-1-vf"),
        pytest.param(3, [0, 1, 2], [(1, "0000:1f:00.2"), (2, "0000:90:00.2")], id="3-gpu-2-vf"),
        pytest.param(4, [0, 1, 2, 3], [(1, "0000:1f:00.2"), (2, "0000:90:00.2")], id="4-gpu-2-vf"),
        pytest.param(
            6,
            [0, 1, 2, 3, 4, 5],
            [(1, "0000:1f:00.2"), (2, "0000:90:00.2"), (3, "0000:51:00.2")],
            id="6-gpu-3-vf",
        ),
        pytest.param(
            8,
            list(range(8)),
            [(1, "0000:1f:00.2"), (2, "0000:90:00.2"), (3, "0000:51:00.2"), (4, "0000:b9:00.2")],
            id="8-gpu-4-vf",
        ),
    ],
)
def test_gpus_with_one_vf_per_pcie_switch(gpus, expected_gpus, expected_nics):
    pod = claim(
        {"nvidia.com/gpu": gpus, "koordinator.sh/rdma": 1}, hints({"rdma": RDMA_HINT}), joint(["gpu", "rdma"])
    )
    assert picks(allocate(upstream_node(), pod, reserve=False)) == (expected_gpus, expected_nics)


def test_vf_alone():
    """``allocate 0 GPU and 1 VF``: no joint allocation, the first NIC's first VF."""
    pod = claim({"koordinator.sh/rdma": 1}, hints({"rdma": RDMA_HINT}))
    assert picks(allocate(upstream_node(), pod, reserve=False)) == ([], [(1, "0000:1f:00.2")])


@pytest.mark.parametrize(
    ("gpus", "expected_gpus", "expected_nics"),
    [
        pytest.param(2, [2, 3], [(2, "0000:90:00.2")], id="2-gpu-move-to-the-free-switch"),
        pytest.param(3, [1, 2, 3], [(1, "0000:1f:00.3"), (2, "0000:90:00.2")], id="3-gpu-stay-on-numa-0"),
    ],
)
def test_with_assigned_devices(gpus, expected_gpus, expected_nics):
    """GPU 0 and the first VF of NIC 1 are taken by another pod."""
    pod = claim(
        {"nvidia.com/gpu": gpus, "koordinator.sh/rdma": 1}, hints({"rdma": RDMA_HINT}), joint(["gpu", "rdma"])
    )
    node = assigned_gpu0_and_vf(upstream_node())
    assert picks(allocate(node, pod, reserve=False)) == (expected_gpus, expected_nics)


def test_host_network_applies_for_all_nics():
    """``ApplyForAll`` drops RDMA from the joint allocation and takes every NIC, without VFs."""
    hint = {"rdma": {"selector": {"matchLabels": {"type": "fakeW"}}, "allocateStrategy": "ApplyForAll"}}
    pod = claim({"nvidia.com/gpu": 4, "koordinator.sh/rdma": 1}, hints(hint), joint(["gpu", "rdma"]))
    result = allocate(upstream_node(), pod, reserve=False)
    assert picks(result) == ([0, 1, 2, 3], [(1, ""), (2, ""), (3, ""), (4, "")])
    assert {item.resources["koordinator.sh/rdma"].value() for item in result["rdma"]} == {1}


def test_secondary_device_well_planned_skips_rdma_outside_reserve():
    node = upstream_node()
    node.labels["node.koordinator.sh/secondary-device-well-planned"] = "true"
    pod = claim(
        {"nvidia.com/gpu": 8, "koordinator.sh/rdma": 1}, hints({"rdma": RDMA_HINT}), joint(["gpu", "rdma"])
    )
    assert picks(allocate(node, pod, reserve=False)) == (list(range(8)), [])


def test_gpu_resources_match_upstreams_expected_list():
    """``gpuResourceList``: 100 core, 100 ratio, 85198045184 bytes (``83201216Ki``)."""
    pod = claim({"nvidia.com/gpu": 1})
    (item,) = allocate(upstream_node(), pod)["gpu"]
    assert {name: str(value) for name, value in item.resources.items()} == {
        "koordinator.sh/gpu-core": "100",
        "koordinator.sh/gpu-memory": "83201216Ki",
        "koordinator.sh/gpu-memory-ratio": "100",
    }
    assert item.resources["koordinator.sh/gpu-memory"].value() == 85198045184
