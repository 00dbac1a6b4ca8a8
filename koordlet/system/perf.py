"""perf_event_open: counters per process, per CPU or per cgroup, and whether the host has them.

Backed by the cffi module ``koordlet._native._perf``; with extensions disabled the same
syscalls are made through ctypes, so availability answers do not depend on the backend.
``supported()`` distinguishes "no PMU" (ENOENT, typical of VMs without a virtual PMU)
from a permission problem (perf_event_paranoid) and from kernels without perf events.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import platform
import struct
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Protocol

from koordlet.system import native

PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_COUNT_SW_TASK_CLOCK = 1
PERF_FLAG_PID_CGROUP = 1 << 2
PERF_FLAG_FD_CLOEXEC = 1 << 3

_PERF_EVENT_IOC_ENABLE = 0x2400
_PERF_EVENT_IOC_DISABLE = 0x2401
_SYSCALL_NUMBERS = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331, "riscv64": 241}


@dataclass(frozen=True)
class Event:
    name: str
    type: int
    config: int


CYCLES = Event("cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES)
INSTRUCTIONS = Event("instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS)
CPU_CLOCK = Event("cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK)
TASK_CLOCK = Event("task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK)


@dataclass(frozen=True)
class Reading:
    value: int
    time_enabled: int
    time_running: int

    def scaled(self) -> float:
        """The count extrapolated over the time the event was enabled (multiplexing)."""
        if self.time_running == 0:
            return 0.0
        return self.value * self.time_enabled / self.time_running


class _Backend(Protocol):
    def open(self, event: Event, pid: int, cpu: int, group_fd: int, flags: int) -> int: ...
    def read(self, fd: int) -> Reading: ...


class _NativeBackend:
    def __init__(self, module: object) -> None:
        self._ffi = module.ffi  # type: ignore[attr-defined]
        self._lib = module.lib  # type: ignore[attr-defined]

    def open(self, event: Event, pid: int, cpu: int, group_fd: int, flags: int) -> int:
        fd = int(self._lib.koord_perf_open(event.type, event.config, pid, cpu, group_fd, flags))
        if fd < 0:
            raise OSError(-fd, os.strerror(-fd))
        return fd

    def read(self, fd: int) -> Reading:
        out = self._ffi.new("uint64_t[3]")
        rc = int(self._lib.koord_perf_read(fd, out, out + 1, out + 2))
        if rc < 0:
            raise OSError(-rc, os.strerror(-rc))
        return Reading(int(out[0]), int(out[1]), int(out[2]))


class _CtypesBackend:
    """The same syscalls through libc's ``syscall()``; perf_event_attr in its VER0 layout."""

    _ATTR_SIZE = 64  # PERF_ATTR_SIZE_VER0
    # disabled | inherit | exclude_hv, matching the C module
    _FLAGS = (1 << 0) | (1 << 1) | (1 << 6)
    _READ_FORMAT = 1 | 2  # TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING

    def __init__(self) -> None:
        number = _SYSCALL_NUMBERS.get(platform.machine())
        if number is None:
            raise OSError(errno.ENOSYS, f"perf_event_open: unknown syscall number on {platform.machine()}")
        self._number = number
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long

    def open(self, event: Event, pid: int, cpu: int, group_fd: int, flags: int) -> int:
        attr = ctypes.create_string_buffer(128)
        struct.pack_into(
            "<IIQQQQQ",
            attr,
            0,
            event.type,
            self._ATTR_SIZE,
            event.config,
            0,
            0,
            self._READ_FORMAT,
            self._FLAGS,
        )
        fd = self._libc.syscall(
            ctypes.c_long(self._number),
            attr,
            ctypes.c_int(pid),
            ctypes.c_int(cpu),
            ctypes.c_int(group_fd),
            ctypes.c_ulong(flags),
        )
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return int(fd)

    def read(self, fd: int) -> Reading:
        data = os.read(fd, 24)
        if len(data) != 24:
            raise OSError(errno.EIO, "short read from a perf event")
        value, enabled, running = struct.unpack("<QQQ", data)
        return Reading(value, enabled, running)


@cache
def _backend() -> _Backend:
    module = native.load("_perf")
    return _CtypesBackend() if module is None else _NativeBackend(module)


def open_counter(event: Event, *, pid: int = 0, cpu: int = -1, group_fd: int = -1, flags: int = 0) -> int:
    """Open a disabled counter; raises OSError with the kernel's errno."""
    return _backend().open(event, pid, cpu, group_fd, flags | PERF_FLAG_FD_CLOEXEC)


def open_cgroup_counter(event: Event, cgroup_dir: Path | str, cpu: int, group_fd: int = -1) -> int:
    """A counter for every task of a cgroup (perf_event hierarchy) on one CPU."""
    dfd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_counter(event, pid=dfd, cpu=cpu, group_fd=group_fd, flags=PERF_FLAG_PID_CGROUP)
    finally:
        os.close(dfd)


def enable(fd: int) -> None:
    fcntl.ioctl(fd, _PERF_EVENT_IOC_ENABLE, 0)


def disable(fd: int) -> None:
    fcntl.ioctl(fd, _PERF_EVENT_IOC_DISABLE, 0)


def read(fd: int) -> Reading:
    return _backend().read(fd)


def _paranoid(proc_root: Path) -> str:
    try:
        return (proc_root / "sys" / "kernel" / "perf_event_paranoid").read_text().strip()
    except OSError:
        return "unknown"


def supported(event: Event = CYCLES, proc_root: Path = Path("/proc")) -> tuple[bool, str]:
    """Can this process count ``event``? Answers with the reason either way."""
    try:
        fd = open_counter(event)
    except OSError as err:
        code = err.errno
        if code == errno.ENOENT:
            return (
                False,
                f"no PMU for {event.name}: perf_event_open returned ENOENT (VM without a virtual PMU?)",
            )
        if code in (errno.EACCES, errno.EPERM):
            return False, f"{event.name}: not permitted (perf_event_paranoid={_paranoid(proc_root)})"
        if code == errno.ENOSYS:
            return False, "kernel built without perf events (ENOSYS)"
        if code == errno.EOPNOTSUPP:
            return False, f"{event.name}: not supported by this PMU (EOPNOTSUPP)"
        return False, f"{event.name}: perf_event_open failed: {os.strerror(code or errno.EIO)}"
    os.close(fd)
    return True, f"{event.name} counter opened"
