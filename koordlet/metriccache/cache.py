"""In-memory time series for the koordlet's samples, and a key-value store for node facts.

Upstream embeds a Prometheus TSDB on disk; the consumers only ever read recent windows
(QoS loops the last two collect intervals, NodeMetric the aggregation durations, 30
minutes by default), so this cache keeps raw samples in memory for a retention window and
under a byte budget.

Samples are stored the way collectors produce them: a collector tick writes many series of
one metric kind at one timestamp, so the unit of storage is a *frame*, one kind at one
instant: a timestamp, the layout (the series keys, in order) and an ``array('d')`` of
values. Ticks of an unchanged set of pods share one layout object, so a sample costs 8
bytes, appending a tick is a comparison of key lists and one array build, and retention
drops whole frames. A query finds the frames of its window by bisection and each key's
position once per layout. A sample is a metric kind with a fixed label schema, as
upstream's ``MetricResource`` (an unknown or missing label is refused when the sample is
built, not when it is queried).

Thread-safety: the collectors append from their worker thread while reporters query from
the event loop, so every operation holds one lock; appends are batched per tick.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from koordlet.metriccache.query import AggregateResult

#: bytes of a value, and the bookkeeping of one frame (timestamp, slots, array header)
_SAMPLE_BYTES = 8
_FRAME_BYTES = 96
#: every this many appends, every kind is trimmed (kinds no longer written included)
_TRIM_ALL_EVERY = 64

Key = tuple[str, ...]


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

    def key(self, **labels: str) -> Key:
        return tuple(labels[name] for name in self.labels)


class Sample(NamedTuple):
    """One value of a series."""

    kind: MetricKind
    label_values: Key
    timestamp: float
    value: float


class Rows:
    """The samples of one collector tick, all at one timestamp, grouped by kind.

    The collectors' hot path: per kind, a list of series keys (label values built once
    with :meth:`MetricKind.key` and reused tick after tick) and the list of their values.
    A collector that writes the same keys every tick should pass the same key list:
    the cache then recognises the layout at once.
    """

    __slots__ = ("by_kind", "timestamp")

    def __init__(self, timestamp: float) -> None:
        self.timestamp = timestamp
        self.by_kind: dict[MetricKind, tuple[list[Key], list[Any]]] = {}

    def extend(self, kind: MetricKind, keys: list[Key], values: list[float | None]) -> None:
        """Samples of ``kind``: ``values[i]`` for ``keys[i]``, where it is not None. The
        lists are not copied; the caller must not change them before the rows are appended."""
        if len(keys) != len(values):
            raise ValueError(f"{kind.name}: {len(keys)} keys for {len(values)} values")
        if None in values:
            kept = [(key, value) for key, value in zip(keys, values, strict=True) if value is not None]
            keys, values = [key for key, _ in kept], [value for _, value in kept]
        if not keys:
            return
        held = self.by_kind.get(kind)
        if held is None:
            self.by_kind[kind] = (keys, values)
        else:  # a second batch of the kind: concatenate into lists of our own
            self.by_kind[kind] = (held[0] + keys, held[1] + values)

    def __len__(self) -> int:
        return sum(len(values) for _, values in self.by_kind.values())


class _Layout:
    """The series keys of frames, in the order of their values; shared by the frames of
    consecutive ticks that wrote the same keys."""

    __slots__ = ("_index", "keys")

    def __init__(self, keys: list[Key]) -> None:
        self.keys = keys
        self._index: dict[Key, list[int]] | None = None

    def positions(self, key: Key) -> Sequence[int]:
        """Where ``key``'s values are (usually one place; a key written twice in one
        frame has two)."""
        index = self._index
        if index is None:
            index = self._index = {}
            for position, k in enumerate(self.keys):
                held = index.get(k)
                if held is None:
                    index[k] = [position]
                else:
                    held.append(position)
        return index.get(key, ())

    def matching(self, wanted: list[tuple[int, str]]) -> list[int]:
        """Positions of the keys with label ``i`` equal to ``v`` for each ``(i, v)``."""
        return [p for p, key in enumerate(self.keys) if all(key[i] == v for i, v in wanted)]


class _Frames:
    """The frames of one metric kind in time order, as three parallel columns."""

    __slots__ = ("layouts", "samples", "times", "values")

    def __init__(self) -> None:
        self.times = array("d")
        self.layouts: list[_Layout] = []
        self.values: list[array[float]] = []
        self.samples = 0

    def add(self, timestamp: float, keys: list[Key], values: array[float]) -> None:
        at = len(self.times)
        if at and timestamp < self.times[-1]:  # late: keep the columns in time order
            at = bisect.bisect_right(self.times, timestamp)
        neighbour = self.layouts[at - 1] if at else None
        layout = neighbour if neighbour is not None and neighbour.keys == keys else _Layout(list(keys))
        if at == len(self.times):
            self.times.append(timestamp)
            self.layouts.append(layout)
            self.values.append(values)
        else:
            self.times.insert(at, timestamp)
            self.layouts.insert(at, layout)
            self.values.insert(at, values)
        self.samples += len(values)

    def drop_first(self, n: int) -> int:
        """Drop the ``n`` oldest frames; returns how many samples went with them."""
        dropped = sum(len(v) for v in self.values[:n])
        del self.times[:n], self.layouts[:n], self.values[:n]
        self.samples -= dropped
        return dropped

    def drop_before(self, cutoff: float) -> int:
        n = bisect.bisect_left(self.times, cutoff)
        return self.drop_first(n) if n else 0


class MetricCache:
    """Labelled series with a retention window and a byte budget."""

    def __init__(self, retention_seconds: float = 1800.0, max_bytes: int = 100 << 20) -> None:
        if retention_seconds <= 0:
            raise ValueError("retention must be positive")
        self.retention_seconds = retention_seconds
        self.max_bytes = max_bytes
        self._kinds: dict[str, _Frames] = {}
        self._samples = 0
        self._frames = 0
        self._appends = 0
        self._lock = threading.Lock()

    def _bytes(self) -> int:
        return self._samples * _SAMPLE_BYTES + self._frames * _FRAME_BYTES

    def append(self, samples: Iterable[Sample]) -> None:
        """Add a batch of samples; each kind's samples at one timestamp make a frame."""
        batches: dict[float, Rows] = {}
        for kind, label_values, timestamp, value in samples:
            rows = batches.get(timestamp)
            if rows is None:
                rows = batches[timestamp] = Rows(timestamp)
            held = rows.by_kind.get(kind)
            if held is None:
                rows.by_kind[kind] = ([label_values], [value])
            else:
                held[0].append(label_values)
                held[1].append(value)
        with self._lock:
            for rows in batches.values():
                self._add(rows)
            written = {kind.name for rows in batches.values() for kind in rows.by_kind}
            self._appended(max(batches, default=None), written)

    def append_rows(self, rows: Rows) -> None:
        """Add one tick's rows (see :class:`Rows`): one frame per kind."""
        with self._lock:
            self._add(rows)
            self._appended(rows.timestamp, [kind.name for kind in rows.by_kind])

    def _add(self, rows: Rows) -> None:
        timestamp = rows.timestamp
        for kind, (keys, values) in rows.by_kind.items():
            frames = self._kinds.get(kind.name)
            if frames is None:
                frames = self._kinds[kind.name] = _Frames()
            frames.add(timestamp, keys, array("d", values))
            self._samples += len(values)
            self._frames += 1

    def _appended(self, newest: float | None, written: Iterable[str]) -> None:
        """Trim after an append: the kinds just written, and every kind now and then."""
        self._appends += 1
        if newest is None:
            return
        if self._appends % _TRIM_ALL_EVERY == 0 or self._bytes() > self.max_bytes:
            self._trim(newest - self.retention_seconds, self._kinds)
        else:
            self._trim(newest - self.retention_seconds, written)

    def _trim(self, cutoff: float, names: Iterable[str]) -> None:
        for name in list(names):
            frames = self._kinds[name]
            before = len(frames.times)
            self._samples -= frames.drop_before(cutoff)
            self._frames -= before - len(frames.times)
            if not frames.times:
                del self._kinds[name]
        # over budget: drop the oldest half of the frames of the largest kind until under it
        while self._bytes() > self.max_bytes:
            candidates = [frames for frames in self._kinds.values() if len(frames.times) > 1]
            if not candidates:  # the newest frame of each kind stays
                break
            largest = max(candidates, key=lambda frames: frames.samples + len(frames.times))
            half = len(largest.times) // 2
            self._samples -= largest.drop_first(half)
            self._frames -= half

    def gc(self, now: float) -> None:
        """Drop samples past the retention window (also done while appending)."""
        with self._lock:
            self._trim(now - self.retention_seconds, self._kinds)

    def query(self, kind: MetricKind, start: float, end: float, **labels: str) -> AggregateResult:
        """Samples of ``kind`` in ``[start, end]`` of every series matching ``labels``
        (equality on each given label; the rest match anything), in time order."""
        unknown = set(labels) - set(kind.labels)
        if unknown:
            raise ValueError(f"{kind.name}: unknown labels {sorted(unknown)}")
        key = kind.key(**labels) if len(labels) == len(kind.labels) else None
        wanted = [(kind.labels.index(k), v) for k, v in labels.items()]
        timestamps: list[float] = []
        values: list[float] = []
        with self._lock:
            frames = self._kinds.get(kind.name)
            if frames is not None:
                lo = bisect.bisect_left(frames.times, start)
                hi = bisect.bisect_right(frames.times, end)
                layout: _Layout | None = None
                positions: Sequence[int] = ()
                for f in range(lo, hi):
                    if frames.layouts[f] is not layout:
                        layout = frames.layouts[f]
                        positions = layout.positions(key) if key is not None else layout.matching(wanted)
                    if positions:
                        row, at = frames.values[f], frames.times[f]
                        for p in positions:
                            timestamps.append(at)
                            values.append(row[p])
        return AggregateResult(tuple(timestamps), tuple(values))

    def label_values(self, kind: MetricKind) -> list[Key]:
        """The label values of every series of ``kind`` currently held."""
        with self._lock:
            frames = self._kinds.get(kind.name)
            return [] if frames is None else list(_distinct_keys(frames))

    def stats(self) -> dict[str, int]:
        with self._lock:
            series = sum(len(_distinct_keys(frames)) for frames in self._kinds.values())
            return {
                "series": series,
                "samples": self._samples,
                "frames": self._frames,
                "bytes": self._bytes(),
            }


def _distinct_keys(frames: _Frames) -> dict[Key, None]:
    """The keys of every layout of ``frames``, in first-seen order."""
    keys: dict[Key, None] = {}
    last: _Layout | None = None
    for layout in frames.layouts:
        if layout is not last:
            keys.update(dict.fromkeys(layout.keys))
            last = layout
    return keys


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
