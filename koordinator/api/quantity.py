"""Kubernetes resource quantities, parsed and printed exactly as ``k8s.io/apimachinery`` does.

A :class:`Quantity` holds an exact integer number of nano-units (the finest precision
Kubernetes keeps) and the format it was written in:

* ``BinarySI`` for ``Ki Mi Gi Ti Pi Ei`` suffixes,
* ``DecimalSI`` for ``n u m "" k M G T P E``,
* ``DecimalExponent`` for ``e<N>`` / ``E<N>``.

Parsing follows ``resource.ParseQuantity``: an optional sign, digits with an optional
fraction, then a suffix; anything else (``"1.2.3"``, ``" 1"``, ``"1e"``, ``"1K"``) is refused.
Values finer than one nano-unit are rounded up (away from zero) and magnitudes are capped at
``2**63 - 1``. A string with no digit at all (``""``, ``"Mi"``, ``"-"``) is refused, as the
apiserver's quantity pattern refuses it.

``str(q)`` is the canonical form (``"1.5Gi"`` -> ``"1536Mi"``, ``"0.1"`` -> ``"100m"``,
``"1e3"`` -> ``"1e3"``); ``value()`` and ``milli_value()`` round up away from zero like
``Value()``/``MilliValue()``. Arithmetic is exact (Python ints), never floating point.
"""

from __future__ import annotations

import functools
import re
from enum import StrEnum
from fractions import Fraction
from typing import Any

__all__ = ["Format", "Quantity", "QuantityError", "ceil_div_away", "parse_quantity"]


class QuantityError(ValueError):
    """A string that Kubernetes would not accept as a quantity."""


class Format(StrEnum):
    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


_NANO = 10**9
_MAX_NANOS = ((1 << 63) - 1) * _NANO
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXPONENT = {v: k for k, v in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_EXPONENT = {v: k for k, v in _BINARY_SUFFIXES.items()}
# sign, integer digits, fraction digits, then the suffix: letters from apimachinery's suffix
# alphabet followed by an optional signed exponent.
_SHAPE = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)")
# Beyond these exponents the value is certainly capped (or rounded to one nano-unit).
_EXPONENT_LIMIT = 40


def _interpret_suffix(suffix: str) -> tuple[int, int, Format]:
    """(base, exponent, format) of a suffix, as apimachinery's suffixer interprets it."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], Format.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], Format.BINARY_SI
    match = _EXPONENT.fullmatch(suffix)
    if match is not None:
        exponent = int(match.group(1))
        if -(1 << 63) <= exponent < (1 << 63):
            return 10, exponent, Format.DECIMAL_EXPONENT
    raise QuantityError(f"unable to parse quantity's suffix: {suffix!r}")


def _nanos_of(digits: str, scale_digits: int, base: int, exponent: int) -> int:
    """Absolute value in nano-units, rounded up and capped like ParseQuantity (integer arithmetic only)."""
    mantissa = int(digits) if digits else 0
    if mantissa == 0:
        return 0
    if base == 10:
        if exponent > _EXPONENT_LIMIT:
            return _MAX_NANOS
        if exponent < -_EXPONENT_LIMIT:
            return 1
        shift = exponent + 9 - scale_digits
        if shift >= 0:
            factor: int = 10**shift
            return min(mantissa * factor, _MAX_NANOS)
        numerator = mantissa
        denominator: int = 10 ** (-shift)
    else:
        numerator = (mantissa << exponent) * _NANO
        denominator = 10**scale_digits
    rounded = -((-numerator) // denominator)  # ceiling of a positive value
    return min(rounded, _MAX_NANOS)


def parse_quantity(text: str) -> Quantity:
    """``resource.ParseQuantity``; raises :class:`QuantityError`. Quantities are immutable, and
    the same few strings ("100m", "500Mi") come again in every pod, so parses are cached."""
    if not isinstance(text, str):
        raise QuantityError(f"quantities must be strings, not {type(text).__name__}")
    return _parse(text)


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> Quantity:
    if not text:
        raise QuantityError("quantities must match the regular expression (empty string)")
    match = _SHAPE.fullmatch(text)
    if match is None:
        raise QuantityError(f"quantities must match the regular expression: {text!r}")
    sign, whole, fraction, suffix = match.group(1), match.group(2), match.group(3) or "", match.group(4)
    if not whole and not fraction:
        raise QuantityError(f"quantity {text!r} has no digits")
    base, exponent, fmt = _interpret_suffix(suffix)
    nanos = _nanos_of(whole + fraction, len(fraction), base, exponent)
    if fmt is Format.BINARY_SI and 0 < nanos < _NANO:
        # A binary quantity below one unit cannot be printed with a binary suffix.
        fmt = Format.DECIMAL_SI
    return Quantity(-nanos if sign == "-" else nanos, fmt)


def _strip_factors(value: int, factor: int, limit: int) -> tuple[int, int]:
    times = 0
    while times < limit and value != 0 and value % factor == 0:
        value //= factor
        times += 1
    return value, times


def _canonical(nanos: int, fmt: Format) -> str:
    if nanos == 0:
        return "0"
    if fmt is Format.BINARY_SI:
        if -1024 * _NANO < nanos < 1024 * _NANO or nanos % _NANO != 0:
            fmt = Format.DECIMAL_SI
        else:
            magnitude, times = _strip_factors(abs(nanos) // _NANO, 1024, 6)
            number = -magnitude if nanos < 0 else magnitude
            return f"{number}{_BINARY_BY_EXPONENT.get(times * 10, '')}"
    mantissa, exponent = nanos, -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    while exponent % 3 != 0:  # down to the nearest multiple of three
        mantissa *= 10
        exponent -= 1
    if fmt is Format.DECIMAL_EXPONENT:
        return f"{mantissa}" if exponent == 0 else f"{mantissa}e{exponent}"
    if exponent > 18:
        mantissa *= 10 ** (exponent - 18)
        exponent = 18
    return f"{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"


def ceil_div_away(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` rounded up away from zero (denominator > 0), as ``ScaledValue`` rounds."""
    magnitude = -((-abs(numerator)) // denominator)
    return -magnitude if numerator < 0 else magnitude


class Quantity:
    """An exact Kubernetes quantity. Immutable; compare, hash and add like numbers."""

    __slots__ = ("_format", "_nanos")

    def __init__(self, nanos: int = 0, fmt: Format = Format.DECIMAL_SI) -> None:
        if isinstance(nanos, bool) or not isinstance(nanos, int):
            raise TypeError("Quantity() takes an integer number of nano-units; use Quantity.parse for text")
        self._nanos = nanos
        self._format = Format(fmt)

    @classmethod
    def _of(cls, nanos: int, fmt: Format) -> Quantity:
        """A quantity from values already checked (arithmetic on quantities): no validation."""
        quantity = object.__new__(cls)
        quantity._nanos = nanos
        quantity._format = fmt
        return quantity

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> Quantity:
        return parse_quantity(text)

    @classmethod
    def from_int(cls, value: int, fmt: Format = Format.DECIMAL_SI) -> Quantity:
        """``resource.NewQuantity(value, fmt)``."""
        return cls(value * _NANO, fmt)

    @classmethod
    def from_milli(cls, milli: int, fmt: Format = Format.DECIMAL_SI) -> Quantity:
        """``resource.NewMilliQuantity(milli, fmt)``."""
        return cls(milli * 1_000_000, fmt)

    @classmethod
    def from_scaled(cls, value: int, scale: int, fmt: Format = Format.DECIMAL_SI) -> Quantity:
        """``resource.NewScaledQuantity``: value x 10**scale (scales below -9 round up)."""
        if scale >= -9:
            return cls(value * 10 ** (scale + 9), fmt)
        return cls(ceil_div_away(value, 10 ** (-9 - scale)), fmt)

    @classmethod
    def from_json(cls, value: Any) -> Quantity:
        """Decode a JSON value as ``Quantity.UnmarshalJSON`` does (strings are trimmed; numbers allowed)."""
        if value is None:
            return cls()
        if isinstance(value, bool):
            raise QuantityError("quantities must be strings or numbers, not booleans")
        if isinstance(value, int):
            return parse_quantity(str(value))
        if isinstance(value, float):
            return parse_quantity(repr(value))
        if isinstance(value, str):
            return parse_quantity(value.strip())
        raise QuantityError(f"quantities must be strings or numbers, not {type(value).__name__}")

    # ---- accessors ------------------------------------------------------------------------
    @property
    def format(self) -> Format:
        return self._format

    @property
    def nanos(self) -> int:
        """The exact value in nano-units (10**-9)."""
        return self._nanos

    def as_fraction(self) -> Fraction:
        return Fraction(self._nanos, _NANO)

    def as_float(self) -> float:
        """An approximate float, for metrics and logs only."""
        return self._nanos / _NANO

    def scaled_value(self, scale: int) -> int:
        """``ScaledValue``: the value in units of 10**scale, rounded up away from zero."""
        if scale <= -9:
            factor: int = 10 ** (-9 - scale)
            return self._nanos * factor
        divisor: int = 10 ** (scale + 9)
        return ceil_div_away(self._nanos, divisor)

    def value(self) -> int:
        """``Value()``: whole units, rounded up away from zero."""
        return self.scaled_value(0)

    def milli_value(self) -> int:
        """``MilliValue()``: thousandths, rounded up away from zero."""
        return self.scaled_value(-3)

    def is_zero(self) -> bool:
        return self._nanos == 0

    def sign(self) -> int:
        return (self._nanos > 0) - (self._nanos < 0)

    def cmp(self, other: Quantity) -> int:
        """-1, 0 or 1 like ``Quantity.Cmp``."""
        return (self._nanos > other._nanos) - (self._nanos < other._nanos)

    def with_format(self, fmt: Format) -> Quantity:
        return Quantity(self._nanos, fmt)

    # ---- arithmetic (results keep the left operand's format unless it is zero) ------------
    def add(self, other: Quantity) -> Quantity:
        fmt = other._format if self._nanos == 0 else self._format
        return Quantity._of(self._nanos + other._nanos, fmt)

    def sub(self, other: Quantity) -> Quantity:
        fmt = other._format if self._nanos == 0 else self._format
        return Quantity._of(self._nanos - other._nanos, fmt)

    def neg(self) -> Quantity:
        return Quantity._of(-self._nanos, self._format)

    def mul(self, factor: int) -> Quantity:
        """``Quantity.Mul(int64)``."""
        if isinstance(factor, bool) or not isinstance(factor, int):
            raise TypeError("quantities multiply by integers only")
        return Quantity(self._nanos * factor, self._format)

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        # add() inlined: quota and resource sums run this in the scheduler's hot path
        quantity = object.__new__(Quantity)
        quantity._nanos = self._nanos + other._nanos
        quantity._format = other._format if self._nanos == 0 else self._format
        return quantity

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        quantity = object.__new__(Quantity)
        quantity._nanos = self._nanos - other._nanos
        quantity._format = other._format if self._nanos == 0 else self._format
        return quantity

    def __mul__(self, factor: int) -> Quantity:
        if isinstance(factor, bool) or not isinstance(factor, int):
            return NotImplemented
        return self.mul(factor)

    __rmul__ = __mul__

    def __neg__(self) -> Quantity:
        return self.neg()

    def __abs__(self) -> Quantity:
        return Quantity(abs(self._nanos), self._format)

    def __bool__(self) -> bool:
        return self._nanos != 0

    # ---- comparison -----------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self._nanos == other._nanos
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._nanos)

    def __lt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos < other._nanos

    def __le__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos <= other._nanos

    def __gt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos > other._nanos

    def __ge__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos >= other._nanos

    # ---- text -----------------------------------------------------------------------------
    def __str__(self) -> str:
        return _canonical(self._nanos, self._format)

    def to_json(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"
