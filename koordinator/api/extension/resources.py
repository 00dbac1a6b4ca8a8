"""Extended resource names, their deprecated aliases, and the per-priority resource mapping.

Batch pods ask for ``kubernetes.io/batch-cpu`` (integer milli-cores) and
``kubernetes.io/batch-memory`` (bytes) instead of ``cpu``/``memory``; mid pods for the
``mid-*`` pair. Prod and unclassified pods keep ``cpu``/``memory``; ``koord-free`` has no
mapping at all (upstream defines none). The pod webhook writes the per-container extended
requests and limits into ``node.koordinator.sh/extended-resource-spec`` for the koordlet.
"""

from __future__ import annotations

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.annotations import get_model
from koordinator.api.extension.priority import PriorityClass
from koordinator.api.model import Model, field
from koordinator.api.quantity import Format, Quantity
from koordinator.api.types.core import ResourceList

__all__ = [
    "AMD_GPU",
    "ANNOTATION_EXTENDED_RESOURCE_SPEC",
    "BATCH_CPU",
    "BATCH_MEMORY",
    "DCU_GPU",
    "DEPRECATED_ALIASES",
    "DEPRECATED_BATCH_CPU",
    "DEPRECATED_BATCH_MEMORY",
    "DEPRECATED_GPU",
    "DEPRECATED_GPU_CORE",
    "DEPRECATED_GPU_MEMORY",
    "DEPRECATED_GPU_MEMORY_RATIO",
    "DEPRECATED_KUBERNETES_FPGA",
    "DEPRECATED_KUBERNETES_RDMA",
    "FPGA",
    "GPU",
    "GPU_CORE",
    "GPU_MEMORY",
    "GPU_MEMORY_RATIO",
    "GPU_SHARED",
    "HUAWEI_NPU_CORE",
    "HUAWEI_NPU_CPU",
    "HUAWEI_NPU_DVPP",
    "MID_CPU",
    "MID_MEMORY",
    "NVIDIA_GPU",
    "RDMA",
    "RESOURCE_NAME_MAP",
    "ExtendedResourceContainerSpec",
    "ExtendedResourceSpec",
    "extended_quantity",
    "get_extended_resource_spec",
    "normalize_resource_name",
    "translate_resource_name",
]

BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
MID_CPU = "kubernetes.io/mid-cpu"
MID_MEMORY = "kubernetes.io/mid-memory"

GPU = "koordinator.sh/gpu"
GPU_CORE = "koordinator.sh/gpu-core"
GPU_MEMORY = "koordinator.sh/gpu-memory"
GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio"
GPU_SHARED = "koordinator.sh/gpu.shared"
RDMA = "koordinator.sh/rdma"
FPGA = "koordinator.sh/fpga"

NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
DCU_GPU = "dcu.com/gpu"
HUAWEI_NPU_CORE = "huawei.com/npu-core"
HUAWEI_NPU_CPU = "huawei.com/npu-cpu"
HUAWEI_NPU_DVPP = "huawei.com/npu-dvpp"

DEPRECATED_BATCH_CPU = "koordinator.sh/batch-cpu"
DEPRECATED_BATCH_MEMORY = "koordinator.sh/batch-memory"
DEPRECATED_GPU = "kubernetes.io/gpu"
DEPRECATED_GPU_CORE = "kubernetes.io/gpu-core"
DEPRECATED_GPU_MEMORY = "kubernetes.io/gpu-memory"
DEPRECATED_GPU_MEMORY_RATIO = "kubernetes.io/gpu-memory-ratio"
DEPRECATED_KUBERNETES_RDMA = "kubernetes.io/rdma"
DEPRECATED_KUBERNETES_FPGA = "kubernetes.io/fpga"

#: Deprecated name -> current name.
DEPRECATED_ALIASES: dict[str, str] = {
    DEPRECATED_BATCH_CPU: BATCH_CPU,
    DEPRECATED_BATCH_MEMORY: BATCH_MEMORY,
    DEPRECATED_GPU: GPU,
    DEPRECATED_GPU_CORE: GPU_CORE,
    DEPRECATED_GPU_MEMORY: GPU_MEMORY,
    DEPRECATED_GPU_MEMORY_RATIO: GPU_MEMORY_RATIO,
    DEPRECATED_KUBERNETES_RDMA: RDMA,
    DEPRECATED_KUBERNETES_FPGA: FPGA,
}

#: Priority class -> {native resource -> extended resource}. Free has no entry.
RESOURCE_NAME_MAP: dict[PriorityClass, dict[str, str]] = {
    PriorityClass.BATCH: {"cpu": BATCH_CPU, "memory": BATCH_MEMORY},
    PriorityClass.MID: {"cpu": MID_CPU, "memory": MID_MEMORY},
}

ANNOTATION_EXTENDED_RESOURCE_SPEC = "node.koordinator.sh/extended-resource-spec"


def translate_resource_name(priority: PriorityClass, name: str) -> str:
    """The resource a pod of ``priority`` requests instead of ``name`` (``name`` itself if unmapped)."""
    return RESOURCE_NAME_MAP.get(priority, {}).get(name, name)


def normalize_resource_name(name: str) -> str:
    """The current name of a possibly deprecated resource name."""
    return DEPRECATED_ALIASES.get(name, name)


def extended_quantity(native: str, quantity: Quantity) -> Quantity:
    """The value of the extended resource replacing ``native``: CPU becomes integer milli-cores."""
    if native == "cpu":
        return Quantity.from_int(quantity.milli_value(), Format.DECIMAL_SI)
    return quantity


@dataclass
class ExtendedResourceContainerSpec(Model):
    limits: ResourceList = field("limits", factory=dict)
    requests: ResourceList = field("requests", factory=dict)


@dataclass
class ExtendedResourceSpec(Model):
    """``node.koordinator.sh/extended-resource-spec``: extended requests/limits per container."""

    containers: dict[str, ExtendedResourceContainerSpec] = field("containers", factory=dict)


def get_extended_resource_spec(annotations: Mapping[str, Any] | None) -> ExtendedResourceSpec | None:
    return get_model(annotations, ANNOTATION_EXTENDED_RESOURCE_SPEC, ExtendedResourceSpec)
