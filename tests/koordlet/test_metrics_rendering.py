"""koordlet_* metrics render with Go's names: counters without _total, no _created."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from prometheus_client import CollectorRegistry

from koordlet.metrics import RENDER_SLICE, KoordletMetrics, prune, render, render_async, sync_gauge


def test_names_and_labels_match_upstream():
    registry = CollectorRegistry()
    metrics = KoordletMetrics(registry, "node-1")
    metrics.pod_eviction.labels("node-1", "evictPodByNodeMemoryUsage").inc()
    metrics.node_used_cpu_cores.labels("node-1").set(1.5)
    metrics.resource_update_duration_milliseconds.labels("cpu.shares", "succeeded").observe(3)
    text = render(registry).decode()
    assert "# TYPE koordlet_pod_eviction counter\n" in text
    assert 'koordlet_pod_eviction{node="node-1",reason="evictPodByNodeMemoryUsage"} 1\n' in text
    assert "_total" not in text
    assert "_created" not in text
    assert 'koordlet_node_used_cpu_cores{node="node-1"} 1.5\n' in text
    bucket = (
        'koordlet_resource_update_duration_milliseconds_bucket{le="5.0",status="succeeded",type="cpu.shares"}'
    )
    assert f"{bucket} 1" in text
    assert "koordlet_resource_update_duration_milliseconds_count" in text


def test_label_values_are_escaped():
    registry = CollectorRegistry()
    metrics = KoordletMetrics(registry, 'n"1')
    metrics.node_used_memory_bytes.labels('n"1\\x\n').set(2)
    assert 'koordlet_node_used_memory_bytes{node="n\\"1\\\\x\\n"} 2' in render(registry).decode()


def test_prune_removes_series_of_gone_objects():
    registry = CollectorRegistry()
    metrics = KoordletMetrics(registry, "n")
    gauge = metrics.cpuset_share_pool_cpu_cores
    gauge.labels("a").set(1)
    gauge.labels("b").set(2)
    prune(gauge, {("a",)})
    text = render(registry).decode()
    assert 'node="a"' in text
    assert 'node="b"' not in text


def test_refreshers_run_before_every_scrape(caplog):
    registry = CollectorRegistry()
    metrics = KoordletMetrics(registry, "n")
    latest = {"a": 1.0, "b": 2.0}
    runs: list[str] = []

    def refresh() -> Iterator[None]:
        runs.append("refresh")
        yield from sync_gauge(
            metrics.container_oom_score_adj, [(("n", k, "ns", "uid", "c"), v) for k, v in latest.items()]
        )

    def broken() -> Iterator[None]:
        if latest:
            raise RuntimeError("boom")
        yield

    metrics.on_scrape(broken)  # logged; the scrape goes on
    metrics.on_scrape(refresh)
    text = render(registry).decode()
    assert 'koordlet_container_oom_score_adj{container_name="c",node="n",pod_name="a"' in text
    latest.pop("a")
    latest["b"] = 3.0
    labels = {"node": "n", "pod_namespace": "ns", "pod_uid": "uid", "container_name": "c"}
    assert registry.get_sample_value("koordlet_container_oom_score_adj", {**labels, "pod_name": "b"}) == 3.0
    assert registry.get_sample_value("koordlet_container_oom_score_adj", {**labels, "pod_name": "a"}) is None
    assert asyncio.run(render_async(registry)).count(b"koordlet_container_oom_score_adj{") == 1
    assert runs == ["refresh"] * 4  # render, two collect() calls, render_async
    assert "refreshing metrics before a scrape failed" in caplog.text


def test_sync_gauge_yields_in_slices():
    registry = CollectorRegistry()
    metrics = KoordletMetrics(registry, "n")
    gauge = metrics.node_resource_priority_reclaimable_status
    series = [(("n", str(i)), float(i)) for i in range(2 * RENDER_SLICE + 1)]
    assert len(list(sync_gauge(gauge, series))) == 2
    assert len(list(sync_gauge(gauge, series[:3]))) == 0
    assert (
        registry.get_sample_value(
            "koordlet_node_resource_priority_reclaimable_status", {"node": "n", "priority": "2"}
        )
        == 2
    )
    assert (
        registry.get_sample_value(
            "koordlet_node_resource_priority_reclaimable_status", {"node": "n", "priority": "3"}
        )
        is None
    )
