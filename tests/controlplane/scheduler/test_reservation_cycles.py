"""Reservation across scheduling cycles, with a framework over an in-memory cluster: a pod
assumed into a reservation is not its owner until it is seen bound (a failed binding
leaves the Reservation Available, no owner written), and a requeued pod is matched again
when a reservation changed meanwhile (never put into one that failed; let in by one that
became Available)."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.plugins.interface import CycleState, Handle, PodPatch
from controlplane.scheduler.plugins.reservation import Reservation
from controlplane.scheduler.podinfo import PodInfo, pod_info
from controlplane.scheduler.waiting import WaitingPods
from koordinator.kube.timeutil import format_time
from tests.controlplane.scheduler.test_reservation_plugin import ALLOCATED, config, node, pod, reservation

Obj = dict[str, Any]
NOW = time.time()
AFFINITY = "scheduling.koordinator.sh/reservation-affinity"


class _Held:
    """Reserve pods as the scheduler keeps them: a placed one holds its room on its node."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def add_reserve_pod(self, pod: PodInfo) -> None:
        if pod.node_name:
            self.cluster.place(pod, pod.node_name)

    def remove_reserve_pod(self, key: str) -> None:
        self.cluster.unplace(key)


def scheduler(*nodes: Obj) -> tuple[Framework, Reservation]:
    cluster = Cluster()
    for obj in nodes:
        cluster.set_node(obj)
    framework = Framework(config().profiles[0], cluster, seed=1)
    framework.bind_handle(Handle(WaitingPods(), lambda _: 0, _Held(cluster)))
    plugin = framework.plugins["Reservation"]
    assert isinstance(plugin, Reservation)
    return framework, plugin


def available(name: str, cpu: str, node_name: str, **kwargs: Any) -> Obj:
    obj = reservation(name, cpu, node_name=node_name, **kwargs)
    obj["metadata"]["creationTimestamp"] = format_time(NOW - 10)
    return obj


def failed(obj: Obj) -> Obj:
    obj = json.loads(json.dumps(obj))
    obj["status"]["phase"] = "Failed"
    obj["status"]["conditions"][1] = {"type": "Ready", "status": "False", "reason": "Expired"}
    return obj


def pending(obj: Obj) -> Obj:
    """The Reservation before the scheduler placed it."""
    obj = json.loads(json.dumps(obj))
    del obj["status"]
    return obj


def owner(name: str, cpu: str, **kwargs: Any) -> PodInfo:
    obj = pod(name, cpu, **kwargs)
    obj["metadata"]["uid"] = f"uid-{name}"
    return pod_info(obj)


def assume(framework: Framework, info: PodInfo, state: CycleState) -> str | None:
    """One cycle and its Reserve, as the scheduler runs them; the node, or None."""
    result = framework.schedule(info)
    if result.node is None:
        return None
    framework.cluster.place(info, result.node)
    refused, _ = framework.points.reserve_and_permit(state, info, result.node)
    assert refused is None, refused
    return result.node


def prebind_annotations(framework: Framework, state: CycleState, info: PodInfo, node_name: str) -> Obj:
    """The annotations PreBind's one patch would write on the pod."""
    patch = PodPatch()
    for modifier in framework.points.modifiers:
        assert modifier.modify(state, info, node_name, patch) is None
    return dict(patch.annotations)


def status_writes(plugin: Reservation, framework: Framework) -> list[tuple[str, Obj]]:
    """What one controller round writes: (reservation, its new status)."""
    return [
        (name, dict(obj["status"]))
        for name, action, obj in plugin.pending_writes(NOW, framework.cluster.nodes)
        if action == "status" and obj is not None
    ]


def test_an_assumed_owner_is_not_written_and_a_failed_binding_leaves_the_reservation_available():
    framework, plugin = scheduler(node("n1"))
    plugin.on_reservation(available("r", "2", "n1"))
    web = owner("web-0", "2", labels={"app": "web"})
    state: CycleState = {}
    assert assume(framework, web, state) == "n1"
    assert json.loads(prebind_annotations(framework, state, web, "n1")[ALLOCATED])["name"] == "r"
    # binding (or Permit) in flight: the controller writes no owner, the reservation stays
    assert status_writes(plugin, framework) == []
    # the binding failed: Unreserve and forget
    framework.points.unreserve(state, web, "n1")
    framework.cluster.unplace(web.key)
    framework.points.forget(web, "n1")
    assert status_writes(plugin, framework) == []
    # scheduled again, bound this time: the informer's bound pod is the owner
    state = {}
    assert assume(framework, web, state) == "n1"
    annotations = {**web.annotations, ALLOCATED: prebind_annotations(framework, state, web, "n1")[ALLOCATED]}
    framework.on_pod(web, dataclasses.replace(web, node_name="n1", annotations=annotations))
    [(name, status)] = status_writes(plugin, framework)
    assert name == "r"
    assert status["currentOwners"] == [{"namespace": "default", "name": "web-0", "uid": "uid-web-0"}]
    assert status["allocated"] == {"cpu": "2"}
    assert status["phase"] == "Succeeded"


def test_a_requeued_pod_is_not_put_into_a_reservation_that_failed_meanwhile():
    framework, plugin = scheduler(node("n1"), node("n2"))
    live = available("r", "2", "n1")
    plugin.on_reservation(live)
    web = owner("web-0", "1", labels={"app": "web"})
    # its first cycle matched r on n1 (then, say, Permit sent it back to the queue)
    assert framework.schedule(web).node == "n1"
    # r expired before the pod's next cycle; the queue hands back the same record
    plugin.on_reservation(failed(live))
    state: CycleState = {}
    node_name = assume(framework, web, state)
    assert node_name is not None
    assert ALLOCATED not in prebind_annotations(framework, state, web, node_name)
    assert plugin.describe(web) is None


def test_a_requeued_pod_is_not_put_into_a_reservation_deleted_meanwhile():
    framework, plugin = scheduler(node("n1"))
    plugin.on_reservation(available("r", "2", "n1"))
    web = owner("web-0", "1", labels={"app": "web"})
    assert framework.schedule(web).node == "n1"
    plugin.on_reservation_deleted("r")
    state: CycleState = {}
    assert assume(framework, web, state) == "n1"
    assert ALLOCATED not in prebind_annotations(framework, state, web, "n1")


def test_a_pod_with_reservation_affinity_fits_once_its_reservation_is_available():
    framework, plugin = scheduler(node("n1"))
    live = available("r", "2", "n1")
    plugin.on_reservation(pending(live))
    pinned = owner("pinned", "1", labels={"app": "web"}, annotations={AFFINITY: json.dumps({"name": "r"})})
    first = framework.schedule(pinned)
    assert first.node is None
    assert "no reservations match reservation affinity" in first.message
    # the reservation is placed and Available; the queue hands back the same record
    plugin.on_reservation(live)
    state: CycleState = {}
    assert assume(framework, pinned, state) == "n1"
    assert json.loads(prebind_annotations(framework, state, pinned, "n1")[ALLOCATED]) == {
        "name": "r",
        "uid": "uid-r",
    }
