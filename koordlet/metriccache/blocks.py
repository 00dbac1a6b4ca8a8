"""Where the metric cache keeps its sealed blocks: segment files on disk, or memory.

A sealed block is an immutable run of bytes (a kind's values over a minute or so, see
:mod:`koordlet.metriccache.frames`), read back in slices. Upstream keeps its samples in a
Prometheus TSDB under ``--tsdb-path`` (an emptyDir in the DaemonSet); :class:`FileBlocks`
does the same job for sealed blocks: it appends them to segment files in that directory
and reads slices back with ``pread``, so 30 minutes of samples live on disk (and in the
kernel's reclaimable page cache) instead of the agent's heap.

Segments are append-only files of at most ``segment_bytes``; a segment is deleted once
every block in it has been released (retention or the byte budget dropped them) and a
newer segment is being written. Files are named ``koordlet-metrics-<n>.seg``; those left
by an earlier run of the agent are deleted on start, and nothing else in the directory is
touched.

Failures lose no samples: a block that cannot be written (disk full, directory removed)
is kept in memory instead, with one warning per run of failures, and the next block tries
the disk again; a slice that cannot be read back (the file was truncated or deleted under
the agent) reads as missing, with one warning per segment.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

SEGMENT_PREFIX = "koordlet-metrics-"
SEGMENT_SUFFIX = ".seg"
#: a segment takes blocks until it holds this many bytes
SEGMENT_BYTES = 4 << 20


class StoredBlock(Protocol):
    """A sealed block's bytes, wherever they are."""

    def read(self, offset: int, length: int) -> bytes | None:
        """``length`` bytes from ``offset``, or None when they cannot be read back."""

    def release(self) -> None:
        """The block was dropped: its bytes may go."""


class BlockStore(Protocol):
    location: str

    def put(self, data: bytes) -> StoredBlock: ...

    def close(self) -> None: ...


class InMemory:
    """A block held as a bytes object."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, offset: int, length: int) -> bytes | None:
        return self.data[offset : offset + length]

    def release(self) -> None:
        self.data = b""


class MemoryBlocks:
    """Every block in memory (no ``--tsdb-path``, or its directory unusable)."""

    location = "memory"

    def put(self, data: bytes) -> StoredBlock:
        return InMemory(data)

    def close(self) -> None:
        """Nothing to release: the blocks go with their references."""


class _Segment:
    """One segment file: its descriptor, how much is written, how many blocks live in it."""

    __slots__ = ("fd", "live", "path", "retired", "size", "unreadable")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self.size = 0
        self.live = 0
        self.retired = False  # no more blocks will be written to it
        self.unreadable = False

    def append(self, data: bytes) -> int:
        """Write ``data`` at the end; returns its offset. A partial write raises OSError
        and leaves ``size`` where it was."""
        offset, view = self.size, memoryview(data)
        while view:
            written = os.pwrite(self.fd, view, offset + len(data) - len(view))
            if written <= 0:
                raise OSError(f"short write to {self.path}")
            view = view[written:]
        self.size += len(data)
        return offset

    def remove_if_done(self) -> None:
        if self.retired and self.live == 0 and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            try:
                self.path.unlink(missing_ok=True)
            except OSError as err:
                log.warning("metric cache: cannot delete segment %s: %s", self.path, err)


class _OnDisk:
    """A block's place in a segment."""

    __slots__ = ("offset", "segment")

    def __init__(self, segment: _Segment, offset: int) -> None:
        self.segment = segment
        self.offset = offset

    def read(self, offset: int, length: int) -> bytes | None:
        segment = self.segment
        if segment.fd < 0:
            return None
        try:
            data = os.pread(segment.fd, length, self.offset + offset)
        except OSError as err:
            data = b""
            reason = str(err)
        else:
            reason = f"{len(data)} of {length} bytes at {self.offset + offset}"
        if len(data) == length:
            return data
        if not segment.unreadable:
            segment.unreadable = True
            log.warning("metric cache: cannot read %s (%s); its samples are missing", segment.path, reason)
        return None

    def release(self) -> None:
        self.segment.live -= 1
        self.segment.remove_if_done()


class FileBlocks:
    """Blocks appended to segment files in ``directory`` (created if missing)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob(f"{SEGMENT_PREFIX}*{SEGMENT_SUFFIX}"):
            stale.unlink(missing_ok=True)
        self.directory = directory
        self.location = str(directory)
        self.segment_bytes = SEGMENT_BYTES
        self._current: _Segment | None = None
        self._sequence = 0
        self._failing = False
        self._segments: list[_Segment] = []

    def put(self, data: bytes) -> StoredBlock:
        try:
            segment = self._segment_for(len(data))
            offset = segment.append(data)
        except OSError as err:
            if self._current is not None:  # whatever it holds stays readable; write no more to it
                self._retire(self._current)
                self._current = None
            if not self._failing:
                self._failing = True
                log.warning(
                    "metric cache: cannot write in %s (%s); blocks stay in memory", self.directory, err
                )
            return InMemory(data)
        if self._failing:
            self._failing = False
            log.info("metric cache: writing blocks under %s again", self.directory)
        segment.live += 1
        return _OnDisk(segment, offset)

    def _segment_for(self, length: int) -> _Segment:
        current = self._current
        if current is not None and (current.size == 0 or current.size + length <= self.segment_bytes):
            return current
        if current is not None:
            self._retire(current)
        self._sequence += 1
        name = f"{SEGMENT_PREFIX}{self._sequence}{SEGMENT_SUFFIX}"
        current = self._current = _Segment(self.directory / name)
        self._segments = [s for s in self._segments if s.fd >= 0]
        self._segments.append(current)
        return current

    @staticmethod
    def _retire(segment: _Segment) -> None:
        segment.retired = True
        segment.remove_if_done()

    def close(self) -> None:
        """Delete every segment: the blocks they hold are unreadable from now on."""
        for segment in self._segments:
            segment.retired, segment.live = True, 0
            segment.remove_if_done()
        self._segments, self._current = [], None


def open_store(directory: Path | None) -> BlockStore:
    """Segment files under ``directory``, or memory where there is none or it cannot be
    used (said once, with the reason)."""
    if directory is None:
        return MemoryBlocks()
    try:
        return FileBlocks(directory)
    except OSError as err:
        log.warning("metric cache: cannot use %s (%s); keeping samples in memory", directory, err)
        return MemoryBlocks()
