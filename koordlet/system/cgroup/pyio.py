"""Pure-Python twin of the native batch reader (``koordlet._native._cgroupfs``).

Same signature and results: for every directory, every file name, either the file's
bytes or the positive errno of the failing syscall. Used when extensions are disabled
and as the reference the native module is tested against.
"""

from __future__ import annotations

import os


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except InterruptedError:
            continue
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def read_dirs(dirs: list[bytes], names: list[bytes]) -> list[list[bytes | int]]:
    result: list[list[bytes | int]] = []
    for directory in dirs:
        row: list[bytes | int] = []
        try:
            dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            result.append([err.errno or 5] * len(names))
            continue
        try:
            for name in names:
                try:
                    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dfd)
                except OSError as err:
                    row.append(err.errno or 5)
                    continue
                try:
                    row.append(_read_all(fd))
                except OSError as err:
                    row.append(err.errno or 5)
                finally:
                    os.close(fd)
        finally:
            os.close(dfd)
        result.append(row)
    return result
