"""Sealed blocks: frames past the recent minute move to segment files under the cache's
directory and read back exactly; retention, the budget and failures of the disk."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from koordlet.metriccache import MetricCache, MetricKind, Rows, blocks
from koordlet.metriccache.blocks import SEGMENT_BYTES, SEGMENT_PREFIX, SEGMENT_SUFFIX
from koordlet.metriccache.frames import BLOCK_FRAMES, RECENT_S

CPU = MetricKind("container_cpu_usage", ("pod_uid", "container_id"))
START = 1_000.0


def _value(tick: int, key: int) -> float:
    return tick * 0.001 + key / 7  # distinct, not exactly representable: any mix-up shows


def _keys(n: int, pod: str = "p") -> list[tuple[str, ...]]:
    return [(pod, f"c{i}") for i in range(n)]


def _fill(cache: MetricCache, ticks: range, keys: list[tuple[str, ...]]) -> None:
    for tick in ticks:
        rows = Rows(START + tick)
        rows.extend(CPU, keys, [_value(tick, i) for i in range(len(keys))])
        cache.append_rows(rows)


def _segments(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(SEGMENT_SUFFIX))


def test_sealed_frames_go_to_disk_and_read_back_exactly(tmp_path):
    cache = MetricCache(retention_seconds=3600, directory=tmp_path)
    keys = _keys(6)
    _fill(cache, range(300), keys)
    assert cache.location == str(tmp_path)
    files = _segments(tmp_path)
    assert files, "frames older than a minute are sealed into segment files"
    on_disk = sum((tmp_path / name).stat().st_size for name in files)
    # every frame but the recent minute's is on disk, 8 bytes a value
    assert on_disk >= (300 - 2 * BLOCK_FRAMES) * len(keys) * 8
    got = cache.query(CPU, 0, 1e9, pod_uid="p", container_id="c3")
    assert got.timestamps == tuple(START + t for t in range(300))
    assert got.values == tuple(_value(t, 3) for t in range(300))
    window = cache.query(CPU, START + 55, START + 130, pod_uid="p", container_id="c0")  # crosses blocks
    assert window.values == tuple(_value(t, 0) for t in range(55, 131))
    assert cache.stats()["samples"] == 300 * len(keys)


def test_many_series_of_a_block_are_read_in_time_order(tmp_path):
    cache, reference = MetricCache(3600, directory=tmp_path), MetricCache(3600)
    keys = _keys(6)
    _fill(cache, range(200), keys)
    _fill(reference, range(200), keys)
    got, want = cache.query(CPU, START + 10, START + 150, pod_uid="p"), reference.query(CPU, 0, 1e9)
    expected = [(START + t, _value(t, i)) for t in range(10, 151) for i in range(len(keys))]
    assert list(zip(got.timestamps, got.values, strict=True)) == expected
    assert want.count() == 200 * len(keys)  # the memory store holds the same blocks


def test_series_coming_and_going_split_blocks(tmp_path):
    cache = MetricCache(3600, directory=tmp_path)
    _fill(cache, range(100), _keys(2))
    _fill(cache, range(100, 250), [("p", "c1"), ("q", "c9")])  # c0 left, c9 came
    assert cache.query(CPU, 0, 1e9, container_id="c0").values == tuple(_value(t, 0) for t in range(100))
    c1 = cache.query(CPU, 0, 1e9, container_id="c1")
    assert c1.values == tuple(_value(t, 1) for t in range(100)) + tuple(_value(t, 0) for t in range(100, 250))
    assert cache.query(CPU, 0, 1e9, pod_uid="q").values == tuple(_value(t, 1) for t in range(100, 250))
    assert cache.label_values(CPU) == [("p", "c0"), ("p", "c1"), ("q", "c9")]


def test_retention_deletes_segments_whose_blocks_are_all_gone(tmp_path):
    cache = MetricCache(retention_seconds=120, directory=tmp_path)
    _fill(cache, range(2000), _keys(300))  # about 4.6 MB a minute: segments rotate
    got = cache.query(CPU, 0, 1e9, container_id="c7")
    assert got.timestamps[-1] == START + 1999
    assert got.timestamps[0] >= START + 1999 - 120 - BLOCK_FRAMES  # blocks go whole
    held = sum((tmp_path / name).stat().st_size for name in _segments(tmp_path))
    assert held <= (120 + 2 * BLOCK_FRAMES) * 300 * 8 + SEGMENT_BYTES  # the window, plus one open segment
    cache.close()
    assert _segments(tmp_path) == []


def test_the_budget_drops_whole_blocks_and_keeps_the_recent_minute(tmp_path):
    keys = _keys(10)
    cache = MetricCache(retention_seconds=1e9, max_bytes=400 * 10 * 8, directory=tmp_path)
    _fill(cache, range(1000), keys)
    assert cache.stats()["bytes"] <= 400 * 10 * 8 + 400 * 96
    got = cache.query(CPU, 0, 1e9, container_id="c2")
    assert got.timestamps[-1] == START + 999
    assert got.timestamps == tuple(sorted(got.timestamps))
    assert got.values == tuple(_value(int(t - START), 2) for t in got.timestamps)


def test_stale_segments_of_an_earlier_run_are_removed_and_nothing_else(tmp_path):
    (tmp_path / f"{SEGMENT_PREFIX}7{SEGMENT_SUFFIX}").write_bytes(b"old")
    (tmp_path / "notes.txt").write_text("kept")
    cache = MetricCache(3600, directory=tmp_path / ".")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    _fill(cache, range(130), _keys(1))
    assert (tmp_path / "notes.txt").read_text() == "kept"


def test_a_directory_that_cannot_be_made_keeps_samples_in_memory(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING):
        cache = MetricCache(3600, directory=blocker / "metric-data")
    assert cache.location == "memory"
    assert "keeping samples in memory" in caplog.text
    _fill(cache, range(300), _keys(2))
    assert cache.query(CPU, 0, 1e9, container_id="c1").values == tuple(_value(t, 1) for t in range(300))


def test_failed_writes_keep_blocks_in_memory_and_the_disk_is_tried_again(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(blocks, "SEGMENT_BYTES", 1)  # a segment per block
    directory = tmp_path / "metric-data"
    cache = MetricCache(3600, directory=directory)
    _fill(cache, range(130), _keys(2))
    first = _segments(directory)
    assert first
    for name in first:
        (directory / name).unlink()
    directory.rmdir()  # the emptyDir vanished: no new segment can be created
    with caplog.at_level(logging.WARNING):
        _fill(cache, range(130, 400), _keys(2))
    assert caplog.text.count("blocks stay in memory") == 1
    # blocks written before the directory went are still open; those after it are in memory
    assert cache.query(CPU, 0, 1e9, container_id="c0").values == tuple(_value(t, 0) for t in range(400))
    directory.mkdir()
    _fill(cache, range(400, 600), _keys(2))
    assert _segments(directory), "the disk is used again once writable"
    assert cache.query(CPU, 0, 1e9, container_id="c1").values == tuple(_value(t, 1) for t in range(600))


def test_a_truncated_segment_reads_as_missing_samples_not_an_error(tmp_path, caplog):
    cache = MetricCache(3600, directory=tmp_path)
    _fill(cache, range(130), _keys(2))
    (name,) = _segments(tmp_path)
    os.truncate(tmp_path / name, 0)
    with caplog.at_level(logging.WARNING):
        got = cache.query(CPU, 0, 1e9, container_id="c0")
        again = cache.query(CPU, 0, 1e9, pod_uid="p")
    # the sealed minute is gone; the recent minute (memory) answers
    assert got.timestamps == tuple(START + t for t in range(BLOCK_FRAMES, 130))
    assert got.values == tuple(_value(t, 0) for t in range(BLOCK_FRAMES, 130))
    assert again.count() == 2 * (130 - BLOCK_FRAMES)
    assert caplog.text.count("samples are missing") == 1


def test_frames_older_than_the_sealed_blocks_are_refused_and_counted(tmp_path):
    cache = MetricCache(3600, directory=tmp_path)
    _fill(cache, range(130), _keys(1))
    late = Rows(START + 5)  # sealed an age ago
    late.extend(CPU, _keys(1), [42.0])
    cache.append_rows(late)
    recent = Rows(START + 130 - RECENT_S / 2)  # within the head: kept in its place
    recent.extend(CPU, _keys(1), [43.0])
    cache.append_rows(recent)
    got = cache.query(CPU, 0, 1e9, container_id="c0")
    assert 42.0 not in got.values
    assert 43.0 in got.values
    assert got.timestamps == tuple(sorted(got.timestamps))
    assert cache.stats()["refused"] == 1


@pytest.mark.parametrize("directory", [None, "disk"])
def test_kinds_written_every_ten_seconds_seal_ten_minute_blocks(tmp_path, directory):
    cache = MetricCache(7200, directory=tmp_path if directory else None)
    for tick in range(0, 3600, 10):
        rows = Rows(START + tick)
        rows.extend(CPU, _keys(3), [_value(tick, i) for i in range(3)])
        cache.append_rows(rows)
    got = cache.query(CPU, START + 595, START + 1805, container_id="c2")
    assert got.values == tuple(_value(t, 2) for t in range(600, 1801, 10))
    if directory:
        assert _segments(tmp_path)
