"""The resource update executor on fake hosts: cache, read-before-write, validation,
leveled merges, expected-error handling and the audit log."""

from __future__ import annotations

import pytest

from koordlet.executor import CgroupUpdate, FileUpdate, ResourceUpdateExecutor
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.errors import CgroupVanishedError, InvalidValueError, UnsupportedResourceError
from tests.fakes.host import FakeHost


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def executor(fake_host: FakeHost) -> tuple[ResourceUpdateExecutor, FakeHost, Clock]:
    clock = Clock()
    return ResourceUpdateExecutor(CgroupFS.detect(fake_host.paths), clock=clock), fake_host, clock


def test_writes_then_skips_identical_values_until_forced(executor):
    ex, host, clock = executor
    pod = host.make_cgroup("kubepods.slice/p1")
    update = CgroupUpdate("cpu.shares", pod, 512, "test")
    assert ex.update(update).written
    assert host.get("cpu.shares", pod) in (512, 500)  # v2 rounds through cpu.weight
    assert not ex.update(update).written  # cached
    # someone changes the file behind our back; within the force interval we trust the cache
    host.set("cpu.shares", pod, 1024)
    clock.now = 30
    assert not ex.update(update).written
    clock.now = 61  # past --resource-force-update-seconds: rewritten
    assert ex.update(update).written
    assert host.get("cpu.shares", pod) in (512, 500)
    assert [e.owner for e in ex.audit] == ["test", "test"]


def test_a_file_already_holding_the_value_is_not_written(executor):
    ex, host, _ = executor
    pod = host.make_cgroup("kubepods.slice/p1")
    outcome = ex.update(CgroupUpdate("cpu.cfs_quota_us", pod, -1))  # the kernel default
    assert not outcome.written
    assert outcome.error is None
    assert not ex.audit


def test_invalid_values_are_refused_and_nothing_is_written(executor):
    ex, host, _ = executor
    pod = host.make_cgroup("kubepods.slice/p1")
    before = host.get("cpu.shares", pod)
    outcome = ex.update(CgroupUpdate("cpu.shares", pod, 1))
    assert isinstance(outcome.error, InvalidValueError)
    assert host.get("cpu.shares", pod) == before


def test_vanished_and_unsupported_are_skipped_quietly(executor):
    ex, _, _ = executor
    gone = ex.update(CgroupUpdate("cpu.shares", "kubepods.slice/gone", 2))
    assert isinstance(gone.error, CgroupVanishedError)
    lacking = ex.update(CgroupUpdate("cpu.bvt_warp_ns", "kubepods.slice", 2))
    assert isinstance(lacking.error, UnsupportedResourceError)


def test_leveled_cpuset_shrink_goes_through_the_union(executor):
    ex, host, _ = executor
    parent = host.make_cgroup("kubepods.slice/kubepods-besteffort.slice")
    child = host.make_cgroup(f"{parent}/pod1")
    host.set("cpuset.cpus", parent, "0-1")
    host.set("cpuset.cpus", child, "0-1")
    ex.leveled(
        [
            [CgroupUpdate("cpuset.cpus", parent, "2-3")],
            [CgroupUpdate("cpuset.cpus", child, "2-3")],
        ]
    )
    writes = [(e.target.rsplit("/", 2)[-2], e.new) for e in ex.audit]
    # pass 1, parent first: the union; pass 2, child first: the real value
    assert writes == [
        ("kubepods-besteffort.slice", "0-3"),
        ("pod1", "0-3"),
        ("pod1", "2-3"),
        ("kubepods-besteffort.slice", "2-3"),
    ]


def test_leveled_updates_the_cache_holds_are_neither_merged_nor_written(executor):
    """As upstream's needUpdate: a leveled update whose value was written within the
    force-update period is skipped in both passes, its file not even read for a merge (a
    value changed behind the koordlet's back is restored once the period is over)."""
    ex, host, clock = executor
    parent = host.make_cgroup("kubepods.slice/kubepods-besteffort.slice")
    child = host.make_cgroup(f"{parent}/pod1")
    host.set("cpuset.cpus", parent, "0-3")
    host.set("cpuset.cpus", child, "0-3")
    levels = [[CgroupUpdate("cpuset.cpus", parent, "0-1")], [CgroupUpdate("cpuset.cpus", child, "0-1")]]
    ex.leveled(levels)
    written = len(ex.audit)
    host.set("cpuset.cpus", child, "2-3")  # behind our back
    clock.now = 30
    ex.leveled(levels)
    assert len(ex.audit) == written  # no union "0-3" merged into the child
    assert host.get("cpuset.cpus", child) == "2-3"
    clock.now = 61  # past --resource-force-update-seconds: through the union, then restored
    ex.leveled(levels)
    child_writes = [e.new for e in list(ex.audit)[written:] if e.target.rsplit("/", 2)[-2] == "pod1"]
    assert child_writes == ["0-3", "0-1"]


def test_leveled_quota_takes_the_looser_value_first(executor):
    ex, host, _ = executor
    parent = host.make_cgroup("kubepods.slice/kubepods-besteffort.slice")
    child = host.make_cgroup(f"{parent}/pod1")
    host.set("cpu.cfs_quota_us", parent, 200000)
    host.set("cpu.cfs_quota_us", child, 100000)
    ex.leveled(
        [[CgroupUpdate("cpu.cfs_quota_us", parent, 300000)], [CgroupUpdate("cpu.cfs_quota_us", child, 50000)]]
    )
    assert host.get("cpu.cfs_quota_us", parent) == 300000
    assert host.get("cpu.cfs_quota_us", child) == 50000


def test_file_updates_are_range_checked(executor, tmp_path):
    ex, _, _ = executor
    knob = tmp_path / "watermark_scale_factor"
    knob.write_text("10\n")
    assert ex.update(FileUpdate(knob, "150", 10, 400)).written
    assert knob.read_text() == "150"
    refused = ex.update(FileUpdate(knob, "1000", 10, 400))
    assert isinstance(refused.error, InvalidValueError)
    assert knob.read_text() == "150"


def test_cache_entries_of_files_no_longer_managed_expire(executor):
    ex, host, clock = executor
    gone = host.make_cgroup("kubepods.slice/gone")
    kept = host.make_cgroup("kubepods.slice/kept")
    ex.update(CgroupUpdate("cpu.shares", gone, 512))
    ex.update(CgroupUpdate("cpu.shares", kept, 512))
    assert ex.cache_size == 2
    host.remove_cgroup(gone)  # the pod ended: nothing asks for its cgroup again
    for now in range(10, 250, 10):  # 'kept' is reconciled every 10 s
        clock.now = now
        ex.update(CgroupUpdate("cpu.shares", kept, 512))
    assert ex.cache_size == 1  # 'gone' expired after three force-update periods
    # what is still managed keeps its entry: within the period the cache answers
    host.set("cpu.shares", kept, 1024)
    clock.now = 250
    assert not ex.update(CgroupUpdate("cpu.shares", kept, 512)).written


def test_uncached_file_updates_are_always_read(executor, tmp_path):
    """A process's file (/proc/<pid>/oom_score_adj): the PID may be another process's the next
    moment, so no cached value stands for it; the file is read every time."""
    ex, _, _ = executor
    adj = tmp_path / "oom_score_adj"
    adj.write_text("0\n")
    update = FileUpdate(adj, "500", -1000, 1000, cached=False)
    assert ex.update(update).written
    adj.write_text("0\n")  # the PID was reused, at the same moment
    assert ex.update(update).written
    assert adj.read_text() == "500"
    assert not ex.update(update).written  # read first: already right
    assert ex.cache_size == 0
