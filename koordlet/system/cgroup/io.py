"""Batch reads and single writes of cgroup/procfs files, with errors mapped to domain errors.

Reads go through the native batch reader when it is built (one call, GIL released, a
directory fd per cgroup) or its Python twin; both return bytes or an errno per file.
Writes are one ``write()`` per value, so the kernel sees exactly the value validated
upstream of this module.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from koordlet.system import native
from koordlet.system.cgroup import pyio
from koordlet.system.errors import HostError, from_errno

ReadDirs = Callable[[list[bytes], list[bytes]], list[list[bytes | int]]]


def _reader() -> ReadDirs:
    module = native.load("_cgroupfs")
    return pyio.read_dirs if module is None else module.read_dirs


def read_raw(dirs: Sequence[Path | str], names: Sequence[str]) -> list[list[bytes | int]]:
    """Bytes or errno for each name under each directory, in one batch."""
    return _reader()(
        [os.fsencode(d) for d in dirs],
        [os.fsencode(n) for n in names],
    )


def read_many(dirs: Sequence[Path | str], names: Sequence[str]) -> list[list[bytes | HostError]]:
    """Like :func:`read_raw` with each errno turned into its domain error (never raised)."""
    rows = read_raw(dirs, names)
    out: list[list[bytes | HostError]] = []
    for directory, row in zip(dirs, rows, strict=True):
        out.append(
            [
                v if isinstance(v, bytes) else from_errno(v, Path(directory) / n, directory=directory)
                for n, v in zip(names, row, strict=True)
            ]
        )
    return out


def read_file(directory: Path | str, name: str) -> bytes:
    """One file's content; raises the domain error on failure."""
    value = read_raw([directory], [name])[0][0]
    if isinstance(value, int):
        raise from_errno(value, Path(directory) / name, directory=directory)
    return value


def write_file(directory: Path | str, name: str, value: str | bytes) -> None:
    """Write ``value`` to ``directory/name`` in a single write() (no create, no truncate games).

    Raises the domain error: vanished cgroup, unsupported file, permission, invalid value
    (the kernel's EINVAL) or busy.
    """
    data = value.encode() if isinstance(value, str) else value
    path = Path(directory) / name
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise from_errno(err.errno or 5, path, directory=directory) from None
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as err:
        raise from_errno(err.errno or 5, path, directory=directory) from None
    finally:
        os.close(dfd)
    try:
        written = os.write(fd, data)
    except OSError as err:
        raise from_errno(err.errno or 5, path, directory=directory) from None
    finally:
        os.close(fd)
    if written != len(data):
        raise from_errno(5, path, directory=directory)  # EIO: short write to a kernel file
