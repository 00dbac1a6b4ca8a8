"""NodeMetric status: averages, aggregated percentiles with the cold-start rule, memory
policy, sorted pods and host applications; quantities as upstream writes them."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from koordinator.api.quantity import Format
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


GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
GPU_B = "GPU-bbbbbbbb-1111-1111-1111-111111111111"
GPU_IDLE = "GPU-cccccccc-2222-2222-2222-222222222222"


def _gpu_series(
    cache: MetricCache, minor: int, uuid: str, core: list[float], used: list[float], total: float
) -> None:
    start, label = NOW - len(core) + 1, str(minor)
    _series(cache, kinds.NODE_GPU_CORE_USAGE, core, start, gpu_minor=label, gpu_device_uuid=uuid)
    _series(cache, kinds.NODE_GPU_MEMORY_USAGE, used, start, gpu_minor=label, gpu_device_uuid=uuid)
    _series(
        cache, kinds.NODE_GPU_MEMORY_TOTAL, [total] * len(core), start, gpu_minor=label, gpu_device_uuid=uuid
    )


def test_gpu_usage_goes_into_the_node_usage_devices():
    cache = MetricCache(retention_seconds=7200)
    _series(cache, kinds.NODE_CPU_USAGE, [2.0] * 60, NOW - 59)
    _series(cache, kinds.NODE_MEMORY_USAGE, [4 * GIB] * 60, NOW - 59)
    # averages over the 300 s window: 50.5 % and 3 GiB of 80 GiB; the older samples are outside it
    _series(cache, kinds.NODE_GPU_CORE_USAGE, [100.0] * 10, NOW - 400, gpu_minor="0", gpu_device_uuid=GPU_A)
    _gpu_series(cache, 0, GPU_A, [40.0, 61.0], [2 * GIB, 4 * GIB], 80 * GIB)
    _gpu_series(cache, 1, GPU_B, [99.9] * 3, [GIB] * 3, 0)  # no total: ratio 0
    # core samples but no memory samples: left out, as upstream
    _series(cache, kinds.NODE_GPU_CORE_USAGE, [10.0] * 5, NOW - 4, gpu_minor="3", gpu_device_uuid="GPU-half")
    gpus = [(1, GPU_B), (0, GPU_A), (2, GPU_IDLE), (3, "GPU-half")]
    status = node_metric_status(_query(cache), CollectPolicy.of(None), [], [], [], NOW, gpus).to_dict()
    assert status["nodeMetric"]["nodeUsage"] == {
        "resources": {"cpu": "2", "memory": "4Gi"},
        "devices": [
            {
                "type": "gpu",
                "id": GPU_A,
                "minor": 0,
                "health": False,
                "resources": {
                    "koordinator.sh/gpu-core": "50",
                    "koordinator.sh/gpu-memory": "3Gi",
                    "koordinator.sh/gpu-memory-ratio": "3",
                },
            },
            {
                "type": "gpu",
                "id": GPU_B,
                "minor": 1,
                "health": False,
                "resources": {
                    "koordinator.sh/gpu-core": "99",
                    "koordinator.sh/gpu-memory": "1Gi",
                    "koordinator.sh/gpu-memory-ratio": "0",
                },
            },
        ],
    }
    # the quantities are typed as upstream's: BinarySI bytes, DecimalSI integers
    node_metric = node_metric_status(_query(cache), CollectPolicy.of(None), [], [], [], NOW, gpus).node_metric
    assert node_metric is not None
    assert node_metric.node_usage is not None
    resources = node_metric.node_usage.devices[0].resources
    assert [(q.value(), q.format) for q in resources.values()] == [
        (50, Format.DECIMAL_SI),
        (3 * GIB, Format.BINARY_SI),
        (3, Format.DECIMAL_SI),
    ]


def test_gpu_usage_without_node_usage_still_makes_the_node_usage():
    cache = MetricCache()
    _gpu_series(cache, 0, GPU_A, [20.0], [GIB], 4 * GIB)
    status = node_metric_status(
        _query(cache), CollectPolicy.of(None), [], [], [], NOW, [(0, GPU_A)]
    ).to_dict()
    assert status["nodeMetric"]["nodeUsage"] == {
        "devices": [
            {
                "type": "gpu",
                "id": GPU_A,
                "minor": 0,
                "health": False,
                "resources": {
                    "koordinator.sh/gpu-core": "20",
                    "koordinator.sh/gpu-memory": "1Gi",
                    "koordinator.sh/gpu-memory-ratio": "25",
                },
            }
        ]
    }


def test_no_gpu_samples_leave_the_node_usage_out():
    status = node_metric_status(
        _query(MetricCache()), CollectPolicy.of(None), [], [], [], NOW, [(0, GPU_IDLE)]
    ).to_dict()
    assert "nodeUsage" not in status["nodeMetric"]


async def test_the_reporter_asks_for_the_gpus_it_is_given():
    cache = MetricCache()
    _gpu_series(cache, 0, GPU_A, [30.0] * 10, [2 * GIB] * 10, 8 * GIB)
    _gpu_series(cache, 1, GPU_B, [30.0] * 10, [2 * GIB] * 10, 8 * GIB)
    seen: list[tuple[int, str]] = [(0, GPU_A)]
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
                client, _States([]), _query(cache), clock=lambda: NOW, gpus=lambda: seen
            )
            assert await reporter.report(force=True)
            stored = await client.get(res.NODE_METRICS, "node-1")
            devices = stored["status"]["nodeMetric"]["nodeUsage"]["devices"]
            assert [(d["id"], d["minor"], d["resources"]) for d in devices] == [
                (
                    GPU_A,
                    0,
                    {
                        "koordinator.sh/gpu-core": "30",
                        "koordinator.sh/gpu-memory": "2Gi",
                        "koordinator.sh/gpu-memory-ratio": "25",
                    },
                )
            ]
            seen.append((1, GPU_B))
            assert await reporter.report(force=True)
            stored = await client.get(res.NODE_METRICS, "node-1")
            assert [d["id"] for d in stored["status"]["nodeMetric"]["nodeUsage"]["devices"]] == [GPU_A, GPU_B]
