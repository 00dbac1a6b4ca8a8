"""NVIDIA GPUs through NVML (NVIDIA's own nvidia-ml-py, which dlopens libnvidia-ml.so.1).

A capability without a Python twin: when the driver library is absent the wrapper says
so and every GPU feature stays off; nothing here ever raises into the agent.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GPUSummary:
    count: int
    driver_version: str
    models: tuple[str, ...]


def _pynvml() -> Any:
    # deferred: nvidia-ml-py is an extra (koordinator-py[gpu]) and costs import time the
    # agent need not pay without GPUs
    import pynvml

    return pynvml


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def summary() -> tuple[GPUSummary | None, str]:
    """The GPUs NVML sees, or None with the reason NVML is unusable."""
    try:
        nvml = _pynvml()
    except ImportError as err:
        return None, f"nvidia-ml-py is not installed (install koordinator-py[gpu]): {err}"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        return None, f"NVML unavailable: {err}"
    try:
        count = int(nvml.nvmlDeviceGetCount())
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        models = tuple(
            _text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)
        )
        return GPUSummary(count, driver, models), f"{count} GPU(s), driver {driver}"
    except nvml.NVMLError as err:
        return None, f"NVML query failed: {err}"
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def supported() -> tuple[bool, str]:
    found, reason = summary()
    if found is None:
        return False, reason
    if found.count == 0:
        return False, f"NVML loaded (driver {found.driver_version}) but reports no GPUs"
    return True, reason
