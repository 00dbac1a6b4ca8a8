"""Nominated pods (upstream's nominator): a pod waiting for its victims to leave keeps the
room on its node from pods no more important than it, and tries that node first itself."""

from __future__ import annotations

import dataclasses
from typing import Any

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import parse
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.podinfo import PodInfo, pod_info
from controlplane.scheduler.scheduler import Scheduler
from koordinator.kube import resources as res
from testsupport.fake import FakeApiServer


def node(name: str, cpu: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def pod(name: str, cpu: str, priority: int = 0) -> PodInfo:
    return pod_info(
        {
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {
                "schedulerName": "koord-scheduler",
                "priority": priority,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
            },
        }
    )


def framework() -> Framework:
    cluster = Cluster()
    cluster.set_node(node("a", "4"))
    cluster.set_node(node("b", "2"))
    return Framework(parse(None).profiles[0], cluster, seed=3)


def test_a_nominated_pod_keeps_its_room_from_pods_no_more_important_than_it():
    fw = framework()
    waiting = [("a", pod("preemptor", "3", priority=100))]
    # without the nomination the 3-CPU pod fits only on a
    assert fw.schedule(pod("same", "3", priority=100)).node == "a"
    for priority in (100, 50):
        result = fw.schedule(pod("other", "3", priority=priority), waiting)
        assert result.node is None
        assert result.message.startswith("0/2 nodes are available: 2 Insufficient cpu.")
    # a more important pod does not see it (it may preempt it in turn)
    assert fw.schedule(pod("vip", "3", priority=1000), waiting).node == "a"
    # smaller ones still fit beside it; and the nominated pod's requests were only counted for those cycles
    assert fw.schedule(pod("small", "1"), waiting).node in ("a", "b")
    assert fw.schedule(pod("same-again", "3", priority=100)).node == "a"


def test_a_pod_with_a_nominated_node_tries_it_first():
    fw = framework()
    # least allocated prefers a (4 CPU) for a 1-CPU pod; nominated to b, it goes to b
    plain = pod("p", "1")
    assert fw.schedule(plain).node == "a"
    assert fw.schedule(dataclasses.replace(plain, nominated_node="b")).node == "b"
    # a nominated node that no longer fits: the whole cluster is searched
    assert fw.schedule(dataclasses.replace(pod("big", "3"), nominated_node="b")).node == "a"
    # its own nomination is not counted against it
    me = dataclasses.replace(pod("me", "2"), nominated_node="b")
    assert fw.schedule(me, [("b", me)]).node == "b"


def test_a_preemptor_waits_for_the_victims_it_is_evicting_instead_of_preempting_again():
    fw = framework()
    for i in range(4):
        low = pod(f"low-{i}", "900m", priority=1)
        fw.cluster.place(low, "a")
        if i < 2:
            fw.cluster.place(dataclasses.replace(low, name=f"low-b-{i}"), "b")
    high = pod("high", "3", priority=100)
    first = fw.schedule(high)
    assert first.preemption is not None
    assert first.preemption.node == "a"
    # the scheduler marks the victims while their deletion is on its way
    fw.cluster.evicting.update(v.key for v in first.preemption.victims)
    again = fw.schedule(dataclasses.replace(high, nominated_node="a"))
    assert again.preemption is None
    assert again.message.endswith("preemption: not eligible due to a terminating pod on the nominated node..")
    # once they are gone (the informer's delete), the preemptor fits its node
    for victim in first.preemption.victims:
        fw.cluster.unplace(victim.key)
    assert not fw.cluster.evicting
    assert fw.schedule(dataclasses.replace(high, nominated_node="a")).node == "a"


async def test_an_update_without_the_nomination_keeps_the_one_made_in_memory():
    async with FakeApiServer() as fake, fake.client() as client:
        scheduler = Scheduler(client, parse(None))
        pending = pod("p", "1", priority=5)
        scheduler._pod_added(pending)
        scheduler._nominate(pending, "a")  # as preemption does, before its status patch lands
        # an update from before the patch (a condition written meanwhile): still nominated
        scheduler._pod_updated(pending, dataclasses.replace(pending, priority=6))
        assert scheduler.nominated["default/p"][0] == "a"
        # the patch arrives, then someone clears it through the API: the nomination goes
        nominated = dataclasses.replace(pending, nominated_node="a")
        scheduler._pod_updated(pending, nominated)
        scheduler._pod_updated(nominated, dataclasses.replace(nominated, nominated_node=""))
        assert "default/p" not in scheduler.nominated


async def test_a_nomination_preemption_can_no_longer_honour_is_cleared_in_memory_and_in_the_api():
    async with FakeApiServer() as fake, fake.client() as client:
        created = fake.create(
            res.PODS,
            {
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        )
        fake.update(res.PODS, {**created, "status": {"nominatedNodeName": "a"}}, subresource="status")
        assert fake.get(res.PODS, "p", "default")["status"]["nominatedNodeName"] == "a"
        scheduler = Scheduler(client, parse(None))
        scheduler.cluster.set_node(node("a", "2"))
        big = dataclasses.replace(pod("p", "3", priority=5), nominated_node="a")
        scheduler._nominate(big, "a")
        scheduler.queue.add(big)
        queued = scheduler.queue.pop()
        assert queued is not None
        result = scheduler.schedule_one(queued)
        # nothing of lower priority anywhere: preemption searched and found no node
        assert result.clears_nomination
        assert "default/p" not in scheduler.nominated
        await scheduler.drain()
        assert fake.get(res.PODS, "p", "default").get("status", {}).get("nominatedNodeName") is None
        # a pod that may not preempt at all keeps what it has (upstream's Noop)
        never = dataclasses.replace(big, preemption_policy="Never")
        assert not scheduler.frameworks["koord-scheduler"].schedule(never).clears_nomination
