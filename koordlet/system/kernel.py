"""Kernel facts: release, filesystem magic numbers (statfs), clock ticks."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
from functools import cache
from pathlib import Path

CGROUP2_SUPER_MAGIC = 0x63677270
CGROUP_SUPER_MAGIC = 0x27E0EB
TMPFS_MAGIC = 0x01021994
RESCTRL_SUPER_MAGIC = 0x07655821


@cache
def libc() -> ctypes.CDLL:
    """The C library, with errno kept for ctypes.get_errno()."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def filesystem_magic(path: Path | str) -> int:
    """``statfs(path).f_type``; raises OSError when the path cannot be examined."""
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if libc().statfs(os.fsencode(path), buf) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(path))
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def release(proc_root: Path) -> str:
    """The running kernel's release string, as /proc/sys/kernel/osrelease gives it."""
    return (proc_root / "sys" / "kernel" / "osrelease").read_text().strip()


def version_tuple(release_text: str) -> tuple[int, int, int]:
    """``"6.18.44-fc-v782"`` -> ``(6, 18, 44)``; missing parts are 0."""
    match = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", release_text)
    if not match:
        return (0, 0, 0)
    major, minor, patch = (int(g) if g else 0 for g in match.groups())
    return (major, minor, patch)


@cache
def clock_ticks() -> int:
    """USER_HZ (``getconf CLK_TCK``); 100 when the system does not say."""
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100
