"""Device reporting: the node's GPUs and RDMA devices as its ``Device`` object
(``scheduling.koordinator.sh/v1alpha1``, upstream's ``states_device_linux.go``).

Every ``--node-topology-sync-interval`` (3 s) the koordlet builds the Device named after
the node, owned by the Node (so it goes with it), from:

* device-info records in ``--xpu-device-infos-dir`` (what koord-device-daemon writes):
  each a ``gpu`` entry with its own resources (``gpu-core``/``gpu-memory`` prefixed with
  ``koordinator.sh/``, ``gpu-memory-ratio`` 100), health, topology and, for a record with a
  status, upstream's ``Healthy`` condition. A resource value that is not a Kubernetes
  quantity is left out (logged once): the apiserver would refuse the whole Device for it.
  The first record's vendor and model label the Device; when it has ``p2pLinks`` the label
  ``node.koordinator.sh/gpu-partition-policy`` is ``Prefer`` (``Honor`` with
  ``mustHonorPartition``), and the records' links make the partition table annotated as
  ``scheduling.koordinator.sh/gpu-partitions`` (upstream's
  ``getPartitionTableFromXPUDevices``). NVIDIA records get ``gpu-driver-version`` from the
  koordlet's own NVML discovery when it has one (the records carry no driver version). When
  there are records, NVML's GPUs are not reported;
* else, unless ``--xpu-enforce-collect-from-device-infos``, the GPUs NVML found at start
  (Accelerators gate): ``gpu`` entries with the UUID as ``id``, the minor number,
  ``gpu-core`` 100, ``gpu-memory`` (bytes) and ``gpu-memory-ratio`` 100, and a topology
  (``socketID`` -1, the NUMA node, the PCIe root and the bus id) when all three are known;
  the Device is labelled ``node.koordinator.sh/gpu-vendor: nvidia``, ``gpu-model`` and
  ``gpu-driver-version``. Their health is what the Xid watcher
  (:class:`~koordlet.system.devices.nvml.GPUHealthWatcher`, started by
  :meth:`DeviceReporter.run`, upstream's ``gpuHealCheck``) has found: an unhealthy GPU has
  ``health: false`` and a ``Healthy`` condition ``False`` with the fault as its reason;
* the RDMA physical functions found in sysfs on each round (RDMADevices gate): ``rdma``
  entries with the PCI address as ``id``, minors numbered in address order,
  ``koordinator.sh/rdma`` 100 and their virtual functions as one ``vfGroups`` entry.

Entries are ordered by type, then minor. The object is written only when its devices,
labels or annotations differ from the apiserver's, a condition keeping its
``lastTransitionTime`` while its status stays (created when missing, never deleted: a node
without devices has one with no devices).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordinator.api.extension.device import (
    ANNOTATION_GPU_PARTITIONS,
    LABEL_GPU_DRIVER_VERSION,
    LABEL_GPU_MODEL,
    LABEL_GPU_PARTITION_POLICY,
    LABEL_GPU_VENDOR,
)
from koordinator.api.extension.resources import GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO, RDMA
from koordinator.api.quantity import QuantityError, parse_quantity
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import ConflictError, NotFoundError
from koordlet.system.devices.nvml import GPUFault, GPUHealthWatcher, GPUInfo, GPUInventory, with_faults
from koordlet.system.devices.rdma import RDMADevice
from koordlet.system.devices.xpu import DeviceRecord

__all__ = ["DeviceReporter", "DeviceSources", "build_device_spec", "partition_table"]

log = logging.getLogger(__name__)

GPU_VENDOR_NVIDIA = "nvidia"
#: upstream's ``DeviceConditionHealthy`` and the reasons of a healthy or unknown device
CONDITION_HEALTHY = "Healthy"
REASON_HEALTHY = "DeviceHealthy"
REASON_UNKNOWN = "Unknown"
#: ``GPUPartitionPolicyPrefer`` / ``GPUPartitionPolicyHonor``
PARTITION_POLICY_PREFER = "Prefer"
PARTITION_POLICY_HONOR = "Honor"
_SHORT_NAMES = {"gpu-core": GPU_CORE, "gpu-memory": GPU_MEMORY, "gpu-memory-ratio": GPU_MEMORY_RATIO}
# metav1.Condition's reason, as the CRD validates it
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_REASON_MAX = 1024
_MESSAGE_MAX = 32768
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.Atoi takes

Obj = dict[str, Any]

_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


def rfc3339(seconds: float) -> str:
    """A metav1.Time as the apiserver writes it (UTC, whole seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


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


def healthy_condition(healthy: bool, err_code: str, err_message: str, now: str) -> Obj:
    """Upstream's ``Healthy`` condition (``getGPUDeviceConditions``): the error code as the
    reason when it is one the apiserver accepts (else ``Unknown``, the code kept in the
    message), the error message as the message."""
    if healthy:
        reason, message = REASON_HEALTHY, "device is healthy"
    else:
        reason, message = err_code or REASON_UNKNOWN, err_message or "device is unhealthy"
        if len(reason) > _REASON_MAX or not _REASON.fullmatch(reason):
            _warn_once(
                f"device error code {err_code!r} is not a condition reason; reported as {REASON_UNKNOWN}"
            )
            reason, message = REASON_UNKNOWN, f"{err_code}: {message}"
    return {
        "type": CONDITION_HEALTHY,
        "status": "True" if healthy else "False",
        "lastTransitionTime": now,
        "reason": reason,
        "message": message[:_MESSAGE_MAX],
    }


def _record_entry(record: DeviceRecord, now: str) -> Obj:
    resources = {GPU_MEMORY_RATIO: "100"}
    for name, value in record.resources.items():
        try:
            quantity = parse_quantity(value)
        except QuantityError as err:
            # upstream's buildXPUDevice skips it too: one bad value would fail the whole Device
            _warn_once(f"device {record.uuid}: resource {name} {value!r} left out: {err}")
            continue
        resources[_SHORT_NAMES.get(name, name)] = str(quantity)
    entry: Obj = {
        "type": "gpu",
        "id": record.uuid,
        "minor": record.minor,
        "health": record.healthy,
        "resources": resources,
    }
    if record.has_topology:
        entry["topology"] = {
            "socketID": record.socket_id,
            "nodeID": record.node_id,
            "pcieID": record.pcie_id,
            "busID": record.bus_id,
        }
    if record.has_status:
        entry["conditions"] = [healthy_condition(record.healthy, record.err_code, record.err_message, now)]
    return entry


def _atoi(text: str) -> int | None:
    return int(text) if _INTEGER.fullmatch(text) else None


def partition_table(records: Sequence[DeviceRecord]) -> dict[int, list[Obj]]:
    """The GPU partitions the records' ``p2pLinks`` make, by their number of GPUs
    (upstream's ``getPartitionTableFromXPUDevices``): each link with a peer and a type is a
    partition of its peers and the device itself, sorted, once, with ``allocationScore`` 1.
    A minor that is not a number is left out of its partition (logged once)."""
    partitions: dict[int, list[Obj]] = {}
    seen: set[tuple[int, ...]] = set()
    for record in records:
        own = str(record.minor) if record.minor_text is None else record.minor_text
        for link in record.p2p_links or ():
            if not link.peer_minor or not link.type:
                _warn_once(
                    f"{record.vendor}-{record.model}-{own}: invalid p2p link "
                    f"(peerMinor {link.peer_minor!r}, type {link.type!r})"
                )
                continue
            minors: set[int] = set()
            for text in [*link.peer_minor.split(","), own]:
                minor = _atoi(text)
                if minor is None:
                    _warn_once(
                        f"device {record.uuid}: peer minor {text!r} of {link.peer_minor!r} is not a number"
                    )
                    continue
                minors.add(minor)
            key = tuple(sorted(minors))
            if not key or key in seen:
                continue
            seen.add(key)
            partitions.setdefault(len(key), []).append(
                {"minors": list(key), "gpuLinkType": link.type, "allocationScore": 1}
            )
    return partitions


def _partition_annotation(partitions: Mapping[int, list[Obj]]) -> str:
    # as Go's json.Marshal writes a map[int]...: keys as strings, sorted as strings, compact
    return json.dumps({str(k): partitions[k] for k in sorted(partitions, key=str)}, separators=(",", ":"))


def _record_labels(first: DeviceRecord, driver_version: str) -> dict[str, str]:
    """Upstream's ``buildXPUDeviceLabels`` (the first record's vendor and model, the partition
    policy when it has ``p2pLinks``), and the driver version of NVIDIA records."""
    labels: dict[str, str] = {}
    if first.vendor:
        labels[LABEL_GPU_VENDOR] = first.vendor
    if first.model:
        labels[LABEL_GPU_MODEL] = first.model
    if first.p2p_links is not None:
        honor = first.must_honor_partition
        labels[LABEL_GPU_PARTITION_POLICY] = PARTITION_POLICY_HONOR if honor else PARTITION_POLICY_PREFER
    if driver_version and first.vendor == GPU_VENDOR_NVIDIA:
        labels[LABEL_GPU_DRIVER_VERSION] = driver_version
    return labels


def _gpu_entry(gpu: GPUInfo, now: str) -> Obj:
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
    if not gpu.healthy:  # upstream gives a GPU a status, so a condition, only when unhealthy
        entry["conditions"] = [healthy_condition(False, gpu.err_code, gpu.err_message, now)]
    return entry


def build_device_spec(
    gpus: GPUInventory | None,
    rdmas: Sequence[RDMADevice],
    records: Sequence[DeviceRecord],
    *,
    driver_version: str = "",
    now: str | None = None,
) -> DeviceSpec:
    """The Device's entries, labels and annotations from what was discovered.
    ``driver_version``: the NVIDIA driver's, for NVIDIA records (NVML's GPUs carry their
    own); ``now``: the conditions' ``lastTransitionTime`` (default: the time now)."""
    now = now if now is not None else rfc3339(time.time())
    spec = DeviceSpec()
    if records:
        spec.devices.extend(_record_entry(r, now) for r in sorted(records, key=lambda r: r.uuid))
        spec.labels.update(_record_labels(records[0], driver_version))
        partitions = partition_table(records)
        if partitions:
            spec.annotations[ANNOTATION_GPU_PARTITIONS] = _partition_annotation(partitions)
    elif gpus is not None and gpus.gpus:
        spec.devices.extend(_gpu_entry(gpu, now) for gpu in gpus.gpus)
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
    #: ``--xpu-enforce-collect-from-device-infos``: GPUs come only from the device-info
    #: records, never from NVML's list (whose driver version still labels NVIDIA records)
    enforce_device_infos: bool = False
    #: the faults found since start, by bus id (the Xid watcher's), applied to NVML's GPUs
    faults: Callable[[], Mapping[str, GPUFault]] | None = None

    def spec(self, now: str | None = None) -> DeviceSpec:
        records = list(self.records()) if self.records is not None else []
        inventory = self.gpus() if self.gpus is not None else None
        if inventory is not None and self.faults is not None:
            inventory = with_faults(inventory, self.faults())
        from_nvml = inventory if not records and not self.enforce_device_infos else None
        rdmas = list(self.rdmas()) if self.rdmas is not None else []
        driver = inventory.driver_version if inventory is not None else ""
        return build_device_spec(from_nvml, rdmas, records, driver_version=driver, now=now)


def _carry_transition_times(devices: Sequence[Obj], existing: Sequence[Any]) -> None:
    """Give each condition whose status the apiserver's copy already has that copy's
    ``lastTransitionTime`` (upstream's ``updateDevice``)."""
    before: dict[tuple[Any, Any], dict[Any, Mapping[str, Any]]] = {}
    for old in existing:
        if isinstance(old, Mapping):
            conditions = [c for c in old.get("conditions") or () if isinstance(c, Mapping)]
            before[(old.get("type"), old.get("id"))] = {c.get("type"): c for c in conditions}
    for device in devices:
        known = before.get((device.get("type"), device.get("id")), {})
        for condition in device.get("conditions") or ():
            prior = known.get(condition["type"])
            if (
                prior is not None
                and prior.get("status") == condition["status"]
                and prior.get("lastTransitionTime")
            ):
                condition["lastTransitionTime"] = prior["lastTransitionTime"]


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
        watch_gpu_health: Callable[[], GPUHealthWatcher] | None = GPUHealthWatcher,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.node = node
        self.sources = sources
        self.interval = interval
        #: makes the Xid watcher :meth:`run` starts when NVML's GPUs are a source (None: none)
        self.watch_gpu_health = watch_gpu_health
        self.clock = clock
        #: the Xid watcher :meth:`run` started, if any
        self.health_watcher: GPUHealthWatcher | None = None
        self.writes = 0

    def desired(self) -> Obj:
        spec = self.sources.spec(now=rfc3339(self.clock()))
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
            _carry_transition_times(
                desired["spec"]["devices"], (existing.get("spec") or {}).get("devices") or []
            )
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

    def _watch_gpu_health(self) -> GPUHealthWatcher | None:
        """Upstream's ``gpuHealCheck``: the Xid watcher, when NVML found GPUs at start and
        nothing else reports their faults."""
        sources = self.sources
        if self.watch_gpu_health is None or sources.gpus is None or sources.faults is not None:
            return None
        inventory = sources.gpus()
        if inventory is None or not inventory.gpus:
            return None
        watcher = self.watch_gpu_health()
        watcher.start()
        sources.faults = watcher.faults
        self.health_watcher = watcher
        return watcher

    async def run(self) -> None:
        watcher = self._watch_gpu_health()
        try:
            while True:
                try:
                    await self.sync()
                except Exception:
                    log.exception("Device report failed")
                await asyncio.sleep(self.interval)
        finally:
            if watcher is not None:
                watcher.stop()  # its thread ends within one event wait
