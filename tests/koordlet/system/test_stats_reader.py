"""StatsReader: CPU, memory, throttling and PSI of many cgroups in one batch, v1 and v2,
both backends; a cgroup that vanishes mid-collection is flagged and skipped."""

from __future__ import annotations

import os

import pytest

from koordinator.api.kubeqos import KubeQOSClass
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.stats import ALL_USAGE, PRESSURES, MemoryStat, Stat, StatsReader, Throttling
from koordlet.system.errors import MalformedContentError
from koordlet.system.psi import PSI
from tests.fakes.host import FakeHost

UIDS = [f"00000000-0000-0000-0000-00000000000{i}" for i in range(3)]
EVERYTHING = ALL_USAGE | {Stat.MEMORY_USAGE, *PRESSURES}


@pytest.fixture(params=["v1", "v2"])
def host(request, tmp_path) -> FakeHost:
    return FakeHost(tmp_path, request.param, features={"psi"})


def _pods(host: FakeHost) -> list[str]:
    pods = []
    for i, uid in enumerate(UIDS):
        pod = host.add_pod(KubeQOSClass.BURSTABLE, uid)
        host.set_cpu_usage(pod, (i + 1) * 1_000_000_000)
        host.set_throttling(pod, nr_periods=100 * (i + 1), nr_throttled=i, throttled_ns=i * 5_000_000)
        host.set_memory_stat(
            pod,
            inactive_anon=1 << 20,
            active_anon=(i + 1) << 20,
            unevictable=4096,
            inactive_file=2 << 20,
            active_file=3 << 20,
        )
        host.set_memory_usage(pod, 64 << 20)
        host.set_pressure(pod, "cpu", (1.5, 0.5, 0.25, 1000 + i), None)
        host.set_pressure(pod, "memory", (0, 0, 0, 10), (0.1, 0, 0, 5))
        pods.append(pod)
    return pods


def test_reads_every_statistic(backend, host):
    pods = _pods(host)
    reader = StatsReader(CgroupFS.detect(host.paths))
    samples = reader.read(pods, EVERYTHING)
    assert [s.relative for s in samples] == pods
    for i, sample in enumerate(samples):
        assert sample.errors == {}
        assert sample.cpu_usage_ns == (i + 1) * 1_000_000_000
        assert sample.throttling == (100 * (i + 1), i, i * 5_000_000)
        assert sample.memory is not None
        assert sample.memory.usage == (1 << 20) + ((i + 1) << 20) + 4096
        assert sample.memory.usage_with_page_cache == sample.memory.usage + (5 << 20)
        assert sample.memory_usage == 64 << 20
        cpu = sample.pressure[Stat.CPU_PRESSURE]
        assert (cpu.some_avg10, cpu.some_avg60, cpu.some_total_us) == (1.5, 0.5, 1000 + i)
        assert not cpu.full_supported
        memory = sample.pressure[Stat.MEMORY_PRESSURE]
        assert memory.full_avg10 == pytest.approx(0.1)
        assert memory.full_supported


def test_samples_carry_records_whichever_way_they_are_read(backend, host):
    pods = _pods(host)
    reader = StatsReader(CgroupFS.detect(host.paths))
    for _ in range(2):  # files opened, then kept; both ways share them
        samples = reader.read(pods, EVERYTHING)
        from_columns = reader.read_columns(pods, EVERYTHING).samples()
        assert len(reader.cache) == len(pods) * (7 if host.version == "v1" else 6)
        for sample, other in zip(samples, from_columns, strict=True):
            assert type(sample.throttling) is Throttling
            assert type(other.throttling) is Throttling
            assert type(sample.memory) is MemoryStat
            assert type(other.memory) is MemoryStat
            assert {type(psi) for psi in sample.pressure.values()} == {PSI}
            assert {type(psi) for psi in other.pressure.values()} == {PSI}
            assert repr(sample) == repr(other)
    columns = reader.read_columns(pods, EVERYTHING).columns
    assert type(columns[Stat.MEMORY][0]) is tuple  # the collectors' columns stay plain tuples


def test_second_read_sees_new_values_through_kept_descriptors(backend, host):
    pods = _pods(host)
    reader = StatsReader(CgroupFS.detect(host.paths))
    reader.read(pods)
    host.set_cpu_usage(pods[0], 9_000_000_000)
    assert reader.read(pods)[0].cpu_usage_ns == 9_000_000_000


def test_a_cgroup_vanishing_mid_collection_is_flagged_not_fatal(backend, host):
    pods = _pods(host)
    reader = StatsReader(CgroupFS.detect(host.paths))
    reader.read(pods)
    host.remove_cgroup(pods[1])
    samples = reader.read(pods)
    assert not samples[0].vanished
    assert not samples[2].vanished
    assert samples[1].vanished
    assert samples[1].cpu_usage_ns is None
    assert set(samples[1].errors) == ALL_USAGE
    assert samples[2].cpu_usage_ns == 3_000_000_000


def test_columns_hold_one_value_per_cgroup_and_none_where_it_vanished(backend, host):
    pods = _pods(host)
    reader = StatsReader(CgroupFS.detect(host.paths))
    host.remove_cgroup(pods[1])
    read = reader.read_columns(pods, EVERYTHING)
    assert read.relatives == pods
    assert read.vanished == {1}
    assert set(read.errors) == {1}
    assert set(read.columns) == EVERYTHING
    assert all(column[1] is None for column in read.columns.values())
    assert read.columns[Stat.CPU_USAGE] == [1_000_000_000, None, 3_000_000_000]
    assert read.columns[Stat.THROTTLING][2] == (300, 2, 10_000_000)  # Throttling's order, ns
    memory = read.columns[Stat.MEMORY][0]
    assert memory[:3] == (1 << 20, 1 << 20, 4096)  # MemoryStat's order
    assert read.columns[Stat.CPU_PRESSURE][2][:4] == (150, 50, 25, 1002)  # PSI's order, hundredths


def test_a_malformed_file_empties_only_its_cell(backend, host):
    pods = _pods(host)
    (host.cgroups.directory("memory", pods[2]) / "memory.stat").write_text("cache 1\n")
    read = StatsReader(CgroupFS.detect(host.paths)).read_columns(pods)
    assert read.vanished == frozenset()
    assert read.columns[Stat.MEMORY][2] is None
    assert read.columns[Stat.MEMORY][0] is not None
    assert read.columns[Stat.CPU_USAGE][2] == 3_000_000_000
    assert set(read.errors[2]) == {Stat.MEMORY}


def test_memory_by_numa_node_counts_the_whole_pod(backend, host):
    """v1 reads the hierarchical line (upstream's first line is the pod cgroup's own pages,
    none of its containers'); v2 adds anon and file bytes."""
    pods = _pods(host)
    host.set_memory_numa(pods[0], anon={0: 8 << 20, 1: 4 << 20}, file={0: 2 << 20})
    (host.cgroups.directory("memory", pods[1]) / "memory.numa_stat").write_text("garbage\n")
    read = StatsReader(CgroupFS.detect(host.paths)).read_columns(pods[:2], frozenset({Stat.MEMORY_NUMA}))
    assert read.columns[Stat.MEMORY_NUMA][0] == {0: 10 << 20, 1: 4 << 20}
    assert read.columns[Stat.MEMORY_NUMA][1] is None
    assert isinstance(read.errors[1][Stat.MEMORY_NUMA], MalformedContentError)


def test_v1_memory_by_numa_node_falls_back_to_the_total_line(backend, tmp_path):
    host = FakeHost(tmp_path, "v1")
    pod = host.add_pod(KubeQOSClass.BURSTABLE, UIDS[0])
    (host.cgroups.directory("memory", pod) / "memory.numa_stat").write_text(
        "total=3 N0=1 N1=2\nfile=0 N0=0 N1=0\n"
    )
    sample = StatsReader(CgroupFS.detect(host.paths)).read([pod], frozenset({Stat.MEMORY_NUMA}))[0]
    page = os.sysconf("SC_PAGE_SIZE")
    assert sample.memory_numa == {0: page, 1: 2 * page}


def test_malformed_memory_stat_is_a_domain_error_for_that_statistic_only(backend, host):
    pods = _pods(host)
    stat_dir = host.cgroups.directory("memory", pods[0])
    (stat_dir / "memory.stat").write_text("cache 1\n")
    sample = StatsReader(CgroupFS.detect(host.paths)).read(pods)[0]
    assert isinstance(sample.errors[Stat.MEMORY], MalformedContentError)
    assert "lacks" in str(sample.errors[Stat.MEMORY])
    assert sample.cpu_usage_ns == 1_000_000_000


def test_truncated_cpu_stat(backend, host):
    pods = _pods(host)
    (host.cgroups.directory("cpu", pods[0]) / "cpu.stat").write_text("nr_periods 1\nnr_thrott")
    sample = StatsReader(CgroupFS.detect(host.paths)).read(pods)[0]
    assert Stat.THROTTLING in sample.errors
    assert sample.memory is not None


def test_descriptors_of_removed_pods_are_dropped(backend, host):
    pods = _pods(host)
    reader = StatsReader(CgroupFS.detect(host.paths))
    reader.read(pods)
    kept = len(reader.cache)
    reader.read(pods[:1])  # two pods went away
    assert len(reader.cache) == kept // 3


def test_descriptors_another_set_reads_are_kept(backend, host):
    """One collector's pods changing does not close what another collector still reads."""
    pods = _pods(host)
    reader = StatsReader(CgroupFS.detect(host.paths))
    reader.read(pods, ALL_USAGE)
    reader.read(pods, frozenset({Stat.CPU_USAGE}))  # another collector: one file a pod, kept already
    files_per_pod = len(reader.cache) // len(pods)
    reader.read(pods[:1], ALL_USAGE)  # two pods went away for the first collector
    # the first pod keeps all its files; the two others keep the file the CPU set reads
    assert len(reader.cache) == files_per_pod + len(pods) - 1


def test_psi_values_keep_hundredths():
    psi = PSI(125, 50, 10, 7, None, None, None, None)
    assert (psi.some_avg10, psi.some_avg60, psi.some_avg300) == (1.25, 0.5, 0.1)
    assert psi.full_avg10 is None


def test_values_as_parsed_match_the_columns(backend, host):
    pods = _pods(host)
    reader = StatsReader(CgroupFS.detect(host.paths))
    stats = frozenset({Stat.MEMORY_USAGE, *PRESSURES})
    host.remove_cgroup(pods[1])
    values = reader.read_values(pods, stats)
    columns = reader.read_columns(pods, stats)
    assert values.relatives == pods
    assert values.vanished == columns.vanished == {1}
    assert values.errors.keys() == columns.errors.keys()
    assert values.width == 1 + 3 * 8
    for stat in PRESSURES:
        assert [values.pressure(k, stat) for k in range(3)] == columns.columns[stat]
    assert values.pressure(2, Stat.CPU_PRESSURE) == (150, 50, 25, 1002, None, None, None, None)
    usage = values.offsets[Stat.MEMORY_USAGE]
    assert values.values[usage] == 64 << 20
    assert values.present[values.width : 2 * values.width] == bytes(values.width)  # vanished: none


def test_values_as_parsed_are_refused_for_statistics_that_are_not(backend, host):
    reader = StatsReader(CgroupFS.detect(host.paths))
    with pytest.raises(ValueError, match="MEMORY"):
        reader.read_values(_pods(host), frozenset({Stat.MEMORY, Stat.CPU_PRESSURE}))
