"""LoadAwareScheduling: the estimator, thresholds, assign-cache delta and scores, with
figures hand-computed from upstream's rules, through the framework (``simulate``'s path)
and through the live scheduler against the fake apiserver."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import ConfigError, parse
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.kernel.twin import go_round
from controlplane.scheduler.plugins.loadaware.args import load_aware_args
from controlplane.scheduler.plugins.loadaware.estimate import estimate_pod, estimated_deadline
from controlplane.scheduler.plugins.loadaware.plugin import LoadAwareScheduling
from controlplane.scheduler.plugins.loadaware.usage import headroom, load_score
from controlplane.scheduler.podinfo import pod_info
from koordinator.kube import resources as res
from koordinator.kube.timeutil import format_time
from koordinator.nodemetrics import node_metric_record
from tests.controlplane.scheduler.live import running
from tests.polling import eventually
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]
GI = 1 << 30
NOW = 1_800_000_000.0
CRDS = Path(__file__).resolve().parents[3] / "crds"


def node(name: str, cpu: str = "4", memory: str = "16Gi", annotations: Obj | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations or {}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }


def pod(
    name: str,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    *,
    limits: Obj | None = None,
    priority: int | None = None,
    owner: str | None = None,
    node_name: str | None = None,
    requests: Obj | None = None,
) -> Obj:
    want = requests if requests is not None else {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    spec: Obj = {
        "schedulerName": "koord-scheduler",
        "containers": [{"name": "c", "image": "x", "resources": {"requests": want, "limits": limits or {}}}],
    }
    if priority is not None:
        spec["priority"] = priority
    if node_name:
        spec["nodeName"] = node_name
    meta: Obj = {"name": name, "namespace": "default"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "u", "controller": True}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def metric(
    name: str, cpu: str, memory: str, *, updated: float = NOW - 10, pods: list[Obj] | None = None
) -> Obj:
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": name},
        "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
        "status": {
            "updateTime": format_time(updated),
            "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}}},
            "podsMetric": pods or [],
        },
    }


def config(args: Obj | None = None) -> Any:
    """A profile with LoadAwareScheduling as the only score plug-in besides nothing else."""
    plugin_config = [{"name": "LoadAwareScheduling", "args": args}] if args is not None else []
    return parse(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": "koord-scheduler",
                    "plugins": {
                        "multiPoint": {"enabled": [{"name": "LoadAwareScheduling"}]},
                        "score": {
                            "disabled": [
                                {"name": "NodeResourcesFit"},
                                {"name": "NodeResourcesBalancedAllocation"},
                                {"name": "ImageLocality"},
                                {"name": "TaintToleration"},
                                {"name": "NodeAffinity"},
                                {"name": "PodTopologySpread"},
                                {"name": "InterPodAffinity"},
                            ]
                        },
                    },
                    "pluginConfig": plugin_config,
                }
            ],
        }
    )


def framework(
    nodes: list[Obj], metrics: list[Obj], args: Obj | None = None, bound: Sequence[Obj] = ()
) -> Framework:
    cluster = Cluster()
    for n in nodes:
        cluster.set_node(n)
    for m in metrics:
        cluster.set_node_metric(node_metric_record(m))
    for p in bound:
        info = pod_info(p)
        cluster.place(info, info.node_name)
    fw = Framework(config(args).profiles[0], cluster, seed=1)
    plugin = next(f for f in fw.filters if isinstance(f, LoadAwareScheduling))
    plugin.clock = lambda: NOW
    return fw


def test_the_default_estimator_scales_requests_and_limits_and_defaults_empty_pods():
    args = load_aware_args(None)
    assert args.resources == ("cpu", "memory")
    # 1 CPU and 1 GiB: 85% and 70%, rounded half away from zero (751619276.8 -> 751619277)
    assert estimate_pod(pod_info(pod("a")), args) == (850, 751619277)
    # the larger of request and limit is scaled
    assert estimate_pod(pod_info(pod("b", "1", "1Gi", limits={"cpu": "2", "memory": "1Gi"})), args) == (
        1700,
        751619277,
    )
    # nothing requested: 250m and 200 MiB
    assert estimate_pod(pod_info(pod("c", None, None)), args) == (250, 200 * 1024 * 1024)
    # a batch pod's batch-cpu (milli-cores as units) and batch-memory stand for cpu and memory
    batch = pod(
        "d", requests={"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}, priority=5500
    )
    assert estimate_pod(pod_info(batch), args) == (850, 751619277)
    # factors from the args; a missing one keeps its default
    assert estimate_pod(pod_info(pod("e")), load_aware_args({"estimatedScalingFactors": {"cpu": 50}})) == (
        500,
        751619277,
    )


def test_headroom_is_the_largest_estimate_upstreams_float_rounding_passes():
    rng = random.Random(7)
    for _ in range(2000):
        alloc = rng.randrange(1, 10**7)
        threshold = rng.randrange(1, 101)
        used = rng.randrange(0, alloc)
        room = headroom(threshold, alloc, used)
        assert go_round(float(used + room) / float(alloc) * 100) <= threshold
        assert go_round(float(used + room + 1) / float(alloc) * 100) > threshold
    assert headroom(0, 4000, 100) == float("inf")  # a zero threshold holds nothing
    assert headroom(65, 0, 100) == float("inf")  # nor does a resource the node has none of


def test_thresholds_filter_hot_expired_and_estimated_nodes_and_scores_rank_the_rest():
    nodes = [node("hot"), node("cool"), node("silent"), node("stale")]
    metrics = [
        metric("hot", "3", "4Gi"),  # 75% CPU: over 65 already
        metric("cool", "1", "4Gi"),
        metric("stale", "0", "0", updated=NOW - 600),  # past nodeMetricExpirationSeconds (180)
    ]
    fw = framework(nodes, metrics)
    explained = fw.explain(pod_info(pod("p")))
    assert explained["filtered"] == {
        "hot": ["node(s) cpu usage exceed threshold"],
        "stale": ["node(s) nodeMetric expired"],
    }
    # cool: CPU 1000 + 850 of 4000 -> (4000-1850)*100/4000 = 53; memory 4Gi + 751619277 of
    # 16Gi -> 70; (53 + 70) / 2 = 61. silent (no NodeMetric) scores 0
    assert explained["scores"]["cool"]["LoadAwareScheduling"] == 61
    assert explained["scores"]["silent"]["LoadAwareScheduling"] == 0
    result = fw.schedule(pod_info(pod("p")))
    assert result.node == "cool"
    failing = framework(nodes[:1] + nodes[3:], [metrics[0], metrics[2]]).schedule(pod_info(pod("p")))
    assert failing.message == (
        "0/2 nodes are available: 1 node(s) cpu usage exceed threshold, 1 node(s) nodeMetric expired. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
    )


def test_pods_placed_after_the_report_stay_estimated_until_it_covers_them():
    nodes = [node("n")]
    # 1 CPU used; a pod placed after the report (assumed now) counts at its estimate
    fw = framework(nodes, [metric("n", "1", "1Gi")])
    first = pod_info(pod("first"))
    assert fw.schedule(first).node == "n"
    fw.cluster.place(first, "n")
    # 1000 + 850 + 850 = 2700 of 4000 = 67.5 -> 68 > 65
    assert fw.explain(pod_info(pod("second")))["filtered"] == {"n": ["node(s) cpu usage exceed threshold"]}
    # a report from after the pod was placed, with its usage, covers it: 1000 + 300 + 850
    covered = metric(
        "n",
        "1300m",
        "1Gi",
        updated=NOW + 120,
        pods=[
            {
                "namespace": "default",
                "name": "first",
                "podUsage": {"resources": {"cpu": "300m", "memory": "100Mi"}},
            }
        ],
    )
    plugin = next(f for f in fw.filters if isinstance(f, LoadAwareScheduling))
    plugin.clock = lambda: NOW + 130
    fw.cluster.set_node_metric(node_metric_record(covered))
    assert fw.explain(pod_info(pod("second")))["filtered"] == {}


def test_a_pod_reported_within_the_report_interval_counts_at_the_larger_of_estimate_and_usage():
    # the pod was scheduled 30 s before the report (interval 60 s): still estimated, at
    # max(850, 2000) = 2000, and its 2000 is taken out of the node's 2500
    scheduled = pod("busy", node_name="n")
    scheduled["status"] = {
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(NOW - 40)}
        ]
    }
    report = metric(
        "n",
        "2500m",
        "1Gi",
        updated=NOW - 10,
        pods=[
            {"namespace": "default", "name": "busy", "podUsage": {"resources": {"cpu": "2", "memory": "1Gi"}}}
        ],
    )
    fw = framework([node("n")], [report], bound=[scheduled])
    plugin = next(f for f in fw.filters if isinstance(f, LoadAwareScheduling))
    load = plugin.load_of(fw.cluster, "n")
    assert load is not None
    assert load.score_used == (500 + 2000, 1 * GI)  # memory: max(751619277, 1Gi) + (1Gi - 1Gi)


def test_node_annotation_thresholds_override_the_args_and_daemonset_pods_pass():
    lenient = {"scheduling.koordinator.sh/usage-thresholds": '{"usageThresholds":{"cpu":97}}'}
    fw = framework(
        [node("hot", annotations=lenient), node("strict")],
        [metric("hot", "3", "4Gi"), metric("strict", "3", "4Gi")],
    )
    # (3000 + 850) / 4000 = 96.25 -> 96 <= 97 on the annotated node only
    assert fw.explain(pod_info(pod("p")))["filtered"] == {"strict": ["node(s) cpu usage exceed threshold"]}
    assert fw.explain(pod_info(pod("ds", owner="DaemonSet")))["filtered"] == {}


def test_prod_pods_are_held_to_prod_thresholds_over_prod_usage():
    prod_pod = pod("web", node_name="n", priority=9500)
    batch_pod = pod("job", node_name="n", priority=5500, requests={"kubernetes.io/batch-cpu": "1000"})
    report = metric(
        "n",
        "3500m",
        "1Gi",
        updated=NOW - 10,
        pods=[
            {"namespace": "default", "name": "web", "podUsage": {"resources": {"cpu": "1", "memory": "1Gi"}}},
            {"namespace": "default", "name": "job", "podUsage": {"resources": {"cpu": "2", "memory": "1Gi"}}},
        ],
    )
    for p in (prod_pod, batch_pod):  # reported long after they were scheduled: not estimated
        p["status"] = {
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(NOW - 900)}
            ]
        }
    args = {"usageThresholds": {"cpu": 65}, "prodUsageThresholds": {"cpu": 55}}
    batch_node = node("n")
    batch_node["status"]["allocatable"].update(
        {"kubernetes.io/batch-cpu": "4000", "kubernetes.io/batch-memory": "8Gi"}
    )
    fw = framework([batch_node], [report], args, bound=[prod_pod, batch_pod])
    # a prod pod sees prod usage: 1000 + 850 of 4000 = 46% <= 55
    assert fw.explain(pod_info(pod("new-web", priority=9500)))["filtered"] == {}
    # a batch pod sees the node: 3500 + 850 = 96% > 65
    assert fw.explain(pod_info(pod("new-job", priority=5500, requests={"kubernetes.io/batch-cpu": "1000"})))[
        "filtered"
    ] == {"n": ["node(s) cpu usage exceed threshold"]}


def test_the_dominant_resource_weight_adds_the_lowest_resource_score():
    # cpu 50 (weight 1), memory 90 (weight 1), dominant 50 (weight 2): (50 + 90 + 100) / 4 = 60
    assert load_score([(0, 1), (1, 1)], 2, (2000, 1 * GI), (4000, 10 * GI)) == 60
    assert load_score([(0, 1), (1, 1)], 0, (2000, 1 * GI), (4000, 10 * GI)) == 70
    assert load_score([], 0, (), ()) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"resourceWeights": {"cpu": 0}},
            "resourceWeights[cpu]: Invalid value: 0: must be between 1 and 100",
        ),
        ({"usageThresholds": {"cpu": 101}}, "usageThresholds[cpu]: Invalid value: 101"),
        ({"nodeMetricExpirationSeconds": 0}, "nodeMetricExpirationSeconds: Invalid value: 0"),
        ({"dominantResourceWeight": 101}, "dominantResourceWeight: Invalid value: 101"),
        ({"estimatedScalingFactors": {"memory": 0}}, "estimatedScalingFactors[memory]"),
        ({"aggregated": {"usageAggregationType": "p42"}}, "usageAggregationType: Unsupported value: 'p42'"),
        ({"prodUsageThresholds": {"cpu": 70}}, "must not exceed usageThresholds[cpu] (65)"),
        ({"bogus": 1}, "unknown field(s) ['bogus']"),
    ],
)
def test_bad_args_are_refused_naming_the_field(args: Obj, message: str):
    with pytest.raises(
        ConfigError,
        match=r".*" + message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)"),
    ):
        config(args)


def test_defaults_follow_upstream():
    args = load_aware_args(None)
    assert args.node_metric_expiration_s == 180
    assert dict(args.resource_weights) == {"cpu": 1, "memory": 1}
    assert dict(args.usage_thresholds) == {"cpu": 65, "memory": 95}
    assert dict(args.estimated_scaling_factors) == {"cpu": 85, "memory": 70}
    assert args.filter_expired_node_metrics
    assert not args.enable_schedule_when_node_metrics_expired
    # only a dominant weight: no default resource weights
    assert dict(load_aware_args({"dominantResourceWeight": 1}).resource_weights) == {}


def node_of(fake: FakeApiServer, name: str) -> str | None:
    return (fake.get(res.PODS, name, "default").get("spec") or {}).get("nodeName")


async def test_the_live_scheduler_avoids_the_hot_node_and_retries_when_it_cools():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "slo.koordinator.sh_nodemetrics.yaml")
        fake.create(res.NODES, node("hot"))
        report = metric("hot", "3500m", "4Gi", updated=time.time())
        fake.create(res.NODE_METRICS, report)  # the status is written apart, as the koordlet does
        fake.update(
            res.NODE_METRICS,
            {**fake.get(res.NODE_METRICS, "hot"), "status": report["status"]},
            subresource="status",
        )
        fake.create(res.PODS, pod("p"))
        async with running(fake, config({"filterExpiredNodeMetrics": False})) as scheduler:
            await eventually(lambda: scheduler.queue.pending()["unschedulable"] == 1)
            assert node_of(fake, "p") is None
            # the koordlet reports the node cooler: the NodeMetric event moves the pod
            cooled = fake.get(res.NODE_METRICS, "hot")
            cooled["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = "500m"
            fake.update(res.NODE_METRICS, cooled, subresource="status")
            await eventually(lambda: node_of(fake, "p") == "hot")


def test_pods_placed_and_confirmed_shift_the_load_exactly_as_a_recomputation():
    fw = framework([node("n")], [metric("n", "1", "1Gi")])
    plugin = next(f for f in fw.filters if isinstance(f, LoadAwareScheduling))
    fw.schedule(pod_info(pod("warm-up")))  # the loads and a mask exist
    for i in range(3):
        assumed = pod_info(pod(f"p{i}", "500m", "1Gi"))
        fw.cluster.place(assumed, "n")
        # its binding confirmed: the same pod, bound, with its PodScheduled time
        confirmed = pod(f"p{i}", "500m", "1Gi", node_name="n")
        confirmed["status"] = {
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(NOW)}]
        }
        fw.cluster.place(pod_info(confirmed), "n")
    fw.cluster.unplace("default/p1")
    shifted = plugin.load_of(fw.cluster, "n")
    plugin._changed("n")  # recompute from the node's pods
    recomputed = plugin.load_of(fw.cluster, "n")
    assert shifted == recomputed
    assert recomputed is not None
    assert recomputed.score_used == (1000 + 2 * 425, GI + 2 * 751619277)


def bound(name: str, cpu: str = "1", *, scheduled: float = NOW - 3600, priority: int | None = None) -> Obj:
    """A pod bound to node ``n`` (PodScheduled at ``scheduled``)."""
    placed = pod(name, cpu, "1Gi", node_name="n", priority=priority)
    placed["status"] = {
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(scheduled)}
        ]
    }
    return placed


def usage_of(name: str, cpu: str, memory: str = "1Gi", priority: str = "") -> Obj:
    entry: Obj = {
        "namespace": "default",
        "name": name,
        "podUsage": {"resources": {"cpu": cpu, "memory": memory}},
    }
    if priority:
        entry["priority"] = priority
    return entry


def filtered(fw: Framework, incoming: Obj) -> Any:
    """The nodes the framework filters the pod out of, with their reasons."""
    return fw.explain(pod_info(incoming))["filtered"]


def test_aggregated_usage_without_a_window_falls_back_to_the_node_usage():
    # no usageAggregatedDuration and no p95 in the report (only avg): upstream reads the
    # node's plain usage, 3900m + 85m of 4000m = 100% > 65
    args = {"aggregated": {"usageThresholds": {"cpu": 65}, "usageAggregationType": "p95"}}
    report = metric("n", "3900m", "1Gi")
    report["status"]["nodeMetric"]["aggregatedNodeUsages"] = [
        {"duration": "1m", "usage": {"avg": {"resources": {"cpu": "100m"}}}}
    ]
    for metrics in ([metric("n", "3900m", "1Gi")], [report]):
        fw = framework([node("n")], metrics, args)
        assert filtered(fw, pod("p", "100m", "100Mi")) == {
            "n": ["node(s) cpu aggregated usage exceed threshold"]
        }
    # the score alike: CPU 3000 + 850 of 4000 -> 3, memory 4Gi + 751619277 of 16Gi -> 70
    scoring = {"usageThresholds": {"cpu": 0, "memory": 0}, "aggregated": {"scoreAggregationType": "p95"}}
    fw = framework([node("n")], [metric("n", "3", "4Gi")], scoring)
    assert fw.explain(pod_info(pod("p")))["scores"]["n"]["LoadAwareScheduling"] == 36


def test_a_report_without_the_aggregation_window_counts_every_pod_at_its_estimate():
    # three pods of 1 CPU (estimate 850m each) reported at 2 CPUs long ago; the report has
    # no 5m p95: upstream counts each pod at its estimate, not at its usage nor at nothing
    window = {"usageAggregationType": "p95", "usageAggregatedDuration": "5m"}
    report = metric("n", "3900m", "1Gi", pods=[usage_of(f"e{i}", "2", "2Gi") for i in range(3)])
    report["status"]["nodeMetric"]["aggregatedNodeUsages"] = [
        {"duration": "1m", "usage": {"p95": {"resources": {"cpu": "3900m", "memory": "1Gi"}}}}
    ]
    placed = [bound(f"e{i}") for i in range(3)]
    fw = framework([node("n")], [report], {"aggregated": {**window, "usageThresholds": {"cpu": 65}}}, placed)
    # 3 x 850 + 85 = 2635 of 4000 = 65.9% -> 66 > 65
    assert filtered(fw, pod("p", "100m", "100Mi")) == {"n": ["node(s) cpu aggregated usage exceed threshold"]}
    scoring = {
        "usageThresholds": {"cpu": 0, "memory": 0},
        "aggregated": {"scoreAggregationType": "p95", "scoreAggregatedDuration": "5m"},
    }
    fw = framework([node("n")], [report], scoring, placed)
    # CPU 2635 of 4000 -> 34; memory 3 x 751619277 + 73400320 of 16Gi -> 86
    assert fw.explain(pod_info(pod("p", "100m", "100Mi")))["scores"]["n"]["LoadAwareScheduling"] == 60


def test_a_report_without_node_usage_passes_the_filter_and_scores_zero():
    report = metric("n", "0", "0")
    del report["status"]["nodeMetric"]
    fw = framework([node("n"), node("m")], [report, metric("m", "1", "1Gi")], bound=[bound("big", "2")])
    explained = fw.explain(pod_info(pod("p")))
    assert explained["filtered"] == {}
    assert explained["scores"]["n"]["LoadAwareScheduling"] == 0
    assert explained["scores"]["m"]["LoadAwareScheduling"] > 0


@pytest.mark.parametrize(
    ("args", "annotations", "priority", "expected"),
    [
        ({}, {}, None, {"n": ["node(s) nodeMetric expired"]}),
        ({"usageThresholds": {"cpu": 0, "memory": 0}}, {}, None, {}),
        ({"aggregated": {"usageThresholds": {"cpu": 0}, "usageAggregationType": "p95"}}, {}, None, {}),
        ({}, {"usageThresholds": {"cpu": 0, "memory": 0}}, None, {}),
        # all-zero prod thresholds: a prod pod is held to the others' (none here)
        ({"usageThresholds": {"cpu": 0, "memory": 0}, "prodUsageThresholds": {"cpu": 0}}, {}, 9500, {}),
        ({"prodUsageThresholds": {"cpu": 50}}, {}, 9500, {"n": ["node(s) nodeMetric expired"]}),
        ({"enableScheduleWhenNodeMetricsExpired": True}, {}, None, {}),
    ],
    ids=["default", "zero", "aggregated-zero", "annotation-zero", "prod-zero", "prod", "enabled"],
)
def test_an_expired_report_rejects_only_where_thresholds_hold(args, annotations, priority, expected):
    marked = {"scheduling.koordinator.sh/usage-thresholds": json.dumps(annotations)} if annotations else {}
    fw = framework([node("n", annotations=marked)], [metric("n", "100m", "1Gi", updated=NOW - 3600)], args)
    assert filtered(fw, pod("p", priority=priority)) == expected


@pytest.mark.parametrize(
    ("initialized", "expected"),
    [
        # initialized 90 s ago + 60 s: the deadline passed before the report (10 s ago), so
        # the report covers the pod although 600 s after scheduling are not over:
        # 1700 + 850 of 4000 = 64%
        (True, {}),
        # not initialized: scheduled 100 s ago + 600 s, still estimated: its 850 less the
        # 100 reported add 750: 82%
        (False, {"n": ["node(s) cpu usage exceed threshold"]}),
    ],
    ids=["initialized", "scheduled"],
)
def test_the_initialized_deadline_replaces_the_scheduled_one(initialized, expected):
    busy = bound("busy", scheduled=NOW - 100)
    if initialized:
        busy["status"]["conditions"].append(
            {"type": "Initialized", "status": "True", "lastTransitionTime": format_time(NOW - 90)}
        )
    report = metric("n", "1700m", "1Gi", pods=[usage_of("busy", "100m")])
    args = {"estimatedSecondsAfterPodScheduled": 600, "estimatedSecondsAfterInitialized": 60}
    fw = framework([node("n")], [report], args, [busy])
    assert filtered(fw, pod("p")) == expected


@pytest.mark.parametrize(
    ("annotations", "deadline"),
    [
        ({}, NOW - 90 + 60),
        ({"scheduling.koordinator.sh/load-estimated-seconds-after-initialized": "0"}, NOW - 100 + 600),
        ({"scheduling.koordinator.sh/load-estimated-seconds-after-initialized": "-1"}, NOW - 90 + 60),
        ({"scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled": "0"}, NOW - 90 + 60),
    ],
    ids=["args", "custom-off", "custom-negative", "custom-scheduled-off"],
)
def test_estimation_deadlines_follow_upstream(annotations, deadline):
    busy = bound("busy", scheduled=NOW - 100)
    busy["status"]["conditions"].append(
        {"type": "Initialized", "status": "True", "lastTransitionTime": format_time(NOW - 90)}
    )
    busy["metadata"]["annotations"] = annotations
    args = load_aware_args(
        {
            "estimatedSecondsAfterPodScheduled": 600,
            "estimatedSecondsAfterInitialized": 60,
            "allowCustomizeEstimation": True,
        }
    )
    assert estimated_deadline(pod_info(busy), args, NOW) == deadline


@pytest.mark.parametrize(
    ("reported_as", "expected"),
    [
        # prod in its spec and in the report: its usage, 300m: 1000 + 300 + 850 = 54%
        ("koord-prod", {}),
        # the report does not say prod: its full estimate, 850m: 1000 + 850 + 850 = 68%
        ("koord-batch", {"n": ["node(s) cpu usage exceed threshold"]}),
        ("", {"n": ["node(s) cpu usage exceed threshold"]}),
    ],
    ids=["prod", "batch", "none"],
)
def test_prod_usage_counts_a_pods_usage_only_when_the_report_says_prod_too(reported_as, expected):
    report = metric(
        "n",
        "3500m",
        "1Gi",
        pods=[
            usage_of("web", "1", priority="koord-prod"),
            usage_of("changed", "300m", priority=reported_as),
            # prod in the report only: not a prod pod, not counted
            usage_of("promoted", "2", priority="koord-prod"),
        ],
    )
    placed = [bound("web", priority=9500), bound("changed", priority=9500), bound("promoted", priority=5500)]
    args = {"usageThresholds": {"cpu": 65}, "prodUsageThresholds": {"cpu": 55}}
    fw = framework([node("n")], [report], args, placed)
    assert filtered(fw, pod("new-web", priority=9500)) == expected
