"""Reading the float columns of :mod:`koordlet.system.cgroup.columns` in tests."""

from __future__ import annotations

import math

from koordlet.system.cgroup.columns import Column


def listed(column: Column) -> list[float | None]:
    """A column as a list, None for no value; checks the count of those that comes with it."""
    values, missing = column
    out = [None if math.isnan(v) else v for v in values]
    assert out.count(None) == missing
    return out
