"""GPU resource normalisation of new pods (on unless ``DisableDeviceResourceSpec``).

For each container that requests any of ``koordinator.sh/gpu``, ``gpu-core``,
``gpu-memory``, ``gpu-memory-ratio`` or ``gpu.shared``:

* ``koordinator.sh/gpu: N`` (percent of one GPU) becomes ``gpu-core: N`` and
  ``gpu-memory-ratio: N`` in requests and limits, and ``gpu`` is removed;
* without ``gpu.shared``, the number of GPUs the request spans is added to requests and
  limits: ``gpu-memory-ratio / 100`` when the ratio is above 100 and a multiple of 100,
  else ``gpu-core / 100`` by the same rule, else 1.

Upstream divides the *memory ratio* in the ``gpu-core`` branch, where the ratio is absent,
and so writes ``gpu.shared: 0`` for ``gpu-core: 200`` alone; this port divides the core
value, as the rule states (tested).
"""

from __future__ import annotations

from typing import Any

from koordinator.api.extension.resources import GPU, GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO, GPU_SHARED
from koordinator.api.quantity import Quantity

__all__ = ["NAME", "mutate_device_resource_spec"]

NAME = "DeviceResourceSpec"
_GPU_RESOURCES = (GPU, GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO, GPU_SHARED)

Obj = dict[str, Any]


def _value(resources: Obj, name: str) -> int | None:
    raw = resources.get(name)
    return None if raw is None else Quantity.from_json(raw).value()


def _spans(value: int | None) -> int | None:
    if value is not None and value > 100 and value % 100 == 0:
        return value // 100
    return None


def mutate_device_resource_spec(pod: Obj) -> None:
    for container in (pod.get("spec") or {}).get("containers") or ():
        resources = container.get("resources")
        if not isinstance(resources, dict):
            continue
        requested = resources.get("requests") or {}
        limited = resources.get("limits") or {}
        for name in _GPU_RESOURCES:
            if name in requested or name in limited:
                break
        else:
            continue
        requests: Obj = dict(requested)
        limits: Obj = dict(limited)
        if GPU in requests:
            percent = str(Quantity.from_int(_value(requests, GPU) or 0))
            requests[GPU_CORE] = requests[GPU_MEMORY_RATIO] = percent
            limits[GPU_CORE] = limits[GPU_MEMORY_RATIO] = percent
            requests.pop(GPU)
            limits.pop(GPU, None)
        if GPU_SHARED not in requests:
            if GPU_MEMORY_RATIO in requests:
                shared = _spans(_value(requests, GPU_MEMORY_RATIO)) or 1
            else:
                shared = _spans(_value(requests, GPU_CORE)) or 1
            requests[GPU_SHARED] = limits[GPU_SHARED] = str(shared)
        resources["requests"] = requests
        resources["limits"] = limits
