"""NodeResourcesFitPlus and ScarceResourceAvoidance: per-resource strategies and scarce-node
avoidance, hand-computed from upstream's rules, through the framework."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import ConfigError, parse
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.plugins.scarceresource import avoidance_score
from controlplane.scheduler.podinfo import pod_info

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
_DEFAULT_SCORES = (
    "NodeResourcesFit",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
    "TaintToleration",
    "NodeAffinity",
    "PodTopologySpread",
    "InterPodAffinity",
)


def node(name: str, cpu: str = "4", memory: str = "8Gi", gpus: int = 0) -> Obj:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        allocatable[GPU] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": allocatable},
    }


def pod(name: str, requests: Obj, node_name: str = "") -> Obj:
    spec: Obj = {
        "schedulerName": "koord-scheduler",
        "containers": [{"name": "c", "resources": {"requests": requests}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def framework(plugin: str, args: Obj, nodes: list[Obj], bound: Sequence[Obj] = ()) -> Framework:
    config = parse(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": "koord-scheduler",
                    "plugins": {
                        "score": {
                            "enabled": [{"name": plugin, "weight": 1}],
                            "disabled": [{"name": n} for n in _DEFAULT_SCORES],
                        }
                    },
                    "pluginConfig": [{"name": plugin, "args": args}],
                }
            ],
        }
    )
    cluster = Cluster()
    for n in nodes:
        cluster.set_node(n)
    for p in bound:
        info = pod_info(p)
        cluster.place(info, info.node_name)
    return Framework(config.profiles[0], cluster, seed=1)


FIT_PLUS = {
    "resources": {
        "cpu": {"type": "MostAllocated", "weight": 2},
        GPU: {"type": "LeastAllocated", "weight": 1},
    }
}


def test_fit_plus_scores_each_requested_resource_by_its_own_strategy():
    fw = framework(
        "NodeResourcesFitPlus",
        FIT_PLUS,
        [node("busy", gpus=4), node("idle", gpus=4), node("cpu-only")],
        bound=[pod("w", {"cpu": "2", GPU: "2"}, node_name="busy")],
    )
    scores = fw.explain(pod_info(pod("p", {"cpu": "1", GPU: "1"})))["scores"]
    # busy: cpu MostAllocated (2000 + 1000) * 100 / 4000 = 75; gpu LeastAllocated (4 - 3) * 100 / 4 = 25;
    # (75 * 2 + 25 * 1) / 3 = 58. idle: cpu 25, gpu 75 -> (50 + 75) / 3 = 41
    assert scores["busy"]["NodeResourcesFitPlus"] == 58
    assert scores["idle"]["NodeResourcesFitPlus"] == 41
    assert "cpu-only" not in scores  # filtered: Insufficient nvidia.com/gpu
    assert fw.schedule(pod_info(pod("p", {"cpu": "1", GPU: "1"}))).node == "busy"
    # a pod requesting no configured resource scores 100 everywhere; CPU counts the
    # non-zero default (100m) only when the pod requests CPU at all
    plain = fw.explain(pod_info(pod("q", {"memory": "1Gi"})))["scores"]
    assert {name: s["NodeResourcesFitPlus"] for name, s in plain.items()} == {
        "busy": 100,
        "idle": 100,
        "cpu-only": 100,
    }


def test_scarce_resource_avoidance_keeps_gpu_nodes_for_gpu_pods():
    fw = framework("ScarceResourceAvoidance", {"resources": [GPU]}, [node("gpu", gpus=2), node("plain")])
    cpu_pod = fw.explain(pod_info(pod("p", {"cpu": "1"})))["scores"]
    # gpu node: its types {cpu, memory, gpu} less the pod's {cpu} = {memory, gpu}, of which
    # {gpu} is scarce: (2 - 1) * 100 / 2 = 50; plain: no scarce type left over -> 100
    assert cpu_pod["gpu"]["ScarceResourceAvoidance"] == 50
    assert cpu_pod["plain"]["ScarceResourceAvoidance"] == 100
    assert fw.schedule(pod_info(pod("p", {"cpu": "1"}))).node == "plain"
    gpu_pod = fw.explain(pod_info(pod("g", {"cpu": "1", GPU: "1"})))["scores"]
    assert (
        gpu_pod["gpu"]["ScarceResourceAvoidance"] == 100
    )  # the pod asks for it: nothing scarce is left over


def test_avoidance_score_edges():
    assert avoidance_score(frozenset(), frozenset(), frozenset({GPU})) == 100
    assert avoidance_score(frozenset({"cpu", GPU, "rdma"}), frozenset({"cpu"}), frozenset({GPU, "rdma"})) == 0
    assert avoidance_score(frozenset({"cpu", "memory", GPU}), frozenset(), frozenset({GPU})) == 66


@pytest.mark.parametrize(
    ("plugin", "args", "message"),
    [
        (
            "NodeResourcesFitPlus",
            {"resources": {"cpu": {"type": "Balanced", "weight": 1}}},
            "Unsupported value: 'Balanced'",
        ),
        (
            "NodeResourcesFitPlus",
            {"resources": {"cpu": {"type": "MostAllocated", "weight": 0}}},
            "weight: Invalid value: 0",
        ),
        ("ScarceResourceAvoidance", {"resources": "nvidia.com/gpu"}, "must be a list of resource names"),
    ],
)
def test_bad_args_are_refused(plugin: str, args: Obj, message: str):
    with pytest.raises(ConfigError, match=message):
        framework(plugin, args, [])


def test_a_scheduling_hint_narrows_the_nodes_and_a_broken_one_fails_the_pod():
    hint = "internal.scheduling.koordinator.sh/scheduling-hint"
    config = parse(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": "koord-scheduler",
                    "plugins": {"preFilter": {"enabled": [{"name": "SchedulingHint"}]}},
                }
            ],
        }
    )
    cluster = Cluster()
    for name in ("a", "b", "c"):
        cluster.set_node(node(name))
    fw = Framework(config.profiles[0], cluster, seed=1)
    hinted = pod("p", {"cpu": "1"})
    hinted["metadata"]["annotations"] = {hint: '{"nodeNames": ["b", "gone"]}'}
    assert fw.schedule(pod_info(hinted)).node == "b"
    hinted["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "8"
    assert fw.schedule(pod_info(hinted)).message.startswith(
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [SchedulingHint]."
    )
    hinted["metadata"]["annotations"] = {hint: "[b]"}
    assert fw.schedule(pod_info(hinted)).message.startswith(
        "0/3 nodes are available: scheduling hint is not JSON:"
    )
