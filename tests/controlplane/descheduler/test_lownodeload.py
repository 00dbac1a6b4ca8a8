"""LowNodeLoad parity cases, hand-computed from upstream's rules (``low_node_load.go``,
``utilization_util.go``, ``utils/sorter``, ``utils/anomaly``).

Every node has 10 cores and 10 GiB unless a case says otherwise; usages come from the
NodeMetric (``systemUsage`` plus the pods' usages). Thresholds are ``int(percent * 0.01 *
allocatable)``: 45% of 10 cores is 4500m, 75% is 7500m; 80% of 10 GiB is 8589934592 bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from controlplane.descheduler.framework import EvictionLimiter, ProfileEvictor
from controlplane.descheduler.lownodeload.args import parse_args
from controlplane.descheduler.lownodeload.plugin import LowNodeLoad
from controlplane.descheduler.sorting import overage_score, pod_order
from koordinator.nodemetrics import NodeMetricRecord, node_metric_record
from tests.controlplane.descheduler import builders
from testsupport.fake.clock import FakeClock

GI = 1024**3
NOW = "2026-11-27T12:00:00Z"
Obj = dict[str, Any]


def node(name: str, cpu: str = "10", memory: str = "10Gi", *, labels: Mapping[str, str] | None = None) -> Obj:
    return builders.node(name, cpu, memory, labels)


def pod(
    name: str,
    node_name: str,
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    qos: str = "BE",
    priority: int = 5500,
    created: str = "2026-11-27T10:00:00Z",
) -> Obj:
    """A pod of the ReplicaSet ``rs`` on ``node_name`` with a Koordinator QoS class."""
    made = builders.pod(
        name,
        node=node_name,
        cpu=cpu,
        memory=memory,
        priority=priority,
        labels={"koordinator.sh/qosClass": qos},
    )
    made["metadata"]["creationTimestamp"] = created
    return made


def metric(
    name: str,
    system: tuple[str, str],
    pods: Mapping[str, tuple[str, str]] = {},
    *,
    when: str = NOW,
    priority: Mapping[str, str] = {},
) -> NodeMetricRecord:
    return node_metric_record(
        {
            "metadata": {"name": name},
            "status": {
                "updateTime": when,
                "nodeMetric": {
                    "nodeUsage": {"resources": {}},
                    "systemUsage": {"resources": {"cpu": system[0], "memory": system[1]}},
                },
                "podsMetric": [
                    {
                        "namespace": key.split("/")[0],
                        "name": key.split("/")[1],
                        "podUsage": {"resources": {"cpu": usage[0], "memory": usage[1]}},
                        **({"priority": priority[key]} if key in priority else {}),
                    }
                    for key, usage in pods.items()
                ],
            },
        }
    )


class RecordingEvictor:
    """The evict plug-in: accepts every eviction (or those ``accept`` allows) and records it."""

    name = "MigrationController"

    def __init__(self, refuse: set[str] | None = None) -> None:
        self.evicted: list[tuple[str, str]] = []
        self.refuse = refuse or set()

    def filter(self, pod: Mapping[str, Any]) -> bool:
        return pod["metadata"]["name"] not in self.refuse

    async def evict(self, pod: Mapping[str, Any], reason: str, plugin: str) -> bool:
        self.evicted.append((pod["metadata"]["name"], reason))
        return True


@dataclass
class Cluster:
    nodes: list[Obj]
    pods: list[Obj] = field(default_factory=list)
    metrics: dict[str, NodeMetricRecord] = field(default_factory=dict)
    clock: FakeClock = field(default_factory=lambda: FakeClock(epoch=1_795_780_800.0))  # NOW
    limiter: EvictionLimiter = field(default_factory=EvictionLimiter)
    plugin: RecordingEvictor = field(default_factory=RecordingEvictor)

    def __post_init__(self) -> None:
        self.evictor = ProfileEvictor([self.plugin], self.plugin, self.limiter)

    def pods_on_node(self, name: str) -> Sequence[Obj]:
        return [p for p in self.pods if p["spec"].get("nodeName") == name]

    def node_metrics(self) -> Mapping[str, NodeMetricRecord]:
        return self.metrics

    def now(self) -> float:
        return self.clock.time()


def plugin(cluster: Cluster, **args: Any) -> LowNodeLoad:
    defaults: dict[str, Any] = {
        "lowThresholds": {"cpu": 45, "memory": 55},
        "highThresholds": {"cpu": 75, "memory": 80},
        "anomalyCondition": {"consecutiveAbnormalities": 1},
    }
    return LowNodeLoad(parse_args({**defaults, **args}), cluster, cluster.clock)


def three_nodes() -> Cluster:
    """hot at 80% cpu (system 1 core, be-1 3, be-2 2, ls-1 2), cool at 10%, mid at 50%."""
    cluster = Cluster([node("hot"), node("cool"), node("mid")])
    cluster.pods = [
        pod("be-1", "hot"),
        pod("be-2", "hot"),
        pod("ls-1", "hot", qos="LS", priority=9500, cpu="2", memory="2Gi"),
    ]
    cluster.metrics = {
        "hot": metric(
            "hot",
            ("1", "1Gi"),
            {"default/be-1": ("3", "1Gi"), "default/be-2": ("2", "1Gi"), "default/ls-1": ("2", "2Gi")},
        ),
        "cool": metric("cool", ("1", "1Gi")),
        "mid": metric("mid", ("5", "5Gi")),
    }
    return cluster


async def balance(pl: LowNodeLoad, cluster: Cluster) -> dict[str, Any]:
    cluster.limiter.reset()
    await pl.balance(cluster.nodes)
    return pl.reports[0].to_dict()


async def test_classification_budget_and_the_pod_moved() -> None:
    cluster = three_nodes()
    report = await balance(plugin(cluster), cluster)
    assert report["lowNodes"] == ["cool"]
    assert report["highNodes"] == ["hot"]
    assert report["anomalousNodes"] == ["hot"]
    # budget: cool's high thresholds minus its usage
    assert report["budget"] == {"cpu": 7500 - 1000, "memory": int(0.8 * 10 * GI) - GI}
    by_name = {n["name"]: n for n in report["nodes"]}
    assert by_name["hot"]["usagePercent"]["cpu"] == 80.0
    assert by_name["mid"]["classification"] == "appropriate"
    # BE before LS; of the BE pods the one matching the 500m overage best: be-2 (2 cores, 4x
    # the overage, scores 1/4 + 1) before be-1 (3 cores, 1/6 + 1); after it hot is at 60%: stop
    assert cluster.plugin.evicted == [("be-2", "node is overutilized, cpu usage(80.00%)>threshold(75.00%)")]
    assert report["evictions"][0]["fitsNode"] == "cool"


async def test_a_node_turns_anomalous_after_more_than_consecutive_abnormalities_rounds() -> None:
    cluster = three_nodes()
    pl = plugin(cluster, anomalyCondition={"consecutiveAbnormalities": 5})
    for round_ in range(1, 6):
        report = await balance(pl, cluster)
        hot = next(n for n in report["nodes"] if n["name"] == "hot")
        assert hot["anomaly"] == {"state": "OK", "consecutiveAbnormalities": round_}
        assert report["outcome"] == "none of the nodes were detected as anomalous, nothing to do here"
    assert cluster.plugin.evicted == []
    report = await balance(pl, cluster)
    assert report["anomalousNodes"] == ["hot"]
    assert [name for name, _ in cluster.plugin.evicted] == ["be-2"]


async def test_a_low_round_resets_the_detector() -> None:
    cluster = three_nodes()
    pl = plugin(cluster, anomalyCondition={"consecutiveAbnormalities": 2})
    await balance(pl, cluster)
    await balance(pl, cluster)
    hot_metric = cluster.metrics["hot"]
    cluster.metrics["hot"] = metric("hot", ("1", "1Gi"))  # hot is now low
    await balance(pl, cluster)
    cluster.metrics["hot"] = hot_metric
    report = await balance(pl, cluster)
    hot = next(n for n in report["nodes"] if n["name"] == "hot")
    assert hot["anomaly"] == {"state": "OK", "consecutiveAbnormalities": 1}
    assert cluster.plugin.evicted == []


async def test_the_anomaly_lasts_its_timeout_then_counting_starts_again() -> None:
    cluster = three_nodes()
    cluster.plugin.refuse = {"be-1", "be-2", "ls-1"}  # nothing moves: hot stays hot
    pl = plugin(cluster, anomalyCondition={"consecutiveAbnormalities": 1 + 1, "timeout": "1m"})
    for _ in range(3):
        report = await balance(pl, cluster)
    assert report["anomalousNodes"] == ["hot"]
    cluster.clock.advance(61)
    report = await balance(pl, cluster)
    assert report["anomalousNodes"] == []


@pytest.mark.parametrize(
    ("args", "outcome"),
    [
        (
            {"numberOfNodes": 1},
            "the number of underutilized nodes (1) is at most numberOfNodes (1), nothing to do here",
        ),
        (
            {"lowThresholds": {"cpu": 90, "memory": 90}, "highThresholds": {"cpu": 95, "memory": 95}},
            "all nodes are underutilized, nothing to do here",
        ),
        ({"lowThresholds": {"cpu": 5, "memory": 5}}, "no nodes are underutilized, nothing to do here"),
        (
            {"highThresholds": {"cpu": 85, "memory": 85}},
            "all nodes are under target utilization, nothing to do here",
        ),
    ],
)
async def test_rounds_that_do_nothing(args: dict[str, Any], outcome: str) -> None:
    cluster = three_nodes()
    report = await balance(plugin(cluster, **args), cluster)
    assert report["outcome"] == outcome
    assert cluster.plugin.evicted == []


async def test_an_unschedulable_node_is_never_low() -> None:
    cluster = three_nodes()
    cluster.nodes[1]["spec"]["unschedulable"] = True
    report = await balance(plugin(cluster), cluster)
    assert report["lowNodes"] == []
    assert cluster.plugin.evicted == []


async def test_expired_or_missing_node_metrics_skip_the_node() -> None:
    cluster = three_nodes()
    cluster.metrics["mid"] = metric("mid", ("5", "5Gi"), when="2026-11-27T11:56:59Z")  # 181 s old
    del cluster.metrics["cool"]
    report = await balance(plugin(cluster), cluster)
    skipped = {n["name"]: n["detail"] for n in report["nodes"] if n["classification"] == "skipped"}
    assert skipped == {"cool": "no NodeMetric", "mid": "NodeMetric expired (older than 180s)"}
    assert report["lowNodes"] == []


async def test_deviation_thresholds_are_relative_to_the_pool_mean() -> None:
    cluster = three_nodes()
    cluster.metrics["mid"] = metric("mid", ("3", "3Gi"))
    # cpu mean (80 + 10 + 30) / 3 = 40%: low 40-10 = 30% (3000m), high 40+10 = 50% (5000m);
    # memory has no low threshold: 0% in deviation mode, so it is not checked
    report = await balance(
        plugin(cluster, useDeviationThresholds=True, lowThresholds={"cpu": 10}, highThresholds={"cpu": 10}),
        cluster,
    )
    assert report["lowNodes"] == ["cool", "mid"]
    assert report["highNodes"] == ["hot"]
    assert report["budget"]["cpu"] == (5000 - 1000) + (5000 - 3000)
    # the overage is 3000m: be-1 (3 cores) matches it exactly and leaves hot at 5000m, not over
    assert [name for name, _ in cluster.plugin.evicted] == ["be-1"]


async def test_the_budget_stops_the_round() -> None:
    cluster = three_nodes()
    cluster.metrics["hot"] = metric(
        "hot",
        ("1", "1Gi"),
        {"default/be-1": ("3", "1Gi"), "default/be-2": ("3", "1Gi"), "default/ls-1": ("2", "2Gi")},
    )  # 90%
    cluster.metrics["cool"] = metric("cool", ("2", "1Gi"))  # budget: 50% of 10 cores - 2 cores = 3000m
    report = await balance(plugin(cluster, nodeFit=False, highThresholds={"cpu": 50, "memory": 80}), cluster)
    assert report["budget"]["cpu"] == 3000
    # be-1 (3 cores) spends the budget: hot, still at 60% (over 50%), keeps be-2
    assert [name for name, _ in cluster.plugin.evicted] == ["be-1"]


async def test_node_fit_skips_pods_that_would_make_the_destination_hot() -> None:
    cluster = three_nodes()
    # cool at 50% now (not low: 45%) -> make it 4 cores (40%): a 3-core pod would take it to 70%
    # (fits under 75%), a 4-core one to 80% (does not)
    cluster.metrics["cool"] = metric("cool", ("4", "1Gi"))
    cluster.metrics["hot"] = metric(
        "hot",
        ("1", "1Gi"),
        {"default/be-1": ("4", "1Gi"), "default/be-2": ("3", "1Gi"), "default/ls-1": ("1", "1Gi")},
    )
    await balance(plugin(cluster), cluster)
    assert [name for name, _ in cluster.plugin.evicted] == ["be-2"]


async def test_node_fit_uses_requests_taints_and_selectors() -> None:
    cluster = three_nodes()
    cluster.nodes[1]["spec"]["taints"] = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    report = await balance(plugin(cluster), cluster)
    assert report["evictions"] == []
    cluster.pods[0]["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    await balance(plugin(cluster), cluster)
    assert [name for name, _ in cluster.plugin.evicted] == ["be-1"]


async def test_pod_selectors_and_namespaces_filter_the_candidates() -> None:
    cluster = three_nodes()
    cluster.pods[1]["metadata"]["labels"]["app"] = "movable"
    await balance(
        plugin(cluster, podSelectors=[{"name": "m", "selector": {"matchLabels": {"app": "movable"}}}]),
        cluster,
    )
    assert [name for name, _ in cluster.plugin.evicted] == ["be-2"]
    cluster = three_nodes()
    await balance(plugin(cluster, evictableNamespaces={"exclude": ["default"]}), cluster)
    assert cluster.plugin.evicted == []


async def test_prod_thresholds_move_prod_pods_off_a_node_hot_with_prod_usage() -> None:
    cluster = three_nodes()
    # hot at 60% total (not over 75%), its prod pods at 50% (over prod 40%)
    cluster.pods = [
        pod("be-1", "hot"),
        pod("prod-1", "hot", qos="LS", priority=9500),
        pod("prod-2", "hot", qos="LS", priority=9600),
    ]
    cluster.metrics["hot"] = metric(
        "hot",
        ("1", "1Gi"),
        {"default/be-1": ("0", "1Gi"), "default/prod-1": ("3", "1Gi"), "default/prod-2": ("2", "1Gi")},
    )
    report = await balance(
        plugin(cluster, prodLowThresholds={"cpu": 30}, prodHighThresholds={"cpu": 40}), cluster
    )
    assert report["prodHighNodes"] == ["hot"]
    assert report["highNodes"] == []
    # prod pods only; the lower priority first: prod-1 (9500, 3 cores) leaves prod usage at 20%
    assert cluster.plugin.evicted == [
        ("prod-1", "node is overutilized by prod pods, cpu usage(50.00%)>threshold(40.00%)")
    ]


async def test_node_pools_each_with_their_own_thresholds() -> None:
    cluster = three_nodes()
    for n in cluster.nodes:
        n["metadata"]["labels"]["pool"] = "a" if n["metadata"]["name"] != "mid" else "b"
    report_pools = plugin(
        cluster,
        nodePools=[
            {"name": "a", "nodeSelector": {"matchLabels": {"pool": "a"}}},
            {
                "name": "b",
                "nodeSelector": {"matchLabels": {"pool": "b"}},
                "highThresholds": {"cpu": 50, "memory": 90},
            },
        ],
    )
    await report_pools.balance(cluster.nodes)
    a, b = (r.to_dict() for r in report_pools.reports)
    assert (a["nodePool"], a["lowNodes"], a["highNodes"]) == ("a", ["cool"], ["hot"])
    # pool b inherits lowThresholds (45/55) and has one node: no destination
    assert (b["nodePool"], b["lowNodes"], b["outcome"]) == (
        "b",
        [],
        "no nodes are underutilized, nothing to do here",
    )


async def test_framework_limits_cap_the_round() -> None:
    cluster = three_nodes()
    cluster.limiter.per_node = 1
    cluster.metrics["hot"] = metric(
        "hot",
        ("5", "1Gi"),
        {"default/be-1": ("2", "1Gi"), "default/be-2": ("2", "1Gi"), "default/ls-1": ("1", "2Gi")},
    )  # 100%: after be-1 still 80%
    report = await balance(plugin(cluster), cluster)
    assert [name for name, _ in cluster.plugin.evicted] == ["be-1"]
    refused = [e for e in report["evictions"] if e.get("refused")]
    assert [e["pod"] for e in refused] == ["default/be-2", "default/ls-1"]


async def test_paused_does_nothing_and_dry_run_evicts_nothing() -> None:
    cluster = three_nodes()
    pl = plugin(cluster, paused=True)
    await pl.balance(cluster.nodes)
    assert pl.reports == []
    await balance(plugin(cluster, dryRun=True), cluster)
    assert cluster.plugin.evicted == []


@pytest.mark.parametrize(
    ("usage", "score"),
    [
        ({"cpu": 500}, 2.0),  # exactly the overage
        ({"cpu": 1000}, 1.5),  # twice it
        ({"cpu": 250}, 0.5),  # half of it
        ({"cpu": 0}, 0.0),
    ],
)
def test_the_piecewise_overage_score(usage: dict[str, int], score: float) -> None:
    # memory is not over: it does not weigh in, whatever its weight
    assert (
        overage_score({**usage, "memory": GI}, {"cpu": 500, "memory": -GI}, {"cpu": 1, "memory": 5}) == score
    )


def test_pod_order_classes_first_then_the_overage_match() -> None:
    usage = {"default/free": {"cpu": 100}, "default/be-small": {"cpu": 500}, "default/be-big": {"cpu": 4000}}
    pods = [
        pod("be-big", "hot", created="2026-11-27T10:00:00Z"),
        pod("prod", "hot", qos="LS", priority=9500),
        pod("be-small", "hot"),
        pod("free", "hot", priority=3500),
        pod("be-new", "hot", created="2026-11-27T11:00:00Z"),
    ]
    order = sorted(
        pods,
        key=lambda p: pod_order(p, usage, {"cpu": 500}, {"cpu": 1}, f"default/{p['metadata']['name']}"),
    )
    # free (koord-free) first; the batch pods by overage match, those without usage last,
    # newer first; prod last
    assert [p["metadata"]["name"] for p in order] == ["free", "be-small", "be-big", "be-new", "prod"]
