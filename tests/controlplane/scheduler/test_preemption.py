"""DefaultPreemption: victims of lower priority only, the fewest by reprieving the most
important first, upstream's node choice, preemptionPolicy Never, waiting for earlier
victims; and the live scheduler deleting the victims and binding the preemptor."""

from __future__ import annotations

from typing import Any

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import parse
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.podinfo import pod_info
from koordinator.kube import resources as res
from tests.controlplane.scheduler.test_scheduler import node_of, running
from tests.polling import eventually
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]


def node(name: str, cpu: str = "4") -> Obj:
    return {
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def pod(
    name: str,
    cpu: str,
    priority: int = 0,
    node_name: str = "",
    created: str = "2026-01-01T00:00:00Z",
    **spec: Any,
) -> Obj:
    body: Obj = {
        "schedulerName": "koord-scheduler",
        "priority": priority,
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
        **spec,
    }
    if node_name:
        body["nodeName"] = node_name
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "creationTimestamp": created,
        },
        "spec": body,
    }


def framework(nodes: list[Obj], placed: list[Obj]) -> Framework:
    cluster = Cluster()
    for n in nodes:
        cluster.set_node(n)
    for p in placed:
        info = pod_info(p)
        cluster.place(info, info.node_name)
    return Framework(parse(None).profiles[0], cluster, seed=1)


def victims(result: Any) -> tuple[str, list[str]] | None:
    if result.preemption is None:
        return None
    return result.preemption.node, [v.name for v in result.preemption.victims]


def test_the_fewest_least_important_victims():
    fw = framework(
        [node("a")],
        [
            pod("low-1", "1", 1, "a"),
            pod("low-2", "1", 2, "a"),
            pod("mid", "1", 5, "a"),
            pod("high", "1", 100, "a"),
        ],
    )
    result = fw.schedule(pod_info(pod("p", "2", 50)))
    assert result.node is None
    # remove every pod below 50 (low-1, low-2, mid), then reprieve the most important first:
    # mid stays (2 CPUs free with low-1 and low-2 gone), low-2 and low-1 cannot both stay
    assert victims(result) == ("a", ["low-2", "low-1"])
    assert "preemption" not in result.message  # a candidate was found: no PostFilter message


def test_the_node_choice_follows_upstream():
    fw = framework(
        [node("a"), node("b"), node("c")],
        [
            pod("a-10", "4", 10, "a"),  # one victim of priority 10
            pod("b-1", "2", 1, "b"),  # two victims of priority 1: lower highest priority wins
            pod("b-2", "2", 1, "b"),
            pod("c-1", "4", 1, "c", created="2026-01-02T00:00:00Z"),  # one of priority 1, started later
        ],
    )
    # b and c both have highest victim priority 1; c's sum of priorities is smaller (one victim)
    assert victims(fw.schedule(pod_info(pod("p", "4", 50)))) == ("c", ["c-1"])


def test_no_preemption_when_it_cannot_help_or_is_not_allowed():
    fw = framework([node("a"), node("b", cpu="1")], [pod("same", "4", 50, "a")])
    result = fw.schedule(pod_info(pod("p", "4", 50)))
    assert result.preemption is None
    assert result.message == (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
    )
    never = fw.schedule(pod_info(pod("never", "4", 100, preemptionPolicy="Never")))
    assert never.preemption is None
    assert never.message.endswith("preemption: not eligible due to preemptionPolicy=Never..")


def test_a_nominated_pod_waits_for_its_terminating_victims():
    leaving = pod("leaving", "4", 1, "a")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    fw = framework([node("a"), node("b")], [leaving, pod("other", "4", 1, "b")])
    waiting = pod("p", "4", 50)
    waiting["status"] = {"nominatedNodeName": "a"}
    result = fw.schedule(pod_info(waiting))
    assert result.preemption is None  # b's pod is not evicted as well
    assert result.message.endswith(
        "preemption: not eligible due to a terminating pod on the nominated node.."
    )


async def test_the_scheduler_evicts_the_victim_and_binds_the_preemptor():
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("only"))
        fake.create(res.PODS, pod("batch", "3", 1))
        async with running(fake) as scheduler:
            await eventually(lambda: node_of(fake, "batch") == "only")
            fake.create(res.PODS, pod("critical", "3", 1000))
            # the victim is deleted (gracefully: it is bound); the preemptor is nominated
            await eventually(
                lambda: fake.get(res.PODS, "batch", "default")["metadata"].get("deletionTimestamp")
            )
            await eventually(
                lambda: (
                    fake.get(res.PODS, "critical", "default").get("status", {}).get("nominatedNodeName")
                    == "only"
                )
            )
            events = [e for e in fake.list_objects(res.EVENTS, "default") if e["reason"] == "Preempted"]
            assert [e["involvedObject"]["name"] for e in events] == ["batch"]
            uid = fake.get(res.PODS, "critical", "default")["metadata"]["uid"]
            assert events[0]["message"] == f"Preempted by pod {uid} on node only"
            # the kubelet finishes the deletion: the preemptor binds where it was nominated
            fake.delete(res.PODS, "batch", "default", gracePeriodSeconds=0)
            await eventually(lambda: node_of(fake, "critical") == "only")
            assert scheduler.metrics.registry.get_sample_value("scheduler_preemption_attempts_total") == 1
