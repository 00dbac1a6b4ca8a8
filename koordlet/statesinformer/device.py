"""Device reporting: the node's GPUs and RDMA devices as its ``Device`` object
(``scheduling.koordinator.sh/v1alpha1``, upstream's ``states_device_linux.go``).

Every ``--node-topology-sync-interval`` (3 s) the koordlet builds the Device named after
the node, owned by the Node (so it goes with it), from:

* device-info records in ``--xpu-device-infos-dir`` (what koord-device-daemon writes):
  each a ``gpu`` entry with its own resources (``gpu-core``/``gpu-memory`` prefixed with
  ``koordinator.sh/``, ``gpu-memory-ratio`` 100), health and topology; the first record's
  vendor and model label the Device. When there are any, NVML is not asked;
* else the GPUs NVML found at start (Accelerators gate): ``gpu`` entries with the UUID as
  ``id``, the minor number, ``gpu-core`` 100, ``gpu-memory`` (bytes) and
  ``gpu-memory-ratio`` 100, and a topology (``socketID`` -1, the NUMA node, the PCIe root and
  the bus id) when all three are known; the Device is labelled
  ``node.koordinator.sh/gpu-vendor: nvidia``, ``gpu-model`` and ``gpu-driver-version``;
* the RDMA physical functions found in sysfs on each round (RDMADevices gate): ``rdma``
  entries with the PCI address as ``id``, minors numbered in address order,
  ``koordinator.sh/rdma`` 100 and their virtual functions as one ``vfGroups`` entry.

Entries are ordered by type, then minor. The object is written only when its devices,
labels or annotations differ from the apiserver's (created when missing, never deleted:
a node without devices has one with no devices). Upstream reads GPU health from NVML's
Xid events; here a GPU is healthy when NVML answered for it at discovery.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordinator.api.extension.device import LABEL_GPU_DRIVER_VERSION, LABEL_GPU_MODEL, LABEL_GPU_VENDOR
from koordinator.api.extension.resources import GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO, RDMA
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import ConflictError, NotFoundError
from koordlet.system.devices.nvml import GPUInventory
from koordlet.system.devices.rdma import RDMADevice
from koordlet.system.devices.xpu import DeviceRecord

__all__ = ["DeviceReporter", "DeviceSources", "build_device_spec"]

log = logging.getLogger(__name__)

GPU_VENDOR_NVIDIA = "nvidia"
_SHORT_NAMES = {"gpu-core": GPU_CORE, "gpu-memory": GPU_MEMORY, "gpu-memory-ratio": GPU_MEMORY_RATIO}

Obj = dict[str, Any]


@dataclass(frozen=True)
class DeviceSpec:
    """What the koordlet owns of its node's Device."""

    devices: list[Obj] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def _topology(node_id: int | None, pcie: str, bus: str) -> Obj | None:
    if node_id is None or node_id < 0 or not pcie or not bus:
        return None
    return {"socketID": -1, "nodeID": node_id, "pcieID": pcie, "busID": bus}


def _record_entry(record: DeviceRecord) -> Obj:
    resources = {GPU_MEMORY_RATIO: "100"}
    for name, value in record.resources.items():
        resources[_SHORT_NAMES.get(name, name)] = value
    entry: Obj = {
        "type": "gpu",
        "id": record.uuid,
        "minor": record.minor,
        "health": record.healthy,
        "resources": resources,
        "topology": {
            "socketID": record.socket_id,
            "nodeID": record.node_id,
            "pcieID": record.pcie_id,
            "busID": record.bus_id,
        },
    }
    return entry


def build_device_spec(
    gpus: GPUInventory | None, rdmas: Sequence[RDMADevice], records: Sequence[DeviceRecord]
) -> DeviceSpec:
    """The Device's entries and labels from what was discovered."""
    spec = DeviceSpec()
    if records:
        spec.devices.extend(_record_entry(r) for r in sorted(records, key=lambda r: r.uuid))
        first = records[0]
        if first.vendor:
            spec.labels[LABEL_GPU_VENDOR] = first.vendor
        if first.model:
            spec.labels[LABEL_GPU_MODEL] = first.model
    elif gpus is not None and gpus.gpus:
        for gpu in gpus.gpus:
            entry: Obj = {
                "type": "gpu",
                "id": gpu.uuid,
                "minor": gpu.minor,
                "health": gpu.healthy,
                "resources": {GPU_CORE: "100", GPU_MEMORY: str(gpu.memory_total), GPU_MEMORY_RATIO: "100"},
            }
            topology = _topology(gpu.numa_node, gpu.pcie_root, gpu.bus_id)
            if topology is not None:
                entry["topology"] = topology
            spec.devices.append(entry)
        spec.labels[LABEL_GPU_VENDOR] = GPU_VENDOR_NVIDIA
        if gpus.model:
            spec.labels[LABEL_GPU_MODEL] = gpus.model
        if gpus.driver_version:
            spec.labels[LABEL_GPU_DRIVER_VERSION] = gpus.driver_version
    for minor, rdma in enumerate(sorted(rdmas, key=lambda d: d.bus_id)):
        entry = {
            "type": "rdma",
            "id": rdma.bus_id,
            "minor": minor,
            "health": rdma.healthy,
            "resources": {RDMA: "100"},
            "topology": {
                "socketID": -1,
                "nodeID": rdma.numa_node if rdma.numa_node is not None else -1,
                "pcieID": rdma.pcie_root,
                "busID": rdma.bus_id,
            },
        }
        if rdma.vfs:
            entry["vfGroups"] = [
                {
                    "vfs": [
                        {"minor": vf.minor, "busID": vf.bus_id}
                        for vf in sorted(rdma.vfs, key=lambda v: v.bus_id)
                    ]
                }
            ]
        spec.devices.append(entry)
    spec.devices.sort(key=lambda d: (d["type"], d.get("minor", 0)))
    return spec


@dataclass
class DeviceSources:
    """Where the devices come from (each None when its gate is off)."""

    gpus: Callable[[], GPUInventory | None] | None = None
    rdmas: Callable[[], Sequence[RDMADevice]] | None = None
    records: Callable[[], Sequence[DeviceRecord]] | None = None

    def spec(self) -> DeviceSpec:
        records = list(self.records()) if self.records is not None else []
        gpus = self.gpus() if self.gpus is not None and not records else None
        rdmas = list(self.rdmas()) if self.rdmas is not None else []
        return build_device_spec(gpus, rdmas, records)


def _comparable(obj: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    meta = obj.get("metadata") or {}
    return (
        ((obj.get("spec") or {}).get("devices")) or [],
        meta.get("labels") or {},
        meta.get("annotations") or {},
    )


class DeviceReporter:
    def __init__(
        self,
        client: ApiClient,
        node_name: str,
        node: Callable[[], Mapping[str, Any] | None],
        sources: DeviceSources,
        *,
        interval: float = 3.0,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.node = node
        self.sources = sources
        self.interval = interval
        self.writes = 0

    def desired(self) -> Obj:
        spec = self.sources.spec()
        metadata: Obj = {"name": self.node_name, "labels": spec.labels, "annotations": spec.annotations}
        uid = ((self.node() or {}).get("metadata") or {}).get("uid")
        if uid:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": self.node_name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        return {
            "apiVersion": res.DEVICES.api_version,
            "kind": res.DEVICES.kind,
            "metadata": metadata,
            "spec": {"devices": spec.devices},
        }

    async def sync(self) -> bool:
        """Write the Device when it differs; True when it was written."""
        desired = self.desired()
        for _ in range(3):
            try:
                existing = await self.client.get(res.DEVICES, self.node_name)
            except NotFoundError:
                await self.client.create(res.DEVICES, desired)
                self.writes += 1
                log.info(
                    "Device %s created with %d device(s)", self.node_name, len(desired["spec"]["devices"])
                )
                return True
            if _comparable(existing) == _comparable(desired):
                return False
            meta = existing.get("metadata") or {}
            updated = {
                **existing,
                "metadata": {
                    **meta,
                    "labels": desired["metadata"]["labels"],
                    "annotations": desired["metadata"]["annotations"],
                },
                "spec": {**(existing.get("spec") or {}), "devices": desired["spec"]["devices"]},
            }
            try:
                await self.client.replace(res.DEVICES, updated)
            except ConflictError:
                continue
            self.writes += 1
            log.info("Device %s updated: %d device(s)", self.node_name, len(desired["spec"]["devices"]))
            return True
        return False

    async def run(self) -> None:
        while True:
            try:
                await self.sync()
            except Exception:
                log.exception("Device report failed")
            await asyncio.sleep(self.interval)
