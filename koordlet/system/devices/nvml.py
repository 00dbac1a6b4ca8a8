"""NVIDIA GPUs through NVML (NVIDIA's own nvidia-ml-py, which dlopens libnvidia-ml.so.1).

A capability without a Python twin: when the driver library is absent the wrapper says
so and every GPU feature stays off; nothing here ever raises into the agent.

* :func:`summary` / :func:`supported`: count, driver and names, for ``koordlet probe``.
* :func:`discover`: the inventory the Device report is built from, as upstream's
  ``initGPUData`` gathers it (uuid, minor, memory total, legacy PCI bus id), plus the MIG mode,
  the NUMA node and PCIe root read from sysfs (:mod:`koordlet.system.devices.pci`) and the
  model and driver version of ``getGPUDriverAndModel``. As upstream, one failing device call
  fails the whole inventory: a partial list of GPUs would under-report the node.
* :func:`usage`: per-GPU core and memory use summed over its compute processes, joined on pid
  with their latest process-utilisation sample (upstream's ``collectGPUUsage``). Unlike
  discovery, a device whose queries fail is skipped and the others are still reported. A GPU
  with no sample at all (NVML answers NOT_FOUND when idle) counts 0 % SM, where upstream would
  drop it, so its processes' memory is still seen.

Each call opens NVML and shuts it down again. NVML counts inits, so a caller that asks often
(the GPU collector, every second) first takes :func:`hold`: one ``nvmlInit`` of its own, kept
until it calls the function :func:`hold` returned, so the calls in between neither load the
library nor initialise the driver again.

Failures come back as ``(None, reason)``, an empty list with the reason, or (:func:`hold`)
None. :func:`discover`, :func:`usage` and :func:`hold` also log each distinct reason once per
process as a warning, so a collector calling every few seconds does not repeat it;
:func:`summary` does not log (``koordlet probe`` prints its reason).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from koordlet.system.devices import pci

__all__ = [
    "LAST_SEEN_US",
    "GPUInfo",
    "GPUInventory",
    "GPUSummary",
    "GPUUsage",
    "discover",
    "hold",
    "model_name",
    "summary",
    "supported",
    "usage",
]

log = logging.getLogger(__name__)

#: the ``lastSeenTimeStamp`` passed to nvmlDeviceGetProcessUtilization, as upstream (µs since
#: the epoch: in effect every sample the driver still buffers)
LAST_SEEN_US = 1024

_LIBRARY_NOT_FOUND = (
    "NVML library not found (libnvidia-ml.so.1 is not on the loader path or cannot be loaded;"
    " is the NVIDIA driver installed?)"
)
_warned: set[str] = set()


@dataclass(frozen=True)
class GPUSummary:
    count: int
    driver_version: str
    models: tuple[str, ...]


@dataclass(frozen=True)
class GPUInfo:
    index: int
    uuid: str
    minor: int  # the N of /dev/nvidiaN
    name: str
    memory_total: int  # bytes
    bus_id: str  # lower-case legacy BDF, "0000:3b:00.0"
    mig_enabled: bool
    healthy: bool = True
    numa_node: int | None = None  # None: sysfs has no numa_node for the device
    pcie_root: str = ""  # the host bridge, "pci0000:3a"


@dataclass(frozen=True)
class GPUInventory:
    gpus: tuple[GPUInfo, ...]
    driver_version: str
    model: str  # "" unless every GPU has the same name


@dataclass(frozen=True)
class GPUUsage:
    uuid: str
    minor: int
    core_percent: float  # sum of the processes' SM utilisation (can exceed 100 with MPS)
    memory_used: int  # bytes, sum of the processes' used memory
    memory_total: int
    pid_usage: Mapping[int, tuple[float, int]]  # pid -> (SM utilisation %, used memory bytes)


def _pynvml() -> Any:
    # deferred: nvidia-ml-py is an extra (koordinator-py[gpu]) and costs import time the
    # agent need not pay without GPUs
    import pynvml

    return pynvml


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _warn_once(reason: str) -> str:
    """Log a reason the first time this process meets it; return it."""
    if reason not in _warned:
        _warned.add(reason)
        log.warning("%s", reason)
    return reason


def model_name(names: Sequence[str]) -> str:
    """Upstream's GPU model label: "" unless all names are equal and non-empty; a leading
    "NVIDIA " (added by drivers 470+) is dropped and spaces become dashes."""
    if not names or not names[0] or any(n != names[0] for n in names):
        return ""
    return names[0].removeprefix("NVIDIA ").replace(" ", "-")


def _init(nvml: Any) -> str | None:
    """Initialise NVML; the reason it cannot be, or None."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        if err.value == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            return _LIBRARY_NOT_FOUND
        return f"NVML init failed: {err}"
    return None


def _shutdown(nvml: Any) -> None:
    with contextlib.suppress(nvml.NVMLError):
        nvml.nvmlShutdown()


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


def _hold() -> Callable[[], None] | None:
    try:
        nvml = _pynvml()
    except ImportError as err:
        _warn_once(f"nvidia-ml-py is not installed (install koordinator-py[gpu]): {err}")
        return None
    failure = _init(nvml)
    if failure is not None:
        _warn_once(failure)
        return None
    lock = threading.Lock()
    held = [True]

    def release() -> None:
        with lock:
            if not held[0]:
                return
            held[0] = False
        try:
            _shutdown(nvml)
        except Exception as err:  # a capability never takes the agent down
            log.warning("NVML shutdown failed: %s: %s", type(err).__name__, err)

    return release


def hold() -> Callable[[], None] | None:
    """Initialise NVML once and keep it initialised: the function returned shuts it down
    again (once; later calls do nothing). None when NVML is unusable (the reason is logged
    once, as by :func:`usage`)."""
    try:
        return _hold()
    except Exception as err:  # a capability never takes the agent down
        _warn_once(f"NVML init failed: {type(err).__name__}: {err}")
        return None


def supported() -> tuple[bool, str]:
    found, reason = summary()
    if found is None:
        return False, reason
    if found.count == 0:
        return False, f"NVML loaded (driver {found.driver_version}) but reports no GPUs"
    return True, reason


def _mig_enabled(nvml: Any, handle: object) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError as err:
        # a GPU without MIG (pre-Ampere, consumer parts) or a driver without the call
        if err.value in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            return False
        raise
    return bool(current == nvml.NVML_DEVICE_MIG_ENABLE)


def _gpu(nvml: Any, sys_root: Path, index: int) -> GPUInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busIdLegacy).lower()
    return GPUInfo(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        minor=int(nvml.nvmlDeviceGetMinorNumber(handle)),
        name=_text(nvml.nvmlDeviceGetName(handle)),
        memory_total=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        bus_id=bus_id,
        mig_enabled=_mig_enabled(nvml, handle),
        numa_node=pci.numa_node(sys_root, bus_id),
        pcie_root=pci.pcie_root(sys_root, bus_id),
    )


def _discover(sys_root: Path) -> tuple[GPUInventory | None, str]:
    try:
        nvml = _pynvml()
    except ImportError as err:
        return None, f"nvidia-ml-py is not installed (install koordinator-py[gpu]): {err}"
    failure = _init(nvml)
    if failure is not None:
        return None, failure
    try:
        try:
            count = int(nvml.nvmlDeviceGetCount())
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError as err:
            return None, f"NVML query failed: {err}"
        gpus: list[GPUInfo] = []
        for index in range(count):
            try:
                gpus.append(_gpu(nvml, sys_root, index))
            except nvml.NVMLError as err:
                return None, f"NVML query of GPU {index} failed: {err}"
    finally:
        _shutdown(nvml)
    inventory = GPUInventory(tuple(gpus), driver, model_name([g.name for g in gpus]))
    if not gpus:
        return inventory, f"NVML driver {driver} reports no GPUs"
    return inventory, f"{count} GPU(s), driver {driver}"


def discover(sys_root: Path) -> tuple[GPUInventory | None, str]:
    """The node's GPUs, or None with the one-line reason NVML could not list them.

    ``sys_root`` is the host's sysfs (``/sys``, or ``/host-sys`` in a DaemonSet), where each
    GPU's NUMA node and PCIe root are read.
    """
    try:
        inventory, reason = _discover(sys_root)
    except Exception as err:  # a capability never takes the agent down
        inventory, reason = None, f"NVML discovery failed: {type(err).__name__}: {err}"
    if inventory is None:
        _warn_once(reason)
    return inventory, reason


def _device_usage(nvml: Any, index: int) -> GPUUsage:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
    memory_total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    memory: dict[int, int] = {}
    for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
        # the same pid can be listed once per MIG instance it uses; None: not available
        memory[int(proc.pid)] = memory.get(int(proc.pid), 0) + int(proc.usedGpuMemory or 0)
    try:
        samples = nvml.nvmlDeviceGetProcessUtilization(handle, LAST_SEEN_US)
    except nvml.NVMLError as err:
        if err.value != nvml.NVML_ERROR_NOT_FOUND:  # NOT_FOUND: no sample since LAST_SEEN_US
            raise
        samples = []
    latest: dict[int, tuple[int, int]] = {}  # pid -> (timestamp, SM %)
    for sample in samples:
        pid, stamp = int(sample.pid), int(sample.timeStamp)
        if pid in memory and (pid not in latest or stamp > latest[pid][0]):
            latest[pid] = (stamp, int(sample.smUtil))
    pid_usage = {pid: (float(latest.get(pid, (0, 0))[1]), used) for pid, used in sorted(memory.items())}
    return GPUUsage(
        uuid=uuid,
        minor=minor,
        core_percent=float(sum(sm for sm, _ in pid_usage.values())),
        memory_used=sum(memory.values()),
        memory_total=memory_total,
        pid_usage=MappingProxyType(pid_usage),
    )


def _usage() -> tuple[list[GPUUsage], str]:
    try:
        nvml = _pynvml()
    except ImportError as err:
        return [], _warn_once(f"nvidia-ml-py is not installed (install koordinator-py[gpu]): {err}")
    failure = _init(nvml)
    if failure is not None:
        return [], _warn_once(failure)
    try:
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as err:
            return [], _warn_once(f"NVML query failed: {err}")
        found: list[GPUUsage] = []
        skipped: list[str] = []
        for index in range(count):
            try:
                found.append(_device_usage(nvml, index))
            except nvml.NVMLError as err:
                skipped.append(_warn_once(f"GPU {index} skipped: {err}"))
    finally:
        _shutdown(nvml)
    reason = f"{len(found)} of {count} GPU(s) sampled"
    return found, reason + (f"; {'; '.join(skipped)}" if skipped else "")


def usage() -> tuple[list[GPUUsage], str]:
    """Each GPU's use by its compute processes, and a one-line account (or why there is none).

    A process without a utilisation sample counts 0 % SM; a device whose queries fail is left
    out of the list and named in the reason.
    """
    try:
        return _usage()
    except Exception as err:  # a capability never takes the agent down
        return [], _warn_once(f"NVML usage failed: {type(err).__name__}: {err}")
