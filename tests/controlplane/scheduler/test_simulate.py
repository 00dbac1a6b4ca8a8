"""``koord-scheduler simulate`` and the framework behind it: placements, per-node reasons,
scores and upstream's FailedScheduling text, hand-computed from upstream's rules."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.scheduler.__main__ import main
from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import parse
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.podinfo import pod_info

Obj = dict[str, Any]


def node(name: str, cpu: str = "4", memory: str = "32Gi", pods: str = "110", **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}},
    }


def pod(
    name: str,
    cpu: str | None = None,
    memory: str | None = None,
    *,
    scheduler: str = "koord-scheduler",
    node_name: str | None = None,
    tolerations: Sequence[Obj] = (),
) -> Obj:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}],
        "tolerations": list(tolerations),
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def write(tmp_path: Path, name: str, objects: Sequence[Obj]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def run(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nodes: list[Obj],
    pods: list[Obj],
    objects: Sequence[Obj] = (),
) -> dict[str, Any]:
    args = [
        "simulate",
        "--nodes",
        write(tmp_path, "n.yaml", nodes),
        "--pods",
        write(tmp_path, "p.yaml", pods),
    ]
    if objects:
        args += ["--objects", write(tmp_path, "o.yaml", objects)]
    assert main([*args, "--seed", "1", "-o", "json"]) == 0
    return {r["pod"]: r for r in json.loads(capsys.readouterr().out)}


NODES = [
    node("n1"),
    node("n2", unschedulable=True),
    node("n3", cpu="8", memory="64Gi", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    node("n4", cpu="2", memory="8Gi"),
]


def test_where_each_pod_goes_and_why(tmp_path, capsys):
    out = run(
        tmp_path,
        capsys,
        NODES,
        [pod("web", "1", "2Gi"), pod("big", "6", "2Gi"), pod("other", scheduler="default-scheduler")],
    )
    web = out["default/web"]
    assert web["node"] == "n1"
    assert web["status"] == "Scheduled"
    assert web["filtered"] == {
        "n2": ["node(s) were unschedulable"],
        "n3": ["node(s) had untolerated taint {dedicated: gpu}"],
    }
    # n1: cpu (4000 - 1000) * 100 / 4000 = 75, memory (32 - 2) * 100 / 32 = 93 -> 84;
    #     balanced |0.25 - 0.0625| / 2 = 0.09375 -> 90
    # n4: cpu 50, memory 75 -> 62; balanced |0.5 - 0.25| / 2 = 0.125 -> 87
    # TaintToleration: no PreferNoSchedule taints anywhere -> 100 each, weight 3;
    # NodeAffinity skips a pod without preferred terms
    assert web["scores"] == {
        "n1": {
            "NodeResourcesFit": 84,
            "NodeResourcesBalancedAllocation": 90,
            "TaintToleration": 100,
            "total": 474,
        },
        "n4": {
            "NodeResourcesFit": 62,
            "NodeResourcesBalancedAllocation": 87,
            "TaintToleration": 100,
            "total": 449,
        },
    }
    big = out["default/big"]
    assert big["node"] is None
    assert big["status"] == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
        "1 node(s) were unschedulable, 2 Insufficient cpu. preemption: 0/4 nodes are available: "
        "2 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.."
    )
    assert big["filtered"]["n1"] == ["Insufficient cpu"]
    assert out["default/other"]["node"] is None
    assert "schedulerName 'default-scheduler'" in out["default/other"]["status"]


def test_placed_pods_count_and_each_placement_is_assumed_for_the_next(tmp_path, capsys):
    nodes = [node("a", cpu="2", pods="3"), node("b", cpu="2")]
    bound = [pod("running", "1500m", node_name="a")]
    out = run(tmp_path, capsys, nodes, [pod("p1", "1"), pod("p2", "1"), pod("p3", "1")], bound)
    # a has 500m left: p1 and p2 go to b (the second one assumed on it already), p3 fits nowhere
    assert [out[f"default/p{i}"]["node"] for i in (1, 2, 3)] == ["b", "b", None]
    assert out["default/p3"]["status"] == (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
    )


def test_tolerations_node_name_and_too_many_pods(tmp_path, capsys):
    nodes = [node("a", pods="1"), NODES[1], NODES[2]]
    tolerate_all = [{"operator": "Exists"}]
    out = run(
        tmp_path,
        capsys,
        nodes,
        [
            pod("pinned", node_name="n3", tolerations=tolerate_all),
            pod("anywhere", tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]),
        ],
        [pod("filler", node_name="a")],
    )
    pinned = out["default/pinned"]
    assert pinned["node"] == "n3"
    assert pinned["filtered"] == {
        "a": ["node(s) didn't match the requested node name"],
        "n2": ["node(s) didn't match the requested node name"],
    }
    anywhere = out["default/anywhere"]
    assert anywhere["node"] == "n3"
    assert anywhere["filtered"] == {"a": ["Too many pods"], "n2": ["node(s) were unschedulable"]}


def test_input_errors_exit_2(tmp_path, capsys):
    nodes = write(tmp_path, "n.yaml", [pod("not-a-node")])
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--nodes", nodes, "--pods", nodes])
    assert exit_.value.code == 2
    assert "expected only Node objects, found Pod" in capsys.readouterr().err


def random_cluster(rng: random.Random) -> tuple[Cluster, list[Obj]]:
    cluster = Cluster()
    for i in range(rng.randint(1, 150)):
        spec: Obj = {}
        if rng.random() < 0.1:
            spec["unschedulable"] = True
        taints = []
        if rng.random() < 0.2:
            taints.append({"key": rng.choice(["a", "b"]), "value": "v", "effect": "NoSchedule"})
        if rng.random() < 0.3:
            taints.append({"key": rng.choice(["c", "d"]), "value": "v", "effect": "PreferNoSchedule"})
        spec["taints"] = taints
        obj = node(
            f"n{i}", str(rng.randint(1, 16)), f"{rng.randint(1, 64)}Gi", str(rng.randint(1, 20)), **spec
        )
        obj["metadata"]["labels"] = {"zone": rng.choice(["z1", "z2", "z3"])}
        cluster.set_node(obj)
    pods = []
    for i in range(30):
        obj = pod(f"p{i}", f"{rng.randint(0, 4000)}m", f"{rng.randint(0, 8)}Gi")
        if rng.random() < 0.5:
            zone = {"key": "zone", "operator": "In", "values": [rng.choice(["z1", "z2"])]}
            obj["spec"]["affinity"] = {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": rng.randint(1, 100), "preference": {"matchExpressions": [zone]}}
                    ]
                }
            }
        pods.append(obj)
    return cluster, pods


def test_the_explanation_agrees_with_the_placement(backend):
    """The node a cycle picks is a best-scored node of the window ``explain`` reports, and a
    pod placed nowhere has every node filtered, on random clusters."""
    rng = random.Random(5)
    for _ in range(20):
        cluster, pods = random_cluster(rng)
        framework = Framework(parse(None).profiles[0], cluster, seed=rng.getrandbits(32) | 1)
        for obj in pods:
            info = pod_info(obj)
            explained = framework.explain(info)
            result = framework.schedule(info)
            if result.node is None:
                assert set(explained["filtered"]) == set(cluster.nodes)
                assert explained["scores"] == {}
                continue
            best = max(s["total"] for s in explained["scores"].values())
            assert explained["scores"][result.node]["total"] == best
            cluster.place(info, result.node)


def test_sampling_rotates_the_start_over_a_large_cluster(backend):
    cluster = Cluster()
    for i in range(1000):
        cluster.set_node(node(f"n{i:04}"))
    framework = Framework(parse(None).profiles[0], cluster, seed=3)
    first = framework.schedule(pod_info(pod("a", "100m")))
    # adaptive: 1000 nodes -> 50 - 1000 / 125 = 42% -> 420 feasible nodes looked for
    assert (first.feasible, first.processed) == (420, 420)
    assert framework.next_start == 420
    second = framework.schedule(pod_info(pod("b", "100m")))
    assert second.processed == 420
    assert framework.next_start == 840


def test_prefer_no_schedule_taints_and_preferred_affinity_steer_the_choice(tmp_path, capsys):
    nodes = [
        node("a", taints=[{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]),
        node("b"),
        node("c"),
    ]
    nodes[1]["metadata"]["labels"] = {"zone": "z2"}
    preferred = pod("p", "1")
    preferred["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]},
                }
            ]
        }
    }
    plain = pod("q", "1")
    plain["spec"]["tolerations"] = [{"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"}]
    out = run(tmp_path, capsys, nodes, [preferred, plain])
    scores = out["default/p"]["scores"]
    # TaintToleration (reverse, weight 3): a has one intolerable taint -> 0; b and c -> 100
    # NodeAffinity (weight 2): only b matches its preferred term -> 100, the others 0
    assert {n: (s["TaintToleration"], s["NodeAffinity"]) for n, s in scores.items()} == {
        "a": (0, 0),
        "b": (100, 100),
        "c": (100, 0),
    }
    assert out["default/p"]["node"] == "b"
    # a pod tolerating the taint sees no difference from it
    assert {n: s["TaintToleration"] for n, s in out["default/q"]["scores"].items()} == {
        "a": 100,
        "b": 100,
        "c": 100,
    }


def with_port(obj: Obj, port: int, ip: str | None = None, protocol: str | None = None) -> Obj:
    spec: Obj = {"containerPort": port, "hostPort": port}
    if ip:
        spec["hostIP"] = ip
    if protocol:
        spec["protocol"] = protocol
    obj["spec"]["containers"][0]["ports"] = [spec]
    return obj


def test_host_ports_conflict_as_upstream(tmp_path, capsys):
    nodes = [node("a"), node("b")]
    bound = [
        with_port(pod("web", node_name="a"), 8080),
        with_port(pod("dns", node_name="b"), 53, "10.0.0.1", "UDP"),
    ]
    out = run(
        tmp_path,
        capsys,
        nodes,
        [
            with_port(pod("same"), 8080),  # a uses 8080 on every address: only b
            with_port(pod("udp-other-ip"), 53, "10.0.0.2", "UDP"),  # another IP: both nodes
            with_port(pod("udp-any"), 53, None, "UDP"),  # every address conflicts with b's 10.0.0.1
            with_port(pod("tcp-53"), 53),  # another protocol: both
        ],
        bound,
    )
    reason = "node(s) didn't have free ports for the requested pod ports"
    assert out["default/same"]["filtered"] == {"a": [reason]}
    assert out["default/same"]["node"] == "b"
    assert out["default/udp-other-ip"]["filtered"] == {}
    # every address conflicts with b's 10.0.0.1, and with the node the pod before took 10.0.0.2 on
    taken = out["default/udp-other-ip"]["node"]
    assert out["default/udp-any"]["filtered"] == {n: [reason] for n in {"b", taken}}
    assert out["default/tcp-53"]["filtered"] == {}


def test_simulate_says_whom_a_pod_would_preempt(tmp_path, capsys):
    low = pod("low", "3", node_name="a")
    low["spec"]["priority"] = 1
    high = pod("high", "3")
    high["spec"]["priority"] = 100
    out = run(tmp_path, capsys, [node("a")], [high], [low])
    assert out["default/high"]["node"] is None
    assert out["default/high"]["preemption"] == {"node": "a", "victims": ["default/low"]}
