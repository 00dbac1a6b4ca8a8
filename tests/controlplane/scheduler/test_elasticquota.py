"""ElasticQuota in the scheduler against the fake apiserver: a quota tree refuses a pod over
its runtime with upstream's message, and admits it once another tenant's pod ends; the
built-in quotas are created and the quotas' status written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from controlplane.scheduler.config import parse
from koordinator.kube import resources as res
from tests.controlplane.scheduler.live import running
from tests.controlplane.scheduler.quota.builders import cpu_quota
from tests.controlplane.scheduler.test_simulate import write
from tests.polling import eventually
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]
CRDS = Path(__file__).resolve().parents[3] / "crds"
Q = "quota.scheduling.koordinator.sh"

PROFILE: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "koord-scheduler",
            "plugins": {
                "preFilter": {"enabled": [{"name": "ElasticQuota"}]},
                "reserve": {"enabled": [{"name": "ElasticQuota"}]},
            },
        }
    ],
}


def pod(name: str, tenant: str, cpu: str, node: str = "") -> Obj:
    spec: Obj = {
        "schedulerName": "koord-scheduler",
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {f"{Q}/name": tenant}},
        "spec": spec,
    }


def node_of(fake: FakeApiServer, name: str) -> str | None:
    return (fake.get(res.PODS, name, "default").get("spec") or {}).get("nodeName")


async def test_a_pod_over_its_quotas_runtime_waits_until_another_tenant_frees_room():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.sigs.k8s.io_elasticquotas.yaml")
        fake.create(
            res.NODES,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n"},
                "status": {"allocatable": {"cpu": "4", "memory": "64Gi", "pods": "110"}},
            },
        )
        # root -> org (4 CPU) -> a, b (2 CPU each guaranteed, may borrow up to 4)
        fake.create(res.ELASTIC_QUOTAS, cpu_quota("org", "4", "4", is_parent=True))
        fake.create(res.ELASTIC_QUOTAS, cpu_quota("a", "2", "4", parent="org"))
        fake.create(res.ELASTIC_QUOTAS, cpu_quota("b", "2", "4", parent="org"))
        fake.create(res.PODS, pod("a-1", "a", "2", node="n"))
        fake.create(res.PODS, pod("b-1", "b", "2", node="n"))
        fake.create(res.PODS, pod("a-2", "a", "1"))
        async with running(fake, parse(PROFILE)) as scheduler:
            # a asks 3 (min 2), b uses its 2: nothing is left to lend, a's runtime stays 2
            await eventually(
                lambda: any(
                    e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "a-2"
                    for e in fake.list_objects(res.EVENTS, "default")
                )
            )
            (failed,) = [
                e for e in fake.list_objects(res.EVENTS, "default") if e["reason"] == "FailedScheduling"
            ]
            assert failed["message"] == (
                "0/1 nodes are available: Insufficient quotas, quotaName: a, runtime: cpu:2,memory:0, "
                "used: cpu:2, pod's request: cpu:1, exceedDimensions: [cpu]. "
                "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.."
            )
            assert node_of(fake, "a-2") is None
            # b's pod ends: b lends its min, a's runtime grows to its request (3)
            fake.delete(res.PODS, "b-1", "default", gracePeriodSeconds=0)
            await eventually(lambda: node_of(fake, "a-2") == "n")
            assert scheduler.bind_failures == 0
            # the status writer reports the quota's figures on the object
            await eventually(
                lambda: (
                    (fake.get(res.ELASTIC_QUOTAS, "a", "default").get("status") or {})
                    .get("used", {})
                    .get("cpu")
                    == "3"
                ),
                within=10,
            )
            annotations = fake.get(res.ELASTIC_QUOTAS, "a", "default")["metadata"]["annotations"]
            assert f"{Q}/runtime" in annotations


def test_simulate_reports_each_pods_quota_and_refuses_the_one_over_its_runtime(tmp_path: Path):
    from controlplane.scheduler.simulate import simulate

    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n"},
        "status": {"allocatable": {"cpu": "4", "memory": "64Gi", "pods": "110"}},
    }
    objects = [
        cpu_quota("org", "4", "4", is_parent=True),
        cpu_quota("a", "2", "4", parent="org"),
        cpu_quota("b", "2", "4", parent="org"),
        pod("b-1", "b", "2", node="n"),
    ]
    results = simulate(
        parse(PROFILE),
        write(tmp_path, "n.yaml", [node]),
        write(tmp_path, "p.yaml", [pod("a-1", "a", "2"), pod("a-2", "a", "1")]),
        [write(tmp_path, "o.yaml", objects)],
    )
    # a asks 3 (min 2) while b uses its 2 of org's 4: a's runtime is its min
    assert results[0]["node"] == "n"
    assert results[1]["node"] is None
    assert results[1]["status"].startswith("0/1 nodes are available: Insufficient quotas, quotaName: a, ")
    assert results[1]["quota"] == {"name": "a", "runtime": {"cpu": "2", "memory": "0"}, "used": {"cpu": "2"}}


def test_a_pod_over_its_quota_preempts_only_lower_priority_pods_of_its_own_quota():
    from controlplane.scheduler.cluster import Cluster
    from controlplane.scheduler.framework import Framework
    from controlplane.scheduler.plugins.elasticquota import ElasticQuota
    from controlplane.scheduler.podinfo import pod_info

    def prioritized(obj: Obj, priority: int) -> Obj:
        obj["spec"]["priority"] = priority
        obj["metadata"]["uid"] = obj["metadata"]["name"]
        obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
        return obj

    profile = parse(
        {
            **PROFILE,
            "profiles": [
                {
                    **PROFILE["profiles"][0],
                    "plugins": {
                        **PROFILE["profiles"][0]["plugins"],
                        "postFilter": {"enabled": [{"name": "ElasticQuota"}]},
                    },
                }
            ],
        }
    ).profiles[0]
    cluster = Cluster()
    cluster.set_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "4", "memory": "64Gi", "pods": "110"}},
        }
    )
    framework = Framework(profile, cluster, seed=1)
    plugin = framework.plugins["ElasticQuota"]
    assert isinstance(plugin, ElasticQuota)
    plugin.take_object(cpu_quota("a", "2", "2"))
    plugin.take_object(cpu_quota("b", "2", "2"))
    bound = [
        prioritized(pod("a-low", "a", "2", node="n"), 1),
        prioritized(pod("b-low", "b", "2", node="n"), 1),
    ]
    for obj in bound:
        plugin.take_object(obj)
        info = pod_info(obj)
        cluster.place(info, "n")
    urgent = prioritized(pod("a-urgent", "a", "2"), 100)
    plugin.take_object(urgent)
    result = framework.schedule(pod_info(urgent))
    # a's runtime (2) is used by a-low: the node has no room either, and only a-low may go
    assert result.node is None
    assert result.message.startswith("0/1 nodes are available: Insufficient quotas, quotaName: a, ")
    assert result.preemption is not None, result.message
    assert [v.key for v in result.preemption.victims] == ["default/a-low"]


def _node(name: str, cpu: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"}},
    }


def _revoking(delay: str) -> Any:
    return parse(
        {
            **PROFILE,
            "profiles": [
                {
                    **PROFILE["profiles"][0],
                    "pluginConfig": [
                        {
                            "name": "ElasticQuota",
                            "args": {"monitorAllQuotas": True, "delayEvictTime": delay},
                        }
                    ],
                }
            ],
        }
    )


async def test_a_restarted_scheduler_judges_quotas_by_the_nodes_before_any_pod_is_scheduled():
    """No pod is pending after the restart, so no PreFilter runs: the status writer and the
    overuse revoker must still see the cluster's 8 CPUs, not fall back to each quota's min."""
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.sigs.k8s.io_elasticquotas.yaml")
        fake.create(res.NODES, _node("n", "8"))
        # a: min 2, uses 4 of the 8 CPUs (within what it may borrow); b: max 2, uses 3 (over)
        fake.create(res.ELASTIC_QUOTAS, cpu_quota("a", "2", "40"))
        fake.create(res.ELASTIC_QUOTAS, cpu_quota("b", "1", "2"))
        for i in range(4):
            fake.create(res.PODS, pod(f"a-{i}", "a", "1", node="n"))
        for i in range(3):
            fake.create(res.PODS, pod(f"b-{i}", "b", "1", node="n"))

        def evicted(name: str) -> bool:
            live = {
                p["metadata"]["name"]
                for p in fake.list_objects(res.PODS, "default")
                if not p["metadata"].get("deletionTimestamp")
            }
            return name not in live

        async with running(fake, _revoking("1s")):
            # a's runtime is its request (4): 8 CPUs less b's 2 leave it room to borrow
            await eventually(
                lambda: (
                    f"{Q}/runtime" in fake.get(res.ELASTIC_QUOTAS, "a", "default")["metadata"]["annotations"]
                )
            )
            annotations = fake.get(res.ELASTIC_QUOTAS, "a", "default")["metadata"]["annotations"]
            assert json.loads(annotations[f"{Q}/runtime"])["cpu"] == "4"
            # b is over its runtime (its max, 2) past delayEvictTime: one of its pods goes
            await eventually(lambda: sum(evicted(f"b-{i}") for i in range(3)) == 1)
            # and a, within its runtime, keeps every pod (the same rounds looked at it)
            assert not any(evicted(f"a-{i}") for i in range(4))
            b = fake.get(res.ELASTIC_QUOTAS, "b", "default")["metadata"]["annotations"]
            assert json.loads(b[f"{Q}/runtime"])["cpu"] == "2"


def test_the_cluster_total_follows_node_adds_updates_and_deletes_without_a_pod_scheduled():
    from controlplane.scheduler.cluster import Cluster
    from controlplane.scheduler.framework import Framework
    from controlplane.scheduler.plugins.elasticquota import ElasticQuota

    cluster = Cluster()
    framework = Framework(parse(PROFILE).profiles[0], cluster, seed=1)
    plugin = framework.plugins["ElasticQuota"]
    assert isinstance(plugin, ElasticQuota)
    plugin.take_object(cpu_quota("a", "1", "100"))
    plugin.take_object(pod("a-0", "a", "50", node="n1"))

    def runtime() -> str:
        plugin.sync_total()  # what each controller round does first
        patch = plugin.status_patches()["a"]
        return str(json.loads(patch["metadata"]["annotations"][f"{Q}/runtime"])["cpu"])

    cluster.set_node(_node("n1", "16"))
    cluster.set_node(_node("n2", "16"))
    assert runtime() == "32"
    cluster.set_node(_node("n2", "24"))  # allocatable grew
    assert runtime() == "40"
    cluster.remove_node("n1")
    assert runtime() == "24"
    cluster.set_node(_node("n3", "64"))
    assert runtime() == "50"  # capped at its request
