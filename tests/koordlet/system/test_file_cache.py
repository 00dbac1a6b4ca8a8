"""FileCache: kept descriptors, pread, parse; same body for the compiled class and its twin."""

from __future__ import annotations

import errno
import os
from typing import NamedTuple

import pytest

from koordlet.system.cgroup import io


def _req(path: os.PathLike[str], kind: int, keys: tuple[bytes, ...] | None = None) -> io.Request:
    return (os.fsencode(path), kind, keys)


def test_reads_and_parses_every_kind(backend, tmp_path):
    (tmp_path / "usage").write_text("1234\n")
    (tmp_path / "stat").write_text("nr_periods 3\nnr_throttled 1\nthrottled_time 99\n")
    (tmp_path / "psi").write_text("some avg10=0.10 avg60=0.20 avg300=0.30 total=7\n")
    (tmp_path / "raw").write_text("0-3\n")
    (tmp_path / "numa").write_text("anon N0=4 N1=5\nfile N0=1 N1=0\n")
    cache = io.new_file_cache()
    cells = cache.read(
        [
            _req(tmp_path / "usage", io.KIND_INT),
            _req(tmp_path / "stat", io.KIND_KEYS, (b"nr_throttled", b"nr_periods")),
            _req(tmp_path / "psi", io.KIND_PSI),
            _req(tmp_path / "raw", io.KIND_RAW),
            _req(tmp_path / "numa", io.KIND_NODES, (b"file ", b"shmem ")),
        ]
    )
    assert cells == [
        1234,
        (1, 3),
        (10, 20, 30, 7, None, None, None, None),
        b"0-3\n",
        (((0, 1), (1, 0)), None),
    ]
    assert len(cache) == 5
    cache.close()
    assert len(cache) == 0


def test_kept_descriptor_sees_new_content(backend, tmp_path):
    path = tmp_path / "cpuacct.usage"
    path.write_text("1\n")
    cache = io.new_file_cache()
    assert cache.read([_req(path, io.KIND_INT)]) == [1]
    with open(path, "r+") as f:  # rewrite in place, as the kernel does: same inode
        f.write("22\n")
    assert cache.read([_req(path, io.KIND_INT)]) == [22]
    assert len(cache) == 1


def test_large_files_are_read_whole(backend, tmp_path):
    body = "".join(f"key{i} {i}\n" for i in range(5000)) + "wanted 42\n"
    (tmp_path / "big").write_text(body)
    cache = io.new_file_cache()
    assert cache.read([_req(tmp_path / "big", io.KIND_KEYS, (b"wanted",))]) == [(42,)]
    assert cache.read([_req(tmp_path / "big", io.KIND_RAW)]) == [body.encode()]


def test_failures_are_per_request_and_never_break_the_batch(backend, tmp_path):
    (tmp_path / "good").write_text("5\n")
    (tmp_path / "bad").write_text("not a number\n")
    cache = io.new_file_cache()
    cells = cache.read(
        [
            _req(tmp_path / "missing", io.KIND_INT),
            _req(tmp_path / "bad", io.KIND_INT),
            _req(tmp_path / "good", io.KIND_INT),
        ]
    )
    assert isinstance(cells[0], OSError)
    assert cells[0].errno == errno.ENOENT
    assert cells[0].filename == str(tmp_path / "missing")
    assert isinstance(cells[1], OSError)
    assert cells[1].errno == errno.EBADMSG
    assert cells[2] == 5
    # malformed content keeps its descriptor (the file exists); the missing one is not kept
    assert len(cache) == 2


def test_failed_requests_are_listed_by_index(backend, tmp_path):
    (tmp_path / "good").write_text("5\n")
    cache = io.new_file_cache()
    requests = [_req(tmp_path / "missing", io.KIND_INT), _req(tmp_path / "good", io.KIND_INT)] * 2
    failed: list[int] = []
    cells = cache.read(requests, failed)
    assert failed == [0, 2]
    assert [isinstance(cell, OSError) for cell in cells] == [True, False, True, False]
    failed.clear()
    cache.read(requests[1:2], failed)
    assert failed == []


def test_retain_closes_what_is_no_longer_read(backend, tmp_path):
    paths = []
    for name in "abc":
        (tmp_path / name).write_text("1\n")
        paths.append(tmp_path / name)
    cache = io.new_file_cache()
    cache.read([_req(p, io.KIND_INT) for p in paths])
    cache.retain([os.fsencode(paths[0])])
    assert len(cache) == 1


def test_descriptor_limit_falls_back_to_open_read_close(backend, tmp_path):
    for name in "abc":
        (tmp_path / name).write_text("7\n")
    cache = io.new_file_cache(max_open=2)
    requests = [_req(tmp_path / n, io.KIND_INT) for n in "abc"]
    assert cache.read(requests) == [7, 7, 7]
    assert cache.read(requests) == [7, 7, 7]
    assert len(cache) == 2


def test_the_same_file_twice_in_one_batch(backend, tmp_path):
    (tmp_path / "x").write_text("3\n")
    cache = io.new_file_cache()
    requests = [_req(tmp_path / "x", io.KIND_INT)] * 2
    assert cache.read(requests) == [3, 3]
    assert cache.read(requests) == [3, 3]
    assert len(cache) == 1


@pytest.mark.parametrize("kind", [io.KIND_INT, io.KIND_RAW])
def test_empty_request_list(backend, kind):
    assert io.new_file_cache().read([]) == []


class _Throttling(NamedTuple):
    nr_periods: int
    nr_throttled: int


class _Pressure(NamedTuple):
    some10: int
    some60: int
    some300: int
    some_total: int
    full10: int | None
    full60: int | None
    full300: int | None
    full_total: int | None


def test_values_are_built_as_the_record_a_request_names(backend, tmp_path):
    (tmp_path / "stat").write_text("nr_periods 3\nnr_throttled 1\n")
    (tmp_path / "psi").write_text("some avg10=0.10 avg60=0.20 avg300=0.30 total=7\n")
    cache = io.new_file_cache()
    for _ in range(2):  # opened, then kept
        stat, psi = cache.read(
            [
                (os.fsencode(tmp_path / "stat"), io.KIND_KEYS, (b"nr_periods", b"nr_throttled"), _Throttling),
                (os.fsencode(tmp_path / "psi"), io.KIND_PSI, None, _Pressure),
            ]
        )
        assert type(stat) is _Throttling
        assert stat == _Throttling(3, 1)
        assert stat.nr_throttled == 1
        assert type(psi) is _Pressure
        assert psi.some60 == 20
        assert psi.full10 is None
    plain = cache.read([(os.fsencode(tmp_path / "stat"), io.KIND_KEYS, (b"nr_periods",), None)])
    assert type(plain[0]) is tuple


@pytest.mark.parametrize(
    ("kind", "keys", "record"),
    [
        pytest.param(io.KIND_KEYS, (b"nr_periods",), _Throttling, id="fewer-keys-than-fields"),
        pytest.param(io.KIND_PSI, None, _Throttling, id="psi-needs-eight-fields"),
        pytest.param(io.KIND_INT, None, _Throttling, id="an-int-has-no-record"),
        pytest.param(io.KIND_KEYS, (b"a", b"b"), tuple, id="plain-tuple-class"),
        pytest.param(io.KIND_KEYS, (b"a", b"b"), list, id="not-a-tuple"),
    ],
)
def test_a_record_that_does_not_fit_is_refused(backend, tmp_path, kind, keys, record):
    (tmp_path / "f").write_text("a 1\nb 2\n")
    with pytest.raises(TypeError):
        io.new_file_cache().batch([(os.fsencode(tmp_path / "f"), kind, keys, record)])


def test_requests_lacking_a_key_are_listed_by_index(backend, tmp_path):
    (tmp_path / "full").write_text("a 1\nb 2\n")
    (tmp_path / "partial").write_text("a 1\n")
    cache = io.new_file_cache()
    full = _req(tmp_path / "full", io.KIND_KEYS, (b"a", b"b"))
    partial = _req(tmp_path / "partial", io.KIND_KEYS, (b"a", b"b"))
    missing = _req(tmp_path / "missing", io.KIND_KEYS, (b"a", b"b"))
    failed: list[int] = []
    lacking: list[int] = []
    cells = cache.read([full, partial, missing, partial], failed, lacking)
    assert cells[:2] == [(1, 2), (1, None)]
    assert failed == [2]
    assert lacking == [1, 3]


def test_a_batch_reads_its_files_tick_after_tick(backend, tmp_path):
    for name, value in (("a", 1), ("b", 2)):
        (tmp_path / name).write_text(f"{value}\n")
    cache = io.new_file_cache()
    requests = [_req(tmp_path / "a", io.KIND_INT), _req(tmp_path / "b", io.KIND_INT)]
    batch = cache.batch(requests)
    assert len(batch) == 2
    assert list(batch.requests) == requests
    assert batch.read() == [1, 2]
    assert len(cache) == 2
    with open(tmp_path / "a", "r+") as f:  # same inode, new content
        f.write("5\n")
    assert batch.read() == [5, 2]
    assert cache.read(requests) == [5, 2]  # a one-off read of the same files takes the kept ones
    assert len(cache) == 2


def test_a_batch_follows_descriptors_its_cache_closed(backend, tmp_path):
    (tmp_path / "a").write_text("1\n")
    (tmp_path / "b").write_text("2\n")
    cache = io.new_file_cache()
    batch = cache.batch([_req(tmp_path / "a", io.KIND_INT), _req(tmp_path / "b", io.KIND_INT)])
    assert batch.read() == [1, 2]
    cache.retain([os.fsencode(tmp_path / "b")])
    other = os.open(tmp_path / "b", os.O_RDONLY)  # may take the number "a" had
    try:
        (tmp_path / "a").unlink()
        (tmp_path / "a").write_text("3\n")  # a new file: only a fresh open sees it
        assert batch.read() == [3, 2]
        cache.close()
        assert batch.read() == [3, 2]
        assert len(cache) == 2
    finally:
        os.close(other)


def test_a_batch_drops_a_file_removed_under_it(backend, tmp_path):
    (tmp_path / "a").write_text("1\n")
    cache = io.new_file_cache()
    batch = cache.batch([_req(tmp_path / "a", io.KIND_INT)])
    assert batch.read() == [1]
    (tmp_path / "a").write_text("")  # what a removed kernel file reads as here
    (tmp_path / "a").unlink()
    failed: list[int] = []
    cells = batch.read(failed)
    assert failed == [0]
    assert isinstance(cells[0], OSError)
    assert cells[0].errno == errno.ENOENT
    assert len(cache) == 0
    (tmp_path / "a").write_text("4\n")
    assert batch.read() == [4]
    assert len(cache) == 1


def test_a_request_is_path_kind_keys_and_an_optional_record(backend, tmp_path):
    cache = io.new_file_cache()
    with pytest.raises(ValueError, match="a request is"):
        cache.batch([(os.fsencode(tmp_path / "a"), io.KIND_INT)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        cache.batch([(str(tmp_path / "a"), io.KIND_INT, None)])  # type: ignore[list-item]


def test_a_batch_reads_its_values_into_one_array(backend, tmp_path):
    (tmp_path / "usage").write_text("1234\n")
    (tmp_path / "stat").write_text("nr_periods 3\nthrottled_time 99\n")
    (tmp_path / "psi").write_text("some avg10=0.10 avg60=0.20 avg300=0.30 total=7\n")
    (tmp_path / "bad").write_text("x\n")
    batch = io.new_file_cache().batch(
        [
            _req(tmp_path / "usage", io.KIND_INT),
            _req(tmp_path / "stat", io.KIND_KEYS, (b"nr_throttled", b"nr_periods")),
            _req(tmp_path / "psi", io.KIND_PSI),
            _req(tmp_path / "missing", io.KIND_INT),
            _req(tmp_path / "bad", io.KIND_KEYS, (b"x",)),
        ]
    )
    for _ in range(2):  # opened, then kept
        failed: list[int] = []
        lacking: list[int] = []
        values, present, errors = batch.read_values(failed, lacking)
        assert values.typecode == "q"
        assert list(values) == [1234, 0, 3, 10, 20, 30, 7, 0, 0, 0, 0, 0, 0]
        assert present == bytes([1, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
        assert (failed, lacking) == ([3, 4], [1])
        assert errors[:3] == [None, None, None]
        assert isinstance(errors[3], OSError)
        assert errors[3].errno == errno.ENOENT
        assert isinstance(errors[4], OSError)
        assert errors[4].errno == errno.EBADMSG
    # what read() gives, value for value
    assert batch.read()[:3] == [1234, (None, 3), (10, 20, 30, 7, None, None, None, None)]


@pytest.mark.parametrize("kind", [io.KIND_RAW, io.KIND_NODES])
def test_values_are_not_read_into_an_array_for_raw_or_node_requests(backend, tmp_path, kind):
    (tmp_path / "f").write_text("1\n")
    batch = io.new_file_cache().batch(
        [_req(tmp_path / "f", kind, (b"a",) if kind == io.KIND_NODES else None)]
    )
    with pytest.raises(TypeError, match="KIND_INT, KIND_KEYS and KIND_PSI"):
        batch.read_values()
