"""In-memory time series for the koordlet's samples, and a key-value store for node facts.

Upstream embeds a Prometheus TSDB on disk; the consumers only ever read recent windows
(QoS loops the last two collect intervals, NodeMetric the aggregation durations, 30
minutes by default), so this cache keeps raw samples in memory for a retention window and
under a byte budget. Each series is two columns, an ``array('i')`` of milliseconds from the
cache's epoch and an ``array('d')`` of values: 12 bytes a sample, no per-sample objects.
A sample is a metric kind with a fixed label schema, as upstream's ``MetricResource`` (an
unknown or missing label is refused when the sample is built, not when it is queried).

Thread-safety: the collectors append from their worker thread while reporters query from
the event loop, so every operation holds one lock; appends are batched per tick.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from koordlet.metriccache.query import AggregateResult

#: int32 milliseconds + float64 value
_SAMPLE_BYTES = 12
_MAX_OFFSET_MS = (1 << 31) - 1
_MIN_OFFSET_MS = -(1 << 31)


@dataclass(frozen=True)
class MetricKind:
    """A metric name (upstream's ``__name__``) and the labels every sample of it carries."""

    name: str
    labels: tuple[str, ...] = ()

    @cached_property
    def _label_set(self) -> frozenset[str]:
        return frozenset(self.labels)

    def sample(self, value: float, timestamp: float, **labels: str) -> Sample:
        """A sample of this kind; refuses unknown or missing labels."""
        if labels.keys() != self._label_set:
            missing = sorted(set(self.labels) - set(labels))
            unknown = sorted(set(labels) - set(self.labels))
            raise ValueError(f"{self.name}: missing labels {missing}, unknown labels {unknown}")
        return Sample(self, tuple([labels[name] for name in self.labels]), timestamp, value)

    def key(self, **labels: str) -> tuple[str, ...]:
        return tuple(labels[name] for name in self.labels)


class Sample(NamedTuple):
    """One value of a series (a tuple: collectors make thousands a tick)."""

    kind: MetricKind
    label_values: tuple[str, ...]
    timestamp: float
    value: float


Row = tuple[tuple[str, ...], float]


class Rows:
    """The samples of one collector tick, all at one timestamp, grouped by kind.

    The collectors' hot path: a row is ``(label values, value)`` appended to the list of its
    kind (``put = rows.writer(kind); put((key, value))``), with label values the collector
    built once with :meth:`MetricKind.key` and reuses tick after tick.
    """

    __slots__ = ("by_kind", "timestamp")

    def __init__(self, timestamp: float) -> None:
        self.timestamp = timestamp
        self.by_kind: dict[MetricKind, list[Row]] = {}

    def writer(self, kind: MetricKind) -> Callable[[Row], None]:
        rows = self.by_kind.get(kind)
        if rows is None:
            rows = self.by_kind[kind] = []
        return rows.append

    def __len__(self) -> int:
        return sum(len(rows) for rows in self.by_kind.values())


class _Series:
    """One series: timestamps as int32 milliseconds from the cache's epoch, float64 values."""

    __slots__ = ("timestamps", "values")

    def __init__(self) -> None:
        self.timestamps = array("i")
        self.values = array("d")

    def trim_before(self, cutoff: int) -> int:
        """Drop samples older than ``cutoff`` (ms); returns how many were dropped."""
        n = bisect.bisect_left(self.timestamps, cutoff)  # appended in time order
        if n:
            del self.timestamps[:n]
            del self.values[:n]
        return n

    def window(self, start: int, end: int) -> tuple[list[int], list[float]]:
        lo = bisect.bisect_left(self.timestamps, start)
        hi = bisect.bisect_right(self.timestamps, end)
        return self.timestamps[lo:hi].tolist(), self.values[lo:hi].tolist()

    def shift(self, delta: int) -> None:
        self.timestamps = array("i", (t - delta for t in self.timestamps))


class MetricCache:
    """Labelled series with a retention window and a byte budget."""

    def __init__(self, retention_seconds: float = 1800.0, max_bytes: int = 100 << 20) -> None:
        if retention_seconds <= 0:
            raise ValueError("retention must be positive")
        self.retention_seconds = retention_seconds
        self.max_bytes = max_bytes
        self._series: dict[str, dict[tuple[str, ...], _Series]] = {}
        self._samples = 0
        self._appends = 0
        self._lock = threading.Lock()
        #: timestamps are kept as milliseconds from this instant (set by the first sample)
        self._epoch: float | None = None

    def _ms(self, timestamp: float) -> int:
        if self._epoch is None:
            self._epoch = timestamp
        return round((timestamp - self._epoch) * 1000)

    def _rebase(self, newest: float) -> float:
        """Move the epoch forward (about every 24 days of uptime) so int32 offsets fit;
        returns the new epoch."""
        assert self._epoch is not None
        new_epoch = newest - self.retention_seconds - 1
        delta = round((new_epoch - self._epoch) * 1000)
        self._trim(newest - self.retention_seconds)
        for by_labels in self._series.values():
            for series in by_labels.values():
                series.shift(delta)
        self._epoch += delta / 1000
        return self._epoch

    def append(self, samples: Iterable[Sample]) -> None:
        """Add a batch (one collector tick); old samples are trimmed every few batches."""
        with self._lock:
            newest = 0.0
            count = 0
            all_series = self._series
            epoch = self._epoch
            for kind, label_values, timestamp, value in samples:
                by_labels = all_series.get(kind.name)
                if by_labels is None:
                    by_labels = all_series[kind.name] = {}
                series = by_labels.get(label_values)
                if series is None:
                    series = by_labels[label_values] = _Series()
                if epoch is None:
                    self._epoch = epoch = timestamp
                offset = round((timestamp - epoch) * 1000)
                if offset > _MAX_OFFSET_MS:
                    epoch = self._rebase(timestamp)
                    offset = round((timestamp - epoch) * 1000)
                    series = by_labels.setdefault(label_values, series)
                series.timestamps.append(offset)
                series.values.append(value)
                count += 1
                if timestamp > newest:
                    newest = timestamp
            self._samples += count
            self._appends += 1
            if newest and (self._appends % 64 == 0 or self._samples * _SAMPLE_BYTES > self.max_bytes):
                self._trim(newest - self.retention_seconds)

    def append_rows(self, rows: Rows) -> None:
        """Add one tick's rows (see :class:`Rows`); one timestamp, so one offset for all."""
        timestamp = rows.timestamp
        with self._lock:
            if self._epoch is None:
                self._epoch = timestamp
            offset = round((timestamp - self._epoch) * 1000)
            if offset > _MAX_OFFSET_MS:
                offset = round((timestamp - self._rebase(timestamp)) * 1000)
            all_series = self._series
            count = 0
            for kind, items in rows.by_kind.items():
                by_labels = all_series.get(kind.name)
                if by_labels is None:
                    by_labels = all_series[kind.name] = {}
                get = by_labels.get
                for labels, value in items:
                    series = get(labels)
                    if series is None:
                        series = by_labels[labels] = _Series()
                    series.timestamps.append(offset)
                    series.values.append(value)
                count += len(items)
            self._samples += count
            self._appends += 1
            if self._appends % 64 == 0 or self._samples * _SAMPLE_BYTES > self.max_bytes:
                self._trim(timestamp - self.retention_seconds)

    def _trim(self, cutoff: float) -> None:
        if self._epoch is None:
            return
        cutoff_ms = max(self._ms(cutoff), _MIN_OFFSET_MS)
        for by_labels in self._series.values():
            emptied = []
            for key, series in by_labels.items():
                series.trim_before(cutoff_ms)
                if not series.timestamps:
                    emptied.append(key)
            for key in emptied:
                del by_labels[key]
        self._samples = sum(len(s.values) for by in self._series.values() for s in by.values())
        # over budget: drop the oldest half of the largest series until under it
        while self._samples * _SAMPLE_BYTES > self.max_bytes:
            largest = max(
                (s for by in self._series.values() for s in by.values()),
                key=lambda s: len(s.values),
                default=None,
            )
            if largest is None or len(largest.values) < 2:
                break
            half = len(largest.values) // 2
            del largest.timestamps[:half]
            del largest.values[:half]
            self._samples -= half

    def gc(self, now: float) -> None:
        """Drop samples past the retention window (also done while appending)."""
        with self._lock:
            self._trim(now - self.retention_seconds)

    def query(self, kind: MetricKind, start: float, end: float, **labels: str) -> AggregateResult:
        """Samples of ``kind`` in ``[start, end]`` of every series matching ``labels``
        (equality on each given label; the rest match anything), concatenated."""
        unknown = set(labels) - set(kind.labels)
        if unknown:
            raise ValueError(f"{kind.name}: unknown labels {sorted(unknown)}")
        with self._lock:
            by_labels = self._series.get(kind.name, {})
            if len(labels) == len(kind.labels):
                found = by_labels.get(kind.key(**labels))
                matching = [found] if found is not None else []
            else:
                index = [(kind.labels.index(k), v) for k, v in labels.items()]
                matching = [s for key, s in by_labels.items() if all(key[i] == v for i, v in index)]
            timestamps: list[float] = []
            values: list[float] = []
            if self._epoch is not None and matching:
                epoch = self._epoch
                lo = max(self._ms(start), _MIN_OFFSET_MS)
                hi = min(self._ms(end), _MAX_OFFSET_MS)
                for series in matching:
                    t, v = series.window(lo, hi)
                    timestamps += [epoch + ms / 1000 for ms in t]
                    values += v
        return AggregateResult(tuple(timestamps), tuple(values))

    def label_values(self, kind: MetricKind) -> list[tuple[str, ...]]:
        """The label values of every series of ``kind`` currently held."""
        with self._lock:
            return list(self._series.get(kind.name, {}))

    def stats(self) -> dict[str, int]:
        with self._lock:
            series = sum(len(by) for by in self._series.values())
            return {"series": series, "samples": self._samples, "bytes": self._samples * _SAMPLE_BYTES}


class KVStore:
    """Static node facts by key (``node_cpu_info``, ``node_numa_info``, ...)."""

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self._lock = threading.Lock()

    def set(self, key: str, value: Any) -> None:
        with self._lock:
            self._data[key] = value

    def get(self, key: str) -> Any:
        with self._lock:
            return self._data.get(key)

    def snapshot(self) -> Mapping[str, Any]:
        with self._lock:
            return dict(self._data)
