"""ColdPageCollector on fake kidled trees: kidled turned on, cold and hot-page usage of the
node, pods and containers; a kernel without kidled disables it; a kidled that cannot be
started is said once, never tried again, and not waited for."""

from __future__ import annotations

import logging

import pytest

from koordinator.api.types.slo import HostApplicationSpec
from koordlet.metriccache import MetricCache, MetricKind, kinds
from koordlet.metricsadvisor.collectors.coldmemoryresource import ColdPageCollector
from koordlet.metricsadvisor.framework import CollectorRunner
from koordlet.statesinformer.nodemetric import CollectPolicy, HostApplication, node_metric_status
from koordlet.system.errors import MalformedContentError
from koordlet.system.kidled import parse_cold_page_bytes
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.metricsadvisor.conftest import FakeStates, make_context

T0 = 1_000_000.0
ROWS: tuple[str, ...] = (
    *("csei", "dsei", "cfei", "dfei", "csui", "dsui", "cfui", "dfui"),
    *("csea", "dsea", "cfea", "dfea", "csua", "dsua", "cfua", "dfua", "slab"),
)


def idle_page_stats(per_row: dict[str, list[int]]) -> str:
    header = [
        "# version: 1.0",
        "# page_scans: 24",
        "# slab_scans: 0",
        "# scan_period_in_seconds: 5",
        "# use_hierarchy: 1",
        "# buckets: 1,2,5,15,30,60,120,240",
        "#",
        "#   _-----=> clean/dirty",
        "#  / _----=> swap/file",
        "# | / _---=> evict/unevict",
        "# || / _--=> inactive/active",
        "# ||| / _-=> slab",
        "# |||| /",
        "# |||||  [1,2) [2,5) [5,15) [15,30) [30,60) [60,120) [120,240) [240,+inf)",
    ]
    rows = [f"  {name} " + " ".join(str(v) for v in per_row.get(name, [0] * 8)) for name in ROWS]
    return "\n".join(header + rows) + "\n"


def test_cold_bytes_are_inactive_file_pages_from_the_sixth_bucket():
    text = idle_page_stats(
        {
            "cfei": [1, 1, 1, 1, 1, 100, 200, 300],
            "dfui": [0, 0, 0, 0, 0, 0, 0, 7],
            "csea": [9, 9, 9, 9, 9, 9, 9, 9],  # active: never cold
        }
    )
    assert parse_cold_page_bytes(text) == 607
    with pytest.raises(MalformedContentError):
        parse_cold_page_bytes("# version: 1.0\n  cfei 1 2\n")


def _kidled(host: FakeHost) -> None:
    host.write("sys/kernel/mm/kidled/scan_period_in_seconds", "0\n")
    host.write("sys/kernel/mm/kidled/use_hierarchy", "0\n")


def test_without_kidled_the_collector_is_disabled(fake_host, states, caplog):
    ctx = make_context(fake_host, states, {"ColdPageCollector": True})
    assert not ColdPageCollector(ctx).enabled()
    assert any("no kidled" in r.getMessage() for r in caplog.records)


def test_disabled_without_the_gate(fake_host, states):
    _kidled(fake_host)
    assert not ColdPageCollector(make_context(fake_host, states)).enabled()


def test_node_pod_and_container_cold_and_hot_usage(fake_host, states):
    host = fake_host
    _kidled(host)
    if host.version == "v2":  # memory.idle_page_stats is a v1 file
        assert not ColdPageCollector(make_context(host, states, {"ColdPageCollector": True})).enabled()
        return
    host.set_meminfo(MemTotal=16_000_000, MemFree=4_000_000, MemAvailable=10_000_000)
    cid = "containerd://" + "a" * 64
    meta = states.add(make_pod("web").kube_qos("Burstable").container("app", cid=cid).build())
    host.add_pod("Burstable", meta.uid, [cid])
    container_dir = meta.containers[0].cgroup_dir
    cold = {"cfei": [0, 0, 0, 0, 0, 1 << 20, 0, 0]}
    host.write_cgroup("memory", "", "memory.idle_page_stats", idle_page_stats({"dfei": [0] * 7 + [3 << 30]}))
    host.write_cgroup("memory", meta.cgroup_dir, "memory.idle_page_stats", idle_page_stats(cold))
    host.write_cgroup("memory", container_dir, "memory.idle_page_stats", idle_page_stats(cold))
    for relative in (meta.cgroup_dir, container_dir):
        host.set_memory_stat(relative, active_anon=100 << 20, inactive_file=50 << 20, active_file=10 << 20)
    # a host application of the NodeSLO, and one whose cgroup has no idle page stats
    states.slo.host_applications = [
        HostApplicationSpec(name="nginx", qos="LS"),
        HostApplicationSpec(name="gone"),
    ]
    app_dir = host.make_cgroup("host-latency-sensitive/nginx")
    host.write_cgroup(
        "memory", app_dir, "memory.idle_page_stats", idle_page_stats({"cfui": [0] * 5 + [2 << 20, 0, 0]})
    )
    host.set_memory_stat(app_dir, active_anon=30 << 20, active_file=5 << 20)
    ctx = make_context(host, states, {"ColdPageCollector": True})
    collector = ColdPageCollector(ctx)
    assert collector.enabled()
    assert collector.interval == 5.0
    collector.collect(T0)
    assert host.read("sys/kernel/mm/kidled/scan_period_in_seconds").strip() == "5"
    assert host.read("sys/kernel/mm/kidled/use_hierarchy").strip() == "1"

    def last(kind: MetricKind, **labels: str) -> float | None:
        result = ctx.cache.query(kind, 0, 1e12, **labels)
        return result.value("last") if result.count() else None

    assert last(kinds.NODE_MEMORY_COLD_PAGE_SIZE) == 3 << 30
    assert last(kinds.NODE_MEMORY_WITH_HOT_PAGE_USAGE) == 12_000_000 * 1024 - (3 << 30)
    assert last(kinds.POD_MEMORY_COLD_PAGE_SIZE, pod_uid=meta.uid) == 1 << 20
    assert last(kinds.POD_MEMORY_WITH_HOT_PAGE_USAGE, pod_uid=meta.uid) == (160 << 20) - (1 << 20)
    assert last(kinds.CONTAINER_MEMORY_COLD_PAGE_SIZE, container_id=cid) == 1 << 20
    assert last(kinds.CONTAINER_MEMORY_WITH_HOT_PAGE_USAGE, container_id=cid) == (159 << 20)
    assert last(kinds.HOST_APPLICATION_MEMORY_COLD_PAGE_SIZE, host_app_name="nginx") == 2 << 20
    assert last(kinds.HOST_APPLICATION_MEMORY_WITH_HOT_PAGE_USAGE, host_app_name="nginx") == 33 << 20
    assert last(kinds.HOST_APPLICATION_MEMORY_COLD_PAGE_SIZE, host_app_name="gone") is None
    assert collector.started


def test_nodemetric_hot_page_policy_reads_hot_page_series_once_they_exist():
    cache = MetricCache()
    policy = CollectPolicy(300, 60, (), "usageWithHotPageCache")
    for t in range(0, 120, 10):
        cache.append(
            [
                kinds.NODE_CPU_USAGE.sample(
                    1.0,
                    T0 - t,
                ),
                kinds.NODE_MEMORY_USAGE.sample(float(4 << 30), T0 - t),
            ]
        )

    apps = [HostApplication("nginx", "koord-prod", "LS")]
    for t in range(0, 120, 10):
        cache.append(
            [
                kinds.HOST_APPLICATION_CPU_USAGE.sample(0.5, T0 - t, host_app_name="nginx"),
                kinds.HOST_APPLICATION_MEMORY_USAGE.sample(float(1 << 30), T0 - t, host_app_name="nginx"),
            ]
        )

    def memory() -> tuple[str, str]:
        status = node_metric_status(cache.query, policy, [], apps, [], T0).to_dict()
        app = status["hostApplicationMetric"][0]["usage"]["resources"]["memory"]
        return str(status["nodeMetric"]["nodeUsage"]["resources"]["memory"]), str(app)

    assert memory() == ("4Gi", "1Gi")  # the ColdPageCollector has not run: usage without page cache
    for t in range(0, 120, 10):
        cache.append(
            [
                kinds.NODE_MEMORY_WITH_HOT_PAGE_USAGE.sample(float(6 << 30), T0 - t),
                kinds.HOST_APPLICATION_MEMORY_WITH_HOT_PAGE_USAGE.sample(
                    float(2 << 30), T0 - t, host_app_name="nginx"
                ),
            ]
        )
    assert memory() == ("6Gi", "2Gi")


async def test_a_kidled_that_cannot_be_started_is_said_once_and_not_waited_for(fake_host_v1, caplog):
    caplog.set_level(logging.INFO)
    host = fake_host_v1
    _kidled(host)
    host.set_meminfo(MemTotal=16_000_000, MemFree=4_000_000, MemAvailable=10_000_000)
    host.write_cgroup("memory", "", "memory.idle_page_stats", idle_page_stats({"dfei": [0] * 7 + [1 << 30]}))
    ctx = make_context(host, FakeStates(host), {"ColdPageCollector": True})
    collector = ColdPageCollector(ctx)
    assert collector.enabled()
    # the kernel refuses the scan period: here, the file turned into a directory (EISDIR)
    scan_period = host.root / "sys/kernel/mm/kidled/scan_period_in_seconds"
    scan_period.unlink()
    scan_period.mkdir()
    for tick in range(3):
        collector.collect(T0 + 5 * tick)
    assert collector.started  # nothing to wait for
    assert collector.unsupported_reason is not None
    assert collector.unsupported_reason.startswith("cannot start kidled: ")
    assert "scan_period_in_seconds" in collector.unsupported_reason
    messages = [r.getMessage() for r in caplog.records if r.name.endswith("coldmemoryresource")]
    assert messages == [f"ColdPageCollector collects nothing on this node: {collector.unsupported_reason}"]
    assert host.read("sys/kernel/mm/kidled/use_hierarchy").strip() == "0"  # never tried again
    assert ctx.cache.label_values(kinds.NODE_MEMORY_COLD_PAGE_SIZE) == []
    # start-up waits for every collector's first data: not for this one
    runner = CollectorRunner([ColdPageCollector(ctx)])
    runner.start()
    try:
        await runner.wait_started()
    finally:
        await runner.stop()
