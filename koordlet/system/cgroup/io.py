"""Batch reads and single writes of cgroup/procfs files, with errors mapped to domain errors.

Reads go through the native batch reader when it is built (one call, GIL released, a
directory fd per cgroup) or its Python twin; both return bytes or an errno per file.
Writes are one ``write()`` per value, so the kernel sees exactly the value validated
upstream of this module.
"""

from __future__ import annotations

import errno
import os
from array import array
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TypeVar

from koordlet.system import native
from koordlet.system.cgroup import pyio
from koordlet.system.errors import HostError, MalformedContentError, from_errno

T = TypeVar("T")

ReadDirs = Callable[[list[bytes], list[bytes]], list[list[bytes | int]]]
#: one request of FileCache.read: (path, kind, keys for KIND_KEYS and KIND_NODES), and
#: optionally the NamedTuple class a KIND_KEYS or KIND_PSI value is built as
Keys = tuple[bytes, ...] | None
Request = tuple[bytes, int, Keys] | tuple[bytes, int, Keys, type[Any] | None]
Cell = bytes | int | tuple[Any, ...] | OSError
KIND_RAW, KIND_INT, KIND_KEYS, KIND_PSI = pyio.KIND_RAW, pyio.KIND_INT, pyio.KIND_KEYS, pyio.KIND_PSI
KIND_NODES = pyio.KIND_NODES


class Batch(Protocol):
    """A request list compiled once by FileCache.batch, read with one call per tick."""

    @property
    def requests(self) -> tuple[Request, ...]: ...
    def __len__(self) -> int: ...
    def read(self, failed: list[int] | None = None, lacking: list[int] | None = None) -> list[Cell]: ...
    def read_values(
        self, failed: list[int] | None = None, lacking: list[int] | None = None
    ) -> tuple[array[int], bytes, list[OSError | None]]: ...


class FileCache(Protocol):
    """Kept descriptors read with pread(); the native class or its twin (pyio.FileCache)."""

    @property
    def max_open(self) -> int: ...
    def __len__(self) -> int: ...
    def close(self) -> None: ...
    def retain(self, paths: Iterable[bytes]) -> None: ...
    def batch(self, requests: Iterable[Request]) -> Batch: ...
    def read(
        self, requests: Iterable[Request], failed: list[int] | None = None, lacking: list[int] | None = None
    ) -> list[Cell]: ...


def _backend() -> ModuleType:
    module = native.load("_cgroupfs")
    return pyio if module is None else module


def _reader() -> ReadDirs:
    reader: ReadDirs = _backend().read_dirs
    return reader


def new_file_cache(max_open: int = 4096) -> FileCache:
    """A FileCache of the active backend; at most ``max_open`` descriptors are kept."""
    cache: FileCache = _backend().FileCache(max_open)
    return cache


def _parsed(parse: Callable[[], T], what: str) -> T:
    try:
        return parse()
    except OSError as err:
        raise MalformedContentError(err.errno or errno.EBADMSG, f"malformed {what}", what) from None


def parse_int(data: bytes, what: str = "integer") -> int:
    """The first integer (``max`` is -1); MalformedContentError naming ``what`` otherwise."""
    return _parsed(lambda: int(_backend().parse_int(data)), what)


def parse_keys(data: bytes, keys: tuple[bytes, ...], what: str = "key-value file") -> tuple[int | None, ...]:
    """The integer after each of ``keys`` (distinct) at a line start, None where absent."""
    return _parsed(lambda: tuple(_backend().parse_keys(data, keys)), what)


def parse_nodes(
    data: bytes, keys: tuple[bytes, ...], what: str = "memory.numa_stat"
) -> tuple[tuple[tuple[int, int], ...] | None, ...]:
    """For each key, the ``N<node>=<value>`` fields of the first line starting with it,
    as ((node, value), ...); None where no line does."""
    return _parsed(lambda: tuple(_backend().parse_nodes(data, keys)), what)


def parse_psi(data: bytes, what: str = "pressure file") -> tuple[int | None, ...]:
    """Eight PSI values: some avg10/60/300 (hundredths), total (us); the same for full (or None)."""
    return _parsed(lambda: tuple(_backend().parse_psi(data)), what)


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


def _write(directory: Path | str, name: str, chunks: Sequence[bytes], flags: int) -> None:
    path = Path(directory) / name
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise from_errno(err.errno or errno.EIO, path, directory=directory) from None
    try:
        fd = os.open(name, flags | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as err:
        raise from_errno(err.errno or errno.EIO, path, directory=directory) from None
    finally:
        os.close(dfd)
    try:
        for data in chunks:
            try:
                written = os.write(fd, data)
            except OSError as err:
                raise from_errno(err.errno or errno.EIO, path, directory=directory) from None
            if written != len(data):
                raise from_errno(errno.EIO, path, directory=directory)  # short write to a kernel file
    finally:
        os.close(fd)


def write_file(directory: Path | str, name: str, value: str | bytes) -> None:
    """Write ``value`` to an existing ``directory/name`` in a single write() (never creates).

    O_TRUNC is what ``echo v > file`` does: kernel files ignore it and plain files (fake
    hosts) end up holding exactly the value. Raises the domain error: vanished cgroup,
    unsupported file, permission, invalid value (the kernel's EINVAL) or busy.
    """
    data = value.encode() if isinstance(value, str) else value
    _write(directory, name, [data], os.O_WRONLY | os.O_TRUNC)


def append_values(directory: Path | str, name: str, values: Sequence[str]) -> None:
    """Append each value with its own write() (resctrl and cgroup ``tasks`` take one id per write)."""
    _write(directory, name, [v.encode() for v in values], os.O_WRONLY | os.O_APPEND)
