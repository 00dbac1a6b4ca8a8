"""Protocol Buffers wire format: just enough to read and write the messages of NRI and CRI.

The koordlet's NRI plug-in and koord-runtime-proxy speak protobuf with containerd; their
message layouts are written out by hand in their own modules (field numbers from the
published ``.proto`` files), on top of these primitives:

* :class:`Writer` appends fields (varints, strings, bytes, nested messages, string maps);
* :func:`fields` splits a message into ``{field number: [raw values]}``: ints for varint
  and fixed fields, bytes for length-delimited ones; repeated fields keep their order and,
  as protobuf wants, the last value of a singular field wins;
* :func:`replace`, :func:`edit`, :func:`append` and :func:`without` change some fields of
  an encoded message and keep every other byte as it was (the runtime proxy edits CRI
  calls it does not otherwise understand).

Unknown fields are kept by :func:`fields` and ignored by readers, so a newer runtime that
adds fields does not break an older reader. Malformed input raises :class:`ProtoError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

__all__ = [
    "ProtoError",
    "Writer",
    "append",
    "edit",
    "fields",
    "first",
    "int64",
    "message",
    "messages",
    "replace",
    "string",
    "string_map",
    "strings",
    "uint",
    "without",
]

VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10
_U64 = 1 << 64


class ProtoError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


class Writer:
    """Builds one message; ``bytes(writer)`` is its encoding. Zero values are left out, as
    proto3 encoders do (the reader's default is the same value)."""

    __slots__ = ("_out",)

    def __init__(self) -> None:
        self._out = bytearray()

    def __bytes__(self) -> bytes:
        return bytes(self._out)

    def _tag(self, number: int, wire: int) -> None:
        _put_varint(self._out, number << 3 | wire)

    def varint(self, number: int, value: int | bool) -> Writer:
        """An int32/int64/uint32/uint64/bool/enum field (negative values as 10-byte two's complement)."""
        value = int(value)
        if value:
            self._tag(number, VARINT)
            _put_varint(self._out, value % _U64)
        return self

    def blob(self, number: int, value: bytes) -> Writer:
        """A ``bytes`` field."""
        if value:
            self._tag(number, BYTES)
            _put_varint(self._out, len(value))
            self._out += value
        return self

    def string(self, number: int, value: str) -> Writer:
        return self.blob(number, value.encode())

    def strings(self, number: int, values: Iterable[str]) -> Writer:
        for value in values:  # a repeated string keeps empty members
            encoded = value.encode()
            self._tag(number, BYTES)
            _put_varint(self._out, len(encoded))
            self._out += encoded
        return self

    def message(self, number: int, value: Writer | bytes | None, *, always: bool = False) -> Writer:
        """A nested message; an empty one is written only with ``always`` (its presence matters)."""
        if value is None:
            return self
        encoded = bytes(value)
        if encoded or always:
            self._tag(number, BYTES)
            _put_varint(self._out, len(encoded))
            self._out += encoded
        return self

    def string_map(self, number: int, values: Mapping[str, str]) -> Writer:
        """A ``map<string, string>`` field: one entry message (key 1, value 2) per pair."""
        for key, value in values.items():
            self.message(number, Writer().string(1, key).string(2, value), always=True)
        return self


def _put_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= len(data):
            raise ProtoError("truncated varint")
        byte = data[pos + i]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos + i + 1
        shift += 7
    raise ProtoError("varint longer than 10 bytes")


def _scan(data: bytes) -> Iterator[tuple[int, int | bytes, int, int]]:
    """Each field in order: its number, its value (an int for varint and fixed fields, bytes
    for length-delimited ones), and where its whole encoding (key included) starts and ends."""
    pos, end = 0, len(data)
    while pos < end:
        start = pos
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtoError("field number 0")
        value: int | bytes
        if wire == VARINT:
            value, pos = _varint(data, pos)
        elif wire == BYTES:
            size, pos = _varint(data, pos)
            if pos + size > end:
                raise ProtoError(f"field {number}: {size} bytes announced, {end - pos} left")
            value, pos = bytes(data[pos : pos + size]), pos + size
        elif wire == FIXED64:
            if pos + 8 > end:
                raise ProtoError(f"field {number}: truncated fixed64")
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == FIXED32:
            if pos + 4 > end:
                raise ProtoError(f"field {number}: truncated fixed32")
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise ProtoError(f"field {number}: unsupported wire type {wire}")
        yield number, value, start, pos


def fields(data: bytes) -> dict[int, list[int | bytes]]:
    """The fields of one message, raw: ``{number: [value, ...]}`` in the order written."""
    out: dict[int, list[int | bytes]] = {}
    for number, value, _, _ in _scan(data):
        out.setdefault(number, []).append(value)
    return out


Fields = Mapping[int, list[int | bytes]]


def first(msg: Fields, number: int) -> int | bytes | None:
    """The value a singular field has (the last one written), or None."""
    values = msg.get(number)
    return values[-1] if values else None


def _as_bytes(number: int, value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise ProtoError(f"field {number}: a number where bytes were expected")
    return value


def string(msg: Fields, number: int) -> str:
    value = first(msg, number)
    if value is None:
        return ""
    try:
        return _as_bytes(number, value).decode()
    except UnicodeDecodeError as exc:
        raise ProtoError(f"field {number}: not UTF-8") from exc


def strings(msg: Fields, number: int) -> list[str]:
    try:
        return [_as_bytes(number, v).decode() for v in msg.get(number, ())]
    except UnicodeDecodeError as exc:
        raise ProtoError(f"field {number}: not UTF-8") from exc


def uint(msg: Fields, number: int) -> int:
    value = first(msg, number)
    if value is None:
        return 0
    if isinstance(value, bytes):
        raise ProtoError(f"field {number}: bytes where a number was expected")
    return value


def int64(msg: Fields, number: int) -> int:
    """A signed 64-bit field (int32/int64 and enums: two's complement of the varint)."""
    value = uint(msg, number) % _U64
    return value - _U64 if value >= 1 << 63 else value


def message(msg: Fields, number: int) -> dict[int, list[int | bytes]] | None:
    """A nested message's fields, or None when it is absent."""
    value = first(msg, number)
    return None if value is None else fields(_as_bytes(number, value))


def messages(msg: Fields, number: int) -> list[dict[int, list[int | bytes]]]:
    return [fields(_as_bytes(number, v)) for v in msg.get(number, ())]


def string_map(msg: Fields, number: int) -> dict[str, str]:
    return {string(entry, 1): string(entry, 2) for entry in messages(msg, number)}


# --- editing a message in place ---------------------------------------------------------------


def replace(data: bytes, number: int, value: Writer | bytes | None) -> bytes:
    """``data`` with every occurrence of field ``number`` dropped and, unless ``value`` is
    None, ``value`` written as that field (a message or bytes); the other fields keep their
    encoding and order."""
    kept = b"".join(data[start:end] for n, _, start, end in _scan(data) if n != number)
    if value is None:
        return kept
    return kept + bytes(Writer().message(number, value, always=True))


def edit(data: bytes, path: tuple[int, ...], change: Callable[[bytes], bytes]) -> bytes:
    """``data`` with the nested message at ``path`` (field numbers, outermost first)
    replaced by ``change(current)``; a missing message along the way starts empty."""
    number, rest = path[0], path[1:]
    current = first(fields(data), number)
    inner = current if isinstance(current, bytes) else b""
    return replace(data, number, edit(inner, rest, change) if rest else change(inner))


def append(data: bytes, number: int, value: Writer | bytes) -> bytes:
    """``data`` with one more occurrence of the repeated field ``number``."""
    return data + bytes(Writer().message(number, value, always=True))


def without(data: bytes, number: int, keep: Callable[[bytes], bool]) -> bytes:
    """``data`` with the occurrences of the repeated message field ``number`` that ``keep``
    refuses dropped."""
    out = bytearray()
    for n, value, start, end in _scan(data):
        if n == number and isinstance(value, bytes) and not keep(value):
            continue
        out += data[start:end]
    return bytes(out)
