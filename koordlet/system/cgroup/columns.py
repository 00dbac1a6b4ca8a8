"""Float columns of a batch's parsed values, in the form the metric cache stores them.

The collectors read hundreds of cgroups a tick and store one float per cgroup and
statistic. These builders turn the parsed values into an ``array('d')`` in one call,
either from a column of cells (a value or a tuple of values per cgroup, None where it
could not be read: :meth:`StatsReader.read_columns
<koordlet.system.cgroup.stats.StatsReader.read_columns>`) or from the int64 rows of
:meth:`StatsReader.read_values <koordlet.system.cgroup.stats.StatsReader.read_values>`.
NaN marks a cgroup without a value, and the count of those comes with the column, so a
collector that has all of them stores the array as it is. Native in the ``_cgroupfs``
accelerator, with the same arithmetic (and floats) in its Python twin.
"""

from __future__ import annotations

from array import array
from types import ModuleType
from typing import Any

from koordlet.system import native
from koordlet.system.cgroup import pyio

#: the values, and how many of them are NaN (no value)
Column = tuple["array[float]", int]
_NAN = float("nan")


def _backend() -> ModuleType:
    module = native.load("_cgroupfs")
    return pyio if module is None else module


def total(cells: list[Any], count: int) -> Column:
    """The sum of the first ``count`` values of each cell; no value where the cell or
    one of them is None."""
    column: Column = _backend().sum_column(cells, count)
    return column


def growth(current: list[Any], previous: list[Any], elapsed: float, unit: float = 1.0) -> Column:
    """How much each counter grew a second, in ``unit``s: ``(c - p) / elapsed / unit``;
    no value where either is None or the counter went back (a restarted cgroup)."""
    column: Column = _backend().growth_column(current, previous, elapsed, unit)
    return column


def ratio(current: list[Any], previous: list[Any], base: int, part: int) -> Column:
    """Per pair of cells, ``Δpart / Δbase`` of two of their counters (0.0 when ``base``
    did not grow); no value where either cell or one of the four counters is None, or
    one of the counters went back."""
    column: Column = _backend().ratio_column(current, previous, base, part)
    return column


def unknown(n: int) -> Column:
    """A column of ``n`` cgroups none of which has a value (a first tick, say)."""
    return array("d", [_NAN]) * n, n


def strided(values: array[int], present: bytes, start: int, step: int, divisor: float = 1.0) -> Column:
    """Of ``values`` (int64, as :meth:`StatsReader.read_values
    <koordlet.system.cgroup.stats.StatsReader.read_values>` gives them) in rows of ``step``
    (one row per cgroup), the value at ``start`` of each row divided by ``divisor``; no
    value where its byte of ``present`` is 0."""
    column: Column = _backend().strided_column(values, present, start, step, divisor)
    return column


def flags(present: bytes, start: int, step: int, base: int) -> Column:
    """Of ``present`` in rows of ``step``, 1.0 where the value at ``start`` of a row was
    read and 0.0 where not; no value for the rows without the value at ``base``."""
    column: Column = _backend().flag_column(present, start, step, base)
    return column
