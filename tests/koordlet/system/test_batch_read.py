"""The batch reader: one test body, both backends, identical results."""

from __future__ import annotations

import errno
import os

import pytest

from koordlet.system.cgroup import io
from koordlet.system.errors import (
    CgroupVanishedError,
    HostPermissionError,
    InvalidValueError,
    UnsupportedResourceError,
)


def test_reads_every_file_of_every_directory(backend, tmp_path):
    dirs = []
    for i in range(3):
        d = tmp_path / f"pod{i}"
        d.mkdir()
        (d / "cpuacct.usage").write_text(f"{i * 1000}\n")
        (d / "memory.stat").write_text("total_rss 1\n" * (i + 1))
        dirs.append(d)
    rows = io.read_raw(dirs, ["cpuacct.usage", "memory.stat"])
    assert rows == [[f"{i * 1000}\n".encode(), b"total_rss 1\n" * (i + 1)] for i in range(3)]


def test_large_file_is_read_whole(backend, tmp_path):
    content = b"x" * 70_000 + b"\n"
    (tmp_path / "big").write_bytes(content)
    assert io.read_file(tmp_path, "big") == content


def test_errors_are_per_file_and_never_break_the_batch(backend, tmp_path):
    alive = tmp_path / "alive"
    alive.mkdir()
    (alive / "cpu.stat").write_text("nr_periods 1\n")
    gone = tmp_path / "gone"
    rows = io.read_raw([alive, gone], ["cpu.stat", "cpu.idle"])
    assert rows[0] == [b"nr_periods 1\n", errno.ENOENT]
    assert rows[1] == [errno.ENOENT, errno.ENOENT]


def test_errnos_become_domain_errors(backend, tmp_path):
    alive = tmp_path / "alive"
    alive.mkdir()
    rows = io.read_many([alive, tmp_path / "gone"], ["cpu.idle"])
    assert isinstance(rows[0][0], UnsupportedResourceError)
    assert isinstance(rows[1][0], CgroupVanishedError)
    assert rows[1][0].filename == str(tmp_path / "gone" / "cpu.idle")


def test_empty_batches(backend, tmp_path):
    assert io.read_raw([], ["a"]) == []
    assert io.read_raw([tmp_path], []) == [[]]


def test_read_file_raises_the_domain_error(backend, tmp_path):
    with pytest.raises(CgroupVanishedError):
        io.read_file(tmp_path / "nope", "cpu.shares")


def test_write_file_is_one_write_and_maps_errors(tmp_path):
    (tmp_path / "cpu.shares").write_text("")
    io.write_file(tmp_path, "cpu.shares", "2")
    assert (tmp_path / "cpu.shares").read_text() == "2"
    with pytest.raises(UnsupportedResourceError):
        io.write_file(tmp_path, "cpu.idle", "1")
    with pytest.raises(CgroupVanishedError):
        io.write_file(tmp_path / "gone", "cpu.shares", "2")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_permission_error_is_classified(tmp_path):
    (tmp_path / "ro").write_text("1")
    os.chmod(tmp_path / "ro", 0o444)
    with pytest.raises(HostPermissionError):
        io.write_file(tmp_path, "ro", "2")


def test_einval_is_an_invalid_value():
    from koordlet.system.errors import from_errno

    assert isinstance(from_errno(errno.EINVAL, "/x/cpu.shares"), InvalidValueError)
