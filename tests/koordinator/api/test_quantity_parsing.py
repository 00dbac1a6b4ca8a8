"""Quantity parsing and canonical form follow k8s.io/apimachinery's resource.Quantity."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koordinator.api.quantity import Format, Quantity, QuantityError, parse_quantity


@pytest.mark.parametrize(
    ("text", "canonical", "fmt"),
    [
        pytest.param("1.5Gi", "1536Mi", Format.BINARY_SI, id="fractional-binary"),
        pytest.param("500m", "500m", Format.DECIMAL_SI, id="milli"),
        pytest.param("1e3", "1e3", Format.DECIMAL_EXPONENT, id="exponent"),
        pytest.param("1E3", "1e3", Format.DECIMAL_EXPONENT, id="upper-exponent"),
        pytest.param("1000e0", "1e3", Format.DECIMAL_EXPONENT, id="exponent-normalised"),
        pytest.param("12e2", "1200", Format.DECIMAL_EXPONENT, id="exponent-not-multiple-of-three"),
        pytest.param("1e-3", "1e-3", Format.DECIMAL_EXPONENT, id="negative-exponent"),
        pytest.param("0.1", "100m", Format.DECIMAL_SI, id="decimal-fraction"),
        pytest.param(".5", "500m", Format.DECIMAL_SI, id="leading-dot"),
        pytest.param("1.", "1", Format.DECIMAL_SI, id="trailing-dot"),
        pytest.param("1Ki", "1Ki", Format.BINARY_SI, id="kibi"),
        pytest.param("1024Mi", "1Gi", Format.BINARY_SI, id="binary-promoted"),
        pytest.param("1.5Ki", "1536", Format.BINARY_SI, id="binary-not-a-power"),
        pytest.param("0.5Ki", "512", Format.BINARY_SI, id="binary-below-1024"),
        pytest.param("100M", "100M", Format.DECIMAL_SI, id="mega"),
        pytest.param("1000", "1k", Format.DECIMAL_SI, id="thousand-to-kilo"),
        pytest.param("1500", "1500", Format.DECIMAL_SI, id="no-suffix-fits"),
        pytest.param("1E", "1E", Format.DECIMAL_SI, id="exa-suffix"),
        pytest.param("-1", "-1", Format.DECIMAL_SI, id="negative"),
        pytest.param("-1.5Gi", "-1536Mi", Format.BINARY_SI, id="negative-binary"),
        pytest.param("+1", "1", Format.DECIMAL_SI, id="plus-sign"),
        pytest.param("0", "0", Format.DECIMAL_SI, id="zero"),
        pytest.param("0Mi", "0", Format.BINARY_SI, id="zero-binary"),
        pytest.param("1.0001m", "1000100n", Format.DECIMAL_SI, id="sub-milli-kept-in-nanos"),
        pytest.param("0.000001", "1u", Format.DECIMAL_SI, id="micro"),
        pytest.param("0.0000000001", "1n", Format.DECIMAL_SI, id="below-nano-rounds-up"),
        pytest.param("-0.0000000001", "-1n", Format.DECIMAL_SI, id="below-nano-rounds-away-from-zero"),
        pytest.param("1e-10", "1e-9", Format.DECIMAL_EXPONENT, id="tiny-exponent-rounds-up"),
        pytest.param("9223372036854775807", "9223372036854775807", Format.DECIMAL_SI, id="int64-max"),
        pytest.param("9223372036854775808", "9223372036854775807", Format.DECIMAL_SI, id="capped-at-int64"),
        pytest.param("10E", "9223372036854775807", Format.DECIMAL_SI, id="huge-suffix-capped"),
        pytest.param("1e100", "9223372036854775807", Format.DECIMAL_EXPONENT, id="huge-exponent-capped"),
        pytest.param("100Gi", "100Gi", Format.BINARY_SI, id="gibi"),
        pytest.param("32Gi", "32Gi", Format.BINARY_SI, id="sample-memory"),
    ],
)
def test_accepted_quantities_print_canonically(text, canonical, fmt):
    quantity = parse_quantity(text)
    assert str(quantity) == canonical
    assert quantity.format is fmt
    assert str(parse_quantity(canonical)) == canonical


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("1.2.3", id="two-dots"),
        pytest.param("Mi", id="suffix-only"),
        pytest.param("", id="empty"),
        pytest.param("-", id="sign-only"),
        pytest.param(".", id="dot-only"),
        pytest.param("1e", id="exponent-without-digits"),
        pytest.param(" 1", id="leading-space"),
        pytest.param("1 ", id="trailing-space"),
        pytest.param("1K", id="upper-k"),
        pytest.param("1i", id="bare-i"),
        pytest.param("0.1mi", id="milli-i"),
        pytest.param("1.1.M", id="dotted-suffix"),
        pytest.param("1+1.0M", id="sign-inside"),
        pytest.param("aoeu", id="letters"),
        pytest.param("-3.01e-", id="dangling-exponent-sign"),
        pytest.param("1Mi3", id="digits-after-binary-suffix"),
        pytest.param("1e3e", id="suffix-after-exponent"),
    ],
)
def test_refused_quantities(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "value", "milli"),
    [
        pytest.param("500m", 1, 500, id="half-rounds-up"),
        pytest.param("1.0001m", 1, 2, id="sub-milli-rounds-up"),
        pytest.param("-500m", -1, -500, id="negative-rounds-away"),
        pytest.param("-1.0001m", -1, -2, id="negative-sub-milli"),
        pytest.param("2", 2, 2000, id="whole"),
        pytest.param("1Ki", 1024, 1024000, id="binary"),
        pytest.param("0.1", 1, 100, id="tenth"),
    ],
)
def test_value_and_milli_value_round_up(text, value, milli):
    quantity = parse_quantity(text)
    assert quantity.value() == value
    assert quantity.milli_value() == milli


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        pytest.param(1, "1", id="json-int"),
        pytest.param(0.5, "500m", id="json-float"),
        pytest.param(" 2Gi ", "2Gi", id="json-string-trimmed"),
        pytest.param(1e-07, "100e-9", id="json-float-exponent"),
        pytest.param(None, "0", id="json-null"),
    ],
)
def test_json_decoding(raw, canonical):
    assert str(Quantity.from_json(raw)) == canonical


def test_json_decoding_refuses_booleans():
    with pytest.raises(QuantityError):
        Quantity.from_json(True)


_SUFFIXES = {"n": (10, -9), "u": (10, -6), "m": (10, -3), "": (10, 0), "k": (10, 3), "M": (10, 6)}
_SUFFIXES.update(
    {"G": (10, 9), "Ki": (2, 10), "Mi": (2, 20), "Gi": (2, 30), "e-12": (10, -12), "e5": (10, 5)}
)


@given(
    whole=st.integers(min_value=0, max_value=10**12),
    fraction=st.text(alphabet="0123456789", max_size=12),
    suffix=st.sampled_from(sorted(_SUFFIXES)),
    negative=st.booleans(),
)
def test_parsed_value_is_the_exact_value_rounded_up_to_nanos(whole, fraction, suffix, negative):
    text = f"{'-' if negative else ''}{whole}{'.' + fraction if fraction else ''}{suffix}"
    base, exponent = _SUFFIXES[suffix]
    exact = Fraction(f"{whole}.{fraction or '0'}") * Fraction(base) ** exponent * 10**9
    nanos = min(math.ceil(exact), (2**63 - 1) * 10**9)
    assert parse_quantity(text).nanos == (-nanos if negative else nanos)
