"""GPUDeviceResource and RDMADeviceResource: a node's device resources and GPU labels from its Device.

The amounts come from :func:`koordinator.api.devices.gpu_node_resources` and
:func:`~koordinator.api.devices.rdma_node_resources` (see there, also for the one
deliberate difference from upstream: GPU names the plug-in does not produce are removed).
This module reads the Device object once per change into a :class:`DeviceView` and works
out what the node must change (:func:`device_changes`); it does no I/O.

* Resources go into ``status.capacity`` and ``status.allocatable`` alike. They are written
  whenever they differ from the node's, compared exactly: upstream's NeedSync applies the
  colocation strategy's ``resourceDiffThreshold``, but device amounts change in whole
  devices, so no move is small, and leaving the colocation strategy out lets the device
  plug-ins work whatever the colocation config says (see the controller).
* Labels: ``node.koordinator.sh/gpu-model`` and ``node.koordinator.sh/gpu-driver-version``
  are copied from the Device's labels when present there and different on the node. They
  are never removed -- not when the Device loses them, not when it is deleted -- as
  upstream ("TBD: shall we reset labels"). ``gpu-vendor`` is never copied (upstream reads
  it in NeedSyncMeta but does not write it).
* A Device that cannot be read (the apiserver validated it, so this means a hand-edited
  object of another version) leaves the node's device resources as they are; its labels
  are still copied.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordinator.api.devices import (
    GPU_NODE_RESOURCE_NAMES,
    RDMA_NODE_RESOURCE_NAMES,
    NodeDeviceResources,
    gpu_node_resources,
    rdma_node_resources,
)
from koordinator.api.extension.device import LABEL_GPU_DRIVER_VERSION, LABEL_GPU_MODEL
from koordinator.api.extension.resources import GPU_MEMORY
from koordinator.api.model import ModelError
from koordinator.api.quantity import Format, Quantity

__all__ = [
    "DEVICE_RESOURCE_NAMES",
    "GPU_LABELS",
    "GPU_NAME",
    "RDMA_NAME",
    "DeviceChanges",
    "DeviceView",
    "device_changes",
    "device_quantity",
    "device_view",
]

GPU_NAME = "GPUDeviceResource"
RDMA_NAME = "RDMADeviceResource"
#: Every node status resource the device plug-ins own.
DEVICE_RESOURCE_NAMES = GPU_NODE_RESOURCE_NAMES + RDMA_NODE_RESOURCE_NAMES
#: Device labels copied to the Node (never removed from it).
GPU_LABELS = (LABEL_GPU_MODEL, LABEL_GPU_DRIVER_VERSION)


@dataclass(frozen=True, slots=True)
class DeviceView:
    """What the device plug-ins read from one Device object (named after its node).

    ``gpu``/``rdma`` are ``None`` when the object cannot be read (``problem`` says why).
    ``spec`` is kept only to tell a spec change from a metadata-only one.
    """

    name: str
    spec: Any = None
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu: NodeDeviceResources | None = None
    rdma: NodeDeviceResources | None = None
    problem: str = ""


def device_view(device: Mapping[str, Any], *, sync_gpu_shared: bool) -> DeviceView:
    """The record of a Device dict; ``sync_gpu_shared`` is the ``EnableSyncGPUSharedResource`` gate."""
    meta = device.get("metadata") or {}
    labels = meta.get("labels") or {}
    copied = {key: str(labels[key]) for key in GPU_LABELS if labels.get(key) is not None}
    name = str(meta.get("name") or "")
    spec = device.get("spec")
    try:
        gpu = gpu_node_resources(device, sync_gpu_shared=sync_gpu_shared)
        rdma = rdma_node_resources(device)
    except ModelError as exc:
        return DeviceView(name, spec, copied, problem=f"Device {name}: {exc}")
    return DeviceView(name, spec, copied, gpu, rdma)


def device_quantity(name: str, amount: int) -> Quantity:
    """How an amount is written to node status: ``gpu-memory`` in binary units, the rest decimal."""
    return Quantity.from_int(amount, Format.BINARY_SI if name == GPU_MEMORY else Format.DECIMAL_SI)


@dataclass(frozen=True, slots=True)
class DeviceChanges:
    """What the device plug-ins change on one node; empty when it already matches."""

    #: resource -> amount to set in capacity and allocatable (``None``: remove it)
    resources: dict[str, int | None] = field(default_factory=dict)
    #: labels to set
    labels: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.resources or self.labels)


def device_changes(
    device: DeviceView | None,
    *,
    allocatable: Mapping[str, int],
    capacity: Mapping[str, int],
    labels: Mapping[str, str],
    plugins: Collection[str],
) -> DeviceChanges:
    """The changes that make a node (its device amounts and labels) match ``device``.

    ``device`` ``None``: the node has no Device object. ``plugins`` are the enabled plug-in
    names; a disabled plug-in's resources (and, for GPUDeviceResource, labels) are left as
    they are.
    """
    results: list[NodeDeviceResources] = []
    if GPU_NAME in plugins:
        gpu = gpu_node_resources(None) if device is None else device.gpu
        if gpu is not None:  # None: an unreadable Device leaves the node as it is
            results.append(gpu)
    if RDMA_NAME in plugins:
        rdma = rdma_node_resources(None) if device is None else device.rdma
        if rdma is not None:
            results.append(rdma)
    resources: dict[str, int | None] = {}
    for result in results:
        for name, amount in result.resources.items():
            if allocatable.get(name) != amount or capacity.get(name) != amount:
                resources[name] = amount
        for name in result.resets:
            if name in allocatable or name in capacity:
                resources[name] = None
    new_labels: dict[str, str] = {}
    if GPU_NAME in plugins and device is not None:
        new_labels = {key: value for key, value in device.labels.items() if labels.get(key) != value}
    return DeviceChanges(resources, new_labels)
