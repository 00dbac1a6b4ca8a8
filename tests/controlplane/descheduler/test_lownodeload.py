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


# ---- prod thresholds: upstream's five classes ----------------------------------------------

PROD_THRESHOLDS = {"prodLowThresholds": {"cpu": 10}, "prodHighThresholds": {"cpu": 20}}


def prod_pod(name: str, node_name: str) -> Obj:
    return pod(name, node_name, qos="LS", priority=9500)


async def test_prod_thresholds_keep_node_balancing_onto_a_node_low_on_node_usage() -> None:
    """A node under the low thresholds whose prod usage sits between the prod thresholds is a
    *low* node: still a destination for the node sources."""
    cluster = three_nodes()
    cluster.pods.append(prod_pod("prod-c", "cool"))
    # cool: 20% of the node, its prod pod 15% (between prod low 10% and prod high 20%)
    cluster.metrics["cool"] = metric("cool", ("0.5", "1Gi"), {"default/prod-c": ("1.5", "1Gi")})
    report = await balance(plugin(cluster, **PROD_THRESHOLDS), cluster)
    assert report["lowNodes"] == ["cool"]
    assert report["bothLowNodes"] == []
    assert report["highNodes"] == ["hot"]
    assert report["budget"]["cpu"] == 7500 - 2000
    assert [name for name, _ in cluster.plugin.evicted] == ["be-2"]
    assert report["evictions"][0]["fitsNode"] == "cool"


async def test_every_class_of_upstreams_classify_nodes() -> None:
    names = ["low", "both-low", "low-but-prod-high", "high", "prod-high", "prod-low", "mid"]
    cluster = Cluster([node(n) for n in names])
    cluster.pods = [
        prod_pod("p-low", "low"),
        pod("b-both", "both-low"),
        prod_pod("p-lph", "low-but-prod-high"),
        pod("b-high", "high"),
        prod_pod("p-high", "high"),
        prod_pod("p-ph", "prod-high"),
        pod("b-pl", "prod-low"),
        prod_pod("p-mid", "mid"),
    ]
    cluster.metrics = {
        # node 40% (under 45%), prod 15% (between 10% and 20%)
        "low": metric("low", ("2.5", "1Gi"), {"default/p-low": ("1.5", "0")}),
        # node 20%, prod 0%
        "both-low": metric("both-low", ("1", "1Gi"), {"default/b-both": ("1", "0")}),
        # node 45% (under), prod 45% (over 20%): a prod source
        "low-but-prod-high": metric("low-but-prod-high", ("0", "1Gi"), {"default/p-lph": ("4.5", "0")}),
        # node 80% (over 75%) and prod 30%: high wins
        "high": metric("high", ("2", "1Gi"), {"default/b-high": ("3", "0"), "default/p-high": ("3", "0")}),
        # node 60%, prod 50%
        "prod-high": metric("prod-high", ("1", "1Gi"), {"default/p-ph": ("5", "0")}),
        # node 60%, prod 0%
        "prod-low": metric("prod-low", ("4", "1Gi"), {"default/b-pl": ("2", "0")}),
        # node 60%, prod 15%: neither
        "mid": metric("mid", ("4.5", "1Gi"), {"default/p-mid": ("1.5", "0")}),
    }
    pl = plugin(cluster, **PROD_THRESHOLDS, anomalyCondition={"consecutiveAbnormalities": 5})
    report = await balance(pl, cluster)
    assert report["lowNodes"] == ["low"]
    assert report["bothLowNodes"] == ["both-low"]
    assert report["prodLowNodes"] == ["prod-low"]
    assert report["highNodes"] == ["high"]
    assert report["prodHighNodes"] == ["low-but-prod-high", "prod-high"]
    classes = {n["name"]: n["classification"] for n in report["nodes"]}
    assert classes["mid"] == "appropriate"
    assert classes["low-but-prod-high"] == "prod-high"
    # every source counts its first abnormal round, the prod ones on their own detectors
    anomalies = {n["name"]: n.get("anomaly") for n in report["nodes"]}
    for source in ("high", "prod-high", "low-but-prod-high"):
        assert anomalies[source] == {"state": "OK", "consecutiveAbnormalities": 1}
    assert cluster.plugin.evicted == []


def prod_cluster(destination_usage: tuple[str, str], *, prod_on_destination: str = "0") -> Cluster:
    """prod-hot: node at 65% (not over 75%), its three 2-core prod pods at 60% (over prod
    20%); cool: a *low* node (node 20%, prod 15%); dest: the prod destination under test."""
    cluster = Cluster([node("prod-hot"), node("cool"), node("dest")])
    cluster.pods = [
        prod_pod("p-1", "prod-hot"),
        prod_pod("p-2", "prod-hot"),
        prod_pod("p-3", "prod-hot"),
        prod_pod("p-cool", "cool"),
        prod_pod("p-dest", "dest"),
    ]
    cluster.metrics = {
        "prod-hot": metric(
            "prod-hot",
            ("0.5", "1Gi"),
            {"default/p-1": ("2", "0"), "default/p-2": ("2", "0"), "default/p-3": ("2", "0")},
        ),
        "cool": metric("cool", ("0.5", "1Gi"), {"default/p-cool": ("1.5", "0")}),
        "dest": metric("dest", destination_usage, {"default/p-dest": (prod_on_destination, "0")}),
    }
    return cluster


async def test_prod_sources_move_to_prod_low_nodes_and_never_to_a_low_one() -> None:
    # dest: node 60% (between the thresholds), prod 0%: prod-low, room for one 2-core prod pod
    cluster = prod_cluster(("6", "1Gi"))
    report = await balance(plugin(cluster, **PROD_THRESHOLDS), cluster)
    assert (report["prodHighNodes"], report["prodLowNodes"], report["lowNodes"]) == (
        ["prod-hot"],
        ["dest"],
        ["cool"],
    )
    assert [e["fitsNode"] for e in report["evictions"]] == ["dest"]
    assert cluster.plugin.evicted[0][1] == (
        "node is overutilized by prod pods, cpu usage(60.00%)>threshold(20.00%)"
    )
    # dest is no longer prod-low: cool, only low, has room for a prod pod but is no prod
    # destination, and nothing moves
    cluster = prod_cluster(("5", "1Gi"), prod_on_destination="1.5")
    report = await balance(plugin(cluster, **PROD_THRESHOLDS), cluster)
    assert (report["prodLowNodes"], report["lowNodes"]) == ([], ["cool"])
    assert report["outcome"] == "0 pod(s) evicted"
    assert cluster.plugin.evicted == []


async def test_the_prod_budget_is_the_prod_room_under_the_prod_high_thresholds() -> None:
    # dest: node 60%, prod 5%: prod-low; its prod room (to prod high 20%) is 1500m, its node
    # room (to high 75%) would be 1500m more
    cluster = prod_cluster(("5.5", "1Gi"), prod_on_destination="0.5")
    report = await balance(plugin(cluster, nodeFit=False, **PROD_THRESHOLDS), cluster)
    assert report["prodLowNodes"] == ["dest"]
    assert report["prodBudget"] == {"cpu": 2000 - 500}
    # one 2-core prod pod spends the 1500m: prod-hot, still at 40% prod, keeps the others
    assert len(cluster.plugin.evicted) == 1


async def test_both_low_nodes_share_what_the_node_sources_left() -> None:
    """A both-low node takes node-source pods first; the prod sources get its prod room, but
    no more than what is left of the node budget (upstream's evictPodsFromSourceNodes)."""
    cluster = Cluster([node("hot"), node("prod-hot"), node("both")])
    cluster.pods = [
        pod("be-1", "hot", cpu="3"),
        pod("be-2", "hot", cpu="3"),
        *(prod_pod(f"p-{i}", "prod-hot") for i in range(4)),
        pod("be-both", "both"),
    ]
    cluster.metrics = {
        # 80%: over 75% by 500m
        "hot": metric("hot", ("2", "1Gi"), {"default/be-1": ("3", "0"), "default/be-2": ("3", "0")}),
        # node 60%, prod 40% (over 20%)
        "prod-hot": metric("prod-hot", ("2", "1Gi"), {f"default/p-{i}": ("1", "0") for i in range(4)}),
        # node 40%, prod 0%: both-low; node room 3500m, prod room 2000m
        "both": metric("both", ("3", "1Gi"), {"default/be-both": ("1", "0")}),
    }
    report = await balance(plugin(cluster, **PROD_THRESHOLDS), cluster)
    assert (report["bothLowNodes"], report["highNodes"], report["prodHighNodes"]) == (
        ["both"],
        ["hot"],
        ["prod-hot"],
    )
    assert report["budget"]["cpu"] == 3500
    # one 3-core BE pod leaves 500m of the node budget: the prod room is capped to it
    assert report["prodBudget"] == {"cpu": 500}
    evicted = [name for name, _ in cluster.plugin.evicted]
    assert evicted[0] in ("be-1", "be-2")
    # a 1-core prod pod spends the 500m; prod-hot stays at 30% prod
    assert len(evicted) == 2
    assert evicted[1].startswith("p-")
    assert {e["fitsNode"] for e in report["evictions"]} == {"both"}


@pytest.mark.parametrize(
    ("number_of_nodes", "outcome"),
    [
        pytest.param(1, "1 pod(s) evicted", id="low-and-both-low-count-together"),
        pytest.param(
            2,
            "the number of underutilized nodes (2) is at most numberOfNodes (2), nothing to do here",
            id="at-most-numberOfNodes",
        ),
    ],
)
async def test_the_underutilized_nodes_are_the_low_and_both_low_ones(
    number_of_nodes: int, outcome: str
) -> None:
    cluster = three_nodes()
    cluster.nodes.append(node("cool-prod"))
    cluster.pods.append(prod_pod("prod-c", "cool-prod"))
    # cool: both-low (no prod); cool-prod: low (prod 15%)
    cluster.metrics["cool-prod"] = metric("cool-prod", ("0.5", "1Gi"), {"default/prod-c": ("1.5", "1Gi")})
    report = await balance(plugin(cluster, numberOfNodes=number_of_nodes, **PROD_THRESHOLDS), cluster)
    assert (report["lowNodes"], report["bothLowNodes"]) == (["cool-prod"], ["cool"])
    assert report["outcome"] == outcome


async def test_prod_low_nodes_alone_are_not_underutilized() -> None:
    # hot is prod-high, dest prod-low; no node is under the node low thresholds
    cluster = prod_cluster(("5.5", "1Gi"), prod_on_destination="0.5")
    cluster.metrics["cool"] = metric("cool", ("5", "1Gi"), {"default/p-cool": ("1.5", "0")})
    report = await balance(plugin(cluster, **PROD_THRESHOLDS), cluster)
    assert report["prodLowNodes"] == ["dest"]
    assert report["outcome"] == "no nodes are underutilized, nothing to do here"
    assert cluster.plugin.evicted == []


# ---- pods without a PodMetric ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_fit", "evicted"),
    [
        # upstream's balancePods: with nodeFit a pod without a PodMetric is never removable
        pytest.param(True, ["be-1"], id="nodeFit"),
        # without nodeFit it may go, and moves nothing off the node or the budget: hot stays
        # over and the round goes on to the next pod
        pytest.param(False, ["be-1", "be-new"], id="no-nodeFit"),
    ],
)
async def test_a_pod_without_a_pod_metric(node_fit: bool, evicted: list[str]) -> None:
    cluster = Cluster([node("hot"), node("cool"), node("mid")])
    cluster.pods = [pod("be-1", "hot"), pod("be-new", "hot")]
    # hot at 95%: system 8 cores and be-1's 1.5; be-new has no podsMetric entry yet
    cluster.metrics = {
        "hot": metric("hot", ("8", "1Gi"), {"default/be-1": ("1.5", "1Gi")}),
        "cool": metric("cool", ("1", "1Gi")),
        "mid": metric("mid", ("5", "5Gi")),
    }
    await balance(plugin(cluster, nodeFit=node_fit), cluster)
    assert [name for name, _ in cluster.plugin.evicted] == evicted


async def test_a_prod_pod_without_a_pod_metric_is_still_a_prod_pod() -> None:
    cluster = prod_cluster(("6", "1Gi"))
    cluster.pods.append(prod_pod("p-new", "prod-hot"))
    cluster.plugin.refuse = {"p-1", "p-2", "p-3"}
    await balance(plugin(cluster, nodeFit=False, **PROD_THRESHOLDS), cluster)
    assert [name for name, _ in cluster.plugin.evicted] == ["p-new"]
