"""A pod's device requests: validation, normalization and the per-device split.

Input is the pod's summed container requests as ``name -> int`` (gpu-memory in bytes,
everything else a plain number). Per device type (``gpu``, ``rdma``, ``fpga``) the names
that type understands are masked out, zero values dropped, and the set of names present
must be one of upstream's allowed combinations; the combination then decides the
normalized form (``nvidia.com/gpu: N`` becomes ``gpu-core = gpu-memory-ratio = 100N``,
``koordinator.sh/gpu: N`` becomes ``gpu-core = gpu-memory-ratio = N``). Finally the request
is split into a device count and a per-device request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from controlplane.scheduler.devices.errors import UNSCHEDULABLE_AND_UNRESOLVABLE, DeviceShareError
from koordinator.api.devices import DEPRECATED_DEVICE_NAMES, transform_deprecated
from koordinator.api.extension.device import DEVICE_TYPE_FPGA, DEVICE_TYPE_GPU, DEVICE_TYPE_RDMA
from koordinator.api.extension.resources import (
    AMD_GPU,
    DCU_GPU,
    FPGA,
    GPU,
    GPU_CORE,
    GPU_MEMORY,
    GPU_MEMORY_RATIO,
    GPU_SHARED,
    HUAWEI_NPU_CORE,
    HUAWEI_NPU_CPU,
    HUAWEI_NPU_DVPP,
    NVIDIA_GPU,
    RDMA,
)
from koordinator.api.quantity import Quantity

__all__ = [
    "COMBINATIONS",
    "DEVICE_REQUEST_NAMES",
    "DEVICE_RESOURCE_NAMES",
    "PERCENTAGE_RESOURCE",
    "SCHEDULED_DEVICE_TYPES",
    "DeviceRequest",
    "convert_device_request",
    "default_count_and_request",
    "gpu_count_and_request",
    "normalize_device_requests",
    "pod_device_requests",
    "validate_device_request",
]

#: The device types DeviceShare schedules, in the order this package visits them.
SCHEDULED_DEVICE_TYPES = (DEVICE_TYPE_GPU, DEVICE_TYPE_RDMA, DEVICE_TYPE_FPGA)

#: Device type -> the request names that belong to it.
DEVICE_RESOURCE_NAMES: dict[str, tuple[str, ...]] = {
    DEVICE_TYPE_GPU: (
        NVIDIA_GPU,
        AMD_GPU,
        DCU_GPU,
        GPU,
        GPU_SHARED,
        GPU_CORE,
        GPU_MEMORY,
        GPU_MEMORY_RATIO,
        HUAWEI_NPU_CORE,
        HUAWEI_NPU_CPU,
        HUAWEI_NPU_DVPP,
    ),
    DEVICE_TYPE_RDMA: (RDMA,),
    DEVICE_TYPE_FPGA: (FPGA,),
}

#: Every request name DeviceShare reads (deprecated ``kubernetes.io/*`` ones included).
DEVICE_REQUEST_NAMES = frozenset(
    name for names in DEVICE_RESOURCE_NAMES.values() for name in names
) | frozenset(DEPRECATED_DEVICE_NAMES)

Request = Mapping[str, int]
_Validator = Callable[[Request], bool]


def _is_percentage(value: int) -> bool:
    """Up to 100 anything goes; above 100 only whole devices (multiples of 100)."""
    return not (value > 100 and value % 100 != 0)


def _percentages_valid(request: Request) -> bool:
    return all(_is_percentage(request[name]) for name in (GPU_CORE, GPU_MEMORY_RATIO) if name in request)


def _gpu_shared_valid(request: Request) -> bool:
    shared = request.get(GPU_SHARED)
    if shared is None:
        return False
    for name in (GPU_CORE, GPU_MEMORY_RATIO):
        if name in request and (request[name] % shared != 0 or request[name] // shared > 100):
            return False
    return True


def _npu_shared_valid(request: Request) -> bool:
    # Upstream's body is not published in the snapshot; its note says multi-NPU sharing is
    # not supported, so one shared NPU is the only accepted form here.
    return request.get(GPU_SHARED) == 1


def _always(request: Request) -> bool:
    return True


def _names(*names: str) -> frozenset[str]:
    return frozenset(names)


#: Allowed sets of request names -> the extra rule the values must meet (``ValidDeviceResourceCombinations``).
COMBINATIONS: dict[frozenset[str], _Validator] = {
    _names(NVIDIA_GPU): _always,
    _names(AMD_GPU): _always,
    _names(DCU_GPU): _always,
    _names(GPU): _always,
    _names(GPU_MEMORY): _percentages_valid,
    _names(GPU_MEMORY_RATIO): _percentages_valid,
    _names(GPU_CORE, GPU_MEMORY): _percentages_valid,
    _names(GPU_CORE, GPU_MEMORY_RATIO): _percentages_valid,
    _names(HUAWEI_NPU_CORE, GPU_MEMORY_RATIO): _percentages_valid,
    _names(GPU_SHARED, GPU_MEMORY): _gpu_shared_valid,
    _names(GPU_SHARED, GPU_MEMORY_RATIO): _gpu_shared_valid,
    _names(GPU_SHARED, GPU_CORE, GPU_MEMORY): _gpu_shared_valid,
    _names(GPU_SHARED, GPU_CORE, GPU_MEMORY_RATIO): _gpu_shared_valid,
    _names(GPU_SHARED, HUAWEI_NPU_CORE, HUAWEI_NPU_CPU, GPU_MEMORY): _npu_shared_valid,
    _names(GPU_SHARED, HUAWEI_NPU_CORE, HUAWEI_NPU_CPU, HUAWEI_NPU_DVPP, GPU_MEMORY): _npu_shared_valid,
    _names(FPGA): _always,
    _names(RDMA): _always,
}

#: Names whose single value must be a valid percentage on its own (``DeviceResourceValidators``).
_PERCENTAGE_NAMES = (GPU, FPGA, RDMA)

#: Whole-device names: N devices normalize to ``gpu-core = gpu-memory-ratio = 100N``.
_WHOLE_DEVICE_NAMES = (NVIDIA_GPU, AMD_GPU, DCU_GPU)


def _quantity_text(value: int) -> str:
    return str(Quantity.from_int(value))


def validate_device_request(request: Request) -> frozenset[str]:
    """Check one device type's request; returns its combination (the set of names present).

    Raises :class:`DeviceShareError` (unresolvable) with upstream's message.
    """
    if not request:
        raise DeviceShareError(UNSCHEDULABLE_AND_UNRESOLVABLE, "pod request should not be empty")
    for name in sorted(request):
        if name in _PERCENTAGE_NAMES and not _is_percentage(request[name]):
            raise DeviceShareError(
                UNSCHEDULABLE_AND_UNRESOLVABLE,
                f"invalid resource unit {name}: {_quantity_text(request[name])}",
            )
    combination = frozenset(request)
    valid = COMBINATIONS.get(combination)
    if valid is None or not valid(request):
        names = " ".join(sorted(request))
        raise DeviceShareError(UNSCHEDULABLE_AND_UNRESOLVABLE, f"invalid resource device requests: [{names}]")
    return combination


def convert_device_request(request: Request, combination: frozenset[str]) -> dict[str, int]:
    """The normalized request of a valid combination (``ResourceCombinationsMapper``)."""
    for whole in _WHOLE_DEVICE_NAMES:
        if combination == {whole}:
            return {GPU_CORE: request[whole] * 100, GPU_MEMORY_RATIO: request[whole] * 100}
    if combination == {GPU}:
        return {GPU_CORE: request[GPU], GPU_MEMORY_RATIO: request[GPU]}
    return {name: request[name] for name in combination}


def pod_device_requests(requests: Request) -> dict[str, dict[str, int]]:
    """Device type -> normalized request, for every type the pod asks for (``GetPodDeviceRequests``).

    ``requests`` is the pod's summed requests; deprecated names are renamed first. Raises
    :class:`DeviceShareError` for a combination upstream rejects.
    """
    current = transform_deprecated(requests)
    result: dict[str, dict[str, int]] = {}
    for device_type in SCHEDULED_DEVICE_TYPES:
        masked = {
            name: current[name] for name in DEVICE_RESOURCE_NAMES[device_type] if current.get(name, 0) != 0
        }
        if not masked:
            continue
        combination = validate_device_request(masked)
        result[device_type] = convert_device_request(masked, combination)
    return result


def gpu_count_and_request(normalized: Request) -> tuple[dict[str, int], int, bool]:
    """(per-GPU request, number of GPUs, shared) for a normalized GPU request.

    The count is ``gpu.shared`` when set, else ``ratio / 100`` for a multi-GPU ratio, else 1.
    Core, ratio and memory are divided by it; the request is shared when the per-GPU ratio is
    under 100 or when it is expressed in bytes of memory.
    """
    count = 1
    shared = False
    if normalized.get(GPU_SHARED, 0) > 0:
        count = normalized[GPU_SHARED]
    else:
        ratio = normalized.get(GPU_MEMORY_RATIO)
        if ratio is not None and ratio > 100 and ratio % 100 == 0:
            count = ratio // 100
    per_gpu: dict[str, int] = {}
    if GPU_CORE in normalized:
        per_gpu[GPU_CORE] = normalized[GPU_CORE] // count
    if GPU_MEMORY_RATIO in normalized:
        per_gpu[GPU_MEMORY_RATIO] = normalized[GPU_MEMORY_RATIO] // count
        shared = per_gpu[GPU_MEMORY_RATIO] < 100
    elif GPU_MEMORY in normalized:
        shared = True
        per_gpu[GPU_MEMORY] = normalized[GPU_MEMORY] // count
    return per_gpu, count, shared


def default_count_and_request(resource_name: str, normalized: Request) -> tuple[dict[str, int], int]:
    """(per-device request, count) for RDMA or FPGA before hints: ``N x 100`` means N whole devices."""
    value = normalized.get(resource_name, 0)
    if value > 100 and value % 100 == 0:
        count = value // 100
        return {resource_name: value // count}, count
    return dict(normalized), 1


@dataclass(frozen=True)
class DeviceRequest:
    """What a pod asks of one device type, normalized and split per device."""

    device_type: str
    #: Normalized total request (``gpu.shared`` kept for GPUs).
    resources: dict[str, int]
    #: Number of devices before hints (RDMA/FPGA hints may change it on a node).
    count: int
    #: What each of those devices must have free.
    per_device: dict[str, int]
    #: GPUs: a share of a GPU (ratio under 100 or bytes of memory). RDMA/FPGA: under 100 per device.
    shared: bool


#: The one resource of the percentage-counted device types.
PERCENTAGE_RESOURCE = {DEVICE_TYPE_RDMA: RDMA, DEVICE_TYPE_FPGA: FPGA}


def normalize_device_requests(requests: Request) -> dict[str, DeviceRequest]:
    """Device type -> :class:`DeviceRequest` for a pod's summed requests (empty: no devices)."""
    result: dict[str, DeviceRequest] = {}
    for device_type, normalized in pod_device_requests(requests).items():
        if device_type == DEVICE_TYPE_GPU:
            per_device, count, shared = gpu_count_and_request(normalized)
        else:
            name = PERCENTAGE_RESOURCE[device_type]
            per_device, count = default_count_and_request(name, normalized)
            shared = per_device.get(name, 0) < 100
        result[device_type] = DeviceRequest(device_type, normalized, count, per_device, shared)
    return result
