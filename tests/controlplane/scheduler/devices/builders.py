"""Builders for pods' device annotations and the nodes the DeviceShare tests share (Device objects
come from :mod:`tests.koordinator.api.builders`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.scheduler.devices.claims import DeviceClaim, build_claim
from controlplane.scheduler.devices.inventory import NodeDevices
from tests.koordinator.api.builders import GPU_80G, GiB, device, gpu, rdma

__all__ = [
    "GPU_80G",
    "UPSTREAM_GPU_MEMORY",
    "GiB",
    "allocated",
    "claim",
    "device",
    "gpu",
    "hints",
    "joint",
    "mixed_node",
    "rdma",
    "upstream_node",
]

#: The memory upstream's allocator tests give each GPU (``83201216Ki``).
UPSTREAM_GPU_MEMORY = 83201216 * 1024


def allocated(allocations: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, str]:
    """Annotations of a pod holding ``allocations`` (the device-allocated JSON)."""
    return {"scheduling.koordinator.sh/device-allocated": json.dumps(allocations)}


def hints(value: Mapping[str, Any]) -> dict[str, str]:
    return {"scheduling.koordinator.sh/device-allocate-hint": json.dumps(value)}


def joint(types: Sequence[str], scope: str = "") -> dict[str, str]:
    body: dict[str, Any] = {"deviceTypes": list(types)}
    if scope:
        body["requiredScope"] = scope
    return {"scheduling.koordinator.sh/device-joint-allocate": json.dumps(body)}


def claim(requests: Mapping[str, int], *annotation_maps: Mapping[str, str]) -> DeviceClaim:
    annotations: dict[str, str] = {}
    for more in annotation_maps:
        annotations.update(more)
    built = build_claim(requests, annotations)
    assert built is not None
    return built


def mixed_node() -> NodeDevices:
    """The brief's node: 4 x 80 GiB GPUs, two RDMA NICs with VFs, two NUMA nodes / PCIe switches.

    GPU 0, 1 and RDMA 1 sit on NUMA 0 / ``pci0``; GPU 2, 3 and RDMA 2 on NUMA 1 / ``pci1``.
    GPU 3 is unhealthy; GPU 1 is half used by ``pod-a`` (50 core, 50 ratio, 40 GiB).
    """
    node = NodeDevices.from_device(
        device(
            gpu(0, numa=0, pcie="pci0"),
            gpu(1, numa=0, pcie="pci0"),
            gpu(2, numa=1, pcie="pci1"),
            gpu(3, numa=1, pcie="pci1", healthy=False),
            rdma(1, numa=0, pcie="pci0", bus="0000:1f"),
            rdma(2, numa=1, pcie="pci1", bus="0000:90"),
        )
    )
    node.restore_pod(
        "pod-a",
        allocated(
            {
                "gpu": [
                    {
                        "minor": 1,
                        "resources": {
                            "koordinator.sh/gpu-core": "50",
                            "koordinator.sh/gpu-memory": "40Gi",
                            "koordinator.sh/gpu-memory-ratio": "50",
                        },
                    }
                ]
            }
        ),
    )
    return node


def upstream_node() -> NodeDevices:
    """Upstream's ``fakeDeviceCR``: 8 GPUs and 4 RDMA NICs (30 VFs each), 2 NUMA nodes, 4 PCIe switches.

    PCIe ``0``: GPU 0, 1 and RDMA 1; ``1``: GPU 2, 3 and RDMA 2 (NUMA 0); ``2``: GPU 4, 5 and
    RDMA 3; ``3``: GPU 6, 7 and RDMA 4 (NUMA 1). RDMA NICs carry label ``type=fakeW``.
    """
    buses = {1: "0000:1f", 2: "0000:90", 3: "0000:51", 4: "0000:b9"}
    infos: list[dict[str, Any]] = []
    for minor, bus in buses.items():
        pcie = minor - 1
        info = rdma(minor, numa=pcie // 2, pcie=str(pcie), bus=bus, vfs=0, labels={"type": "fakeW"})
        info["vfGroups"] = [
            {
                "labels": {"type": "general"},
                "vfs": [{"minor": i - 2, "busID": f"{bus}:0{i // 8}.{i % 8}"} for i in range(2, 32)],
            }
        ]
        infos.append(info)
    for minor in range(8):
        pcie = minor // 2
        infos.append(gpu(minor, numa=pcie // 2, pcie=str(pcie), memory=UPSTREAM_GPU_MEMORY))
    return NodeDevices.from_device(device(*infos, name="test-node-1"))
