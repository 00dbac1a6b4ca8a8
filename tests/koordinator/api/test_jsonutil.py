"""JSON text as Go's encoding/json writes it (annotations are compared as strings)."""

from __future__ import annotations

import pytest

from koordinator.api.jsonutil import JSONError, marshal, nested_deeper, unmarshal


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param({"a": 1, "b": [True, None]}, '{"a":1,"b":[true,null]}', id="compact"),
        pytest.param({"z": 1, "a": 2}, '{"z":1,"a":2}', id="order-kept"),
        pytest.param("<a&b>", '"\\u003ca\\u0026b\\u003e"', id="html-escaped"),
        pytest.param("caf\u00e9\n", '"caf\u00e9\\n"', id="non-ascii-kept"),
        pytest.param("\u2028", '"\\u2028"', id="line-separator"),
        pytest.param("\x01", '"\\u0001"', id="control"),
        pytest.param(0.5, "0.5", id="float"),
        pytest.param(2.0, "2", id="integral-float"),
        pytest.param(1e-7, "1e-7", id="small-float"),
        pytest.param(1e21, "1e+21", id="large-float"),
        pytest.param(1e20, "100000000000000000000", id="below-exponent-threshold"),
    ],
)
def test_marshal_matches_go(value, text):
    assert marshal(value) == text


def test_marshal_refuses_nan_and_unknown_types():
    with pytest.raises(JSONError):
        marshal(float("nan"))
    with pytest.raises(JSONError):
        marshal({1, 2})


def test_unmarshal_reports_bad_text():
    assert unmarshal('{"a":[1]}') == {"a": [1]}
    with pytest.raises(JSONError):
        unmarshal("{")


@pytest.mark.parametrize(
    "text",
    ['{"cpu":NaN}', "Infinity", "[-Infinity]", '{"cpu":1e309}', "-1e400", "1" + "0" * 400, "1" * 5000],
)
def test_unmarshal_refuses_what_go_refuses(text):
    """Python's decoder takes NaN, Infinity and numbers beyond a float64 (as ``inf``); Go's
    decoder refuses them, and a ratio of inf written back would be text no Go component reads."""
    with pytest.raises(JSONError):
        unmarshal(text)


def test_unmarshal_keeps_the_largest_float64():
    assert unmarshal("[1.7976931348623157e308, -5, 0.5]") == [1.7976931348623157e308, -5, 0.5]


def test_nested_deeper_counts_objects_and_arrays_without_recursing():
    assert not nested_deeper("text", 0)
    assert nested_deeper({}, 0)
    assert not nested_deeper({"a": [1, {"b": "c"}]}, 3)
    assert nested_deeper({"a": [1, {"b": []}]}, 3)
    deep: list[object] = []
    for _ in range(100_000):  # far past the interpreter's recursion limit
        deep = [deep]
    assert nested_deeper(deep, 100)
    assert not nested_deeper(deep, 100_001)
