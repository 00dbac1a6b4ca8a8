"""The samples of one metric kind: recent frames in memory, older ones in sealed blocks.

A *frame* is what one collector tick wrote for a kind: a timestamp, the layout (the
series keys, in order) and an ``array('d')`` of values. Frames first go to the *head*, in
time order. Once a run of head frames with one layout is complete (60 frames, or ten
minutes of them, or the next frame has other keys) and a minute older than the newest,
it is *sealed* into a block: its timestamps stay here and its values are transposed
series-major (every value of the layout's first key, then the second key's ...) into one
run of bytes handed to a :mod:`block store <koordlet.metriccache.blocks>`, on disk under
``--tsdb-path``. Reading a series over half an hour is then one slice per block.

The head keeps the last minute of every kind (and at least 60 frames) in memory, which is
all the QoS strategies and the predictor read; a late frame goes to its place in the head,
and one older than the newest sealed block is refused (upstream's TSDB refuses samples
past its out-of-order window too).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Sequence
from itertools import chain

from koordlet.metriccache.blocks import StoredBlock

Key = tuple[str, ...]

#: frames in a sealed block, at most
BLOCK_FRAMES = 60
#: seconds a sealed block spans, at most (a kind written every 10 s seals 10-minute blocks)
BLOCK_SPAN_S = 600.0
#: the newest seconds of each kind that always stay in memory
RECENT_S = 60.0
_VALUE_BYTES = 8


class Layout:
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


class Block:
    """Sealed frames of one layout: their timestamps and their stored values."""

    __slots__ = ("layout", "stored", "times")

    def __init__(self, times: array[float], layout: Layout, stored: StoredBlock) -> None:
        self.times = times
        self.layout = layout
        self.stored = stored

    @property
    def samples(self) -> int:
        return len(self.times) * len(self.layout.keys)

    def column(self, position: int, lo: int, hi: int) -> array[float]:
        """The values of the key at ``position`` in frames ``[lo, hi)`` (empty where the
        bytes cannot be read back)."""
        frames = len(self.times)
        raw = self.stored.read((position * frames + lo) * _VALUE_BYTES, (hi - lo) * _VALUE_BYTES)
        values = array("d")
        if raw is not None:
            values.frombytes(raw)
        return values

    def columns(self, positions: Sequence[int], lo: int, hi: int) -> list[array[float]]:
        """:meth:`column` of each position; a single read of the whole block where many
        keys are wanted."""
        if len(positions) <= 4:
            return [self.column(p, lo, hi) for p in positions]
        frames = len(self.times)
        raw = self.stored.read(0, frames * len(self.layout.keys) * _VALUE_BYTES)
        if raw is None:
            return [array("d") for _ in positions]
        whole = array("d")
        whole.frombytes(raw)
        return [whole[p * frames + lo : p * frames + hi] for p in positions]


Sealer = Callable[[bytes], StoredBlock]


class Frames:
    """The frames of one metric kind in time order: sealed blocks, then the head."""

    __slots__ = ("block_last", "blocks", "frames", "head_layouts", "head_times", "head_values", "samples")

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.block_last = array("d")  # the newest timestamp of each block
        self.head_times = array("d")
        self.head_layouts: list[Layout] = []
        self.head_values: list[array[float]] = []
        self.samples = 0
        self.frames = 0

    def add(self, timestamp: float, keys: list[Key], values: array[float], seal: Sealer) -> bool:
        """Add a frame; False (and nothing added) when it is older than the sealed blocks."""
        if self.block_last and timestamp < self.block_last[-1]:
            return False
        times = self.head_times
        at = len(times)
        if at and timestamp < times[-1]:  # late: keep the head in time order
            at = bisect.bisect_right(times, timestamp)
        neighbour = self.head_layouts[at - 1] if at else (self.blocks[-1].layout if self.blocks else None)
        layout = neighbour if neighbour is not None and neighbour.keys == keys else Layout(list(keys))
        if at == len(times):
            times.append(timestamp)
            self.head_layouts.append(layout)
            self.head_values.append(values)
        else:
            times.insert(at, timestamp)
            self.head_layouts.insert(at, layout)
            self.head_values.insert(at, values)
        self.samples += len(values)
        self.frames += 1
        if len(times) >= 2 * BLOCK_FRAMES or times[-1] - times[0] >= BLOCK_SPAN_S + RECENT_S:
            self._seal(seal)
        return True

    def _seal(self, seal: Sealer) -> None:
        """Seal every complete run of head frames that is older than the recent minute."""
        times, layouts = self.head_times, self.head_layouts
        while len(times) > 1:
            first, layout = times[0], layouts[0]
            end, limit = 1, min(len(times), BLOCK_FRAMES)
            while end < limit and layouts[end] is layout and times[end] - first < BLOCK_SPAN_S:
                end += 1
            if end == len(times) or times[end - 1] > times[-1] - RECENT_S:
                return  # the run is still open, or too recent
            self.blocks.append(Block(times[:end], layout, seal(_series_major(self.head_values[:end]))))
            self.block_last.append(times[end - 1])
            del times[:end], layouts[:end], self.head_values[:end]

    def drop_first(self, frames: int) -> int:
        """Drop at least ``frames`` of the oldest frames (whole blocks, then head frames);
        returns how many samples went with them."""
        dropped_samples = dropped_frames = 0
        while self.blocks and dropped_frames < frames:
            block = self.blocks.pop(0)
            del self.block_last[0]
            block.stored.release()
            dropped_frames += len(block.times)
            dropped_samples += block.samples
        n = min(max(frames - dropped_frames, 0), len(self.head_times))
        if n:
            dropped_samples += sum(len(v) for v in self.head_values[:n])
            dropped_frames += n
            del self.head_times[:n], self.head_layouts[:n], self.head_values[:n]
        self.samples -= dropped_samples
        self.frames -= dropped_frames
        return dropped_samples

    def drop_before(self, cutoff: float) -> int:
        """Drop the blocks entirely before ``cutoff`` and the head frames before it
        (a block that straddles it stays whole; queries leave out its old frames)."""
        sealed = bisect.bisect_left(self.block_last, cutoff)
        dropped = self.drop_first(sum(len(b.times) for b in self.blocks[:sealed])) if sealed else 0
        if not self.blocks:
            n = bisect.bisect_left(self.head_times, cutoff)
            if n:
                dropped += self.drop_first(n)
        return dropped

    def release(self) -> None:
        for block in self.blocks:
            block.stored.release()
        self.blocks.clear()

    def collect(
        self,
        start: float,
        end: float,
        positions_of: Callable[[Layout], Sequence[int]],
        timestamps: list[float],
        values: list[float],
    ) -> None:
        """Append the samples in ``[start, end]`` at the positions ``positions_of`` gives
        for each layout, frame by frame in time order."""
        layout: Layout | None = None
        positions: Sequence[int] = ()
        for b in range(bisect.bisect_left(self.block_last, start), len(self.blocks)):
            block = self.blocks[b]
            times = block.times
            if times[0] > end:
                return
            lo, hi = bisect.bisect_left(times, start), bisect.bisect_right(times, end)
            if block.layout is not layout:
                layout = block.layout
                positions = positions_of(layout)
            if lo >= hi or not positions:
                continue
            columns = block.columns(positions, lo, hi)
            if any(len(column) != hi - lo for column in columns):
                continue  # unreadable: its samples are missing
            if len(columns) == 1:
                timestamps.extend(times[lo:hi])
                values.extend(columns[0])
                continue
            for i, sample_values in enumerate(zip(*columns, strict=True)):
                at = times[lo + i]
                for value in sample_values:
                    timestamps.append(at)
                    values.append(value)
        times = self.head_times
        for f in range(bisect.bisect_left(times, start), bisect.bisect_right(times, end)):
            if self.head_layouts[f] is not layout:
                layout = self.head_layouts[f]
                positions = positions_of(layout)
            if positions:
                frame, at = self.head_values[f], times[f]
                for p in positions:
                    timestamps.append(at)
                    values.append(frame[p])

    def layouts(self) -> list[Layout]:
        """Every distinct layout, oldest first."""
        seen: list[Layout] = []
        for layout in chain((b.layout for b in self.blocks), self.head_layouts):
            if not seen or seen[-1] is not layout:
                seen.append(layout)
        return seen


def _series_major(frames: list[array[float]]) -> bytes:
    """The values of ``frames`` (one layout) as bytes, key by key: every frame's first
    value, then every frame's second ... (strided slices of the frames laid end to end)."""
    flat = array("d")
    for values in frames:
        flat += values
    width = len(frames[0])
    return b"".join(flat[p::width].tobytes() for p in range(width))
