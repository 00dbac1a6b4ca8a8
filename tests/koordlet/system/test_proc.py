"""procfs readers on seeded files: hand-computed values and clear errors on bad input."""

from __future__ import annotations

import pytest

from koordlet.system import proc, psi
from koordlet.system.errors import CgroupVanishedError, MalformedContentError
from tests.fakes.host import FakeHost


def test_proc_stat_busy_ticks_exclude_idle_iowait_and_steal(fake_host_v1):
    fake_host_v1.set_proc_stat(
        [100, 10, 50, 1000, 20, 5, 7, 3, 0, 0],
        {0: [60, 5, 25, 500, 10, 3, 4, 2, 0, 0], 1: [40, 5, 25, 500, 10, 2, 3, 1]},
    )
    stat = proc.read_proc_stat(fake_host_v1.paths)
    assert stat.total.busy == 100 + 10 + 50 + 5 + 7
    assert stat.per_cpu[0].busy == 97
    assert stat.per_cpu[1].steal == 1
    assert stat.per_cpu[1].guest_nice == 0  # older kernels print 8 fields


@pytest.mark.parametrize(
    "content",
    ["", "intr 0\n", "cpu  1 2 x 4 5 6 7\n", "cpu  1 2 3\n"],
    ids=["empty", "no-cpu-line", "non-numeric", "truncated"],
)
def test_proc_stat_refuses_bad_content(fake_host_v1, content):
    fake_host_v1.write("proc/stat", content)
    with pytest.raises(MalformedContentError):
        proc.read_proc_stat(fake_host_v1.paths)


def test_meminfo_usage_policies(fake_host_v1):
    fake_host_v1.set_meminfo(MemTotal=16000, MemFree=4000, MemAvailable=10000, Active_file_=1000)
    info = proc.read_meminfo(fake_host_v1.paths)
    assert info.used_bytes == 6000 * 1024
    assert info.used_with_page_cache_bytes == 12000 * 1024
    assert info.kib("Active(file)") == 1000


def test_meminfo_without_total_is_malformed(fake_host_v1):
    fake_host_v1.write("proc/meminfo", "MemFree: 1 kB\n")
    with pytest.raises(MalformedContentError):
        proc.read_meminfo(fake_host_v1.paths)


def test_numa_meminfo(fake_host_v1):
    fake_host_v1.set_numa_meminfo(
        0, MemTotal=8000, MemFree=1000, Active_file_=500, Inactive_file_=500, SReclaimable=100
    )
    fake_host_v1.set_numa_meminfo(1, MemTotal=8000, MemFree=9000)
    numa = proc.read_numa_meminfo(fake_host_v1.paths)
    assert sorted(numa) == [0, 1]
    assert numa[0].numa_used_bytes == (8000 - 2100) * 1024
    assert numa[1].numa_used_bytes == 0  # floored


def test_loadavg(fake_host_v1):
    fake_host_v1.write("proc/loadavg", "0.50 0.25 0.10 3/456 789\n")
    load = proc.read_loadavg(fake_host_v1.paths)
    assert (load.load1, load.running, load.total) == (0.5, 3, 456)
    fake_host_v1.write("proc/loadavg", "garbage\n")
    with pytest.raises(MalformedContentError):
        proc.read_loadavg(fake_host_v1.paths)


def test_node_pressure(backend, fake_host_v1):
    fake_host_v1.set_node_pressure("memory", (2.5, 1.0, 0.5, 999), (1.0, 0.5, 0.25, 500))
    pressure = psi.read_node_pressure(fake_host_v1.paths, "memory")
    assert pressure.some_avg10 == 2.5
    assert pressure.full_total_us == 500
    fake_host_v1.write("proc/pressure/cpu", "some avg10=oops\n")
    with pytest.raises(MalformedContentError):
        psi.read_node_pressure(fake_host_v1.paths, "cpu")
    with pytest.raises(ValueError, match="unknown pressure resource"):
        psi.read_node_pressure(fake_host_v1.paths, "disk")


def test_process_cgroup_membership(fake_host_v1):
    fake_host_v1.write(
        "proc/42/cgroup",
        "12:cpu,cpuacct:/kubepods.slice/x.scope\n4:memory:/kubepods.slice/x.scope\n1:name=systemd:/init\n0::/\n",
    )
    groups = proc.read_process_cgroups(fake_host_v1.paths, 42)
    assert groups["cpu"] == groups["cpuacct"] == "/kubepods.slice/x.scope"
    assert groups["systemd"] == "/init"
    assert groups[""] == "/"
    with pytest.raises(CgroupVanishedError):
        proc.read_process_cgroups(fake_host_v1.paths, 43)


def test_id_lists():
    assert proc.parse_id_list("1\n22\n\n333\n") == [1, 22, 333]


def _node_files(host: FakeHost) -> None:
    host.set_proc_stat([100, 10, 50, 1000, 20, 5, 7, 3, 0, 0], {0: [60, 5, 25, 500, 10, 3, 4, 2, 0, 0]})
    host.set_meminfo(MemTotal=16000, MemFree=4000, MemAvailable=10000, Active_file_=1000, Cached=77)
    host.set_numa_meminfo(
        0, MemTotal=8000, MemFree=1000, Active_file_=500, Inactive_file_=500, SReclaimable=1
    )


def test_node_stats_reader_gives_what_the_one_shot_readers_give(backend, fake_host_v1):
    _node_files(fake_host_v1)
    paths = fake_host_v1.paths
    reader = proc.NodeStatsReader(paths)
    stat, meminfo, numa = reader.read()
    assert stat == proc.read_proc_stat(paths)
    one_shot = proc.read_meminfo(paths)
    assert (meminfo.used_bytes, meminfo.used_with_page_cache_bytes, meminfo.total_bytes) == (
        one_shot.used_bytes,
        one_shot.used_with_page_cache_bytes,
        one_shot.total_bytes,
    )
    assert meminfo.kib("Cached") == 0  # only the fields the usage properties read
    assert numa is not None
    assert {n: m.numa_used_bytes for n, m in numa.items()} == {
        n: m.numa_used_bytes for n, m in proc.read_numa_meminfo(paths).items()
    }
    # kept descriptors see new content; a NUMA node that appears is read from then on
    fake_host_v1.set_meminfo(MemTotal=16000, MemFree=3000, MemAvailable=9000)
    fake_host_v1.set_numa_meminfo(1, MemTotal=8000, MemFree=7000)
    _, meminfo, numa = reader.read()
    assert meminfo.used_bytes == 7000 * 1024
    assert numa is not None
    assert numa[1].numa_used_bytes == 1000 * 1024
    reader.close()


def test_node_stats_reader_totals_only(backend, fake_host_v1):
    """The pressure probe's reader: the aggregate CPU line and /proc/meminfo, no per-CPU
    lines and no NUMA files (a broken one is not even read)."""
    _node_files(fake_host_v1)
    fake_host_v1.write("sys/bus/node/devices/node0/meminfo", "Node 0 MemTotal: x kB\n")
    paths = fake_host_v1.paths
    reader = proc.NodeStatsReader(paths, totals_only=True)
    stat, meminfo, numa = reader.read()
    assert stat.total == proc.read_proc_stat(paths).total
    assert (stat.per_cpu, numa) == ({}, {})
    assert meminfo.used_bytes == proc.read_meminfo(paths).used_bytes
    reader.close()


def test_node_stats_reader_errors(backend, fake_host_v1):
    _node_files(fake_host_v1)
    reader = proc.NodeStatsReader(fake_host_v1.paths)
    fake_host_v1.write("sys/bus/node/devices/node0/meminfo", "Node 0 MemTotal: x kB\n")
    assert reader.read().numa is None  # NUMA figures skipped, the node's still read
    fake_host_v1.write("proc/meminfo", "MemFree: 1 kB\n")
    with pytest.raises(MalformedContentError, match="no MemTotal"):
        reader.read()
    reader.close()
    fake_host_v1.paths.proc("stat").unlink()
    with pytest.raises(type(_one_shot_error(fake_host_v1))):
        proc.NodeStatsReader(fake_host_v1.paths).read()


def _one_shot_error(host: FakeHost) -> Exception:
    try:
        proc.read_proc_stat(host.paths)
    except Exception as err:
        return err
    raise AssertionError("read_proc_stat read a removed file")
