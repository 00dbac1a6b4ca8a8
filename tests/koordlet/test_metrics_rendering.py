"""koordlet_* metrics render with Go's names: counters without _total, no _created."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from koordlet.metrics import KoordletMetrics, prune, render


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
