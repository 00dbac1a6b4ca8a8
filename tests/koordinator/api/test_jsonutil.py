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
