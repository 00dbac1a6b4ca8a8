"""GPU request shapes (gate ``ValidatePodDeviceResource``), a step of ``/validate-pod``.

Per container, with upstream's field errors (all on the path
``pod.spec.containers[*].resources.requests``):

* ``koordinator.sh/gpu`` and ``koordinator.sh/gpu.shared`` may not both be requested (the
  container's other checks are then skipped);
* ``koordinator.sh/gpu`` (percent of one GPU) must be above zero, and a multiple of 100
  when above 100;
* ``gpu.shared`` (the number of GPUs shared) must be above zero; unless the container asks
  for ``huawei.com/npu-core``, exactly one of ``gpu-memory`` and ``gpu-memory-ratio`` must
  be non-zero, and ``gpu-core`` and ``gpu-memory-ratio`` must be multiples of ``gpu.shared``.

Values are whole units (``Value()``, rounded up), as upstream. A negative request is
refused as not above zero (upstream lets it through; the apiserver's own validation
refuses it before this webhook is called anyway).
"""

from __future__ import annotations

from typing import Any

from koordinator.api.extension.resources import (
    GPU,
    GPU_CORE,
    GPU_MEMORY,
    GPU_MEMORY_RATIO,
    GPU_SHARED,
    HUAWEI_NPU_CORE,
)
from koordinator.api.quantity import Quantity
from koordinator.api.schema.errors import FieldError

__all__ = ["NAME", "validate_device_resources"]

NAME = "DeviceResource"
PATH = "pod.spec.containers[*].resources.requests"

Obj = dict[str, Any]


def _gpu_errors(gpu: Quantity) -> list[FieldError]:
    if gpu.value() <= 0:
        return [FieldError.invalid(PATH, str(gpu), "the requested GPU must be greater than zero")]
    if gpu.value() > 100 and gpu.value() % 100 != 0:
        return [FieldError.invalid(PATH, str(gpu), "the requested GPU must be percentage of 100")]
    return []


def _shared_errors(requests: dict[str, Quantity]) -> list[FieldError]:
    zero = Quantity()
    shared = requests[GPU_SHARED]
    errors: list[FieldError] = []
    if shared.value() <= 0:
        errors.append(FieldError.invalid(PATH, str(shared), "the requested GPU must be greater than zero"))
    if requests.get(HUAWEI_NPU_CORE, zero).value() != 0:
        return errors
    memory = requests.get(GPU_MEMORY, zero).value()
    ratio = requests.get(GPU_MEMORY_RATIO, zero)
    if memory == 0 and ratio.value() == 0:
        errors.append(FieldError.forbidden(PATH, "GPU memory and GPU memory ratio all is zero"))
    if memory != 0 and ratio.value() != 0:
        errors.append(FieldError.forbidden(PATH, "declare GPU memory and GPU memory ratio at same time"))
    if shared.value() > 0:
        core = requests.get(GPU_CORE, zero)
        if core.value() % shared.value() != 0:
            errors.append(
                FieldError.invalid(PATH, str(core), "the requested gpuCore must multiple of shared")
            )
        if ratio.value() % shared.value() != 0:
            errors.append(
                FieldError.invalid(PATH, str(ratio), "the requested gpuMemoryRatio must multiple of shared")
            )
    return errors


def _container_errors(container: Obj) -> list[FieldError]:
    raw = (container.get("resources") or {}).get("requests") or {}
    requests = {
        name: Quantity.from_json(value)
        for name, value in raw.items()
        if name in (GPU, GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO, GPU_SHARED, HUAWEI_NPU_CORE)
    }
    if GPU in requests and GPU_SHARED in requests:
        return [FieldError.forbidden(PATH, "Forbidden declare GPU and GPU share at same time")]
    errors: list[FieldError] = []
    if GPU in requests:
        errors += _gpu_errors(requests[GPU])
    if GPU_SHARED in requests:
        errors += _shared_errors(requests)
    return errors


def validate_device_resources(pod: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    for container in (pod.get("spec") or {}).get("containers") or ():
        errors += _container_errors(container)
    return errors
