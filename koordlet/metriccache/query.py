"""Aggregations over the samples of a query window, with upstream's exact rules.

* ``avg``: the mean;
* ``p50``/``p90``/``p95``/``p99``: lower nearest rank: values sorted ascending, index
  ``int(n * p) - 1`` clamped at 0 (so p50 of two samples is the smaller one);
* ``last``: the value with the latest timestamp;
* ``count``: the number of samples (0 for an empty window, which every other
  aggregation refuses with QueryError).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


class Aggregation(enum.StrEnum):
    AVG = "avg"
    P50 = "p50"
    P90 = "p90"
    P95 = "p95"
    P99 = "p99"
    LAST = "last"
    COUNT = "count"


PERCENTILES = {Aggregation.P50: 0.5, Aggregation.P90: 0.9, Aggregation.P95: 0.95, Aggregation.P99: 0.99}


class QueryError(LookupError):
    """No samples to aggregate (a series that was never written, or a window without samples)."""


def percentile(values: Sequence[float], p: float) -> float:
    """Lower nearest rank of already sorted ``values``."""
    if not values:
        raise QueryError("no samples")
    index = max(int(len(values) * p) - 1, 0)
    return values[index]


@dataclass(frozen=True, slots=True)
class AggregateResult:
    """The samples of one window (of every matching series), in time order."""

    timestamps: tuple[float, ...]
    values: tuple[float, ...]

    def count(self) -> int:
        return len(self.values)

    def value(self, aggregation: Aggregation | str) -> float:
        kind = Aggregation(aggregation)
        if kind is Aggregation.COUNT:
            return float(len(self.values))
        if not self.values:
            raise QueryError("no samples in the window")
        if kind is Aggregation.AVG:
            return sum(self.values) / len(self.values)
        if kind is Aggregation.LAST:
            latest = max(range(len(self.timestamps)), key=self.timestamps.__getitem__)
            return self.values[latest]
        return percentile(sorted(self.values), PERCENTILES[kind])

    def time_range(self) -> float:
        """Seconds between the first and the last sample (0 with fewer than two)."""
        if len(self.timestamps) < 2:
            return 0.0
        return max(self.timestamps) - min(self.timestamps)
