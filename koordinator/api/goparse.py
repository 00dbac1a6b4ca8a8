"""Go's parsing rules for the scalar strings Koordinator's Go code reads from labels and annotations.

Labels such as ``koordinator.sh/priority`` are parsed upstream with ``strconv.ParseInt(s, 0, 32)``,
ratios with ``strconv.ParseFloat`` and durations with ``time.ParseDuration``. Python's ``int()``
and ``float()`` accept a different language (surrounding whitespace, ``_`` anywhere, ``1e3`` as
an int is refused, ...), so values would be accepted or refused differently. These functions
reproduce Go's grammar; each raises :class:`GoParseError` (a ``ValueError``) on bad input.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = [
    "GoParseError",
    "format_duration",
    "parse_bool",
    "parse_duration",
    "parse_duration_seconds",
    "parse_float",
    "parse_int",
]


class GoParseError(ValueError):
    """A string that Go's strconv/time parser would refuse."""


_BOOL_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_BOOL_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(text: str) -> bool:
    """``strconv.ParseBool``."""
    if text in _BOOL_TRUE:
        return True
    if text in _BOOL_FALSE:
        return False
    raise GoParseError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def _underscores_ok(text: str) -> bool:
    """Go's rule for ``_`` in base-0 integer literals: only between digits or after a base prefix."""
    saw = "^"
    i = 0
    if text[:1] in ("+", "-"):
        text = text[1:]
    hexadecimal = False
    if len(text) >= 2 and text[0] == "0" and text[1].lower() in "box":
        i = 2
        saw = "0"
        hexadecimal = text[1].lower() == "x"
    for ch in text[i:]:
        if ch.isdigit() or (hexadecimal and ch.lower() in "abcdef"):
            saw = "0"
            continue
        if ch == "_":
            if saw != "0":
                return False
            saw = "_"
            continue
        if saw == "_":
            return False
        saw = "!"
    return saw != "_"


def parse_int(text: str, base: int = 10, bits: int = 64) -> int:
    """``strconv.ParseInt(text, base, bits)``; base 0 reads ``0x``/``0o``/``0b``/leading-``0`` prefixes."""
    syntax = GoParseError(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    if not text:
        raise syntax
    body = text
    negative = False
    if body[0] in "+-":
        negative = body[0] == "-"
        body = body[1:]
    if not body:
        raise syntax
    base0 = base == 0
    if base0:
        base = 10
        if body[0] == "0":
            prefix = body[1].lower() if len(body) >= 3 else ""
            if prefix == "b":
                base, body = 2, body[2:]
            elif prefix == "o":
                base, body = 8, body[2:]
            elif prefix == "x":
                base, body = 16, body[2:]
            else:
                base, body = 8, body[1:]
    elif not 2 <= base <= 36:
        raise GoParseError(f'strconv.ParseInt: parsing "{text}": invalid base {base}')
    value = 0
    underscores = False
    for ch in body:
        if ch == "_" and base0:
            underscores = True
            continue
        digit = int(ch, 36) if ch.isascii() and ch.isalnum() else 99
        if digit >= base:
            raise syntax
        value = value * base + digit
    if underscores and not _underscores_ok(text):
        raise syntax
    limit = 1 << (bits - 1)
    if (not negative and value >= limit) or (negative and value > limit):
        raise GoParseError(f'strconv.ParseInt: parsing "{text}": value out of range')
    return -value if negative else value


_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SPECIAL = {"inf": math.inf, "+inf": math.inf, "infinity": math.inf, "+infinity": math.inf}


def parse_float(text: str) -> float:
    """``strconv.ParseFloat(text, 64)`` for decimal forms, ``Inf``/``Infinity`` and ``NaN`` (any case).

    Hexadecimal floats and ``_`` separators (accepted by Go only with a base prefix) are refused.
    """
    lowered = text.lower()
    if lowered in _SPECIAL:
        return _SPECIAL[lowered]
    if lowered in ("-inf", "-infinity"):
        return -math.inf
    if lowered == "nan":
        return math.nan
    if not _FLOAT.fullmatch(text):
        raise GoParseError(f'strconv.ParseFloat: parsing "{text}": invalid syntax')
    value = float(text)
    if math.isinf(value):
        raise GoParseError(f'strconv.ParseFloat: parsing "{text}": value out of range')
    return value


# Nanoseconds per unit, as time.ParseDuration knows them.
_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]*)")
_MAX_NANOS = (1 << 63) - 1


def parse_duration(text: str) -> int:
    """``time.ParseDuration``: the duration in integer nanoseconds (``"1h30m"``, ``"-1.5s"``, ``"0"``)."""
    invalid = GoParseError(f'time: invalid duration "{text}"')
    body = text
    negative = False
    if body[:1] in ("+", "-"):
        negative = body[0] == "-"
        body = body[1:]
    if body == "0":
        return 0
    if not body:
        raise invalid
    total = Fraction(0)
    pos = 0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        if match is None or match.end() == pos:
            raise invalid
        number, unit = match.group(1), match.group(2)
        if number in ("", ".") or not unit:
            if not unit and number not in ("", "."):
                raise GoParseError(f'time: missing unit in duration "{text}"')
            raise invalid
        if unit not in _UNITS:
            raise GoParseError(f'time: unknown unit "{unit}" in duration "{text}"')
        total += Fraction(number) * _UNITS[unit]
        pos = match.end()
    # Go truncates fractional nanoseconds toward zero.
    nanos = int(total)
    if nanos > _MAX_NANOS + (1 if negative else 0):
        raise invalid
    return -nanos if negative else nanos


def parse_duration_seconds(text: str) -> float:
    """``time.ParseDuration`` expressed in (possibly fractional) seconds."""
    return parse_duration(text) / 1_000_000_000


def _format_fraction(value: int, digits: int) -> tuple[str, int]:
    """Go's fmtFrac: ``value`` / 10**digits as ``.ddd`` with trailing zeros dropped."""
    text = ""
    printed = False
    for _ in range(digits):
        digit = value % 10
        printed = printed or digit != 0
        if printed:
            text = str(digit) + text
        value //= 10
    if printed:
        text = "." + text
    return text, value


def format_duration(nanos: int) -> str:
    """``time.Duration.String``: ``"24h0m0s"``, ``"1.5s"``, ``"300ms"``, ``"0s"``."""
    if nanos == 0:
        return "0s"
    negative = nanos < 0
    u = -nanos if negative else nanos
    sign = "-" if negative else ""
    if u < 1_000_000_000:
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            frac, whole = _format_fraction(u, 3)
            return f"{sign}{whole}{frac}\u00b5s"
        frac, whole = _format_fraction(u, 6)
        return f"{sign}{whole}{frac}ms"
    frac, seconds = _format_fraction(u, 9)
    text = f"{seconds % 60}{frac}s"
    minutes = seconds // 60
    if minutes > 0:
        text = f"{minutes % 60}m{text}"
        hours = minutes // 60
        if hours > 0:
            text = f"{hours}h{text}"
    return sign + text
