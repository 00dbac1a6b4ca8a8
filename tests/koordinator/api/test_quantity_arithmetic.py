"""Quantity arithmetic is exact and keeps apimachinery's format rules."""

from __future__ import annotations

import pytest

from koordinator.api.quantity import Format, Quantity, parse_quantity


def q(text: str) -> Quantity:
    return parse_quantity(text)


@pytest.mark.parametrize(
    ("a", "b", "total", "difference"),
    [
        pytest.param("1", "500m", "1500m", "500m", id="cores-and-milli"),
        pytest.param("1Gi", "512Mi", "1536Mi", "512Mi", id="binary"),
        pytest.param("0", "1Gi", "1Gi", "-1Gi", id="zero-takes-other-format"),
        pytest.param("100m", "200m", "300m", "-100m", id="negative-result"),
        pytest.param("0.1", "0.2", "300m", "-100m", id="no-float-error"),
    ],
)
def test_add_and_subtract(a, b, total, difference):
    assert str(q(a) + q(b)) == total
    assert str(q(a) - q(b)) == difference


def test_result_format_follows_left_operand():
    assert (q("1Gi") + q("1")).format is Format.BINARY_SI
    assert (q("1") + q("1Gi")).format is Format.DECIMAL_SI
    assert (q("0") + q("1Gi")).format is Format.BINARY_SI


def test_multiply_by_integer():
    assert str(q("250m") * 4) == "1"
    assert str(3 * q("1Gi")) == "3Gi"
    with pytest.raises(TypeError):
        q("1").mul(1.5)  # type: ignore[arg-type]


def test_compare_ignores_format():
    assert q("1Ki") == q("1024")
    assert q("1") < q("1001m")
    assert q("1").cmp(q("1000m")) == 0
    assert q("2").cmp(q("1")) == 1
    assert len({q("1Ki"), q("1024")}) == 1


def test_constructors():
    assert str(Quantity.from_milli(1500)) == "1500m"
    assert str(Quantity.from_int(4 * 1024**3, Format.BINARY_SI)) == "4Gi"
    assert str(Quantity.from_scaled(5, 3)) == "5k"
    assert str(Quantity.from_scaled(1, -12)) == "1n"
    assert Quantity.from_milli(500).as_fraction() * 2 == 1


def test_negation_and_zero():
    assert str(-q("1Gi")) == "-1Gi"
    assert not q("0")
    assert q("0").is_zero()
    assert q("-1").sign() == -1
