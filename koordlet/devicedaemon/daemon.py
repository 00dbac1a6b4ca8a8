"""koord-device-daemon's work: find the node's accelerators and write them as device-info
records (:mod:`koordlet.system.devices.xpu`) for the koordlet, which turns them into the
node's Device object (upstream's ``pkg/device-daemon``).

Configuration (upstream's): ``--oneshot``, ``--sleep-interval`` (900 s), ``--no-timestamp``
(accepted; upstream declares it and never reads it), ``--prints-output-file``
(``/var/run/koordlet/xpu-device-infos/ic-device``; empty: standard output) and
``--config-file`` (YAML or JSON ``{version: v1, flags: {kdd: {oneshot, sleepInterval,
printsOutputFile}}}``). A flag given on the command line wins over its ``KDD_*`` environment
variable, which wins over the file.

Each round discovers the NVIDIA GPUs through NVML (upstream registers managers for other
vendors' tools; NVML is the one library this build carries): one record per GPU with its
UUID, minor, ``koordinator.sh/gpu-core`` 100, ``koordinator.sh/gpu-memory`` (bytes), model,
topology and status. As upstream's managers, a GPU that fails is skipped, not the round: one
whose uuid and minor NVML answered but whose other queries fail is written unhealthy, with the
NVML error as its ``errCode``/``errMessage`` (and no ``gpu-memory`` when that is what failed);
one NVML cannot identify is left out. The file is replaced atomically.

Without ``--oneshot`` the daemon repeats every sleep interval, reloads its configuration on
SIGHUP, and removes the file when it stops. It also watches the GPUs' critical Xid events
(:class:`koordlet.system.devices.nvml.GPUHealthWatcher`): a GPU with one is written unhealthy
(``Xid<n>``) for good, at once rather than at the next round, and a GPU whose driver cannot
report them is unhealthy with ``DeviceHealthCheckNotSupported``. When NVML fails as a whole
(no library, no driver, every GPU unidentifiable) after a round that listed the GPUs, the last
file is kept: writing no GPUs would make the koordlet report the node's GPUs from its own
start-up discovery, all healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from koordinator.api.extension.resources import GPU_CORE, GPU_MEMORY
from koordinator.api.goparse import GoParseError, parse_duration_seconds
from koordlet.system.devices import nvml
from koordlet.system.devices.xpu import DeviceRecord, to_json, write_atomically

__all__ = ["DaemonConfig", "DaemonError", "discover_records", "load_config", "run"]

log = logging.getLogger(__name__)

DEFAULT_OUTPUT = "/var/run/koordlet/xpu-device-infos/ic-device"
DEFAULT_SLEEP_S = 900.0
VENDOR_NVIDIA = "nvidia"


class DaemonError(ValueError):
    """A configuration the daemon cannot run with."""


@dataclass(frozen=True)
class DaemonConfig:
    oneshot: bool = False
    sleep_interval_s: float = DEFAULT_SLEEP_S
    prints_output_file: str = DEFAULT_OUTPUT
    no_timestamp: bool = False


def _duration(value: Any, where: str) -> float:
    try:
        seconds = parse_duration_seconds(str(value))
    except GoParseError as err:
        raise DaemonError(f"{where}: {value!r}: {err}") from None
    if seconds <= 0:
        raise DaemonError(f"{where}: {value!r}: must be positive")
    return seconds


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "t", "true", "yes")


def load_config(
    flags: Mapping[str, Any], environ: Mapping[str, str] | None = None, config_file: str | None = None
) -> DaemonConfig:
    """The configuration: the file, then the ``KDD_*`` environment, then the given flags
    (``flags`` holds only those given on the command line)."""
    environ = os.environ if environ is None else environ
    config = DaemonConfig()
    path = config_file or environ.get("KDD_CONFIG_FILE") or environ.get("CONFIG_FILE")
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as err:
            raise DaemonError(f"cannot read --config-file {path}: {err.strerror or err}") from None
        except yaml.YAMLError as err:
            raise DaemonError(f"--config-file {path}: not YAML or JSON: {err}") from None
        if not isinstance(data, Mapping) or data.get("version", "v1") != "v1":
            raise DaemonError(f"--config-file {path}: want {{version: v1, flags: {{kdd: ...}}}}")
        kdd = ((data.get("flags") or {}).get("kdd")) or {}
        if "oneshot" in kdd:
            config = replace(config, oneshot=bool(kdd["oneshot"]))
        if "sleepInterval" in kdd:
            config = replace(config, sleep_interval_s=_duration(kdd["sleepInterval"], "sleepInterval"))
        if "printsOutputFile" in kdd:
            config = replace(config, prints_output_file=str(kdd["printsOutputFile"] or ""))
    if "KDD_ONESHOT" in environ:
        config = replace(config, oneshot=_truthy(environ["KDD_ONESHOT"]))
    if "KDD_NO_TIMESTAMP" in environ:
        config = replace(config, no_timestamp=_truthy(environ["KDD_NO_TIMESTAMP"]))
    if "KDD_SLEEP_INTERVAL" in environ:
        config = replace(
            config, sleep_interval_s=_duration(environ["KDD_SLEEP_INTERVAL"], "KDD_SLEEP_INTERVAL")
        )
    for name in ("KDD_PRINTS_OUTPUT_FILE", "PRINTS_OUTPUT_FILE"):
        if name in environ:
            config = replace(config, prints_output_file=environ[name])
            break
    if flags.get("oneshot") is not None:
        config = replace(config, oneshot=bool(flags["oneshot"]))
    if flags.get("no_timestamp") is not None:
        config = replace(config, no_timestamp=bool(flags["no_timestamp"]))
    if flags.get("sleep_interval") is not None:
        config = replace(config, sleep_interval_s=_duration(flags["sleep_interval"], "--sleep-interval"))
    if flags.get("prints_output_file") is not None:
        config = replace(config, prints_output_file=str(flags["prints_output_file"]))
    return config


def _record(model: str, gpu: nvml.GPUInfo) -> DeviceRecord:
    resources = {GPU_CORE: "100"}
    if gpu.memory_total > 0:
        resources[GPU_MEMORY] = str(gpu.memory_total)
    return DeviceRecord(
        vendor=VENDOR_NVIDIA,
        model=model,
        uuid=gpu.uuid,
        minor=gpu.minor,
        resources=resources,
        node_id=gpu.numa_node if gpu.numa_node is not None else -1,
        pcie_id=gpu.pcie_root,
        bus_id=gpu.bus_id,
        healthy=gpu.healthy,
        err_code=gpu.err_code,
        err_message=gpu.err_message,
    )


def discover_records(
    sys_root: Path, faults: Mapping[str, nvml.GPUFault] | None = None
) -> tuple[list[DeviceRecord] | None, str]:
    """The node's NVIDIA GPUs as device-info records (those with a fault, by bus id,
    unhealthy), and what NVML said; None when NVML failed as a whole (every GPU it counted
    unidentifiable included)."""
    inventory, reason = nvml.discover(sys_root, per_gpu=True)
    if inventory is None or (inventory.dropped and not inventory.gpus):
        return None, reason
    inventory = nvml.with_faults(inventory, faults or {})
    return [_record(inventory.model, gpu) for gpu in inventory.gpus], reason


def write_records(config: DaemonConfig, records: list[DeviceRecord]) -> None:
    text = to_json(records)
    if not config.prints_output_file:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_atomically(Path(config.prints_output_file), text)


def remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


async def run(load: Callable[[], DaemonConfig], sys_root: Path) -> int:
    """Rounds until stopped (``load()`` reads the configuration: at start and on SIGHUP).

    Without ``--oneshot`` a :class:`~koordlet.system.devices.nvml.GPUHealthWatcher` runs
    beside the rounds; a GPU it finds faulty starts a round at once. It is asked to stop
    with the daemon and ends within one event wait (its thread does not hold the exit)."""
    config = load()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reload = asyncio.Event()
    changed = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload.set)

    def fault_found() -> None:  # from the watcher's thread
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(changed.set)

    watcher: nvml.GPUHealthWatcher | None = None
    if not config.oneshot:
        watcher = nvml.GPUHealthWatcher(on_fault=fault_found)
        watcher.start()
    listed = False  # a round had NVML's answer
    try:
        while True:
            changed.clear()
            faults = watcher.faults() if watcher is not None else None
            records, reason = await asyncio.to_thread(discover_records, sys_root, faults)
            if records is None and listed:
                log.warning("NVML failed (%s); the last device-info file is kept", reason)
            else:
                log.info("%d device(s): %s", len(records or []), reason)
                write_records(config, records or [])
                listed = listed or records is not None
            if config.oneshot:
                return 0
            waits = {asyncio.ensure_future(e.wait()) for e in (stop, reload, changed)}
            _, pending = await asyncio.wait(
                waits, timeout=config.sleep_interval_s, return_when=asyncio.FIRST_COMPLETED
            )
            for task in pending:
                task.cancel()
            if stop.is_set():
                return 0
            if reload.is_set():
                reload.clear()
                try:
                    config = load()
                    log.info("configuration reloaded")
                except DaemonError as err:
                    log.error("configuration not reloaded, keeping the last good one: %s", err)
    finally:
        if watcher is not None:
            watcher.stop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        if not config.oneshot and config.prints_output_file:
            remove(Path(config.prints_output_file))
