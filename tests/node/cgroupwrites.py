"""Count writes to cgroup files as the kernel sees them: inotify's IN_MODIFY, which the VFS
raises on every successful write(2), whoever the writer."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from collections.abc import Iterable
from pathlib import Path

IN_MODIFY = 0x2
IN_NONBLOCK = 0o4000
_EVENT = struct.Struct("iIII")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class CgroupWrites:
    """Watches files; :meth:`count` is the writes seen since the watch began."""

    def __init__(self, files: Iterable[Path]) -> None:
        self.fd = _libc.inotify_init1(IN_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.names: dict[int, Path] = {}
        for path in files:
            wd = _libc.inotify_add_watch(self.fd, str(path).encode(), IN_MODIFY)
            if wd < 0:
                raise OSError(ctypes.get_errno(), "inotify_add_watch", str(path))
            self.names[wd] = path
        self.seen: list[Path] = []

    def count(self) -> int:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return len(self.seen)
            pos = 0
            while pos < len(data):
                wd, _mask, _cookie, size = _EVENT.unpack_from(data, pos)
                self.seen.append(self.names.get(wd, Path("?")))
                pos += _EVENT.size + size

    def close(self) -> None:
        os.close(self.fd)
