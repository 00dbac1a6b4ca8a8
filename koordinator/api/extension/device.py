"""Device sharing protocol: ``device-allocated`` and the hint annotations, device types and GPU labels.

``scheduling.koordinator.sh/device-allocated`` maps a device type (``gpu``, ``rdma``, ``fpga``
...) to the devices given to the pod: minor number, resources (quantities as strings), and
for RDMA the virtual functions chosen.
"""

from __future__ import annotations

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.annotations import AnnotationError, decode_json
from koordinator.api.extension.constants import DOMAIN_PREFIX, NODE_DOMAIN_PREFIX, SCHEDULING_DOMAIN_PREFIX
from koordinator.api.jsonutil import marshal
from koordinator.api.model import Model, ModelError, field
from koordinator.api.types.core import LabelSelector, ResourceList

__all__ = [
    "ANNOTATION_DEVICE_ALLOCATED",
    "ANNOTATION_DEVICE_ALLOCATE_HINT",
    "ANNOTATION_DEVICE_JOINT_ALLOCATE",
    "ANNOTATION_GPU_PARTITIONS",
    "ANNOTATION_GPU_PARTITION_SPEC",
    "DEVICE_TYPES",
    "DEVICE_TYPE_FPGA",
    "DEVICE_TYPE_GPU",
    "DEVICE_TYPE_RDMA",
    "DEVICE_TYPE_XPU",
    "GPU_ISOLATION_PROVIDER_HAMI_CORE",
    "LABEL_GPU_DRIVER_VERSION",
    "LABEL_GPU_ISOLATION_PROVIDER",
    "LABEL_GPU_MODEL",
    "LABEL_GPU_PARTITION_POLICY",
    "LABEL_GPU_VENDOR",
    "LABEL_SECONDARY_DEVICE_WELL_PLANNED",
    "DeviceAllocation",
    "DeviceAllocationExtension",
    "DeviceHint",
    "VirtualFunction",
    "get_device_allocate_hints",
    "get_device_allocations",
    "set_device_allocations",
]

ANNOTATION_DEVICE_ALLOCATED = SCHEDULING_DOMAIN_PREFIX + "/device-allocated"
ANNOTATION_DEVICE_ALLOCATE_HINT = SCHEDULING_DOMAIN_PREFIX + "/device-allocate-hint"
ANNOTATION_DEVICE_JOINT_ALLOCATE = SCHEDULING_DOMAIN_PREFIX + "/device-joint-allocate"
ANNOTATION_GPU_PARTITION_SPEC = SCHEDULING_DOMAIN_PREFIX + "/gpu-partition-spec"
ANNOTATION_GPU_PARTITIONS = SCHEDULING_DOMAIN_PREFIX + "/gpu-partitions"

#: ``spec.devices[].type`` of a Device object (and the keys of ``device-allocated``).
DEVICE_TYPE_GPU = "gpu"
DEVICE_TYPE_FPGA = "fpga"
DEVICE_TYPE_RDMA = "rdma"
DEVICE_TYPE_XPU = "xpu"
DEVICE_TYPES = (DEVICE_TYPE_GPU, DEVICE_TYPE_FPGA, DEVICE_TYPE_RDMA, DEVICE_TYPE_XPU)

LABEL_GPU_VENDOR = NODE_DOMAIN_PREFIX + "/gpu-vendor"
LABEL_GPU_MODEL = NODE_DOMAIN_PREFIX + "/gpu-model"
LABEL_GPU_DRIVER_VERSION = NODE_DOMAIN_PREFIX + "/gpu-driver-version"
#: ``Honor`` or ``Prefer``.
LABEL_GPU_PARTITION_POLICY = NODE_DOMAIN_PREFIX + "/gpu-partition-policy"
LABEL_SECONDARY_DEVICE_WELL_PLANNED = NODE_DOMAIN_PREFIX + "/secondary-device-well-planned"
#: Pod label naming the GPU isolation provider (``HAMi-core`` for HAMi vGPU).
LABEL_GPU_ISOLATION_PROVIDER = DOMAIN_PREFIX + "gpu-isolation-provider"
GPU_ISOLATION_PROVIDER_HAMI_CORE = "HAMi-core"


@dataclass
class VirtualFunction(Model):
    minor: int = field("minor", default=0)
    bus_id: str = field("busID", default="")


@dataclass
class DeviceAllocationExtension(Model):
    virtual_functions: list[VirtualFunction] = field("vfs", factory=list)
    gpu_shared_resource_template: str = field("gpuSharedResourceTemplate", default="")


@dataclass
class DeviceAllocation(Model):
    minor: int = field("minor", default=0, omitempty=False)
    resources: ResourceList = field("resources", factory=dict, omitempty=False)
    id: str = field("id", default="")
    extension: DeviceAllocationExtension | None = field("extension")


@dataclass
class DeviceHint(Model):
    selector: LabelSelector | None = field("selector")
    vf_selector: LabelSelector | None = field("vfSelector")
    #: ``ApplyForAll`` or ``RequestsAsCount``.
    allocate_strategy: str = field("allocateStrategy", default="")
    #: ``Device``, ``PCIe``, ``NUMANode`` or ``Node``.
    required_topology_scope: str = field("requiredTopologyScope", default="")
    #: ``DeviceLevel`` or ``PCIeLevel``.
    exclusive_policy: str = field("exclusivePolicy", default="")


def _typed_map(
    annotations: Mapping[str, Any] | None, key: str, item: type[Model], many: bool
) -> dict[str, Any]:
    data = decode_json(annotations, key)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise AnnotationError(key, "expected a JSON object keyed by device type")
    result: dict[str, Any] = {}
    try:
        for device_type, value in data.items():
            if many:
                if not isinstance(value, list):
                    raise AnnotationError(key, f"{device_type}: expected an array")
                result[device_type] = [
                    item.from_dict(v, path=f"{device_type}[{i}]") for i, v in enumerate(value)
                ]
            else:
                result[device_type] = item.from_dict(value, path=device_type)
    except ModelError as exc:
        raise AnnotationError(key, str(exc)) from None
    return result


def get_device_allocations(annotations: Mapping[str, Any] | None) -> dict[str, list[DeviceAllocation]]:
    """Device type -> allocated devices; empty when the annotation is absent."""
    return _typed_map(annotations, ANNOTATION_DEVICE_ALLOCATED, DeviceAllocation, True)


def set_device_allocations(
    annotations: MutableMapping[str, str], allocations: Mapping[str, list[DeviceAllocation]]
) -> str:
    text = marshal({t: [a.to_dict() for a in allocations[t]] for t in sorted(allocations)})
    annotations[ANNOTATION_DEVICE_ALLOCATED] = text
    return text


def get_device_allocate_hints(annotations: Mapping[str, Any] | None) -> dict[str, DeviceHint]:
    """Device type -> allocation hint; empty when the annotation is absent."""
    return _typed_map(annotations, ANNOTATION_DEVICE_ALLOCATE_HINT, DeviceHint, False)
