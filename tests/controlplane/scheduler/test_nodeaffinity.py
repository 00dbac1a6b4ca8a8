"""NodeAffinity: nodeSelector, required node affinity (every operator, matchFields, OR of
terms, an empty term matching nothing) and the scheduler-enforced addedAffinity, with
upstream's reasons; the byte-mask path agrees with the per-node explanation."""

from __future__ import annotations

import random
from typing import Any

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import parse
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.podinfo import pod_info

Obj = dict[str, Any]
POD_REASON = "node(s) didn't match Pod's node affinity/selector"


def node(name: str, **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }


def pod(selector: Obj | None = None, terms: list[Obj] | None = None) -> Obj:
    spec: Obj = {"schedulerName": "koord-scheduler", "containers": [{"name": "c", "image": "x"}]}
    if selector:
        spec["nodeSelector"] = selector
    if terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def expr(key: str, operator: str, *values: str) -> Obj:
    return {"key": key, "operator": operator, "values": list(values)}


CLUSTER = [
    node("a", zone="z1", disk="ssd", cores="16"),
    node("b", zone="z2", disk="hdd", cores="4"),
    node("c", zone="z3", cores="x"),
    node("d"),
]


def feasible(obj: Obj, config: Any = None) -> set[str]:
    cluster = Cluster()
    for n in CLUSTER:
        cluster.set_node(n)
    framework = Framework((config or parse(None)).profiles[0], cluster, seed=1)
    info = pod_info(obj)
    explained = framework.explain(info)
    mask = framework.candidates(info)
    # the mask and the per-node explanation agree
    assert cluster.names_of(mask) == set(explained["scores"])
    return set(explained["scores"])


def test_operators_and_terms_as_upstream():
    assert feasible(pod({"zone": "z1"})) == {"a"}
    assert feasible(pod(terms=[{"matchExpressions": [expr("zone", "In", "z1", "z2")]}])) == {"a", "b"}
    # NotIn and DoesNotExist also match nodes without the key
    assert feasible(pod(terms=[{"matchExpressions": [expr("disk", "NotIn", "ssd")]}])) == {"b", "c", "d"}
    assert feasible(pod(terms=[{"matchExpressions": [expr("disk", "DoesNotExist")]}])) == {"c", "d"}
    assert feasible(pod(terms=[{"matchExpressions": [expr("disk", "Exists")]}])) == {"a", "b"}
    # Gt/Lt compare integers; a label that is not one never matches
    assert feasible(pod(terms=[{"matchExpressions": [expr("cores", "Gt", "8")]}])) == {"a"}
    assert feasible(pod(terms=[{"matchExpressions": [expr("cores", "Lt", "8")]}])) == {"b"}
    # expressions of a term AND, terms OR; matchFields select by name
    terms = [
        {"matchExpressions": [expr("zone", "In", "z1", "z2"), expr("disk", "In", "hdd")]},
        {"matchFields": [expr("metadata.name", "In", "d")]},
    ]
    assert feasible(pod(terms=terms)) == {"b", "d"}
    # an empty term matches nothing; so do no terms at all
    assert feasible(pod(terms=[{}])) == set()
    assert feasible(pod(terms=[])) == set()
    # nodeSelector and affinity both hold
    assert feasible(pod({"disk": "ssd"}, [{"matchExpressions": [expr("zone", "In", "z2")]}])) == set()


def test_unschedulable_message_and_enforced_affinity():
    cluster = Cluster()
    for n in CLUSTER:
        cluster.set_node(n)
    config = parse(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": "koord-scheduler",
                    "pluginConfig": [
                        {
                            "name": "NodeAffinity",
                            "args": {
                                "addedAffinity": {
                                    "requiredDuringSchedulingIgnoredDuringExecution": {
                                        "nodeSelectorTerms": [{"matchExpressions": [expr("zone", "Exists")]}]
                                    }
                                }
                            },
                        }
                    ],
                }
            ],
        }
    )
    framework = Framework(config.profiles[0], cluster, seed=1)
    result = framework.schedule(pod_info(pod({"zone": "z9"})))
    assert result.node is None
    assert result.message == (
        f"0/4 nodes are available: 1 node(s) didn't match scheduler-enforced node affinity, 3 {POD_REASON}. "
        "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.."
    )
    assert result.rejected_by == {"NodeAffinity"}
    assert feasible(pod(), config) == {"a", "b", "c"}  # d has no zone: enforced away


def test_the_label_index_follows_node_updates_and_deletes():
    cluster = Cluster()
    for n in CLUSTER:
        cluster.set_node(n)
    cluster.set_node(node("a", zone="z2"))
    cluster.remove_node("b")
    framework = Framework(parse(None).profiles[0], cluster, seed=1)
    assert set(framework.explain(pod_info(pod({"zone": "z2"})))["scores"]) == {"a"}
    assert "z1" not in cluster.labels.get("zone", {})
    assert "disk" not in cluster.labels  # the last node with it changed or went


def test_random_clusters_mask_equals_explanation():
    rng = random.Random(11)
    keys, values = ["zone", "disk", "gen"], ["1", "2", "3", "x"]
    for _ in range(40):
        cluster = Cluster()
        for i in range(rng.randint(1, 120)):
            labels = {k: rng.choice(values) for k in keys if rng.random() < 0.7}
            cluster.set_node(node(f"n{i}", **labels))
        framework = Framework(parse(None).profiles[0], cluster, seed=1)
        for _ in range(10):
            terms = [
                {
                    "matchExpressions": [
                        expr(rng.choice(keys), op, *rng.sample(values, rng.randint(1, 2)))
                        if op in ("In", "NotIn")
                        else expr(rng.choice(keys), op, rng.choice(["1", "2"]))
                        if op in ("Gt", "Lt")
                        else expr(rng.choice(keys), op)
                        for op in rng.sample(
                            ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"], rng.randint(1, 3)
                        )
                    ]
                }
                for _ in range(rng.randint(1, 3))
            ]
            info = pod_info(pod(terms=terms))
            (affinity,) = [f for f in framework.filters if f.NAME == "NodeAffinity"]
            mask = affinity.mask(info, cluster)
            assert mask is not None
            passing = cluster.names_of(mask)
            assert passing == {
                n.name for n in cluster.nodes.values() if affinity.explain(info, n, cluster) is None
            }
