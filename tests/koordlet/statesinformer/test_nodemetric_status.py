"""NodeMetric status: averages, aggregated percentiles with the cold-start rule, memory
policy, sorted pods and host applications; quantities as upstream writes them."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from koordinator.api.types.slo import AggregatePolicy, NodeMetricCollectPolicy, NodeMetricSpec
from koordinator.kube import resources as res
from koordlet.metriccache import MetricCache, MetricKind, kinds
from koordlet.metrics import KoordletMetrics
from koordlet.statesinformer.nodemetric import (
    CollectPolicy,
    HostApplication,
    NodeMetricReporter,
    UsageQuerier,
    node_metric_status,
)
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system.cgroup.layout import CgroupDriver, KubepodsLayout
from tests.fakes.pods import make_pod
from testsupport.fake import FakeApiServer

NOW = 10_000.0
GIB = 1 << 30
CRDS = Path(__file__).resolve().parents[3] / "crds"


def _query(cache: MetricCache) -> UsageQuerier:
    return cache.query


def _series(
    cache: MetricCache, kind: MetricKind, values: list[float], start: float, step: float = 1.0, **labels: str
) -> None:
    cache.append(kind.sample(v, start + i * step, **labels) for i, v in enumerate(values))


def test_policy_defaults_and_minimums():
    assert CollectPolicy.of(None) == CollectPolicy(
        300, 60, ("5m0s", "10m0s", "30m0s"), "usageWithoutPageCache"
    )
    spec = NodeMetricSpec(
        metric_collect_policy=NodeMetricCollectPolicy(
            aggregate_duration_seconds=10,
            report_interval_seconds=5,
            node_aggregate_policy=AggregatePolicy(["1m"]),
        )
    )
    assert CollectPolicy.of(spec) == CollectPolicy(60, 30, ("1m",), "usageWithoutPageCache")


def test_status_values():
    cache = MetricCache(retention_seconds=7200)
    # node: 300 s window averaging 1.5 cores; 10 minutes of history for the 5m aggregation
    _series(cache, kinds.NODE_CPU_USAGE, [1.0, 2.0] * 300, NOW - 599.5)
    _series(cache, kinds.NODE_MEMORY_USAGE, [4 * GIB] * 600, NOW - 599)
    _series(cache, kinds.SYS_CPU_USAGE, [0.25] * 600, NOW - 599)
    _series(cache, kinds.SYS_MEMORY_USAGE, [GIB] * 600, NOW - 599)
    web = pod_meta(make_pod("web", "b").qos("LS").build(), KubepodsLayout.default(CgroupDriver.SYSTEMD))
    api = pod_meta(
        make_pod("api", "a").kube_qos("Guaranteed").priority(9500).build(),
        KubepodsLayout.default(CgroupDriver.SYSTEMD),
    )
    idle = pod_meta(make_pod("idle", "a").build(), KubepodsLayout.default(CgroupDriver.SYSTEMD))
    assert web
    assert api
    assert idle
    _series(cache, kinds.POD_CPU_USAGE, [0.5] * 60, NOW - 59, pod_uid=web.uid)
    _series(cache, kinds.POD_MEMORY_USAGE, [512 << 20] * 60, NOW - 59, pod_uid=web.uid)
    _series(cache, kinds.POD_CPU_USAGE, [0.1234] * 60, NOW - 59, pod_uid=api.uid)
    _series(cache, kinds.HOST_APPLICATION_CPU_USAGE, [0.2] * 60, NOW - 59, host_app_name="nginx")
    _series(cache, kinds.NODE_NUMA_CPU_USAGE, [1.5] * 60, NOW - 59, numa_node_id="0")
    policy = CollectPolicy(300, 60, ("5m", "30m"), "usageWithoutPageCache")
    status = node_metric_status(
        _query(cache), policy, [web, api, idle], [HostApplication("nginx", "koord-prod", "LS")], [0, 1], NOW
    ).to_dict()
    node = status["nodeMetric"]
    assert node["nodeUsage"] == {"resources": {"cpu": "1500m", "memory": "4Gi"}}
    assert node["systemUsage"] == {"resources": {"cpu": "250m", "memory": "1Gi"}}
    five, thirty = node["aggregatedNodeUsages"]
    assert five["duration"] == "5m0s"
    assert five["usage"]["avg"]["resources"]["cpu"] == "1500m"
    assert five["usage"]["p50"]["resources"]["cpu"] == "1"
    assert five["usage"]["p99"]["resources"]["cpu"] == "2"
    assert thirty == {"duration": "30m0s"}  # only 10 minutes of samples: cold start
    assert node["numaUsages"] == [{"numaNodeID": 0, "nodeUsage": {"resources": {"cpu": "1500m"}}}]
    assert [(p["namespace"], p["name"]) for p in status["podsMetric"]] == [("a", "api"), ("b", "web")]
    api_entry, web_entry = status["podsMetric"]
    assert api_entry["podUsage"] == {"resources": {"cpu": "123m"}}  # truncated to milli-cores
    assert api_entry["priority"] == "koord-prod"
    assert api_entry["qos"] == "LSR"
    assert web_entry["podUsage"] == {"resources": {"cpu": "500m", "memory": "512Mi"}}
    assert status["hostApplicationMetric"] == [
        {"name": "nginx", "usage": {"resources": {"cpu": "200m"}}, "priority": "koord-prod", "qos": "LS"}
    ]
    assert status["updateTime"].endswith("Z")


def test_memory_policy_with_page_cache():
    cache = MetricCache()
    _series(cache, kinds.NODE_MEMORY_USAGE, [GIB] * 10, NOW - 9)
    _series(cache, kinds.NODE_MEMORY_USAGE_WITH_PAGE_CACHE, [3 * GIB] * 10, NOW - 9)
    policy = CollectPolicy(300, 60, (), "usageWithPageCache")
    status = node_metric_status(_query(cache), policy, [], [], [], NOW).to_dict()
    assert status["nodeMetric"]["nodeUsage"] == {"resources": {"memory": "3Gi"}}


def test_no_samples_yet_gives_an_empty_node_metric():
    status = node_metric_status(_query(MetricCache()), CollectPolicy.of(None), [], [], [0], NOW).to_dict()
    assert status["nodeMetric"]["aggregatedNodeUsages"] == [
        {"duration": "5m0s"},
        {"duration": "10m0s"},
        {"duration": "30m0s"},
    ]
    assert "nodeUsage" not in status["nodeMetric"]
    assert "podsMetric" not in status


class _States:
    node_name = "node-1"
    node_metric_exists = True

    def __init__(self, numa_nodes: list[int]) -> None:
        self._numa_nodes = numa_nodes

    def get_node_metric_spec(self) -> NodeMetricSpec | None:
        return None

    def get_all_pods(self) -> list[PodMeta]:
        return []

    def host_applications(self) -> list[HostApplication]:
        return []

    def numa_nodes(self) -> list[int]:
        return self._numa_nodes


async def test_reports_mirror_the_usages_to_prometheus():
    cache = MetricCache()
    _series(cache, kinds.NODE_CPU_USAGE, [1.5] * 60, NOW - 59)
    _series(cache, kinds.NODE_MEMORY_USAGE, [4 * GIB] * 60, NOW - 59)
    _series(cache, kinds.SYS_CPU_USAGE, [0.25] * 60, NOW - 59)
    _series(cache, kinds.SYS_MEMORY_USAGE, [GIB] * 60, NOW - 59)
    _series(cache, kinds.NODE_NUMA_CPU_USAGE, [1.0] * 60, NOW - 59, numa_node_id="0")
    _series(cache, kinds.NODE_NUMA_MEMORY_USAGE, [3 * GIB] * 60, NOW - 59, numa_node_id="0")
    _series(cache, kinds.SYS_NUMA_CPU_USAGE, [0.125] * 60, NOW - 59, numa_node_id="0")
    registry = CollectorRegistry()
    metrics = KoordletMetrics(registry, "node-1")
    states = _States([0])
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
            reporter = NodeMetricReporter(client, states, _query(cache), clock=lambda: NOW, metrics=metrics)
            assert await reporter.report(force=True)

            def value(name: str, resource: str, unit: str, numa: str | None = None) -> float | None:
                labels = {"node": "node-1", "resource": resource, "unit": unit}
                if numa is not None:
                    labels["numa_node_id"] = numa
                return registry.get_sample_value(f"koordlet_node_metric_{name}_usage", labels)

            assert value("node", "cpu", "core") == 1.5
            assert value("node", "memory", "byte") == 4 * GIB
            assert value("system", "cpu", "core") == 0.25
            assert value("system", "memory", "byte") == GIB
            assert value("numa_node", "cpu", "core", "0") == 1.0
            assert value("numa_node", "memory", "byte", "0") == 3 * GIB
            assert value("numa_system", "cpu", "core", "0") == 0.125
            assert value("numa_system", "memory", "byte", "0") is None  # no samples
            # the next report no longer has NUMA usages (not reported): their series go
            states._numa_nodes = []
            assert await reporter.report(force=True)
            assert value("numa_node", "cpu", "core", "0") is None
            assert value("numa_system", "cpu", "core", "0") is None
            assert value("node", "cpu", "core") == 1.5
