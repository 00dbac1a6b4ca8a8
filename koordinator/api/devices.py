"""The node extended resources a ``Device`` object stands for (slo-controller's GPU/RDMA device plug-ins).

Shared by koord-manager's noderesource controller, which writes them into the node's
``status.capacity`` and ``status.allocatable``, and by koord-scheduler's DeviceShare,
which reads device amounts the same way (:func:`to_ints`, :func:`transform_deprecated`).

GPUDeviceResource sums the resources of the healthy GPUs (``gpu-core``, ``gpu-memory``,
``gpu-memory-ratio``, and any Ascend NPU amounts), adds ``koordinator.sh/gpu`` = the summed
``gpu-core`` (when the Device's ``gpu-vendor`` label is ``nvidia`` or absent) and, behind
the ``EnableSyncGPUSharedResource`` gate, ``gpu.shared`` = 100 per healthy GPU; only its
known names (:data:`GPU_NODE_RESOURCE_NAMES`) reach the node. RDMADeviceResource sets
``koordinator.sh/rdma`` = 100 per healthy RDMA device. Without a Device object, or without
a healthy device of the kind, the plug-in's names are removed from the node instead.

Deliberate difference from upstream: upstream's GPUDeviceResource leaves a name it owns but
did not produce on the node as it was ("ignore missing resources ... TBD"). When the Device
exists but has no healthy GPU it produces only ``koordinator.sh/gpu`` (and ``gpu.shared``)
= 0, so a node whose GPUs all failed keeps advertising ``gpu-core``, ``gpu-memory`` and
``gpu-memory-ratio``; likewise ``gpu.shared`` stays after ``EnableSyncGPUSharedResource``
is turned off, and an NPU amount stays after the Device stops reporting it. Here every GPU
name the plug-in does not produce is removed (``resets``), as when the Device is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordinator.api.extension.device import DEVICE_TYPE_GPU, DEVICE_TYPE_RDMA, LABEL_GPU_VENDOR
from koordinator.api.extension.resources import (
    DEPRECATED_ALIASES,
    FPGA,
    GPU,
    GPU_CORE,
    GPU_MEMORY,
    GPU_MEMORY_RATIO,
    GPU_SHARED,
    HUAWEI_NPU_CORE,
    HUAWEI_NPU_CPU,
    HUAWEI_NPU_DVPP,
    RDMA,
)
from koordinator.api.quantity import Quantity
from koordinator.api.types.scheduling import Device

__all__ = [
    "DEPRECATED_DEVICE_NAMES",
    "GPU_NODE_RESOURCE_NAMES",
    "RDMA_NODE_RESOURCE_NAMES",
    "NodeDeviceResources",
    "gpu_node_resources",
    "node_device_resources",
    "rdma_node_resources",
    "to_ints",
    "transform_deprecated",
]

#: Deprecated ``kubernetes.io/*`` device names -> their ``koordinator.sh/*`` names.
DEPRECATED_DEVICE_NAMES: dict[str, str] = {
    old: new
    for old, new in DEPRECATED_ALIASES.items()
    if new in (GPU, GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO, RDMA, FPGA)
}

#: Names GPUDeviceResource writes to (or removes from) the node.
GPU_NODE_RESOURCE_NAMES = (
    GPU,
    GPU_CORE,
    HUAWEI_NPU_CORE,
    HUAWEI_NPU_CPU,
    HUAWEI_NPU_DVPP,
    GPU_MEMORY,
    GPU_MEMORY_RATIO,
    GPU_SHARED,
)
#: Names RDMADeviceResource writes to (or removes from) the node.
RDMA_NODE_RESOURCE_NAMES = (RDMA,)

#: GPU vendors whose cards count towards ``koordinator.sh/gpu`` (empty: not reported).
_KOORD_GPU_VENDORS = ("", "nvidia")


def transform_deprecated(amounts: Mapping[str, int]) -> dict[str, int]:
    """Rename deprecated ``kubernetes.io/*`` device names; a current name already present wins."""
    result = dict(amounts)
    for old, new in DEPRECATED_DEVICE_NAMES.items():
        if old in result and new not in result:
            result[new] = result.pop(old)
    return result


def to_ints(resources: Mapping[str, Quantity]) -> dict[str, int]:
    """Quantities -> integers (rounded up, as ``Quantity.Value()``); deprecated names renamed."""
    return transform_deprecated({name: quantity.value() for name, quantity in resources.items()})


@dataclass(frozen=True)
class NodeDeviceResources:
    """What to do to the node's allocatable and capacity."""

    #: name -> amount to set (gpu-memory in bytes).
    resources: dict[str, int] = field(default_factory=dict)
    #: names to remove.
    resets: tuple[str, ...] = ()

    def merged(self, other: NodeDeviceResources) -> NodeDeviceResources:
        return NodeDeviceResources({**self.resources, **other.resources}, self.resets + other.resets)


def _healthy(device: Mapping[str, Any], device_type: str) -> list[dict[str, int]]:
    parsed = Device.from_dict(device)
    infos = parsed.spec.devices if parsed.spec is not None else []
    return [to_ints(info.resources) for info in infos if info.type == device_type and info.health]


def gpu_node_resources(
    device: Mapping[str, Any] | None, *, sync_gpu_shared: bool = False
) -> NodeDeviceResources:
    """GPUDeviceResource's result for the node's Device object (``None``: there is none)."""
    if device is None:
        return NodeDeviceResources(resets=GPU_NODE_RESOURCE_NAMES)
    gpus = _healthy(device, DEVICE_TYPE_GPU)
    if not gpus:
        # upstream sets only gpu (and gpu.shared) to 0 here and leaves the other names stale
        # ("ignore missing resources ... TBD"); a node without a healthy GPU loses them all
        return NodeDeviceResources(resets=GPU_NODE_RESOURCE_NAMES)
    summed: dict[str, int] = {}
    for resources in gpus:
        for name, value in resources.items():
            summed[name] = summed.get(name, 0) + value
    vendor = ((device.get("metadata") or {}).get("labels") or {}).get(LABEL_GPU_VENDOR, "")
    if vendor in _KOORD_GPU_VENDORS:
        summed[GPU] = summed.get(GPU_CORE, 0)
    if sync_gpu_shared:
        summed[GPU_SHARED] = 100 * len(gpus)
    produced = {name: summed[name] for name in GPU_NODE_RESOURCE_NAMES if name in summed}
    return NodeDeviceResources(produced, tuple(n for n in GPU_NODE_RESOURCE_NAMES if n not in produced))


def rdma_node_resources(device: Mapping[str, Any] | None) -> NodeDeviceResources:
    """RDMADeviceResource's result for the node's Device object (``None``: there is none)."""
    if device is None:
        return NodeDeviceResources(resets=RDMA_NODE_RESOURCE_NAMES)
    count = len(_healthy(device, DEVICE_TYPE_RDMA))
    if count == 0:
        return NodeDeviceResources(resets=RDMA_NODE_RESOURCE_NAMES)
    return NodeDeviceResources({RDMA: 100 * count})


def node_device_resources(
    device: Mapping[str, Any] | None, *, sync_gpu_shared: bool = False
) -> NodeDeviceResources:
    """Both plug-ins together."""
    return gpu_node_resources(device, sync_gpu_shared=sync_gpu_shared).merged(rdma_node_resources(device))
