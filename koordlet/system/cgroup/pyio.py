"""Pure-Python twin of the native batch reader and parsers (``koordlet._native._cgroupfs``).

Same signatures and results, byte for byte: ``read_dirs`` gives each file's bytes or the
positive errno of the failing syscall; the parsers return the same integers and tuples
and raise ``OSError(EBADMSG)`` on content the C parsers refuse; ``FileCache`` keeps the
same descriptors and answers with the same values or ``OSError``. Used when extensions
are disabled and as the reference the native module is tested against.
"""

from __future__ import annotations

import errno
import os
from array import array
from collections.abc import Iterable
from typing import Any, cast

KIND_RAW = 0
KIND_INT = 1
KIND_KEYS = 2
KIND_PSI = 3
KIND_NODES = 4
#: as the native parser: fields beyond this many on one line are malformed
_MAX_NODES = 64

_SPACE = b" \t\n\r\v\f"
_SCRATCH = 16384
_INT64_MAX = (1 << 63) - 1
_PSI_FIELDS = (b"avg10=", b"avg60=", b"avg300=", b"total=")
#: values of a parsed PSI file: the four fields of "some", then of "full"
_PSI_VALUES = 2 * len(_PSI_FIELDS)

#: bytes, an int, a tuple of ints (KIND_KEYS, KIND_PSI) or of per-key node fields
#: (KIND_NODES), or the error
Cell = bytes | int | tuple[Any, ...] | OSError


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
            result.append([err.errno or errno.EIO] * len(names))
            continue
        try:
            for name in names:
                try:
                    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dfd)
                except OSError as err:
                    row.append(err.errno or errno.EIO)
                    continue
                try:
                    row.append(_read_all(fd))
                except OSError as err:
                    row.append(err.errno or errno.EIO)
                finally:
                    os.close(fd)
        finally:
            os.close(dfd)
        result.append(row)
    return result


def _malformed() -> OSError:
    return OSError(errno.EBADMSG, os.strerror(errno.EBADMSG))


def _decimal(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """An optionally negative decimal ending at whitespace or ``end``: (value, next position)."""
    i = pos
    negative = i < end and buf[i] == 0x2D  # '-'
    if negative:
        i += 1
    start = i
    while i < end and 0x30 <= buf[i] <= 0x39:
        i += 1
    if i == start or (i < end and buf[i] not in _SPACE):
        raise _malformed()
    value = int(buf[start:i])
    if value > _INT64_MAX + (1 if negative else 0):
        raise _malformed()
    return (-value if negative else value), i


def parse_int(data: bytes) -> int:
    i = 0
    while i < len(data) and data[i] in _SPACE:
        i += 1
    if data[i : i + 3] == b"max" and (i + 3 == len(data) or data[i + 3] in _SPACE):
        return -1
    return _decimal(data, i, len(data))[0]


def _lines(data: bytes) -> Iterable[tuple[int, int]]:
    """(start, end) of each line; a trailing newline ends the last line."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            end = len(data)
        yield start, end
        start = end + 1


def parse_keys(data: bytes, keys: tuple[bytes, ...]) -> tuple[int | None, ...]:
    values: list[int | None] = [None] * len(keys)
    index = {key: i for i, key in reversed(list(enumerate(keys)))}
    remaining = len(keys)
    for start, end in _lines(data):
        if not remaining:
            break
        key_end = start
        while key_end < end and data[key_end] not in b" \t":
            key_end += 1
        k = index.get(data[start:key_end])
        if k is None or values[k] is not None:
            continue
        pos = key_end
        while pos < end and data[pos] in b" \t":
            pos += 1
        values[k] = _decimal(data, pos, end)[0]
        remaining -= 1
    return tuple(values)


def _hundredths(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    i, whole = pos, 0
    while i < end and 0x30 <= buf[i] <= 0x39:
        if whole > (_INT64_MAX // 100 - 9) // 10:
            raise _malformed()
        whole = whole * 10 + buf[i] - 0x30
        i += 1
    if i == pos:
        raise _malformed()
    frac_digits = b""
    if i < end and buf[i] == 0x2E:  # '.'
        i += 1
        start = i
        while i < end and 0x30 <= buf[i] <= 0x39:
            i += 1
        if i == start:
            raise _malformed()
        frac_digits = buf[start:i][:2]
    if i < end and buf[i] not in _SPACE:
        raise _malformed()
    return whole * 100 + int(frac_digits.ljust(2, b"0")), i


def _psi_line(buf: bytes, pos: int, end: int) -> list[int]:
    values: list[int | None] = [None, None, None, None]
    while pos < end:
        while pos < end and buf[pos] in b" \t":
            pos += 1
        if pos >= end:
            break
        f = next((i for i, name in enumerate(_PSI_FIELDS) if buf.startswith(name, pos, end)), -1)
        if f < 0:  # a field a newer kernel added: skip it
            while pos < end and buf[pos] not in b" \t":
                pos += 1
            continue
        token = pos + len(_PSI_FIELDS[f])
        if f == 3:
            if token >= end or buf[token] == 0x2D:
                raise _malformed()
            values[3], pos = _decimal(buf, token, end)
        else:
            values[f], pos = _hundredths(buf, token, end)
    if any(v is None for v in values):
        raise _malformed()
    return [v for v in values if v is not None]


def parse_psi(data: bytes) -> tuple[int | None, ...]:
    some: list[int] | None = None
    full: list[int] | None = None
    for start, end in _lines(data):
        if data.startswith(b"some ", start, end):
            some = _psi_line(data, start + 5, end)
        elif data.startswith(b"full ", start, end):
            full = _psi_line(data, start + 5, end)
    if some is None:
        raise _malformed()
    return (*some, *(full if full is not None else (None, None, None, None)))


def parse_nodes(data: bytes, keys: tuple[bytes, ...]) -> tuple[tuple[tuple[int, int], ...] | None, ...]:
    out: list[tuple[tuple[int, int], ...] | None] = []
    for key in keys:
        fields: tuple[tuple[int, int], ...] | None = None
        for start, end in _lines(data):
            if data.startswith(key, start, end):
                # tokens split at spaces and tabs only, as the native parser
                fields = _node_fields([t for t in data[start:end].replace(b"\t", b" ").split(b" ") if t][1:])
                break
        out.append(fields)
    return tuple(out)


def _node_fields(tokens: list[bytes]) -> tuple[tuple[int, int], ...]:
    if len(tokens) > _MAX_NODES:
        raise _malformed()
    fields = []
    for token in tokens:
        name, sep, value = token.partition(b"=")
        node = name[1:]
        if not (name.startswith(b"N") and sep and node.isdigit() and len(node) <= 9 and value.isdigit()):
            raise _malformed()
        parsed, _ = _decimal(value, 0, len(value))
        fields.append((int(node), parsed))
    return tuple(fields)


def _pread_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    size, want = 0, _SCRATCH
    while True:
        try:
            data = os.pread(fd, want, size)
        except InterruptedError:
            continue
        chunks.append(data)
        size += len(data)
        if len(data) < want:
            return b"".join(chunks)
        want = size  # the buffer doubles, as in C


def _parse(data: bytes, kind: int, keys: tuple[bytes, ...] | None) -> Cell:
    if kind == KIND_RAW:
        return data
    if kind == KIND_INT:
        return parse_int(data)
    if kind == KIND_KEYS:
        return parse_keys(data, keys or ())
    if kind == KIND_NODES:
        return parse_nodes(data, keys or ())
    return parse_psi(data)


def _width(kind: int, keys: tuple[bytes, ...] | None) -> int:
    """How many values a KIND_INT, KIND_KEYS or KIND_PSI request parses into."""
    return 1 if kind == KIND_INT else (len(keys or ()) if kind == KIND_KEYS else _PSI_VALUES)


def _record_width(record: Any) -> int:
    if not (isinstance(record, type) and issubclass(record, tuple) and record is not tuple) or not hasattr(
        record, "_fields"
    ):
        raise TypeError(f"a request's record must be a NamedTuple class, not {record!r}")
    return len(record._fields)


class Batch:
    """A request list checked once, read with one call per tick; see the native module."""

    def __init__(self, cache: FileCache, requests: Iterable[tuple[Any, ...]]) -> None:
        self._cache = cache
        self.requests = tuple(requests)
        compiled: list[tuple[bytes, int, tuple[bytes, ...] | None, Any]] = []
        for request in self.requests:
            if len(request) not in (3, 4):
                raise ValueError(f"a request is (path, kind, keys[, record]), not {request!r}")
            path, kind, keys = request[:3]
            if not isinstance(path, bytes):
                raise TypeError(f"a request's path must be bytes, not {path!r}")
            record = request[3] if len(request) == 4 else None
            if record is not None:
                if kind not in (KIND_KEYS, KIND_PSI):
                    raise TypeError("only KIND_KEYS and KIND_PSI values are built as records")
                width = _width(kind, keys)
                if _record_width(record) != width:
                    raise TypeError(f"{record.__name__} does not have the {width} fields of {request!r}")
            compiled.append((path, kind, keys, record))
        self._compiled = compiled

    def __len__(self) -> int:
        return len(self.requests)

    def read(self, failed: list[int] | None = None, lacking: list[int] | None = None) -> list[Cell]:
        return self._cache._read(self._compiled, failed, lacking)

    def read_values(
        self, failed: list[int] | None = None, lacking: list[int] | None = None
    ) -> tuple[array[int], bytes, list[OSError | None]]:
        if any(kind in (KIND_RAW, KIND_NODES) for _, kind, _, _ in self._compiled):
            raise TypeError("read_values reads KIND_INT, KIND_KEYS and KIND_PSI requests only")
        values: array[int] = array("q")
        present = bytearray()
        errors: list[OSError | None] = []
        for (_, kind, keys, _), cell in zip(self._compiled, self.read(failed, lacking), strict=True):
            width = _width(kind, keys)
            if isinstance(cell, OSError):
                values.extend([0] * width)
                present.extend(bytes(width))
                errors.append(cell)
                continue
            parsed = cast(tuple[int | None, ...], (cell,) if kind == KIND_INT else cell)
            values.extend([0 if v is None else v for v in parsed])
            present.extend([v is not None for v in parsed])
            errors.append(None)
        return values, bytes(present), errors


class FileCache:
    """Kept descriptors of files read every tick; see the native module for the contract."""

    def __init__(self, max_open: int = 4096) -> None:
        self._fds: dict[bytes, int] = {}
        self.max_open = max_open

    def __del__(self) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._fds)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def retain(self, paths: Iterable[bytes]) -> None:
        keep = set(paths)
        for path in [p for p in self._fds if p not in keep]:
            os.close(self._fds.pop(path))

    def _drop(self, path: bytes, fd: int, kept: bool) -> None:
        """Close a descriptor that failed: one opened for this read, or the kept one of ``path``."""
        if not kept:
            os.close(fd)
        elif self._fds.get(path) == fd:
            del self._fds[path]
            os.close(fd)

    def batch(self, requests: Iterable[tuple[Any, ...]]) -> Batch:
        return Batch(self, requests)

    def read(
        self,
        requests: Iterable[tuple[Any, ...]],
        failed: list[int] | None = None,
        lacking: list[int] | None = None,
    ) -> list[Cell]:
        return self.batch(requests).read(failed, lacking)

    def _read(
        self,
        requests: list[tuple[bytes, int, tuple[bytes, ...] | None, Any]],
        failed: list[int] | None,
        lacking: list[int] | None,
    ) -> list[Cell]:
        out: list[Cell] = []
        can_keep = len(self._fds) < self.max_open
        for path, kind, keys, record in requests:
            fd = self._fds.get(path, -1)
            kept = fd >= 0
            try:
                if fd < 0:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                data = _pread_all(fd)
            except OSError as err:
                code = err.errno or errno.EIO
                out.append(OSError(code, os.strerror(code), os.fsdecode(path)))
                if fd >= 0:
                    self._drop(path, fd, kept)
                continue
            try:
                parsed = _parse(data, kind, keys)
                if not data and not os.path.exists(path):
                    raise _malformed()
                out.append(parsed if record is None else tuple.__new__(record, parsed))  # type: ignore[arg-type]
            except OSError as err:
                if not os.path.exists(path):  # removed under a kept descriptor
                    code = errno.ENOENT
                    out.append(OSError(code, os.strerror(code), os.fsdecode(path)))
                    self._drop(path, fd, kept)
                    continue
                out.append(OSError(err.errno, err.strerror, os.fsdecode(path)))
            if not kept:
                if can_keep and len(self._fds) < self.max_open and path not in self._fds:
                    self._fds[path] = fd
                else:
                    os.close(fd)
        if failed is not None:
            failed.extend(i for i, cell in enumerate(out) if isinstance(cell, OSError))
        if lacking is not None:
            for i, (request, cell) in enumerate(zip(requests, out, strict=True)):
                if request[1] == KIND_KEYS and isinstance(cell, tuple) and None in cell:
                    lacking.append(i)
        return out


# Columns: the twins of the native column builders (the same floats, NaN and counts).

_NAN = float("nan")
Column = tuple["array[float]", int]


def _column(values: list[float | None]) -> Column:
    return array("d", [_NAN if v is None else v for v in values]), values.count(None)


def _sum(cell: Any, count: int) -> float | None:
    total = 0
    for i in range(count):  # IndexError for a short cell, as the native loop
        value = cell[i]
        if value is None:
            return None
        total += value
    return float(total)


def sum_column(cells: list[Any], count: int) -> Column:
    return _column([None if c is None else _sum(c, count) for c in cells])


def growth_column(current: list[Any], previous: list[Any], elapsed: float, unit: float) -> Column:
    if len(previous) != len(current):
        raise ValueError(f"{len(current)} counters for {len(previous)} previous ones")
    if elapsed == 0 or unit == 0:
        raise ZeroDivisionError("a rate over no time or in no unit")
    return _column(
        [
            None if c is None or p is None or c < p else (c - p) / elapsed / unit
            for c, p in zip(current, previous, strict=True)
        ]
    )


def ratio_column(current: list[Any], previous: list[Any], base: int, part: int) -> Column:
    if len(previous) != len(current):
        raise ValueError(f"{len(current)} cells for {len(previous)} previous ones")
    return _column(
        [
            None
            if c is None
            or p is None
            or None in (c[base], p[base], c[part], p[part])
            or c[base] < p[base]
            or c[part] < p[part]
            else ((c[part] - p[part]) / (c[base] - p[base]) if c[base] > p[base] else 0.0)
            for c, p in zip(current, previous, strict=True)
        ]
    )


def _rows(n: int, m: int, start: int, step: int) -> int:
    if n != m:
        raise ValueError(f"{n} values for {m} flags")
    if step <= 0 or start < 0 or start >= step or n % step != 0:
        raise ValueError(f"no column at {start} of rows of {step} in {n} values")
    return n // step


def strided_column(values: array[int], present: bytes, start: int, step: int, divisor: float) -> Column:
    if values.typecode != "q":
        raise TypeError(f"an array of int64 ('q'), not of {values.typecode!r}")
    _rows(len(values), len(present), start, step)
    if divisor == 0:
        raise ZeroDivisionError("a column divided by zero")
    return _column(
        [v / divisor if p else None for v, p in zip(values[start::step], present[start::step], strict=True)]
    )


def flag_column(present: bytes, start: int, step: int, base: int) -> Column:
    _rows(len(present), len(present), start, step)
    _rows(len(present), len(present), base, step)
    return _column(
        [
            (1.0 if f else 0.0) if b else None
            for f, b in zip(present[start::step], present[base::step], strict=True)
        ]
    )
