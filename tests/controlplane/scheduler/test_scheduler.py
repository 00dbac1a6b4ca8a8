"""The scheduler against the strict fake apiserver: informers, cycles, binding, Events and
the PodScheduled condition, and an unschedulable pod placed once a fitting node arrives."""

from __future__ import annotations

from typing import Any

from controlplane.scheduler.config import parse
from controlplane.scheduler.podinfo import pod_info
from controlplane.scheduler.scheduler import Scheduler
from koordinator.kube import resources as res
from tests.controlplane.scheduler.live import running
from tests.polling import eventually
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]


def node(name: str, cpu: str = "4") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def pod(name: str, cpu: str, scheduler: str = "koord-scheduler") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def node_of(fake: FakeApiServer, name: str) -> str | None:
    return (fake.get(res.PODS, name, "default").get("spec") or {}).get("nodeName")


def events(fake: FakeApiServer, reason: str) -> list[Obj]:
    return [e for e in fake.list_objects(res.EVENTS, "default") if e["reason"] == reason]


async def test_pods_are_bound_and_an_unschedulable_one_waits_for_a_node():
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("small", cpu="2"))
        fake.create(res.NODES, node("large", cpu="4"))
        for name, cpu in (("a", "1"), ("b", "1"), ("huge", "6")):
            fake.create(res.PODS, pod(name, cpu))
        fake.create(res.PODS, pod("theirs", "1", scheduler="default-scheduler"))
        async with running(fake) as scheduler:
            await eventually(lambda: node_of(fake, "a") and node_of(fake, "b"))
            # least allocated: the first goes to the larger node; both fit there or spread
            assert {node_of(fake, "a"), node_of(fake, "b")} <= {"small", "large"}
            await eventually(lambda: events(fake, "FailedScheduling"))
            (failed,) = events(fake, "FailedScheduling")
            assert failed["message"] == (
                "0/2 nodes are available: 2 Insufficient cpu. "
                "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
            )
            assert failed["involvedObject"]["name"] == "huge"
            conditions = fake.get(res.PODS, "huge", "default")["status"]["conditions"]
            assert {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
            }.items() <= conditions[0].items()
            await eventually(lambda: len(events(fake, "Scheduled")) == 2)  # written after each binding
            # a node that fits arrives: the pod leaves unschedulable on NodeAdd and binds
            fake.create(res.NODES, node("xl", cpu="8"))
            await eventually(lambda: node_of(fake, "huge") == "xl")
            assert node_of(fake, "theirs") is None  # another scheduler's pod is left alone
            assert scheduler.bind_failures == 0
            assert scheduler.queue.pending() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}


async def test_a_deleted_pod_frees_its_node_for_an_unschedulable_one():
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("only", cpu="2"))
        fake.create(res.PODS, pod("first", "1500m"))
        async with running(fake) as scheduler:
            await eventually(lambda: node_of(fake, "first") == "only")
            fake.create(res.PODS, pod("second", "1500m"))
            await eventually(lambda: scheduler.queue.pending()["unschedulable"] == 1)
            # as the kubelet finishes it: a bound pod's deletion is graceful until then
            fake.delete(res.PODS, "first", "default", gracePeriodSeconds=0)
            await eventually(lambda: node_of(fake, "second") == "only")


async def test_a_bound_pods_status_update_leaves_its_record_and_a_label_change_replaces_it():
    async with FakeApiServer() as fake, fake.client() as client:
        scheduler = Scheduler(client, parse(None))
        scheduler.cluster.set_node(node("n1"))
        bound = pod("p", "1")
        bound["spec"]["nodeName"] = "n1"
        first = pod_info(bound)
        scheduler._pod_added(first)
        running = {
            **bound,
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        scheduler._pod_updated(first, pod_info(running))
        assert scheduler.cluster.placed["default/p"][2] is first  # nothing the record keeps changed
        relabelled = {**running, "metadata": {**running["metadata"], "labels": {"app": "web"}}}
        scheduler._pod_updated(first, pod_info(relabelled))
        assert scheduler.cluster.placed["default/p"][2].labels == {"app": "web"}
        assert scheduler.cluster.on_node == {"n1": {"default/p"}}
