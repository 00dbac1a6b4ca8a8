"""The evictor against the strict fake apiserver (Eviction API, PodDisruptionBudgets,
events), and the QoS runner (cooldown, failure isolation, disabled strategies, rounds off the event
loop on captured cgroup values)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from koordinator.api.extension.constants import LABEL_POD_EVICT_ENABLE
from koordinator.kube import resources as res
from koordinator.kube.errors import NotFoundError
from koordinator.kube.events import EventRecorder
from koordlet.executor import ResourceUpdateExecutor
from koordlet.metriccache import kinds
from koordlet.metrics import KoordletMetrics
from koordlet.qosmanager.evictor import Evictor
from koordlet.qosmanager.framework import Eviction, NodeView, Plan, QoSManager, Snapshot
from koordlet.qosmanager.strategies.cpu_evict import CPUEvict
from koordlet.qosmanager.strategies.memory_evict import MemoryEvict
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.layout import CgroupDriver, KubepodsLayout
from koordlet.system.cgroup.registry import CPU_CFS_QUOTA
from tests.fakes.pods import make_pod
from tests.koordlet.qosmanager.conftest import NOW, snapshot
from testsupport.fake import FakeApiServer

LAYOUT = KubepodsLayout.default(CgroupDriver.SYSTEMD)


def _create_running(fake: FakeApiServer, pod: dict[str, Any]) -> dict[str, Any]:
    """Create a pod and set its status as the kubelet would (the apiserver ignores status on create)."""
    pod["spec"]["containers"] = [{"name": "main", "image": "app:1"}]
    pod["metadata"].pop("uid", None)
    pod["metadata"].pop("resourceVersion", None)
    pod.pop("status", None)
    created = fake.create(res.PODS, pod)
    created["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return fake.update(res.PODS, created, "status")


def _meta(obj: dict[str, Any]) -> PodMeta:
    meta = pod_meta(obj, LAYOUT)
    assert meta is not None
    return meta


async def _events(client, reason: str) -> list[dict[str, Any]]:
    listed = await client.list(res.EVENTS, "default")
    return [e for e in listed["items"] if e["reason"] == reason]


async def test_evicts_be_pods_and_says_why():
    async with FakeApiServer() as fake:
        be = _create_running(fake, make_pod("batch").qos("BE").build())
        ls = _create_running(fake, make_pod("web").qos("LS").build())
        async with fake.client() as client:
            metrics = KoordletMetrics(CollectorRegistry(), "node-1")
            evictor = Evictor(client, metrics, EventRecorder(client, "koordlet", "node-1"))
            evicted = await evictor.evict(
                [
                    Eviction(_meta(ls), "BEMemoryEvict", "evictPodByNodeMemoryUsage", "must not happen"),
                    Eviction(_meta(be), "BEMemoryEvict", "evictPodByNodeMemoryUsage", "memory 75% >= 70%"),
                ]
            )
            assert evicted == 1
            try:
                await client.get(res.PODS, "batch", "default")
                deleted = False
            except NotFoundError:
                deleted = True
            assert deleted
            assert (await client.get(res.PODS, "web", "default"))["metadata"]["name"] == "web"
            assert evictor.refused == [("default/web", "QoS LS is never evicted")]
            [event] = await _events(client, "EvictPodSuccess")
            assert event["involvedObject"]["name"] == "batch"
            assert event["message"] == "memory 75% >= 70%"
            assert event["type"] == "Warning"
            value = metrics.pod_eviction.labels("node-1", "evictPodByNodeMemoryUsage")._value.get()
            assert value == 1


async def test_a_pdb_refusal_evicts_nothing_and_the_event_says_why():
    async with FakeApiServer() as fake:
        be = _create_running(fake, make_pod("batch").qos("BE").label("app", "batch").build())
        fake.create(
            res.POD_DISRUPTION_BUDGETS,
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "keep-batch", "namespace": "default"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "batch"}}},
            },
        )
        pdb = fake.get(res.POD_DISRUPTION_BUDGETS, "keep-batch", "default")
        pdb["status"] = {
            "observedGeneration": pdb["metadata"].get("generation", 1),
            "disruptionsAllowed": 0,
            "currentHealthy": 1,
            "desiredHealthy": 1,
            "expectedPods": 1,
        }
        fake.update(res.POD_DISRUPTION_BUDGETS, pdb, "status")
        clock = [1000.0]
        async with fake.client() as client:
            evictor = Evictor(
                client,
                KoordletMetrics(CollectorRegistry(), "n"),
                EventRecorder(client, "koordlet", "n"),
                clock=lambda: clock[0],
            )
            evicted = await evictor.evict([Eviction(_meta(be), "BEMemoryEvict", "r", "memory 75% >= 70%")])
            assert evicted == 0
            assert (await client.get(res.PODS, "batch", "default"))["metadata"]["name"] == "batch"
            [event] = await _events(client, "EvictPodFail")
            assert "disruption budget" in event["message"]
            assert event["message"].startswith("memory 75% >= 70%")
            # passed over by the strategies for a while, then a candidate again
            assert evictor.refused_lately() == {be["metadata"]["uid"]}
            clock[0] += 31
            assert evictor.refused_lately() == frozenset()


class Recording:
    def __init__(self) -> None:
        self.asked: list[list[Eviction]] = []

    async def evict(self, evictions):
        self.asked.append(list(evictions))
        return len(evictions)


class Scripted:
    NAME = "Scripted"
    interval = 1.0
    cooldown = 4.0

    def __init__(self, pod: PodMeta) -> None:
        self.pod = pod
        self.fail = False

    def enabled(self, snapshot: Snapshot) -> tuple[bool, str]:
        return True, ""

    def plan(self, snapshot: Snapshot) -> Plan:
        if self.fail:
            raise RuntimeError("boom")
        return Plan(self.NAME, evictions=[Eviction(self.pod, "F", "r", "m")])


class Off(Scripted):
    NAME = "Off"

    def enabled(self, snapshot: Snapshot) -> tuple[bool, str]:
        return False, "gate off"


async def test_runner_cooldown_and_failure_isolation(fake_host_v1):
    pod = _meta(make_pod("x").qos("BE").build())
    scripted, off = Scripted(pod), Off(pod)
    evictor = Recording()
    now = [1000.0]
    base = snapshot(fake_host_v1, topology=False)

    def current() -> Snapshot:
        return Snapshot(**{**base.__dict__, "now": now[0]})

    manager = QoSManager(
        [scripted, off],
        current,
        ResourceUpdateExecutor(CgroupFS.detect(fake_host_v1.paths)),
        evictor,
        KoordletMetrics(CollectorRegistry(), "n"),
    )
    assert await manager.run_once(scripted) is not None
    assert len(evictor.asked) == 1
    now[0] += 2  # inside the 4 s cooldown: nothing planned
    assert await manager.run_once(scripted) is None
    now[0] += 3
    assert await manager.run_once(scripted) is not None
    assert await manager.run_once(off) is None
    scripted.fail = True
    now[0] += 10
    assert await manager.run_once(scripted) is None
    assert manager.failures == {"Scripted": 1, "Off": 0}
    manager.start()
    await asyncio.sleep(0.05)
    await manager.stop()


async def test_memory_evict_asks_the_evictor_only_for_pods_it_evicts(fake_host_v1):
    """An eviction-enabled LS pod comes first in MemoryEvict's order, but the evictor never
    evicts LS pods: the strategy takes the BE pod instead, and the evictor refuses nothing."""
    async with FakeApiServer() as fake:
        web = make_pod("web").qos("LS").label(LABEL_POD_EVICT_ENABLE, "true").priority(10).build()
        batch = make_pod("batch").qos("BE").label(LABEL_POD_EVICT_ENABLE, "true").priority(100).build()
        web, batch = _create_running(fake, web), _create_running(fake, batch)
        gi = 1 << 30
        samples = [
            kinds.NODE_MEMORY_USAGE.sample(12 * gi, NOW - 0.5),  # 75 % of 16Gi
            kinds.POD_MEMORY_USAGE.sample(4 * gi, NOW - 0.5, pod_uid=web["metadata"]["uid"]),
            kinds.POD_MEMORY_USAGE.sample(2 * gi, NOW - 0.5, pod_uid=batch["metadata"]["uid"]),
        ]
        current = snapshot(
            fake_host_v1,
            pods=[web, batch],
            samples=samples,
            slo={"resourceUsedThresholdWithBE": {"enable": True, "evictEnabledPriorityThreshold": 1000}},
            gates={"MemoryEvict": True},
            topology=False,
        )
        async with fake.client() as client:
            metrics = KoordletMetrics(CollectorRegistry(), "node-1")
            evictor = Evictor(client, metrics)
            strategy = MemoryEvict()
            manager = QoSManager(
                [strategy],
                lambda: current,
                ResourceUpdateExecutor(CgroupFS.detect(fake_host_v1.paths)),
                evictor,
                metrics,
            )
            plan = await manager.run_once(strategy)
            assert plan is not None
            assert [e.pod.key for e in plan.evictions] == ["default/batch"]
            assert evictor.refused == []
            with pytest.raises(NotFoundError):
                await client.get(res.PODS, "batch", "default")
            assert (await client.get(res.PODS, "web", "default"))["metadata"]["name"] == "web"


async def test_cpu_evict_waits_its_cooldown_after_the_start(fake_host_v1):
    """As upstream (its last eviction time starts at the koordlet's start), CPUEvict evicts
    nothing in its first 20 s, though node CPU is over the threshold; then it evicts."""
    pod = make_pod("burner").qos("BE").label(LABEL_POD_EVICT_ENABLE, "true").priority(100).build()
    uid = pod["metadata"]["uid"]
    start = NOW - 20
    samples = []
    for t in (start, NOW):  # 7 of 8 cores (87 % >= 60 %) at both times
        samples += [
            kinds.NODE_CPU_USAGE.sample(7.0, t - 0.5),
            kinds.POD_CPU_USAGE.sample(3.0, t - 0.5, pod_uid=uid),
        ]
    base = snapshot(
        fake_host_v1,
        pods=[pod],
        samples=samples,
        slo={
            "resourceUsedThresholdWithBE": {
                "enable": True,
                "cpuEvictThresholdPercent": 60,
                "evictEnabledPriorityThreshold": 1000,
            }
        },
        gates={"CPUEvict": True},
        topology=False,
    )
    now = [start]
    evictor = Recording()
    strategy = CPUEvict()
    manager = QoSManager(
        [strategy],
        lambda: Snapshot(**{**base.__dict__, "now": now[0]}),
        ResourceUpdateExecutor(CgroupFS.detect(fake_host_v1.paths)),
        evictor,
        KoordletMetrics(CollectorRegistry(), "n"),
    )
    await manager.run_once(strategy)
    now[0] = NOW - 0.5  # 19.5 s after the start
    await manager.run_once(strategy)
    assert evictor.asked == []
    now[0] = NOW
    await manager.run_once(strategy)
    assert [[e.pod.name for e in asked] for asked in evictor.asked] == [["burner"]]


class Probe:
    """A strategy that records where its plan ran and what it read, twice, from one file."""

    NAME = "Probe"
    interval = 1.0
    cooldown = 0.0

    def __init__(self, relative: str) -> None:
        self.relative = relative
        self.on_loop: bool | None = None
        self.reads: list[object] = []
        self.change: Callable[[], None] = lambda: None

    def enabled(self, snapshot: Snapshot) -> tuple[bool, str]:
        return True, ""

    def plan(self, snapshot: Snapshot) -> Plan:
        try:
            asyncio.get_running_loop()
            self.on_loop = True
        except RuntimeError:
            self.on_loop = False
        self.reads.append(snapshot.cgroups.read(CPU_CFS_QUOTA, self.relative))
        self.change()  # the file changes in the middle of the round
        self.reads.append(snapshot.cgroups.read(CPU_CFS_QUOTA, self.relative))
        return Plan(self.NAME)


async def test_a_round_plans_off_the_event_loop_on_values_captured_once(fake_host_v1):
    relative = "kubepods.slice/kubepods-besteffort.slice"
    fake_host_v1.set(CPU_CFS_QUOTA, relative, 50_000)
    probe = Probe(relative)
    probe.change = lambda: fake_host_v1.set(CPU_CFS_QUOTA, relative, 70_000)
    manager = QoSManager(
        [probe],
        lambda: snapshot(fake_host_v1, topology=False),
        ResourceUpdateExecutor(CgroupFS.detect(fake_host_v1.paths)),
        None,
        KoordletMetrics(CollectorRegistry(), "n"),
    )
    assert await manager.run_once(probe) is not None
    assert probe.on_loop is False  # a worker thread: host reads never block the loop
    assert probe.reads == [50_000, 50_000]  # one value per file for the whole round
    assert await manager.run_once(probe) is not None
    assert probe.reads[2:] == [70_000, 70_000]  # the next round takes a fresh snapshot


def test_the_node_is_decoded_once_with_malformed_quantities_left_out():
    view = NodeView.decode(
        {
            "metadata": {"annotations": {"a": "b"}},
            "status": {
                "capacity": {"cpu": "3500m", "memory": "4Gi", "kubernetes.io/batch-cpu": "1200"},
                "allocatable": {"cpu": "not-a-quantity", "memory": "3Gi"},
            },
        }
    )
    assert view.annotations == {"a": "b"}
    assert view.capacity == {"cpu": 3500, "memory": 4 << 30, "kubernetes.io/batch-cpu": 1200}
    assert view.allocatable == {"memory": 3 << 30}
    assert NodeView.decode(None) == NodeView()
    assert NodeView.decode({"status": "garbage"}) == NodeView()


def test_strategies_wake_once_per_collection_of_node_and_pod_usage(fake_host_v1):
    """The node and pod collectors each report their collection; the strategies are woken
    once both have delivered since the last wake (not once per collector, which ran every
    strategy twice a second, the first time on the previous second's pod usage)."""
    pod = _meta(make_pod("x").qos("BE").build())
    manager = QoSManager(
        [Scripted(pod)],
        lambda: snapshot(fake_host_v1, topology=False),
        ResourceUpdateExecutor(CgroupFS.detect(fake_host_v1.paths)),
        None,
        KoordletMetrics(CollectorRegistry(), "n"),
        wake_on=("NodeResourceCollector", "PodResourceCollector"),
    )
    wakes: list[int] = []
    manager.wake = lambda: wakes.append(1)  # type: ignore[method-assign]
    manager.collected("NodeResourceCollector")
    manager.collected("PSICollector")  # not a usage collector: ignored
    assert wakes == []
    manager.collected("PodResourceCollector")
    assert wakes == [1]
    manager.collected("PodResourceCollector")  # the node's usage of this round not in yet
    manager.collected("PodResourceCollector")
    assert wakes == [1]
    manager.collected("NodeResourceCollector")
    assert wakes == [1, 1]
    alone = QoSManager(
        [],
        lambda: snapshot(fake_host_v1, topology=False),
        ResourceUpdateExecutor(CgroupFS.detect(fake_host_v1.paths)),
        None,
        KoordletMetrics(CollectorRegistry(), "n"),
        wake_on=("NodeResourceCollector",),  # the only usage collector running
    )
    alone.wake = lambda: wakes.append(2)  # type: ignore[method-assign]
    alone.collected("NodeResourceCollector")
    alone.collected("NodeResourceCollector")
    assert wakes == [1, 1, 2, 2]


class Counting(Scripted):
    """A strategy that counts its rounds and plans nothing."""

    NAME = "Counting"

    def __init__(self, interval: float) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.interval = interval
        self.rounds = 0

    def plan(self, snapshot: Snapshot) -> Plan:
        self.rounds += 1
        return Plan(self.NAME)


async def test_collections_every_interval_drive_a_strategy_once_each(fake_host_v1):
    """Collections about as frequent as the strategy's interval (here a tenth longer, as a
    collection's own run time makes them) run it once each: its own tick waits a fifth of
    an interval longer after a woken round, instead of running it a moment before each
    collection does again; when they stop, the interval takes over. (Real time: 100 ms
    margins either side, and one late wake-up allowed for.)"""
    strategy = Counting(interval=1.0)
    manager = QoSManager(
        [strategy],
        lambda: snapshot(fake_host_v1, topology=False),
        ResourceUpdateExecutor(CgroupFS.detect(fake_host_v1.paths)),
        None,
        KoordletMetrics(CollectorRegistry(), "n"),
        wake_on=("NodeResourceCollector", "PodResourceCollector"),
    )
    manager.start()
    try:
        for _ in range(4):
            await asyncio.sleep(1.1)
            manager.collected("NodeResourceCollector")
            manager.collected("PodResourceCollector")
        await asyncio.sleep(0.05)
        driven = strategy.rounds
        # the first round at the start, then one per collection (the tick beside each
        # collection ran it twice as often)
        assert driven <= 1 + 4 + 1
        await asyncio.sleep(2.6)
        assert strategy.rounds >= driven + 2  # no collections: run on the interval again
    finally:
        await manager.stop()
