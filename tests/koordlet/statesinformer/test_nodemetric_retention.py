"""NodeMetric windows longer than the metric cache keeps samples
(``--tsdb-retention-duration``) are reported as not available, as a cold start is, not
computed from the truncated history; the reporter says so once, naming the flag."""

from __future__ import annotations

import logging
from pathlib import Path

from koordinator.api.types.slo import AggregatePolicy, NodeMetricCollectPolicy, NodeMetricSpec
from koordinator.kube import resources as res
from koordlet.metriccache import MetricCache, kinds
from koordlet.statesinformer.nodemetric import (
    CollectPolicy,
    HostApplication,
    NodeMetricReporter,
    node_metric_status,
    windows_beyond_retention,
)
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system.cgroup.layout import CgroupDriver, KubepodsLayout
from tests.fakes.pods import make_pod
from testsupport.fake import FakeApiServer

NOW = 100_000.0
GIB = 1 << 30
CRDS = Path(__file__).resolve().parents[3] / "crds"
RETENTION = 1800.0  # the agent's default
NODEMETRIC_LOG = "koordlet.statesinformer.nodemetric"


def _cache(pod: PodMeta) -> MetricCache:
    """Two hours of 1 s samples into a cache keeping 30 minutes: 4 cores in the first
    hour, 1 core in the second (the 1 h average is 1, the 2 h one 2.5)."""
    cache = MetricCache(retention_seconds=RETENTION)
    for t in range(7200):
        ts, cores = NOW - 7199 + t, 4.0 if t < 3600 else 1.0
        cache.append(
            [
                kinds.NODE_CPU_USAGE.sample(cores, ts),
                kinds.NODE_MEMORY_USAGE.sample(GIB, ts),
                kinds.SYS_CPU_USAGE.sample(0.5, ts),
                kinds.SYS_MEMORY_USAGE.sample(GIB, ts),
                kinds.NODE_NUMA_CPU_USAGE.sample(cores, ts, numa_node_id="0"),
                kinds.POD_CPU_USAGE.sample(0.5, ts, pod_uid=pod.uid),
                kinds.HOST_APPLICATION_CPU_USAGE.sample(0.25, ts, host_app_name="nginx"),
            ]
        )
    return cache


def _pod() -> PodMeta:
    meta = pod_meta(make_pod("web").qos("LS").build(), KubepodsLayout.default(CgroupDriver.SYSTEMD))
    assert meta is not None
    return meta


def _spec(aggregate_seconds: int, *durations: str) -> NodeMetricSpec:
    return NodeMetricSpec(
        metric_collect_policy=NodeMetricCollectPolicy(
            aggregate_duration_seconds=aggregate_seconds,
            node_aggregate_policy=AggregatePolicy(list(durations)),
        )
    )


def test_an_aggregate_window_beyond_retention_is_not_available():
    pod = _pod()
    cache = _cache(pod)
    policy = CollectPolicy.of(_spec(3600, "30m", "1h"))
    status = node_metric_status(
        cache.query,
        policy,
        [pod],
        [HostApplication("nginx", "koord-prod", "LS")],
        [0],
        NOW,
        retention_seconds=cache.retention_seconds,
    ).to_dict()
    node_metric = status["nodeMetric"]
    # the 1 h averages would be those of the last 30 minutes (1 core): left out
    for field in ("nodeUsage", "systemUsage", "numaUsages"):
        assert field not in node_metric
    assert "podsMetric" not in status
    assert "hostApplicationMetric" not in status
    # a duration the cache holds is aggregated; the longer one is empty, as a cold start
    for usages in (node_metric["aggregatedNodeUsages"], node_metric["aggregatedSystemUsages"]):
        assert [u["duration"] for u in usages] == ["30m0s", "1h0m0s"]
        assert "usage" in usages[0]
        assert "usage" not in usages[1]
    assert node_metric["aggregatedNodeUsages"][0]["usage"]["avg"]["resources"]["cpu"] == "1"


def test_windows_within_retention_are_reported():
    pod = _pod()
    cache = _cache(pod)
    policy = CollectPolicy.of(_spec(1800, "30m"))  # exactly the retention
    status = node_metric_status(
        cache.query, policy, [pod], [], [0], NOW, retention_seconds=cache.retention_seconds
    ).to_dict()
    assert status["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "1"
    assert "usage" in status["nodeMetric"]["aggregatedNodeUsages"][0]
    assert [p["name"] for p in status["podsMetric"]] == ["web"]


def test_windows_beyond_retention():
    assert windows_beyond_retention(CollectPolicy.of(None), RETENTION) == []
    assert windows_beyond_retention(CollectPolicy.of(_spec(3600, "5m", "2h")), RETENTION) == [
        "2h0m0s",
        "1h0m0s",
    ]
    assert windows_beyond_retention(CollectPolicy.of(_spec(3600, "2h")), None) == []


class _States:
    node_name = "node-1"
    node_metric_exists = True

    def __init__(self, spec: NodeMetricSpec) -> None:
        self.spec = spec

    def get_node_metric_spec(self) -> NodeMetricSpec | None:
        return self.spec

    def get_all_pods(self) -> list[PodMeta]:
        return []

    def host_applications(self) -> list[HostApplication]:
        return []

    def numa_nodes(self) -> list[int]:
        return []


async def test_the_reporter_writes_them_as_not_available_and_warns_once(caplog):
    cache = _cache(_pod())
    states = _States(_spec(3600, "1h"))
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "slo.koordinator.sh_nodemetrics.yaml")
        fake.create(
            res.NODE_METRICS,
            {
                "apiVersion": "slo.koordinator.sh/v1alpha1",
                "kind": "NodeMetric",
                "metadata": {"name": "node-1"},
            },
        )
        async with fake.client() as client:
            reporter = NodeMetricReporter(
                client, states, cache.query, clock=lambda: NOW, retention_seconds=cache.retention_seconds
            )
            with caplog.at_level(logging.WARNING, logger=NODEMETRIC_LOG):
                for _ in range(3):
                    assert await reporter.report(force=True)
            written = fake.get(res.NODE_METRICS, "node-1")["status"]["nodeMetric"]
            assert "nodeUsage" not in written
            assert written["aggregatedNodeUsages"] == [{"duration": "1h0m0s"}]
            warnings = [r.getMessage() for r in caplog.records if r.name == NODEMETRIC_LOG]
            assert len(warnings) == 1
            assert "--tsdb-retention-duration to at least 1h0m0s" in warnings[0]

            # windows the cache holds: reported again, and a later misfit warns again
            caplog.clear()
            states.spec = _spec(300, "30m")
            assert await reporter.report(force=True)
            written = fake.get(res.NODE_METRICS, "node-1")["status"]["nodeMetric"]
            assert written["nodeUsage"]["resources"]["cpu"] == "1"
            states.spec = _spec(300, "2h")
            with caplog.at_level(logging.WARNING, logger=NODEMETRIC_LOG):
                assert await reporter.report(force=True)
            assert len([r for r in caplog.records if r.name == NODEMETRIC_LOG]) == 1
