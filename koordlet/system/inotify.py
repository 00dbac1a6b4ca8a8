"""inotify: directory events (a pod or container cgroup created or removed).

A thin ctypes binding: ``inotify_init1`` with non-blocking and close-on-exec, watches
added per directory, and a parser of the kernel's ``struct inotify_event`` records. The
caller polls the descriptor (the states informer registers it with its event loop).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from koordlet.system import kernel
from koordlet.system.errors import from_errno

IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_ISDIR = 0x40000000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_HEADER = struct.Struct("iIII")


@dataclass(frozen=True)
class Event:
    directory: Path
    name: str
    mask: int

    @property
    def created_dir(self) -> bool:
        return bool(self.mask & IN_CREATE and self.mask & IN_ISDIR)

    @property
    def deleted_dir(self) -> bool:
        return bool(self.mask & IN_DELETE and self.mask & IN_ISDIR)


def parse_events(data: bytes, directories: dict[int, Path]) -> list[Event]:
    """Decode a read() of the inotify descriptor."""
    events = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
        offset += _HEADER.size
        raw = data[offset : offset + length]
        offset += length
        name = raw.split(b"\0", 1)[0].decode(errors="replace")
        directory = directories.get(wd)
        if directory is not None and not mask & IN_IGNORED:
            events.append(Event(directory, name, mask))
    return events


class Inotify:
    def __init__(self) -> None:
        libc = kernel.libc()
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise from_errno(code, "inotify_init1")
        self.fd = int(fd)
        self._directories: dict[int, Path] = {}

    def watch(self, directory: Path, mask: int = IN_CREATE | IN_DELETE | IN_ONLYDIR) -> None:
        """Watch a directory (again: replaces the mask); raises the domain error if it is gone."""
        wd = kernel.libc().inotify_add_watch(self.fd, os.fsencode(directory), ctypes.c_uint32(mask))
        if wd < 0:
            raise from_errno(ctypes.get_errno(), directory, directory=directory.parent)
        self._directories[int(wd)] = directory

    def read(self) -> list[Event]:
        """Pending events; an empty list when there are none."""
        try:
            data = os.read(self.fd, 64 * 1024)
        except BlockingIOError:
            return []
        except OSError as err:
            if err.errno == errno.EINTR:
                return []
            raise
        return parse_events(data, self._directories)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Inotify:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
