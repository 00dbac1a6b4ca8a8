"""GPU request shapes (gate ``ValidatePodDeviceResource``), a step of ``/validate-pod``.

Per container:

* ``koordinator.sh/gpu`` and ``koordinator.sh/gpu.shared`` may not both be requested;
* ``koordinator.sh/gpu`` (percent of one GPU) must be in (0, 100], or a multiple of 100;
* with ``gpu.shared`` (the number of GPUs shared): it must be positive, exactly one of
  ``gpu-memory`` and ``gpu-memory-ratio`` must be given, and ``gpu-core`` and
  ``gpu-memory-ratio`` must be multiples of the number of GPUs.
"""

from __future__ import annotations

from typing import Any

from koordinator.api.extension.resources import GPU, GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO, GPU_SHARED
from koordinator.api.quantity import Quantity
from koordinator.api.schema.errors import FieldError

__all__ = ["NAME", "validate_device_resources"]

NAME = "DeviceResource"

Obj = dict[str, Any]


def _container_errors(index: int, container: Obj) -> list[FieldError]:
    path = f"pod.spec.containers[{index}].resources.requests"
    requests = (container.get("resources") or {}).get("requests") or {}
    values = {
        name: Quantity.from_json(raw).value()
        for name, raw in requests.items()
        if name in (GPU, GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO, GPU_SHARED)
    }
    errors: list[FieldError] = []
    if GPU in values and GPU_SHARED in values:
        errors.append(FieldError.forbidden(path, f"{GPU} and {GPU_SHARED} cannot be requested together"))
    if GPU in values:
        gpu = values[GPU]
        if gpu <= 0 or (gpu > 100 and gpu % 100 != 0):
            errors.append(
                FieldError.invalid(f"{path}[{GPU}]", str(gpu), "must be in (0, 100] or a multiple of 100")
            )
    if GPU_SHARED in values:
        shared = values[GPU_SHARED]
        if shared <= 0:
            errors.append(FieldError.invalid(f"{path}[{GPU_SHARED}]", str(shared), "must be positive"))
            return errors
        if (GPU_MEMORY in values) == (GPU_MEMORY_RATIO in values):
            errors.append(
                FieldError.invalid(
                    path,
                    "",
                    f"exactly one of {GPU_MEMORY} and {GPU_MEMORY_RATIO} must be requested with {GPU_SHARED}",
                )
            )
        for name in (GPU_CORE, GPU_MEMORY_RATIO):
            if name in values and values[name] % shared != 0:
                errors.append(
                    FieldError.invalid(
                        f"{path}[{name}]", str(values[name]), f"must be a multiple of {GPU_SHARED} ({shared})"
                    )
                )
    return errors


def validate_device_resources(pod: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, container in enumerate((pod.get("spec") or {}).get("containers") or ()):
        errors += _container_errors(index, container)
    return errors
