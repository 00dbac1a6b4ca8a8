"""Go's strconv/time parsing rules for label and annotation values."""

from __future__ import annotations

import math

import pytest

from koordinator.api.goparse import (
    GoParseError,
    format_duration,
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("100", 100, id="decimal"),
        pytest.param("-5", -5, id="negative"),
        pytest.param("+5", 5, id="plus"),
        pytest.param("0x10", 16, id="hex"),
        pytest.param("0X1f", 31, id="hex-upper-prefix"),
        pytest.param("010", 8, id="leading-zero-octal"),
        pytest.param("0o17", 15, id="octal-prefix"),
        pytest.param("0b101", 5, id="binary"),
        pytest.param("1_000", 1000, id="underscore-separator"),
        pytest.param("0", 0, id="zero"),
        pytest.param("-2147483648", -(2**31), id="int32-min"),
        pytest.param("2147483647", 2**31 - 1, id="int32-max"),
    ],
)
def test_parse_int_base0_int32(text, value):
    assert parse_int(text, 0, 32) == value


@pytest.mark.parametrize(
    "text",
    ["", "-", "2147483648", "-2147483649", "08", "0x", "_1", "1_", "1__0", "1.5", " 1", "abc", "1e3"],
)
def test_parse_int_refuses(text):
    with pytest.raises(GoParseError):
        parse_int(text, 0, 32)


def test_parse_int_base10_has_no_prefixes():
    assert parse_int("010") == 10
    with pytest.raises(GoParseError):
        parse_int("0x10")
    with pytest.raises(GoParseError):
        parse_int("1_000")


@pytest.mark.parametrize(
    ("text", "nanos", "printed"),
    [
        pytest.param("24h", 86_400 * 10**9, "24h0m0s", id="day"),
        pytest.param("1h30m", 5_400 * 10**9, "1h30m0s", id="compound"),
        pytest.param("1.5h", 5_400 * 10**9, "1h30m0s", id="fractional"),
        pytest.param("-1.5s", -1_500_000_000, "-1.5s", id="negative"),
        pytest.param("300ms", 300_000_000, "300ms", id="milliseconds"),
        pytest.param("1us", 1_000, "1\u00b5s", id="microseconds"),
        pytest.param("0", 0, "0s", id="bare-zero"),
        pytest.param(".5s", 500_000_000, "500ms", id="leading-dot"),
    ],
)
def test_durations(text, nanos, printed):
    assert parse_duration(text) == nanos
    assert format_duration(nanos) == printed


@pytest.mark.parametrize("text", ["", "1", "h", "1x", "12 hours", "1h 2m", "--1s", "."])
def test_duration_refuses(text):
    with pytest.raises(GoParseError):
        parse_duration(text)


def test_parse_float_and_bool():
    assert parse_float("0.7") == 0.7
    assert parse_float("1e2") == 100.0
    assert parse_float("-Inf") == -math.inf
    assert math.isnan(parse_float("NaN"))
    for bad in (" 0.7", "0.7 ", "1_0", "0x1p-2", "", "abc"):
        with pytest.raises(GoParseError):
            parse_float(bad)
    assert parse_bool("T") is True
    assert parse_bool("0") is False
    with pytest.raises(GoParseError):
        parse_bool("yes")
