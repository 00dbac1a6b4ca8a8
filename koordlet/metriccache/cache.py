"""Time series of the koordlet's samples, and a key-value store for node facts.

Upstream embeds a Prometheus TSDB under ``--tsdb-path``; the consumers only ever read
recent windows (QoS loops the last two collect intervals, the predictor the last training
interval, NodeMetric the aggregation durations, 30 minutes by default), so this cache
keeps raw samples for a retention window and under a byte budget: the last minute of each
kind in memory, older samples in sealed blocks, in segment files under ``--tsdb-path``
where one is given (:mod:`koordlet.metriccache.frames`, :mod:`koordlet.metriccache.blocks`).

Samples are stored the way collectors produce them: a collector tick writes many series of
one metric kind at one timestamp, so the unit of storage is a *frame*, one kind at one
instant: a timestamp, the layout (the series keys, in order) and the values. Ticks of an
unchanged set of pods share one layout object, so a sample costs 8 bytes, appending a
tick is a comparison of key lists and one array build, and retention drops whole frames
and blocks. A sample is a metric kind with a fixed label schema, as upstream's
``MetricResource`` (an unknown or missing label is refused when the sample is built, not
when it is queried).

Thread-safety: the collectors append from their worker thread while reporters query from
the event loop, so every operation holds one lock; appends are batched per tick.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from operator import methodcaller
from pathlib import Path
from typing import Any, NamedTuple, cast

from koordlet.metriccache.blocks import BlockStore, open_store
from koordlet.metriccache.frames import Frames, Key, Layout

__all__ = ["KVStore", "Key", "MetricCache", "MetricKind", "Rows", "Sample"]
from koordlet.metriccache.query import AggregateResult

#: bytes of a value, and the bookkeeping of one frame (timestamp, slots, array header)
_SAMPLE_BYTES = 8
_FRAME_BYTES = 96
#: every this many appends, every kind is trimmed (kinds no longer written included)
_TRIM_ALL_EVERY = 64


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
    with :meth:`MetricKind.key` and reused tick after tick) and the list of their values,
    held as the ``array('d')`` the cache stores. A collector that writes the same keys
    every tick should pass the same key list: the cache then recognises the layout at once.
    """

    __slots__ = ("by_kind", "timestamp")

    def __init__(self, timestamp: float) -> None:
        self.timestamp = timestamp
        self.by_kind: dict[MetricKind, tuple[list[Key], array[float]]] = {}

    def extend(self, kind: MetricKind, keys: list[Key], values: list[float | None]) -> None:
        """Samples of ``kind``: ``values[i]`` for ``keys[i]``, where it is not None. The
        key list is not copied; the caller must not change it before the rows are appended."""
        if len(keys) != len(values):
            raise ValueError(f"{kind.name}: {len(keys)} keys for {len(values)} values")
        column: array[float]
        try:
            column = array("d", cast("list[float]", values))  # a None fails the build
        except TypeError:
            kept = [(key, value) for key, value in zip(keys, values, strict=True) if value is not None]
            keys, column = [key for key, _ in kept], array("d", [value for _, value in kept])
        self._put(kind, keys, column)

    def extend_column(self, kind: MetricKind, keys: list[Key], values: array[float], missing: int) -> None:
        """Samples of ``kind`` from a float column (:mod:`koordlet.system.cgroup.columns`):
        ``values[i]`` for ``keys[i]``, none where it is NaN. ``missing`` is how many NaN the
        column it was sliced from holds: with none, the array is stored as it is. The
        key list and the array are not copied."""
        if len(keys) != len(values):
            raise ValueError(f"{kind.name}: {len(keys)} keys for {len(values)} values")
        if missing:
            kept = [(key, value) for key, value in zip(keys, values, strict=True) if value == value]
            keys, values = [key for key, _ in kept], array("d", [value for _, value in kept])
        self._put(kind, keys, values)

    def _put(self, kind: MetricKind, keys: list[Key], column: array[float]) -> None:
        if not keys:
            return
        held = self.by_kind.get(kind)
        if held is None:
            self.by_kind[kind] = (keys, column)
        else:  # a second batch of the kind: concatenate into a key list of our own
            self.by_kind[kind] = (held[0] + keys, held[1] + column)

    def __len__(self) -> int:
        return sum(len(values) for _, values in self.by_kind.values())


class MetricCache:
    """Labelled series with a retention window and a byte budget, sealed blocks in
    segment files under ``directory`` (in memory without one)."""

    def __init__(
        self, retention_seconds: float = 1800.0, max_bytes: int = 100 << 20, directory: Path | None = None
    ) -> None:
        if retention_seconds <= 0:
            raise ValueError("retention must be positive")
        self.retention_seconds = retention_seconds
        self.max_bytes = max_bytes
        self._store: BlockStore = open_store(directory)
        self._kinds: dict[str, Frames] = {}
        self._samples = 0
        self._frames = 0
        self._appends = 0
        self._refused = 0
        self._lock = threading.Lock()

    @property
    def location(self) -> str:
        """Where sealed blocks go: ``memory`` or the directory."""
        return self._store.location

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
                rows.by_kind[kind] = ([label_values], array("d", (value,)))
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
        timestamp, seal = rows.timestamp, self._store.put
        for kind, (keys, values) in rows.by_kind.items():
            frames = self._kinds.get(kind.name)
            if frames is None:
                frames = self._kinds[kind.name] = Frames()
            if frames.add(timestamp, keys, values, seal):
                self._samples += len(values)
                self._frames += 1
            else:
                self._refused += len(values)

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
            before = frames.frames
            self._samples -= frames.drop_before(cutoff)
            self._frames -= before - frames.frames
            if not frames.frames:
                del self._kinds[name]
        # over budget: drop the oldest half of the frames of the largest kind until under it
        while self._bytes() > self.max_bytes:
            candidates = [frames for frames in self._kinds.values() if frames.frames > 1]
            if not candidates:  # the newest frame of each kind stays
                break
            largest = max(candidates, key=lambda frames: frames.samples + frames.frames)
            before = largest.frames
            self._samples -= largest.drop_first(before // 2)
            self._frames -= before - largest.frames

    def gc(self, now: float) -> None:
        """Drop samples past the retention window (also done while appending)."""
        with self._lock:
            self._trim(now - self.retention_seconds, self._kinds)

    def close(self) -> None:
        """Drop every sample and delete the segment files."""
        with self._lock:
            for frames in self._kinds.values():
                frames.release()
            self._kinds.clear()
            self._samples = self._frames = 0
            self._store.close()

    def query(self, kind: MetricKind, start: float, end: float, **labels: str) -> AggregateResult:
        """Samples of ``kind`` in ``[start, end]`` of every series matching ``labels``
        (equality on each given label; the rest match anything), in time order."""
        unknown = set(labels) - set(kind.labels)
        if unknown:
            raise ValueError(f"{kind.name}: unknown labels {sorted(unknown)}")
        positions_of: Callable[[Layout], Sequence[int]]
        if len(labels) == len(kind.labels):
            positions_of = methodcaller("positions", kind.key(**labels))
        else:
            positions_of = methodcaller("matching", [(kind.labels.index(k), v) for k, v in labels.items()])
        timestamps: list[float] = []
        values: list[float] = []
        with self._lock:
            frames = self._kinds.get(kind.name)
            if frames is not None:
                frames.collect(start, end, positions_of, timestamps, values)
        return AggregateResult(tuple(timestamps), tuple(values))

    def label_values(self, kind: MetricKind) -> list[Key]:
        """The label values of every series of ``kind`` currently held."""
        with self._lock:
            frames = self._kinds.get(kind.name)
            return [] if frames is None else list(_distinct_keys(frames))

    def stats(self) -> dict[str, int]:
        """Series, samples and frames held, the bytes they count against the budget,
        and samples refused for being older than the sealed blocks."""
        with self._lock:
            series = sum(len(_distinct_keys(frames)) for frames in self._kinds.values())
            return {
                "series": series,
                "samples": self._samples,
                "frames": self._frames,
                "bytes": self._bytes(),
                "refused": self._refused,
            }


def _distinct_keys(frames: Frames) -> dict[Key, None]:
    """The keys of every layout of ``frames``, in first-seen order."""
    keys: dict[Key, None] = {}
    for layout in frames.layouts():
        keys.update(dict.fromkeys(layout.keys))
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
