"""Builders for Device objects (``scheduling.koordinator.sh/v1alpha1``), shared by the tests of
the node device resources, DeviceShare and the manager's noderesource controller."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["GPU_80G", "GiB", "device", "gpu", "rdma"]

GiB = 1024**3
#: One 80 GiB GPU.
GPU_80G = 80 * GiB


def gpu(
    minor: int,
    *,
    numa: int | None = 0,
    pcie: str = "pci0",
    memory: int = GPU_80G,
    healthy: bool = True,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    info: dict[str, Any] = {
        "type": "gpu",
        "id": f"GPU-{minor}",
        "minor": minor,
        "health": healthy,
        "resources": {
            "koordinator.sh/gpu-core": "100",
            "koordinator.sh/gpu-memory": str(memory),
            "koordinator.sh/gpu-memory-ratio": "100",
        },
    }
    if numa is not None:
        info["topology"] = {"socketID": max(numa, 0), "nodeID": numa, "pcieID": pcie}
    if labels:
        info["labels"] = dict(labels)
    return info


def rdma(
    minor: int,
    *,
    numa: int | None = 0,
    pcie: str = "pci0",
    bus: str = "0000:1f",
    vfs: int = 2,
    healthy: bool = True,
    labels: Mapping[str, str] | None = None,
    vf_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    info: dict[str, Any] = {
        "type": "rdma",
        "id": f"{bus}:00.0",
        "minor": minor,
        "health": healthy,
        "resources": {"koordinator.sh/rdma": "100"},
    }
    if numa is not None:
        info["topology"] = {"socketID": max(numa, 0), "nodeID": numa, "pcieID": pcie}
    if vfs:
        info["vfGroups"] = [
            {
                "labels": dict(vf_labels or {"type": "general"}),
                "vfs": [{"minor": i, "busID": f"{bus}:00.{i + 2}"} for i in range(vfs)],
            }
        ]
    if labels:
        info["labels"] = dict(labels)
    return info


def device(
    *infos: Mapping[str, Any], labels: Mapping[str, str] | None = None, name: str = "node-1"
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Device",
        "metadata": metadata,
        "spec": {"devices": [dict(i) for i in infos]},
    }
