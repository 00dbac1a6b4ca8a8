"""The protobuf wire primitives: encodings checked byte for byte, malformed input refused."""

from __future__ import annotations

import pytest

from koordinator import protowire as pw
from koordinator.protowire import ProtoError, Writer


def test_known_encodings():
    # field 1 "ab", field 2 varint 300, field 3 -1 (ten bytes, two's complement)
    data = bytes(Writer().string(1, "ab").varint(2, 300).varint(3, -1))
    assert data == bytes.fromhex("0a026162") + bytes.fromhex("10ac02") + bytes.fromhex(
        "18ffffffffffffffffff01"
    )
    msg = pw.fields(data)
    assert pw.string(msg, 1) == "ab"
    assert pw.uint(msg, 2) == 300
    assert pw.int64(msg, 3) == -1


def test_zero_values_are_left_out_but_present_messages_are_kept():
    assert bytes(Writer().string(1, "").varint(2, 0).blob(3, b"")) == b""
    assert bytes(Writer().message(1, Writer(), always=True)) == b"\x0a\x00"
    assert pw.message(pw.fields(b"\x0a\x00"), 1) == {}
    assert pw.message(pw.fields(b""), 1) is None


def test_repeated_maps_and_last_value_wins():
    data = bytes(
        Writer().strings(1, ["a", "", "b"]).string_map(2, {"k": "v", "x": ""}).varint(3, 1).varint(3, 2)
    )
    msg = pw.fields(data)
    assert pw.strings(msg, 1) == ["a", "", "b"]
    assert pw.string_map(msg, 2) == {"k": "v", "x": ""}
    assert pw.uint(msg, 3) == 2


def test_unknown_and_fixed_fields_are_skipped_by_readers():
    data = bytes.fromhex("0d01000000") + bytes.fromhex("110100000000000000") + bytes(Writer().string(5, "z"))
    msg = pw.fields(data)
    assert msg[1] == [1]
    assert msg[2] == [1]
    assert pw.string(msg, 5) == "z"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x0a\x05ab", "announced"),
        (b"\x08", "truncated varint"),
        (b"\x08" + b"\xff" * 11, "longer than 10"),
        (b"\x00\x01", "field number 0"),
        (b"\x0b", "wire type 3"),
        (b"\x0d\x01", "fixed32"),
    ],
)
def test_malformed_messages_are_refused(data, reason):
    with pytest.raises(ProtoError, match=reason):
        pw.fields(data)


def test_type_mismatches_are_errors_not_crashes():
    with pytest.raises(ProtoError, match="bytes where a number"):
        pw.uint(pw.fields(bytes(Writer().string(1, "x"))), 1)
    with pytest.raises(ProtoError, match="number where bytes"):
        pw.string(pw.fields(bytes(Writer().varint(1, 7))), 1)
    with pytest.raises(ProtoError, match="UTF-8"):
        pw.string(pw.fields(b"\x0a\x01\xff"), 1)
