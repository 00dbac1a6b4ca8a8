"""JSON text byte-for-byte as Go's ``encoding/json.Marshal`` writes it.

Annotations are compared as strings (a controller rewrites one only when the text differs),
so values written here must match what the Go components write: compact separators, HTML
characters escaped (``<`` -> ``\\u003c``), U+2028/U+2029 escaped, non-ASCII kept, floats in
Go's shortest form (``1e-7``, ``100``, ``0.5``). Key order is the order of the dict; the model
layer emits struct fields in declaration order and map keys sorted, as Go does.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["JSONError", "marshal", "nested_deeper", "unmarshal"]


class JSONError(ValueError):
    """Text that is not valid JSON, or a value JSON cannot represent."""


_CONTAINERS = frozenset({dict, list})


def nested_deeper(value: Any, limit: int) -> bool:
    """Whether decoded JSON ``value`` nests objects and arrays more than ``limit`` levels deep
    (``value`` itself is level 1 when it is one).

    Level by level, without recursion, whatever the depth: what checks the depth must not
    fail on it as the recursive code it protects would.
    """
    level: list[Any] = [value] if type(value) in _CONTAINERS else []
    for _ in range(limit):
        level = [
            child
            for item in level
            for child in (item.values() if type(item) is dict else item)
            if type(child) in _CONTAINERS
        ]
        if not level:
            return False
    return bool(level)


_SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_HTML = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif ch in _HTML:
            out.append(_HTML[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            out.append("\\ufffd")  # lone surrogate: Go writes the replacement character
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _float(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        raise JSONError(f"json: unsupported value: {value}")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    magnitude = abs(value)
    if 1e-6 <= magnitude < 1e21:
        return format(Decimal(repr(value)).normalize(), "f")
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    sign = exponent[0] if exponent[0] in "+-" else "+"
    digits = exponent.lstrip("+-").lstrip("0") or "0"
    if sign == "-" and len(digits) == 1:
        return f"{mantissa}e-{digits}"
    return f"{mantissa}e{sign}{digits.zfill(2)}"


def _encode(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, Mapping):
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                out.append(",")
            out.append(_string(str(key)))
            out.append(":")
            _encode(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode(item, out)
        out.append("]")
    else:
        raise JSONError(f"json: unsupported type: {type(value).__name__}")


def marshal(value: Any) -> str:
    """Encode like Go's ``json.Marshal`` (dict order preserved)."""
    out: list[str] = []
    _encode(value, out)
    return "".join(out)


_FLOAT64_MAX = sys.float_info.max


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise JSONError(f"number {text} is out of range of a float64")
    return value


def _integer(text: str) -> int:
    value = int(text)
    if abs(value) > _FLOAT64_MAX:
        raise JSONError(f"number {text[:20]}... is out of range of a float64")
    return value


def _no_constant(name: str) -> Any:
    raise JSONError(f"invalid value {name}: not JSON")


def unmarshal(text: str | bytes) -> Any:
    """Decode JSON text as Go's decoder reads it; raises :class:`JSONError` with the reason.

    Python's decoder also takes ``NaN``, ``Infinity`` and numbers beyond a float64 (``1e309``
    becomes ``inf``); Go's refuses them, and a ratio of ``inf`` or ``nan`` written back into an
    annotation would be text no Go component can read, so they are refused here too."""
    try:
        return json.loads(text, parse_float=_finite, parse_int=_integer, parse_constant=_no_constant)
    except JSONError:
        raise
    except ValueError as exc:  # the decoder's errors, bad UTF-8, an integer of too many digits
        raise JSONError(str(exc)) from None
