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
        """The count extrapolated over the time the event was enabled (multiplexing);
        unscaled when either time is 0, as upstream does."""
        if self.time_running == 0 or self.time_enabled == 0:
            return float(self.value)
        return self.value * self.time_enabled / self.time_running


FORMAT_TOTAL_TIME_ENABLED = 1 << 0
FORMAT_TOTAL_TIME_RUNNING = 1 << 1
FORMAT_GROUP = 1 << 3
_SINGLE = FORMAT_TOTAL_TIME_ENABLED | FORMAT_TOTAL_TIME_RUNNING
_GROUP = FORMAT_GROUP | FORMAT_TOTAL_TIME_ENABLED | FORMAT_TOTAL_TIME_RUNNING
_PERF_EVENT_IOC_RESET = 0x2403
_PERF_IOC_FLAG_GROUP = 1


class _Backend(Protocol):
    def open(
        self, event: Event, pid: int, cpu: int, group_fd: int, flags: int, read_format: int, inherit: bool
    ) -> int: ...
    def read_u64(self, fd: int, count: int) -> list[int]: ...


class _NativeBackend:
    def __init__(self, module: object) -> None:
        self._ffi = module.ffi  # type: ignore[attr-defined]
        self._lib = module.lib  # type: ignore[attr-defined]

    def open(
        self, event: Event, pid: int, cpu: int, group_fd: int, flags: int, read_format: int, inherit: bool
    ) -> int:
        fd = int(
            self._lib.koord_perf_open(
                event.type, event.config, pid, cpu, group_fd, flags, read_format, inherit
            )
        )
        if fd < 0:
            raise OSError(-fd, os.strerror(-fd))
        return fd

    def read_u64(self, fd: int, count: int) -> list[int]:
        buf = self._ffi.new("uint64_t[]", count)
        n = int(self._lib.koord_perf_read_u64(fd, buf, count))
        if n < 0:
            raise OSError(-n, os.strerror(-n))
        return [int(buf[i]) for i in range(n)]


class _CtypesBackend:
    """The same syscalls through libc's ``syscall()``; perf_event_attr in its VER0 layout."""

    _ATTR_SIZE = 64  # PERF_ATTR_SIZE_VER0
    _DISABLED, _INHERIT, _EXCLUDE_HV = 1 << 0, 1 << 1, 1 << 6

    def __init__(self) -> None:
        number = _SYSCALL_NUMBERS.get(platform.machine())
        if number is None:
            raise OSError(errno.ENOSYS, f"perf_event_open: unknown syscall number on {platform.machine()}")
        self._number = number
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long

    def open(
        self, event: Event, pid: int, cpu: int, group_fd: int, flags: int, read_format: int, inherit: bool
    ) -> int:
        bits = self._EXCLUDE_HV | (self._DISABLED if group_fd < 0 else 0) | (self._INHERIT if inherit else 0)
        attr = ctypes.create_string_buffer(128)
        struct.pack_into(
            "<IIQQQQQ", attr, 0, event.type, self._ATTR_SIZE, event.config, 0, 0, read_format, bits
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

    def read_u64(self, fd: int, count: int) -> list[int]:
        data = os.read(fd, 8 * count)
        if len(data) % 8:
            raise OSError(errno.EIO, "short read from a perf event")
        return list(struct.unpack(f"<{len(data) // 8}Q", data))


@cache
def _backend() -> _Backend:
    module = native.load("_perf")
    return _CtypesBackend() if module is None else _NativeBackend(module)


def open_counter(
    event: Event, *, pid: int = 0, cpu: int = -1, group_fd: int = -1, flags: int = 0, inherit: bool = True
) -> int:
    """Open a disabled counter (time-enabled/running read format); raises OSError with the errno."""
    return _backend().open(event, pid, cpu, group_fd, flags | PERF_FLAG_FD_CLOEXEC, _SINGLE, inherit)


def open_cgroup_counter(event: Event, cgroup_dir: Path | str, cpu: int, group_fd: int = -1) -> int:
    """A counter for every task of a cgroup (perf_event hierarchy) on one CPU."""
    dfd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_counter(
            event, pid=dfd, cpu=cpu, group_fd=group_fd, flags=PERF_FLAG_PID_CGROUP, inherit=False
        )
    finally:
        os.close(dfd)


def enable(fd: int) -> None:
    fcntl.ioctl(fd, _PERF_EVENT_IOC_ENABLE, 0)


def disable(fd: int) -> None:
    fcntl.ioctl(fd, _PERF_EVENT_IOC_DISABLE, 0)


def read(fd: int) -> Reading:
    values = _backend().read_u64(fd, 3)
    if len(values) != 3:
        raise OSError(errno.EIO, "short read from a perf event")
    return Reading(values[0], values[1], values[2])


class CgroupCounters:
    """One perf event group per CPU (the first event leads) counting a cgroup's tasks.

    This is upstream's CPI collector set-up: cycles and instructions per container
    cgroup, one group per CPU (cgroup events need a CPU), enabled for a window, read
    once, scaled by time enabled / running and summed over CPUs.
    """

    def __init__(
        self, cgroup_dir: Path | str, cpus: list[int], events: tuple[Event, ...] = (CYCLES, INSTRUCTIONS)
    ) -> None:
        if not events:
            raise ValueError("a counter group needs at least one event")
        self.events = events
        self._leaders: list[int] = []
        self._fds: list[int] = []
        dfd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        backend = _backend()
        flags = PERF_FLAG_PID_CGROUP | PERF_FLAG_FD_CLOEXEC
        try:
            for cpu in cpus:
                leader = backend.open(events[0], dfd, cpu, -1, flags, _GROUP, False)
                self._leaders.append(leader)
                self._fds.append(leader)
                for event in events[1:]:
                    self._fds.append(backend.open(event, dfd, cpu, leader, flags, _GROUP, False))
        except OSError:
            self.close()
            raise
        finally:
            os.close(dfd)

    def __enter__(self) -> CgroupCounters:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ioctl(self, request: int) -> None:
        for leader in self._leaders:
            fcntl.ioctl(leader, request, _PERF_IOC_FLAG_GROUP)

    def reset(self) -> None:
        self._ioctl(_PERF_EVENT_IOC_RESET)

    def enable(self) -> None:
        self._ioctl(_PERF_EVENT_IOC_ENABLE)

    def disable(self) -> None:
        self._ioctl(_PERF_EVENT_IOC_DISABLE)

    def read(self) -> dict[str, float]:
        """Each event's count, scaled for multiplexing, summed over the CPUs."""
        totals = dict.fromkeys((e.name for e in self.events), 0.0)
        backend = _backend()
        for leader in self._leaders:
            values = backend.read_u64(leader, 3 + len(self.events))
            nr, enabled, running = values[0], values[1], values[2]
            if nr != len(self.events) or len(values) != 3 + nr:
                raise OSError(errno.EIO, f"perf group read returned {nr} events, expected {len(self.events)}")
            for event, value in zip(self.events, values[3:], strict=True):
                totals[event.name] += Reading(value, enabled, running).scaled()
        return totals

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        self._leaders.clear()


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
