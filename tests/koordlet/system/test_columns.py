"""The column builders (native and twin): the collectors' arithmetic on parsed cells, NaN
where a cgroup has no value, and the same floats and counts from both backends for any
input."""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koordlet.system import native
from koordlet.system.cgroup import columns, pyio
from koordlet.system.cgroup.columns import Column
from tests.koordlet.floatcolumns import listed


def test_total_sums_the_first_values_exactly(backend):
    big = 1 << 62
    cells = [(1, 2, 3, 100), None, (1, None, 3, 4), (big, big, big, 0), (2**53, 1, 0, 0)]
    # int64 overflow and values past a double's exact range are summed as Python ints
    assert listed(columns.total(cells, 3)) == [6.0, None, None, float(3 * big), float(2**53 + 1)]
    assert listed(columns.total(cells, 0)) == [0.0, None, 0.0, 0.0, 0.0]


def test_a_cell_shorter_than_asked_is_refused(backend):
    with pytest.raises(IndexError):
        columns.total([(1, 2)], 3)
    with pytest.raises(IndexError):
        columns.ratio([(1,)], [(1,)], 0, 1)


def test_growth_is_the_rate_of_each_counter(backend):
    current = [300, 100, None, 50, 2**70 + 10]
    previous = [100, 200, 5, None, 2**70]
    assert listed(columns.growth(current, previous, 2.0, 10.0)) == [10.0, None, None, None, 0.5]
    with pytest.raises(ValueError, match="2 counters for 1 previous"):
        columns.growth([1, 2], [1], 1.0)
    with pytest.raises(ZeroDivisionError):
        columns.growth([], [], 0.0)
    with pytest.raises(ZeroDivisionError):
        columns.strided(array("q"), b"", 0, 1, 0.0)


def test_ratio_is_one_counters_growth_over_anothers(backend):
    # (nr_periods, nr_throttled, throttled_ns), as the pod collector's throttling
    current = [(110, 30, 0), (50, 5, 0), (50, 6, 0), (10, 1, 0), None, (3, 2, 0)]
    previous = [(100, 25, 0), (50, 5, 0), (50, 5, 0), (20, 0, 0), (1, 1, 1), (2, 3, 0)]
    assert listed(columns.ratio(current, previous, 0, 1)) == [0.5, 0.0, 0.0, None, None, None]


def test_unknown_is_all_missing():
    assert listed(columns.unknown(3)) == [None, None, None]


_counter = st.one_of(st.none(), st.integers(0, 2**66), st.integers(-5, 5))
_cell = st.one_of(st.none(), st.tuples(_counter, _counter, _counter))


def _same(a: Column, b: Column) -> bool:
    return a[1] == b[1] and [repr(v) for v in a[0]] == [repr(v) for v in b[0]]


@pytest.mark.skipif(native.load("_cgroupfs") is None, reason="the native extension is not built")
@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(st.tuples(_cell, _cell), max_size=20),
    divisor=st.sampled_from([1.0, 3.0, 100.0, 1e9]),
    elapsed=st.floats(0.001, 1e4),
)
def test_native_and_twin_give_the_same_columns(pairs: list[tuple[Any, Any]], divisor: float, elapsed: float):
    compiled = native.load("_cgroupfs")
    current, previous = [c for c, _ in pairs], [p for _, p in pairs]
    counters = [None if c is None else c[0] for c in current]
    last = [None if p is None else p[0] for p in previous]
    for name, args in [
        ("sum_column", (current, 3)),
        ("growth_column", (counters, last, elapsed, divisor)),
        ("ratio_column", (current, previous, 0, 1)),
    ]:
        assert _same(getattr(compiled, name)(*args), getattr(pyio, name)(*args)), name


def test_strided_takes_one_value_of_each_row(backend):
    values = array("q", [150, 1, 2, 0, 7, 9])
    present = bytes([1, 1, 1, 0, 1, 0])
    assert listed(columns.strided(values, present, 0, 3, 100.0)) == [1.5, None]
    assert listed(columns.strided(values, present, 2, 3)) == [2.0, None]
    assert listed(columns.flags(present, 2, 3, 0)) == [1.0, None]
    assert listed(columns.flags(present, 2, 3, 1)) == [1.0, 0.0]
    with pytest.raises(ValueError, match="no column at 3 of rows of 3"):
        columns.strided(values, present, 3, 3)
    with pytest.raises(ValueError, match="6 values for 5 flags"):
        columns.strided(values, present[:5], 0, 3)
    with pytest.raises(TypeError, match="int64"):
        columns.strided(array("d", [1.0]), b"\x01", 0, 1)  # type: ignore[arg-type]


@pytest.mark.skipif(native.load("_cgroupfs") is None, reason="the native extension is not built")
@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.booleans()), min_size=3, max_size=3)
    ),
    start=st.integers(0, 2),
    base=st.integers(0, 2),
    divisor=st.sampled_from([1.0, 7.0, 100.0]),
)
def test_native_and_twin_give_the_same_strided_columns(rows, start, base, divisor):
    compiled = native.load("_cgroupfs")
    values = array("q", [v for row in rows for v, _ in row])
    present = bytes([p for row in rows for _, p in row])
    for name, args in [
        ("strided_column", (values, present, start, 3, divisor)),
        ("flag_column", (present, start, 3, base)),
    ]:
        assert _same(getattr(compiled, name)(*args), getattr(pyio, name)(*args)), name
