"""A labelled Prometheus histogram for a process that observes from its event loop only.

The client library's ``Histogram`` takes a lock and walks its buckets on every
observation, about a microsecond; koord-scheduler makes some ten observations per pod
(attempt, end-to-end and extension-point durations), a few percent of its whole per-pod
cost. :class:`LoopHistogram` finds the bucket by bisection and adds without a lock: every
observation and every scrape (the ``/metrics`` handler) run on the one loop thread, so
nothing else reads or writes the counts meanwhile. It renders exactly as the library's
histogram does (``_bucket`` with ``le``, ``_count``, ``_sum``), without ``_created``
series, as Go's client writes none.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["LoopHistogram", "LoopHistogramChild"]

#: the library's bound formatting (``le="0.001"``), typed: the library leaves it untyped
_go_float: Callable[[float], str] = floatToGoString


class LoopHistogramChild:
    """One label combination: counts per bucket (the last one ``+Inf``) and the sum."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # the first bound >= value: Prometheus buckets count what is less than or equal
        self.counts[bisect_left(self._bounds, value)] += 1
        self.sum += value


class LoopHistogram(Collector):
    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Iterable[float],
        registry: CollectorRegistry | None = None,
    ) -> None:
        bounds = tuple(sorted(float(b) for b in buckets if b != float("inf")))
        if not bounds:
            raise ValueError(f"{name}: a histogram needs at least one finite bucket")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._bounds = bounds
        self._children: dict[tuple[str, ...], LoopHistogramChild] = {}
        if not self.labelnames:
            self._children[()] = LoopHistogramChild(bounds)
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> LoopHistogramChild:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected, got {len(values)}")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = LoopHistogramChild(self._bounds)
        return child

    def observe(self, value: float) -> None:
        """Observe on the histogram without labels."""
        self.labels().observe(value)

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        edges = [_go_float(b) for b in self._bounds] + ["+Inf"]
        for values, child in self._children.items():
            total, buckets = 0, []
            for edge, count in zip(edges, child.counts, strict=True):
                total += count
                buckets.append((edge, float(total)))
            family.add_metric(list(values), buckets, child.sum)
        yield family
