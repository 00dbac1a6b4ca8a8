"""Nominated pods (upstream's nominator): a pod waiting for its victims to leave keeps the
room on its node from pods no more important than it, and tries that node first itself."""

from __future__ import annotations

import dataclasses
from typing import Any

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import parse
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.podinfo import PodInfo, pod_info


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
