"""NVIDIA GPUs through NVML (NVIDIA's own nvidia-ml-py, which dlopens libnvidia-ml.so.1).

A capability without a Python twin: when the driver library is absent the wrapper says
so and every GPU feature stays off; nothing here ever raises into the agent.

* :func:`summary` / :func:`supported`: count, driver and names, for ``koordlet probe``.
* :func:`discover`: the inventory the Device report is built from, as upstream's
  ``initGPUData`` gathers it (uuid, minor, memory total, legacy PCI bus id), plus the MIG mode,
  the NUMA node and PCIe root read from sysfs (:mod:`koordlet.system.devices.pci`) and the
  model and driver version of ``getGPUDriverAndModel``. As upstream's koordlet, one failing
  device call fails the whole inventory: a partial list of GPUs would under-report the node.
  With ``per_gpu=True`` (koord-device-daemon, whose upstream managers skip only the failing
  device) a GPU whose uuid and minor were read but whose other queries fail is kept, unhealthy,
  with the NVML error as its ``err_code``/``err_message``; one that cannot be identified is
  left out and named in :attr:`GPUInventory.dropped`; the others are reported as usual.
* :class:`GPUHealthWatcher`: upstream's ``gpuHealCheck``/``checkHealth``, a thread that
  registers every GPU for NVML's critical Xid events and waits on them (5 s at a time); a
  critical Xid marks its GPU unhealthy for good (``Xid<n>``), the application errors 13, 31,
  43, 45, 68 and 109 are ignored, and a GPU whose driver cannot deliver the events is
  unhealthy from the start (``DeviceHealthCheckNotSupported``). :func:`with_faults` applies
  what it found to an inventory.
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
import ctypes
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from koordlet.system.devices import pci

__all__ = [
    "APPLICATION_XIDS",
    "HEALTH_CHECK_NOT_SUPPORTED",
    "LAST_SEEN_US",
    "GPUFault",
    "GPUHealthWatcher",
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
    "with_faults",
]

log = logging.getLogger(__name__)

#: the ``lastSeenTimeStamp`` passed to nvmlDeviceGetProcessUtilization, as upstream (µs since
#: the epoch: in effect every sample the driver still buffers)
LAST_SEEN_US = 1024
#: Xids that are the application's fault, not the GPU's: the GPU stays healthy (upstream's
#: list, from NVIDIA's Xid catalogue)
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
#: the errCode of a GPU whose driver cannot deliver Xid events (upstream's)
HEALTH_CHECK_NOT_SUPPORTED = "DeviceHealthCheckNotSupported"
#: how long one nvmlEventSetWait waits, as upstream (ms); also how long stopping can take
EVENT_WAIT_MS = 5000

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
    #: why the GPU is unhealthy (a failed query's NVML error, or an Xid), as upstream's
    #: DeviceStatus errCode/errMessage; "" while healthy
    err_code: str = ""
    err_message: str = ""


@dataclass(frozen=True)
class GPUInventory:
    gpus: tuple[GPUInfo, ...]
    driver_version: str
    model: str  # "" unless every GPU has the same name
    #: GPUs left out because NVML could not identify them (``per_gpu`` discovery): one
    #: reason each
    dropped: tuple[str, ...] = ()


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


def _error_code(err: Exception) -> str:
    """A DeviceStatus errCode for an NVML error: pynvml's class name without its prefix
    (``GpuIsLost``), or ``NVMLError<code>`` for a code pynvml has no class for."""
    name = type(err).__name__
    if name.startswith("NVMLError_"):
        return name.removeprefix("NVMLError_")
    return f"NVMLError{getattr(err, 'value', '')}"


def _gpu(nvml: Any, sys_root: Path, index: int, *, strict: bool = True) -> GPUInfo:
    """GPU ``index``. Its handle, uuid and minor must answer (NVMLError otherwise); with
    ``strict`` so must every other query, else a failing one leaves its field unknown and the
    GPU unhealthy with the first failure as its error."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    failures: list[tuple[str, Exception]] = []

    def ask(what: str, query: Callable[[], Any], unknown: Any) -> Any:
        try:
            return query()
        except nvml.NVMLError as err:
            if strict:
                raise
            failures.append((what, err))
            return unknown

    def legacy_bus_id() -> str:
        return _text(nvml.nvmlDeviceGetPciInfo(handle).busIdLegacy).lower()

    bus_id = legacy_bus_id() if strict else ""  # strict: upstream's order, before the uuid
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
    if not strict:
        bus_id = ask("PCI info", legacy_bus_id, "")
    name = ask("name", lambda: _text(nvml.nvmlDeviceGetName(handle)), "")
    memory_total = ask("memory info", lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total), 0)
    mig_enabled = ask("MIG mode", lambda: _mig_enabled(nvml, handle), False)
    err_code = _error_code(failures[0][1]) if failures else ""
    err_message = "; ".join(f"NVML {what} query failed: {err}" for what, err in failures)
    return GPUInfo(
        index=index,
        uuid=uuid,
        minor=minor,
        name=name,
        memory_total=memory_total,
        bus_id=bus_id,
        mig_enabled=mig_enabled,
        healthy=not failures,
        numa_node=pci.numa_node(sys_root, bus_id) if bus_id else None,
        pcie_root=pci.pcie_root(sys_root, bus_id) if bus_id else "",
        err_code=err_code,
        err_message=err_message,
    )


def _discover(sys_root: Path, per_gpu: bool) -> tuple[GPUInventory | None, str]:
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
        dropped: list[str] = []
        for index in range(count):
            try:
                gpus.append(_gpu(nvml, sys_root, index, strict=not per_gpu))
            except nvml.NVMLError as err:
                if not per_gpu:
                    return None, f"NVML query of GPU {index} failed: {err}"
                dropped.append(_warn_once(f"GPU {index} left out: NVML cannot identify it: {err}"))
    finally:
        _shutdown(nvml)
    for gpu in gpus:
        if not gpu.healthy:
            _warn_once(f"GPU {gpu.index} ({gpu.uuid}) reported unhealthy: {gpu.err_message}")
    known = [g.name for g in gpus if g.name]
    model = model_name(known) if len(known) == len(gpus) else ""
    inventory = GPUInventory(tuple(gpus), driver, model, tuple(dropped))
    if not gpus and not dropped:
        return inventory, f"NVML driver {driver} reports no GPUs"
    reason = f"{count} GPU(s), driver {driver}"
    unhealthy = sum(not g.healthy for g in gpus)
    if unhealthy:
        reason += f"; {unhealthy} unhealthy"
    if dropped:
        reason += f"; {len(dropped)} left out ({'; '.join(dropped)})"
    return inventory, reason


def discover(sys_root: Path, *, per_gpu: bool = False) -> tuple[GPUInventory | None, str]:
    """The node's GPUs, or None with the one-line reason NVML could not list them.

    ``sys_root`` is the host's sysfs (``/sys``, or ``/host-sys`` in a DaemonSet), where each
    GPU's NUMA node and PCIe root are read. ``per_gpu``: a GPU's failing query fails only
    that GPU (see the module's docstring); NVML itself failing still gives None.
    """
    try:
        inventory, reason = _discover(sys_root, per_gpu)
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


# --- health: critical Xid events ------------------------------------------------------------


@dataclass(frozen=True)
class GPUFault:
    """Why a GPU is unhealthy for good (upstream's ``unhealthyGPUInfo``)."""

    err_code: str  # "Xid79", "DeviceHealthCheckNotSupported"
    err_message: str


def with_faults(inventory: GPUInventory, faults: Mapping[str, GPUFault]) -> GPUInventory:
    """``inventory`` with each GPU that has a fault (keyed by its legacy bus id) unhealthy."""
    if not faults:
        return inventory
    gpus = []
    for gpu in inventory.gpus:
        fault = faults.get(gpu.bus_id) if gpu.bus_id else None
        if fault is not None:
            gpu = replace(gpu, healthy=False, err_code=fault.err_code, err_message=fault.err_message)
        gpus.append(gpu)
    return replace(inventory, gpus=tuple(gpus))


def _address(handle: Any) -> int:
    """The address an NVML device handle points at (0 for NULL)."""
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


def _bus_id(nvml: Any, handle: Any) -> str:
    return _text(nvml.nvmlDeviceGetPciInfo(handle).busIdLegacy).lower()


class GPUHealthWatcher:
    """A thread watching NVML's critical Xid events (upstream's ``checkHealth``).

    :meth:`start` returns at once; the thread initialises NVML (its own reference, released
    when it ends), creates an event set and registers each GPU for
    ``nvmlEventTypeXidCriticalError``, then waits for events :data:`EVENT_WAIT_MS` at a time
    until :meth:`stop`. What it finds is kept for good (there is no recovery from an Xid, as
    upstream) and read with :meth:`faults`, keyed by each GPU's legacy bus id:

    * a critical Xid on a GPU: ``Xid<n>``, "Xid error detected on device, error code: <n>";
      an event that names no device marks every watched GPU; after each one, a watched GPU
      that no longer answers NVML is marked with the same code ("failed to get device, ...");
    * Xids in :data:`APPLICATION_XIDS`: ignored;
    * a GPU whose registration answers NOT_SUPPORTED: ``DeviceHealthCheckNotSupported``,
      "device does not support health checking"; other registration failures leave the GPU
      unwatched (logged once).

    Without NVML, or without an event set, nothing is watched and every GPU stays as discovery
    found it; the reason is logged once (upstream exits the koordlet there). ``on_fault`` is
    called, from the thread, each time a GPU gets its fault.
    """

    def __init__(self, *, wait_ms: int = EVENT_WAIT_MS, on_fault: Callable[[], None] | None = None) -> None:
        self.wait_ms = wait_ms
        self.on_fault = on_fault
        #: set once the GPUs are registered, or once the watch has given up
        self.ready = threading.Event()
        #: the bus ids of the GPUs whose events are watched
        self.watched: tuple[str, ...] = ()
        self._faults: dict[str, GPUFault] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpu-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end; it does within one wait (:meth:`join` waits for it)."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; True when it has (or never started)."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def faults(self) -> dict[str, GPUFault]:
        """The faults found so far, by legacy bus id."""
        with self._lock:
            return dict(self._faults)

    def _mark(self, bus_id: str, fault: GPUFault) -> None:
        with self._lock:
            if bus_id in self._faults:  # the first fault stays
                return
            self._faults[bus_id] = fault
        log.warning("GPU %s is unhealthy: %s: %s", bus_id, fault.err_code, fault.err_message)
        if self.on_fault is not None:
            try:
                self.on_fault()
            except Exception:
                log.exception("GPU health callback failed")

    def _run(self) -> None:
        try:
            self._watch()
        except Exception as err:  # a capability never takes the agent down
            _warn_once(f"GPU health check stopped: {type(err).__name__}: {err}")
        finally:
            self.ready.set()

    def _watch(self) -> None:
        try:
            nvml = _pynvml()
        except ImportError as err:
            _warn_once(f"GPU health check off: nvidia-ml-py is not installed: {err}")
            return
        failure = _init(nvml)
        if failure is not None:
            _warn_once(f"GPU health check off: {failure}")
            return
        try:
            try:
                event_set = nvml.nvmlEventSetCreate()
            except nvml.NVMLError as err:
                _warn_once(f"GPU health check off: NVML cannot create an event set: {err}")
                return
            try:
                devices = self._register(nvml, event_set)
                self.watched = tuple(devices)
                self.ready.set()
                if devices:
                    log.info("GPU health check: watching Xid events of %s", ", ".join(devices))
                    self._wait(nvml, event_set, devices)
            finally:
                with contextlib.suppress(nvml.NVMLError):
                    nvml.nvmlEventSetFree(event_set)
        finally:
            _shutdown(nvml)

    def _register(self, nvml: Any, event_set: Any) -> dict[str, Any]:
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as err:
            _warn_once(f"GPU health check off: NVML query failed: {err}")
            return {}
        devices: dict[str, Any] = {}
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                bus_id = _bus_id(nvml, handle)
            except nvml.NVMLError as err:
                _warn_once(f"GPU {index} not health-checked: NVML cannot identify it: {err}")
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
            except nvml.NVMLError as err:
                if err.value == nvml.NVML_ERROR_NOT_SUPPORTED:
                    self._mark(
                        bus_id,
                        GPUFault(HEALTH_CHECK_NOT_SUPPORTED, "device does not support health checking"),
                    )
                else:
                    _warn_once(f"GPU {bus_id} not health-checked: NVML cannot register its events: {err}")
                continue
            devices[bus_id] = handle
        return devices

    def _wait(self, nvml: Any, event_set: Any, devices: Mapping[str, Any]) -> None:
        while not self._stop.is_set():
            try:
                event = nvml.nvmlEventSetWait(event_set, self.wait_ms)
            except nvml.NVMLError as err:
                if err.value != nvml.NVML_ERROR_TIMEOUT:
                    _warn_once(f"GPU health check: waiting for NVML events failed: {err}")
                    self._stop.wait(self.wait_ms / 1000)  # no busy loop on a lasting error
                continue
            if int(event.eventType) != nvml.nvmlEventTypeXidCriticalError:
                continue
            xid = int(event.eventData)
            if xid in APPLICATION_XIDS:
                log.info("GPU health check: Xid %d is an application error, the GPU stays healthy", xid)
                continue
            self._critical(nvml, event.device, xid, devices)

    def _critical(self, nvml: Any, device: Any, xid: int, devices: Mapping[str, Any]) -> None:
        code = f"Xid{xid}"
        address = _address(device)
        named = [bus for bus, handle in devices.items() if address and _address(handle) == address]
        if not named and address:
            with contextlib.suppress(nvml.NVMLError):
                named = [bus for bus in (_bus_id(nvml, device),) if bus in devices]
        # an event that names no GPU we watch counts against all of them (upstream's)
        for bus_id in named or list(devices):
            self._mark(bus_id, GPUFault(code, f"Xid error detected on device, error code: {xid}"))
        for bus_id, handle in devices.items():  # does every GPU still answer?
            try:
                _bus_id(nvml, handle)
            except nvml.NVMLError as err:
                self._mark(bus_id, GPUFault(code, f"failed to get device, error: {err}"))
