"""One node's devices (from its ``Device`` object) and what the pods on it hold.

Totals are kept per device type and minor as ``name -> int`` (gpu-memory in bytes); an
unhealthy device keeps its minor with empty resources, so it is known but never fits.
Allocations are booked per pod key (the pod UID, say) and device type: adding a pod that
is already booked, or removing one that is not, changes nothing. Free = total - used,
never below zero. Deprecated ``kubernetes.io/*`` names in the Device object and in
allocation annotations are renamed on the way in, as upstream's informer transformers do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controlplane.scheduler.devices.gpu_topology import TopologyScope, build_gpu_topology
from koordinator.api.devices import to_ints
from koordinator.api.extension.annotations import annotations_of, labels_of
from koordinator.api.extension.device import (
    DEVICE_TYPE_GPU,
    LABEL_SECONDARY_DEVICE_WELL_PLANNED,
    DeviceAllocation,
    get_device_allocations,
)
from koordinator.api.types.scheduling import Device, DeviceInfo

__all__ = [
    "DeviceResources",
    "NodeDevices",
    "Resources",
    "fits",
    "is_zero",
    "subtract_non_negative",
]

#: ``name -> int`` amounts of one device.
Resources = dict[str, int]
#: minor -> amounts, for one device type.
DeviceResources = dict[int, Resources]


def is_zero(resources: Mapping[str, int]) -> bool:
    return all(value == 0 for value in resources.values())


def fits(request: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """Every requested amount is available (a name missing from ``free`` has none)."""
    return all(value <= free.get(name, 0) for name, value in request.items())


def subtract_non_negative(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """``a - b`` per name, floored at zero, over the names of both."""
    result = {name: max(value - b.get(name, 0), 0) for name, value in a.items()}
    for name in b:
        result.setdefault(name, 0)
    return result


def _add(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    result = dict(a)
    for name, value in b.items():
        result[name] = result.get(name, 0) + value
    return result


def minor_of(info: DeviceInfo) -> int:
    return info.minor if info.minor is not None else 0


class NodeDevices:
    """The devices of one node and the pods' allocations on them."""

    def __init__(self) -> None:
        #: Device type -> every device of that type (healthy or not), as reported.
        self.infos: dict[str, list[DeviceInfo]] = {}
        self.total: dict[str, DeviceResources] = {}
        self.used: dict[str, DeviceResources] = {}
        #: Device type -> minor -> bus IDs of the virtual functions handed out.
        self.vf_allocated: dict[str, dict[int, set[str]]] = {}
        #: Device type -> pod key -> what the pod holds.
        self.pods: dict[str, dict[str, list[DeviceAllocation]]] = {}
        self.labels: dict[str, str] = {}
        self.annotations: dict[str, str] = {}
        self.gpu_topology: TopologyScope | None = None

    @classmethod
    def from_device(cls, device: Mapping[str, Any]) -> NodeDevices:
        node = cls()
        node.update_device(device)
        return node

    # ---- the Device object ----------------------------------------------------------------

    def update_device(self, device: Mapping[str, Any]) -> None:
        """Take a new version of the node's ``Device`` object; bookings are kept."""
        parsed = Device.from_dict(device)
        infos: dict[str, list[DeviceInfo]] = {}
        total: dict[str, DeviceResources] = {}
        for info in parsed.spec.devices if parsed.spec is not None else []:
            infos.setdefault(info.type, []).append(info)
            total.setdefault(info.type, {})[minor_of(info)] = to_ints(info.resources) if info.health else {}
        for device_type in self.total:
            total.setdefault(device_type, {})
        self.infos = infos
        self.total = total
        self.labels = labels_of(device)
        self.annotations = annotations_of(device)
        self.gpu_topology = build_gpu_topology(infos.get(DEVICE_TYPE_GPU, []), total.get(DEVICE_TYPE_GPU, {}))

    @property
    def secondary_device_well_planned(self) -> bool:
        """Device label saying RDMA and the like need no checking before Reserve."""
        return self.labels.get(LABEL_SECONDARY_DEVICE_WELL_PLANNED) == "true"

    def info(self, device_type: str, minor: int) -> DeviceInfo | None:
        """The device with ``minor`` (the last one reported wins, as upstream's index does)."""
        found = None
        for info in self.infos.get(device_type, []):
            if minor_of(info) == minor:
                found = info
        return found

    def has_virtual_functions(self, device_type: str) -> bool:
        return any(info.vf_groups for info in self.infos.get(device_type, []))

    # ---- free -----------------------------------------------------------------------------

    def free(self, device_type: str) -> DeviceResources:
        """Minor -> what is left of each device (every known minor, zero amounts included)."""
        total = self.total.get(device_type, {})
        result = {minor: dict(resources) for minor, resources in total.items()}
        for minor, used in self.used.get(device_type, {}).items():
            result[minor] = subtract_non_negative(total.get(minor, {}), used)
        return result

    # ---- bookings -------------------------------------------------------------------------

    def add_pod(self, pod_key: str, allocations: Mapping[str, Sequence[DeviceAllocation]]) -> bool:
        """Book a pod's devices; a device type the pod already holds is left alone."""
        changed = False
        for device_type, items in allocations.items():
            booked = self.pods.setdefault(device_type, {})
            if pod_key in booked:
                continue
            used = self.used.setdefault(device_type, {})
            for item in items:
                used[item.minor] = _add(used.get(item.minor, {}), to_ints(item.resources))
            self._book_vfs(device_type, items, add=True)
            booked[pod_key] = list(items)
            changed = True
        return changed

    def remove_pod(self, pod_key: str) -> bool:
        """Release everything the pod holds; unknown pods change nothing."""
        changed = False
        for device_type, booked in self.pods.items():
            items = booked.pop(pod_key, None)
            if items is None:
                continue
            used = self.used.get(device_type, {})
            for item in items:
                left = subtract_non_negative(used.get(item.minor, {}), to_ints(item.resources))
                if is_zero(left):
                    used.pop(item.minor, None)
                else:
                    used[item.minor] = left
            if not used:
                self.used.pop(device_type, None)
            self._book_vfs(device_type, items, add=False)
            changed = True
        return changed

    def restore_pod(self, pod_key: str, annotations: Mapping[str, str] | None) -> bool:
        """Book a pod from its ``scheduling.koordinator.sh/device-allocated`` annotation."""
        allocations = get_device_allocations(annotations)
        return self.add_pod(pod_key, allocations) if allocations else False

    def pod_allocations(self, pod_key: str) -> dict[str, list[DeviceAllocation]]:
        return {
            device_type: list(booked[pod_key])
            for device_type, booked in self.pods.items()
            if pod_key in booked
        }

    def _book_vfs(self, device_type: str, items: Iterable[DeviceAllocation], *, add: bool) -> None:
        per_minor = self.vf_allocated.setdefault(device_type, {})
        for item in items:
            if item.extension is None or not item.extension.virtual_functions:
                continue
            bus_ids = {vf.bus_id for vf in item.extension.virtual_functions}
            if add:
                per_minor.setdefault(item.minor, set()).update(bus_ids)
                continue
            left = per_minor.get(item.minor, set()) - bus_ids
            if left:
                per_minor[item.minor] = left
            else:
                per_minor.pop(item.minor, None)
        if not per_minor:
            self.vf_allocated.pop(device_type, None)
