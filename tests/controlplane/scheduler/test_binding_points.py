"""The points after a node is chosen, run by the live scheduler against the fake apiserver:
Reserve and Unreserve, Permit's wait, allow, reject and timeout, PreBind's one patch, a
Bind plug-in that takes some pods and skips the others, PostBind, the ForgetPod hooks, and
PreEnqueue (SchedulingGates)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from controlplane.scheduler import registry
from controlplane.scheduler.config import SchedulerConfig, parse
from controlplane.scheduler.metrics import PLUGIN_SAMPLE_EVERY
from controlplane.scheduler.plugins.interface import (
    ALLOW,
    RESERVE_POD_PATCH,
    WAIT,
    CycleState,
    PermitResult,
    PodPatch,
)
from controlplane.scheduler.podinfo import PodInfo, pod_info
from controlplane.scheduler.registry import BIND, PERMIT, POST_BIND, PRE_BIND, RESERVE, PluginSpec
from controlplane.scheduler.scheduler import Scheduler
from controlplane.scheduler.simulate import simulate
from controlplane.scheduler.waiting import WaitingPod, WaitingPods
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer.factory import InformerFactory
from tests.controlplane.scheduler.test_scheduler import events, node, node_of, pod
from tests.polling import eventually
from testsupport.fake import FakeApiServer

GANG = "pod-group.test/name"


class Gang:
    """A small gang plug-in: pods labelled with a group wait until two of the group are
    reserved, then all are allowed; a pod named ``refused`` cannot be reserved."""

    NAME = "TestGang"
    waiting: WaitingPods

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.reserved: dict[str, str] = {}
        self.forgotten: list[str] = []
        self.post_bound: list[str] = []

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        if pod.name == "refused":
            return "the gang has no room for this pod"
        self.reserved[pod.key] = node
        state["gang"] = pod.name
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self.reserved.pop(pod.key, None)

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> PermitResult:
        if not pod.name.startswith("member"):
            return PermitResult(ALLOW)
        if len([k for k in self.reserved if k.startswith("default/member")]) < 2:
            return PermitResult(WAIT, timeout=self.timeout)
        for waiting in self.waiting:
            waiting.allow(self.NAME)
        return PermitResult(ALLOW)

    def modify(self, state: CycleState, pod: PodInfo, node: str, patch: PodPatch) -> str | None:
        patch.annotations["gang.test/reserved-on"] = node
        patch.labels["gang.test/state"] = str(state["gang"])
        return None

    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self.post_bound.append(pod.key)

    def forget_pod(self, pod: PodInfo, node: str) -> None:
        self.forgotten.append(pod.key)


class ReservationBinder:
    """Binds ``reserve-*`` pods itself (as Koordinator's reserve pods) and skips the rest."""

    NAME = "TestReservationBinder"

    def __init__(self) -> None:
        self.bound: dict[str, str] = {}
        self.patches: dict[str, object] = {}

    async def bind(self, client: ApiClient, state: CycleState, pod: PodInfo, node: str) -> bool:
        if not pod.name.startswith("reserve-"):
            return False
        self.bound[pod.key] = node
        self.patches[pod.key] = state.get(RESERVE_POD_PATCH)
        return True


def register(monkeypatch: pytest.MonkeyPatch, gang: Gang, binder: ReservationBinder) -> None:
    monkeypatch.setitem(
        registry.REGISTRY,
        Gang.NAME,
        PluginSpec(Gang.NAME, frozenset({RESERVE, PERMIT, PRE_BIND, POST_BIND}), factory=lambda _: gang),
    )
    monkeypatch.setitem(
        registry.REGISTRY,
        ReservationBinder.NAME,
        PluginSpec(ReservationBinder.NAME, frozenset({BIND}), factory=lambda _: binder),
    )


def gang_config() -> SchedulerConfig:
    return parse(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": "koord-scheduler",
                    "plugins": {
                        "multiPoint": {"enabled": [{"name": Gang.NAME}]},
                        "bind": {
                            "disabled": [{"name": "*"}],
                            "enabled": [{"name": ReservationBinder.NAME}, {"name": "DefaultBinder"}],
                        },
                    },
                }
            ],
        }
    )


@contextlib.asynccontextmanager
async def running(fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch, permit_timeout: float = 30.0):
    gang, binder = Gang(permit_timeout), ReservationBinder()
    register(monkeypatch, gang, binder)
    config = gang_config()
    client = fake.client()
    factory = InformerFactory(client, freeze_after_sync=False)
    scheduler = Scheduler(client, config, recorder=EventRecorder(client, "koord-scheduler"), seed=1)
    gang.waiting = scheduler.waiting
    scheduler.attach(factory)
    factory.start()
    task = asyncio.create_task(scheduler.run())
    try:
        yield scheduler, gang, binder
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await factory.stop()
        await client.close()


def member(name: str) -> dict[str, Any]:
    obj = pod(name, "1")
    obj["metadata"]["labels"] = {GANG: "g"}
    return obj


async def test_a_waiting_pod_binds_once_its_gang_is_allowed_with_one_patch_of_its_prebind_changes(
    monkeypatch,
):
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("n1"))
        fake.create(res.PODS, member("member-1"))
        async with running(fake, monkeypatch) as (scheduler, gang, _):
            await eventually(lambda: len(scheduler.waiting) == 1)
            assert node_of(fake, "member-1") is None  # waits on Permit
            assert scheduler.cluster.placed["default/member-1"][0] == "n1"  # assumed meanwhile
            fake.create(res.PODS, member("member-2"))
            await eventually(lambda: node_of(fake, "member-1") == "n1" and node_of(fake, "member-2") == "n1")
            for name in ("member-1", "member-2"):
                meta = fake.get(res.PODS, name, "default")["metadata"]
                assert meta["annotations"]["gang.test/reserved-on"] == "n1"
                assert meta["labels"] == {GANG: "g", "gang.test/state": name}
            await eventually(lambda: len(gang.post_bound) == 2)
            assert gang.forgotten == []
            assert len(scheduler.waiting) == 0


async def test_a_permit_timeout_unreserves_forgets_and_reports_the_pod_unschedulable(monkeypatch):
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("n1"))
        fake.create(res.PODS, member("member-1"))
        async with running(fake, monkeypatch, permit_timeout=0.05) as (scheduler, gang, _):
            await eventually(lambda: events(fake, "FailedScheduling"))
            assert events(fake, "FailedScheduling")[0]["message"] == (
                "rejected due to timeout after waiting 50ms at plugin TestGang"
            )
            assert gang.reserved == {}
            assert "default/member-1" in gang.forgotten
            assert "default/member-1" not in scheduler.cluster.placed
            assert node_of(fake, "member-1") is None
            await eventually(
                lambda: scheduler.queue.pods["default/member-1"].where in ("unschedulable", "active")
            )
            assert scheduler.queue.pods["default/member-1"].rejected_by == frozenset({Gang.NAME})


async def test_a_reserve_failure_leaves_nothing_placed_and_reports_its_message(monkeypatch):
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("n1"))
        fake.create(res.PODS, pod("refused", "1"))
        async with running(fake, monkeypatch) as (scheduler, gang, _):
            await eventually(lambda: events(fake, "FailedScheduling"))
            assert events(fake, "FailedScheduling")[0]["message"] == "the gang has no room for this pod"
            assert scheduler.cluster.placed == {}
            assert gang.reserved == {}
            assert gang.forgotten == ["default/refused"]


async def test_a_bind_plugin_takes_its_pods_and_skips_the_others_to_the_default_binder(monkeypatch):
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("n1"))
        fake.create(res.PODS, pod("reserve-a", "1"))
        fake.create(res.PODS, pod("plain", "1"))
        async with running(fake, monkeypatch) as (scheduler, _, binder):
            await eventually(lambda: node_of(fake, "plain") == "n1" and binder.bound)
            assert binder.bound == {"default/reserve-a": "n1"}
            assert node_of(fake, "reserve-a") is None  # the reservation binder does not post a Binding
            assert scheduler.bind_failures == 0


async def test_a_gated_pod_is_scheduled_once_its_gates_are_removed(monkeypatch):
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("n1"))
        gated = pod("gated", "1")
        gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
        fake.create(res.PODS, gated)
        async with running(fake, monkeypatch) as (scheduler, _, _):
            await eventually(lambda: scheduler.queue.pending()["gated"] == 1)
            assert scheduler.queue.pods["default/gated"].attempts == 0  # never tried
            assert node_of(fake, "gated") is None
            assert not events(fake, "FailedScheduling")
            current = fake.get(res.PODS, "gated", "default")
            current["spec"]["schedulingGates"] = []
            fake.update(res.PODS, current)
            await eventually(lambda: node_of(fake, "gated") == "n1")


def test_a_waiting_pod_settles_once_on_its_first_rejection_or_last_allow():
    async def scenario() -> None:
        info = PodInfo("default", "p", "u", "koord-scheduler", "", 0, "", {}, ())
        waiting = WaitingPod(info, "n1", {"A": 10.0, "B": 10.0})
        waiting.allow("A")
        waiting.reject("B", "no")
        waiting.allow("B")
        assert await waiting.wait() == ("B", "no")
        both = WaitingPod(info, "n1", {"A": 10.0, "B": 10.0})
        both.allow("A")
        both.allow("B")
        assert await both.wait() is None

    asyncio.run(scenario())


async def test_every_extension_point_and_sampled_plugins_report_their_durations(monkeypatch):
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("n1", cpu="32"))
        for i in range(PLUGIN_SAMPLE_EVERY):
            fake.create(res.PODS, pod(f"p{i}", "1"))
        async with running(fake, monkeypatch) as (scheduler, gang, _):
            await eventually(lambda: len(gang.post_bound) == PLUGIN_SAMPLE_EVERY)
            text = generate_latest(scheduler.metrics.registry).decode()
    for point in ("Filter", "Reserve", "Permit", "PreBind", "Bind", "PostBind"):
        assert (
            f'scheduler_framework_extension_point_duration_seconds_count{{extension_point="{point}",'
            f'profile="koord-scheduler",status="Success"}} {PLUGIN_SAMPLE_EVERY}.0'
        ) in text
    # one cycle in ten measures each plug-in
    assert (
        'scheduler_plugin_execution_duration_seconds_count{extension_point="Filter",'
        'plugin="NodeUnschedulable",status="Success"} 1.0'
    ) in text


def test_simulate_runs_reserve_and_permit_and_reports_a_refused_or_waiting_pod(monkeypatch, tmp_path):
    gang = Gang(30.0)
    register(monkeypatch, gang, ReservationBinder())
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(node("n1")))
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump_all([pod("refused", "1"), member("member-1"), pod("plain", "1")]))
    results = {r["pod"]: r for r in simulate(gang_config(), str(nodes), str(pods), seed=1)}
    assert results["default/refused"]["node"] is None
    assert results["default/refused"]["status"] == (
        "rejected at Reserve/Permit by TestGang: the gang has no room for this pod"
    )
    assert results["default/member-1"]["node"] == "n1"
    assert results["default/member-1"]["status"] == "Waiting on Permit: TestGang"
    assert results["default/plain"]["status"] == "Scheduled"
    assert set(gang.reserved) == {"default/member-1", "default/plain"}


async def test_a_reserve_pod_is_scheduled_bound_by_its_plugin_and_holds_its_room(monkeypatch):
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("n1", cpu="2"))
        async with running(fake, monkeypatch) as (scheduler, _, binder):
            reserve = dataclasses.replace(pod_info(pod("reserve-web", "2")), uid="r-uid", reservation="web")
            scheduler.add_reserve_pod(reserve)
            await eventually(lambda: binder.bound == {"default/reserve-web": "n1"})
            assert "default/reserve-web" not in scheduler.assumed
            # PreBind's changes are left for the reservation's binder (no Pod to patch)
            assert binder.patches["default/reserve-web"] == {
                "metadata": {
                    "labels": {"gang.test/state": "reserve-web"},
                    "annotations": {"gang.test/reserved-on": "n1"},
                }
            }
            assert scheduler.cluster.placed["default/reserve-web"][0] == "n1"
            # its room is taken: a real pod does not fit until the reservation goes
            fake.create(res.PODS, pod("after", "2"))
            await eventually(lambda: events(fake, "FailedScheduling"))
            scheduler.remove_reserve_pod("default/reserve-web")
            await eventually(lambda: node_of(fake, "after") == "n1")
    with pytest.raises(ValueError, match="is not a reserve pod"):
        scheduler.add_reserve_pod(pod_info(pod("plain", "1")))
