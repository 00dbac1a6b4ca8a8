"""envtest tier: koord-descheduler's LowNodeLoad and MigrationController on a real
kube-apiserver and etcd, with koord-scheduler placing the Reservations.

Both components run in-process: koord-scheduler with the shipped Koordinator profile
(:data:`controlplane.scheduler.profiles.KOORDINATOR`, Reservation plug-in included) and the
descheduler (:class:`~controlplane.descheduler.descheduler.Descheduler`) with LowNodeLoad as
its balance plug-in (low cpu 45 % / memory 55 %, high cpu 75 % / memory 80 %, a node over
its high thresholds a source at its first round) and MigrationController in its default
ReservationFirst mode, one round a second.

* A BE pod of a two-replica ReplicaSet on a node the koordlet reports 80 % busy gets a
  PodMigrationJob (``koordinator.sh/evict-trigger: LowNodeLoad``); its Reservation is
  scheduled on the cool node (10 %), never on the node in between (60 %); the pod is
  evicted; its replacement binds the Reservation (``status.currentOwners``) and the job
  ends Succeeded / Complete with ``status.podRef`` naming the replacement.
* When no other node has room for the pod's requests (LowNodeLoad's ``nodeFit`` off, so a
  job is made anyway), the job's Reservation cannot be scheduled. koord-scheduler retries
  its reserve pod, records ``FailedScheduling`` Events on the Reservation and writes
  ``Scheduled=False, reason Unschedulable`` on it, keeping it Pending, as upstream's does;
  the job reports ``ReservationScheduled=False, Unschedulable`` and waits (upstream's
  ReservationFirst step 5) until its own TTL (``defaultJobTTL`` 8s here, which is also the
  Reservation's TTL), then fails with reason ``Timeout``; the pod is never touched (same
  UID, not terminating, no replacement). The next rounds make new jobs for it, which end the
  same way.

No kubelet and no kube-controller-manager run. The test writes the node status (Ready, no
``not-ready`` taint) and the NodeMetrics as the koordlet reports them, and one background
task plays two controllers for the test's namespace:

* the **kubelet**: a pod bound to a node becomes Running and Ready; a pod that is being
  deleted is stopped and removed, as the kubelet's status manager does, by a DELETE with
  ``gracePeriodSeconds: 0`` and the pod's UID as precondition;
* the **ReplicaSet controller**: while fewer pods of a ReplicaSet are active (not being
  deleted) than its ``spec.replicas``, it creates replacements from the template (same
  labels, the ReplicaSet as controlling owner, unscheduled, ``schedulerName:
  koord-scheduler``), which koord-scheduler binds -- into the Reservation, whose owner is
  that controller.

The eviction policy is the default, ``Eviction``, with no ``defaultDeleteOptions``: that is
what a deployment runs (the Eviction subresource honours PodDisruptionBudgets and the pod's
grace period), and the pod then stays Terminating until its kubelet is done with it -- which
the test's kubelet is. (``Delete`` with ``gracePeriodSeconds: 0`` would remove the pod at
once and bypass both, which is not how the migration normally looks.)

The module runs its own etcd and kube-apiserver; each test labels its nodes with a tag of
its own and selects them in its pods and in the DeschedulerConfiguration's ``nodeSelector``.
* With 100 candidates at once (ten ReplicaSets of ten BE pods, five ReplicaSets on each of two hot
  nodes, three cool nodes), the migration limits hold at every moment: no hot node has more
  than ``maxMigratingPerNode`` (2) of its pods being migrated (as upstream counts them: pods
  still on the node, terminating ones too, with a job in flight), no ReplicaSet more than 2
  of its 10 replicas unavailable, while migrations keep completing.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from controlplane.descheduler.config import parse
from controlplane.descheduler.descheduler import Descheduler
from controlplane.descheduler.metrics import DeschedulerMetrics
from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient, Preconditions
from koordinator.kube.errors import ConflictError, KubeError, NotFoundError
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.timeutil import format_time
from tests.controlplane.manager.controllers.objects import node_metric, pod_metric
from tests.controlplane.scheduler.test_envtest_koordinator import CRDS as SCHEDULER_CRDS
from tests.controlplane.scheduler.test_envtest_koordinator import add_node_metric, koord_scheduler
from tests.envtest import Envtest, own_envtest, prepare_koordinator
from tests.polling import eventually_awaited

pytestmark = pytest.mark.envtest

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[3]
CRDS = [*SCHEDULER_CRDS, ROOT / "crds" / "scheduling.koordinator.sh_podmigrationjobs.yaml"]
SCHEDULER = "koord-scheduler"
DESCHEDULER = "koord-descheduler"
BE = {"koordinator.sh/qosClass": "BE"}
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def envtest_deschedule(envtest_bin: Path) -> Iterator[Envtest]:
    """A control plane of this module's own."""
    with own_envtest(envtest_bin) as plane:
        yield plane


@pytest.fixture
async def cluster(envtest_deschedule: Envtest) -> AsyncIterator[tuple[ApiClient, str, str]]:
    """An admin client with the CRDs and priority classes installed, a fresh namespace and a
    tag for the test's nodes."""
    async with envtest_deschedule.client() as client:
        namespace, tag = await prepare_koordinator(client, CRDS)
        yield client, namespace, tag


# ---- the apiserver's objects, written as their owners write them ---------------------------------


async def add_node(client: ApiClient, name: str, tag: str, cpu: str = "16", memory: str = "64Gi") -> None:
    """A Node as the kubelet registers it and reports it Ready, and as the node lifecycle
    controller leaves it (no ``not-ready`` taint)."""
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "test-tag": tag}},
    }
    created = await client.create(res.NODES, body)
    now = format_time(time.time())
    created["status"] = {
        "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
        "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
    }
    created = await client.replace_status(res.NODES, created)
    created["spec"]["taints"] = []
    await client.replace(res.NODES, created)


async def report_usage(
    client: ApiClient,
    node: str,
    system: tuple[str, str],
    pods: tuple[tuple[str, str, str], ...] = (),
    *,
    namespace: str,
) -> None:
    """The koordlet's NodeMetric: the system's usage, each pod's (reported as koord-batch) and
    the node's, their sum."""
    cpu = Quantity.parse(system[0]).milli_value() + sum(Quantity.parse(c).milli_value() for _, c, _ in pods)
    memory = Quantity.parse(system[1]).value() + sum(Quantity.parse(m).value() for _, _, m in pods)
    await add_node_metric(
        client,
        node_metric(
            node,
            update_time=format_time(time.time()),
            node_usage=(f"{cpu}m", str(memory)),
            system_usage=system,
            pods=[pod_metric(n, c, m, namespace=namespace, priority="koord-batch") for n, c, m in pods],
        ),
    )


def replica_set(name: str, namespace: str, tag: str, replicas: int, cpu: str, memory: str = "4Gi") -> Obj:
    """A ReplicaSet of BE pods (koord-batch) requesting ``cpu`` on the test's nodes."""
    labels = {"app": name, **BE}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "priorityClassName": "koord-batch",
                    "nodeSelector": {"test-tag": tag},
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
                    ],
                },
            },
        },
    }


def pod_of(rs: Obj, *, name: str = "", node_name: str = "") -> Obj:
    """A pod as the ReplicaSet controller creates it (``generateName``, the template's labels
    and spec, the ReplicaSet as controlling owner); ``node_name``: one bound earlier."""
    meta = rs["metadata"]
    template = copy.deepcopy(rs["spec"]["template"])
    pod_meta: Obj = {
        "namespace": meta["namespace"],
        "labels": template["metadata"]["labels"],
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if name:
        pod_meta["name"] = name
    else:
        pod_meta["generateName"] = f"{meta['name']}-"
    spec = template["spec"]
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def plain_pod(name: str, namespace: str, tag: str, cpu: str, node_name: str) -> Obj:
    """A bare LS pod already running on ``node_name``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"koordinator.sh/qosClass": "LS"}},
        "spec": {
            "schedulerName": SCHEDULER,
            "nodeName": node_name,
            "nodeSelector": {"test-tag": tag},
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


# ---- the kubelet and the ReplicaSet controller, played by the test --------------------------------


def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()
    )


def _owned_by(pod: Obj, rs: Obj) -> bool:
    return any(
        r.get("controller") and r.get("uid") == rs["metadata"]["uid"]
        for r in pod["metadata"].get("ownerReferences") or ()
    )


@dataclass
class Actors:
    """What the kubelet and ReplicaSet controller played by the test did."""

    replacements: list[str] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)


async def _act_once(client: ApiClient, namespace: str, replica_sets: list[Obj], actors: Actors) -> None:
    pods = (await client.list(res.PODS, namespace))["items"]
    for pod in pods:
        meta = pod["metadata"]
        node = pod["spec"].get("nodeName")
        if meta.get("deletionTimestamp"):
            # the kubelet stopped the containers: the status manager removes the pod
            with contextlib.suppress(NotFoundError, ConflictError):
                await client.delete(
                    res.PODS,
                    meta["name"],
                    namespace,
                    grace_period_seconds=0,
                    preconditions=Preconditions(meta["uid"]),
                )
                actors.removed.append((meta["name"], meta["uid"]))
        elif node and not _ready(pod):
            now = format_time(time.time())
            conditions = [
                {"type": kind, "status": "True", "lastTransitionTime": now}
                for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ]
            pod["status"] = {
                "phase": "Running",
                "hostIP": "10.0.0.1",
                "podIP": "10.1.0.1",
                "startTime": now,
                "conditions": conditions,
                "containerStatuses": [
                    {
                        "name": "c",
                        "image": "x",
                        "imageID": "x",
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": now}},
                    }
                ],
            }
            with contextlib.suppress(NotFoundError, ConflictError):
                await client.replace_status(res.PODS, pod)
    for rs in replica_sets:
        active = [p for p in pods if _owned_by(p, rs) and not p["metadata"].get("deletionTimestamp")]
        for _ in range(rs["spec"]["replicas"] - len(active)):
            created = await client.create(res.PODS, pod_of(rs))
            actors.replacements.append(created["metadata"]["name"])


@contextlib.asynccontextmanager
async def kubelet_and_replicaset_controller(
    client: ApiClient, namespace: str, replica_sets: list[Obj]
) -> AsyncIterator[Actors]:
    actors = Actors()

    async def loop() -> None:
        while True:
            try:
                await _act_once(client, namespace, replica_sets, actors)
            except KubeError as err:  # as the real ones: try again on the next pass
                log.warning("kubelet/ReplicaSet controller pass failed: %s", err)
            await asyncio.sleep(0.2)

    task = asyncio.create_task(loop())
    try:
        yield actors
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ---- koord-descheduler, in-process ------------------------------------------------------------------


def descheduler_config(tag: str, *, node_fit: bool, job_ttl: str) -> Obj:
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "deschedulingInterval": "1s",
        "nodeSelector": {"matchLabels": {"test-tag": tag}},
        "profiles": [
            {
                "name": DESCHEDULER,
                "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
                "pluginConfig": [
                    {
                        "name": "LowNodeLoad",
                        "args": {
                            "apiVersion": "descheduler/v1alpha2",
                            "kind": "LowNodeLoadArgs",
                            "lowThresholds": {"cpu": 45, "memory": 55},
                            "highThresholds": {"cpu": 75, "memory": 80},
                            "anomalyCondition": {"consecutiveAbnormalities": 1},
                            "nodeFit": node_fit,
                        },
                    },
                    {
                        "name": "MigrationController",
                        "args": {
                            "apiVersion": "descheduler/v1alpha2",
                            "kind": "MigrationControllerArgs",
                            "evictionPolicy": "Eviction",
                            "defaultJobTTL": job_ttl,
                            # a given arbitrationArgs is off unless it says enabled (upstream)
                            "arbitrationArgs": {"enabled": True, "interval": "200ms"},
                        },
                    },
                ],
            }
        ],
    }


@contextlib.asynccontextmanager
async def koord_descheduler(client: ApiClient, config: Obj) -> AsyncIterator[DeschedulerMetrics]:
    """The descheduler's rounds and migration controller, its informers synced."""
    factory = InformerFactory(client, freeze_after_sync=False)
    metrics = DeschedulerMetrics()
    descheduler = Descheduler(
        parse(config), client, factory, recorder=EventRecorder(client, DESCHEDULER), metrics=metrics
    )
    factory.start()
    task: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(30):
            await factory.wait_for_sync()
        task = asyncio.create_task(descheduler.run())
        yield metrics
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await factory.stop()


# ---- reading back ------------------------------------------------------------------------------


async def jobs_for(client: ApiClient, namespace: str, pod_name: str) -> list[Obj]:
    listed = (await client.list(res.POD_MIGRATION_JOBS))["items"]
    return [
        j
        for j in listed
        if (j["spec"].get("podRef") or {}).get("namespace") == namespace
        and j["spec"]["podRef"].get("name") == pod_name
    ]


def reservation_of(job: Obj) -> str:
    return str(((job["spec"].get("reservationOptions") or {}).get("reservationRef") or {}).get("name") or "")


async def failed_scheduling(client: ApiClient, reservation: str) -> list[str]:
    """koord-scheduler's FailedScheduling Events about a Reservation's reserve pod."""
    listed = (await client.list(res.EVENTS))["items"]
    return [
        e["message"]
        for e in listed
        if e["reason"] == "FailedScheduling"
        and e["involvedObject"].get("kind") == "Reservation"
        and e["involvedObject"].get("name") == reservation
    ]


def condition(job: Obj, kind: str) -> Obj | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or () if c["type"] == kind), None)


async def job_events(client: ApiClient, job: Obj) -> list[tuple[str, str]]:
    listed = (await client.list(res.EVENTS))["items"]
    return [
        (e["reason"], e["message"])
        for e in listed
        if e["involvedObject"].get("kind") == "PodMigrationJob"
        and e["involvedObject"].get("name") == job["metadata"]["name"]
    ]


# ---- 1. a hot node's BE pod moves to the cool node through a Reservation ----------------------------


async def test_a_be_pod_on_a_hot_node_migrates_to_the_cool_node_through_a_reservation(cluster):
    client, ns, tag = cluster
    hot, middle, cool = f"hot-{tag}", f"middle-{tag}", f"cool-{tag}"
    for node in (hot, middle, cool):
        await add_node(client, node, tag)  # 16 cores, 64Gi each
    rs = await client.create(res.REPLICA_SETS, replica_set("spark", ns, tag, 2, "4"))
    moving = await client.create(res.PODS, pod_of(rs, name="spark-a", node_name=hot))
    await client.create(res.PODS, pod_of(rs, name="spark-b", node_name=middle))
    # hot: 3.8 + 9 = 12.8 of 16 cores (80 % > 75 %); middle: 1 + 8.6 = 60 % (neither low nor
    # high); cool: 1.6 cores (10 %), with room for the 9 cores spark-a uses (10.6 <= 12)
    await report_usage(client, hot, ("3800m", "4Gi"), (("spark-a", "9", "8Gi"),), namespace=ns)
    await report_usage(client, middle, ("1", "4Gi"), (("spark-b", "8600m", "8Gi"),), namespace=ns)
    await report_usage(client, cool, ("1600m", "4Gi"), namespace=ns)

    async with kubelet_and_replicaset_controller(client, ns, [rs]) as actors:

        async def both_ready() -> bool:
            return all(_ready(p) for p in (await client.list(res.PODS, ns))["items"])

        await eventually_awaited(both_ready, 10)
        async with (
            koord_scheduler(client),
            koord_descheduler(client, descheduler_config(tag, node_fit=True, job_ttl="60s")) as metrics,
        ):

            async def succeeded() -> bool:
                jobs = await jobs_for(client, ns, "spark-a")
                return bool(jobs) and (jobs[0].get("status") or {}).get("phase") == "Succeeded"

            await eventually_awaited(succeeded, 40)
            (job,) = await jobs_for(client, ns, "spark-a")
            assert job["metadata"]["annotations"]["koordinator.sh/evict-trigger"] == "LowNodeLoad"
            assert job["metadata"]["annotations"]["koordinator.sh/evict-reason"] == (
                "node is overutilized, cpu usage(80.00%)>threshold(75.00%)"
            )
            assert job["spec"]["mode"] == "ReservationFirst"
            assert job["spec"]["podRef"]["uid"] == moving["metadata"]["uid"]
            status = job["status"]
            assert (status["phase"], status["status"]) == ("Succeeded", "Complete")
            assert status["nodeName"] == cool
            # the ReplicaSet controller's replacement, bound into the Reservation on the cool node
            (replacement,) = actors.replacements
            assert actors.removed == [("spark-a", moving["metadata"]["uid"])]
            assert status["podRef"]["name"] == replacement
            assert status["podRef"]["namespace"] == ns
            new_pod = await client.get(res.PODS, replacement, ns)
            assert status["podRef"]["uid"] == new_pod["metadata"]["uid"]
            assert new_pod["spec"]["nodeName"] == cool
            reservation_name = job["spec"]["reservationOptions"]["reservationRef"]["name"]
            reservation = await client.get(res.RESERVATIONS, reservation_name)
            assert reservation["status"]["nodeName"] == cool
            assert [o["name"] for o in reservation["status"]["currentOwners"]] == [replacement]
            assert reservation["spec"]["owners"][0]["controller"]["uid"] == rs["metadata"]["uid"]
            assert status["message"] == f'Bind Pod "{ns}/{replacement}" in Reservation "{reservation_name}"'
            for kind in (
                "ReservationCreated",
                "ReservationScheduled",
                "Eviction",
                "ReservationBound",
                "BoundPodReady",
                "PodBoundReservation",
            ):
                found = condition(job, kind) or {}
                assert found.get("status") == "True", (kind, found)
            with pytest.raises(NotFoundError):
                await client.get(res.PODS, "spark-a", ns)
            reasons = [reason for reason, _ in await job_events(client, job)]
            for reason in (
                "ReservationCreated",
                "ReservationScheduled",
                "Evicting",
                "EvictComplete",
                "Complete",
            ):
                assert reason in reasons
            assert (
                metrics.registry.get_sample_value(
                    "descheduler_pods_evicted_total",
                    {"result": "success", "strategy": "LowNodeLoad", "namespace": ns, "node": hot},
                )
                == 1.0
            )


# ---- 2. no node has room: the Reservation stays Pending, the job times out, nothing is evicted ------


async def test_a_reservation_no_node_can_take_times_the_job_out_and_nothing_is_evicted(cluster):
    client, ns, tag = cluster
    hot, cool = f"hot-{tag}", f"cool-{tag}"
    for node in (hot, cool):
        await add_node(client, node, tag)
    rs = await client.create(res.REPLICA_SETS, replica_set("batch", ns, tag, 2, "8"))
    stuck = await client.create(res.PODS, pod_of(rs, name="batch-a", node_name=hot))
    # cool is idle by its NodeMetric but its requests leave 2 cores: 8 for batch-b, 6 for web
    await client.create(res.PODS, pod_of(rs, name="batch-b", node_name=cool))
    await client.create(res.PODS, plain_pod("web", ns, tag, "6", cool))
    await report_usage(client, hot, ("3800m", "4Gi"), (("batch-a", "9", "8Gi"),), namespace=ns)
    await report_usage(client, cool, ("1", "4Gi"), (("batch-b", "500m", "1Gi"),), namespace=ns)

    async with kubelet_and_replicaset_controller(client, ns, [rs]) as actors:

        async def all_ready() -> bool:
            return all(_ready(p) for p in (await client.list(res.PODS, ns))["items"])

        await eventually_awaited(all_ready, 10)
        # nodeFit off: LowNodeLoad does not check that the pod fits the cool node
        config = descheduler_config(tag, node_fit=False, job_ttl="8s")
        async with koord_scheduler(client), koord_descheduler(client, config) as metrics:

            async def reservation_created() -> bool:
                jobs = await jobs_for(client, ns, "batch-a")
                return bool(jobs) and bool(reservation_of(jobs[0]))

            await eventually_awaited(reservation_created, 20)
            first = (await jobs_for(client, ns, "batch-a"))[0]
            name, r_name = first["metadata"]["name"], reservation_of(first)
            assert first["metadata"]["annotations"]["koordinator.sh/evict-trigger"] == "LowNodeLoad"
            assert first["spec"]["ttl"] == "8s"

            # koord-scheduler tries the reserve pod and finds no node for it
            async def refused() -> bool:
                return bool(await failed_scheduling(client, r_name))

            await eventually_awaited(refused, 20)
            message = (await failed_scheduling(client, r_name))[0]
            assert re.match(r"0/\d+ nodes are available: .*\b1 Insufficient cpu\b", message), message
            # ... and leaves the Reservation Pending, not placed, with Scheduled=False/Unschedulable,
            # which the job reports while it waits
            reservation = await client.get(res.RESERVATIONS, r_name)
            r_status = reservation.get("status") or {}
            assert r_status.get("phase", "Pending") == "Pending"
            assert not r_status.get("nodeName")

            async def reported() -> bool:
                found = condition(await client.get(res.POD_MIGRATION_JOBS, name), "ReservationScheduled")
                return found is not None and (found["status"], found["reason"]) == ("False", "Unschedulable")

            await eventually_awaited(reported, 10)

            async def failed() -> bool:
                job = await client.get(res.POD_MIGRATION_JOBS, name)
                return (job.get("status") or {}).get("phase") == "Failed"

            await eventually_awaited(failed, 20)
            job = await client.get(res.POD_MIGRATION_JOBS, name)
            assert (job["status"]["reason"], job["status"]["message"]) == (
                "Timeout",
                "Abort job caused by timeout",
            )
            assert ("Timeout", "Abort job caused by timeout") in await job_events(client, job)
            assert condition(job, "Eviction") is None
            # nothing was evicted: the pod is the same, not terminating, and no replacement exists
            pod = await client.get(res.PODS, "batch-a", ns)
            assert pod["metadata"]["uid"] == stuck["metadata"]["uid"]
            assert "deletionTimestamp" not in pod["metadata"]
            assert pod["spec"]["nodeName"] == hot
            assert actors.replacements == []
            assert actors.removed == []
            for other in await jobs_for(client, ns, "batch-a"):
                assert condition(other, "Eviction") is None
            assert (
                metrics.registry.get_sample_value(
                    "descheduler_pods_evicted_total",
                    {"result": "success", "strategy": "LowNodeLoad", "namespace": ns, "node": hot},
                )
                is None
            )


# ---- 3. the migration limits hold under 100 simultaneous candidates --------------------------------


async def test_limits_hold_under_a_hundred_simultaneous_candidates(cluster):
    client, ns, tag = cluster
    hots = [f"hot-a-{tag}", f"hot-b-{tag}"]
    cools = [f"cool-{i}-{tag}" for i in range(3)]
    for node in (*hots, *cools):
        await add_node(client, node, tag)  # 16 cores, 64Gi each
    replica_sets = [
        await client.create(res.REPLICA_SETS, replica_set(f"web{i}", ns, tag, 10, "100m", "64Mi"))
        for i in range(10)
    ]
    source: dict[str, str] = {}  # pod -> the hot node it started on
    usage: dict[str, list[tuple[str, str, str]]] = {node: [] for node in hots}
    for i, rs in enumerate(replica_sets):
        for j in range(10):
            # five ReplicaSets per hot node: a workload's object limiter cannot hold the other node back
            name, node = f"web{i}-{j}", hots[i // 5]
            await client.create(res.PODS, pod_of(rs, name=name, node_name=node))
            source[name] = node
            usage[node].append((name, "100m", "64Mi"))
    # each hot node: 7.8 + 50 x 0.1 = 12.8 of 16 cores (80 %); the cool ones at 10 %
    for node in hots:
        await report_usage(client, node, ("7800m", "4Gi"), tuple(usage[node]), namespace=ns)
    for node in cools:
        await report_usage(client, node, ("1600m", "4Gi"), namespace=ns)

    def migrating(job: Obj) -> bool:
        phase = (job.get("status") or {}).get("phase") or "Pending"
        admitted = (job["metadata"].get("annotations") or {}).get(
            "descheduler.koordinator.sh/passed-arbitration"
        )
        return phase == "Running" or (phase == "Pending" and admitted == "true")

    async with kubelet_and_replicaset_controller(client, ns, replica_sets):

        async def all_ready() -> bool:
            pods = (await client.list(res.PODS, ns))["items"]
            return len(pods) == 100 and all(_ready(p) for p in pods)

        await eventually_awaited(all_ready, 30)
        most_per_node: dict[str, int] = {}
        most_per_workload: dict[str, int] = {}
        async with (
            koord_scheduler(client),
            koord_descheduler(client, descheduler_config(tag, node_fit=True, job_ttl="60s")),
        ):
            deadline = time.monotonic() + 20
            succeeded: set[str] = set()
            while time.monotonic() < deadline and len(succeeded) < 6:
                jobs = [
                    j
                    for j in (await client.list(res.POD_MIGRATION_JOBS))["items"]
                    if (j["spec"].get("podRef") or {}).get("namespace") == ns
                ]
                pods = {p["metadata"]["name"]: p for p in (await client.list(res.PODS, ns))["items"]}
                # a node's pods being migrated: still on it (terminating too), with a job in flight
                per_node: dict[str, int] = {}
                for job in jobs:
                    pod_name = job["spec"]["podRef"]["name"]
                    if (job.get("status") or {}).get("phase") == "Succeeded":
                        succeeded.add(pod_name)
                    pod = pods.get(pod_name)
                    if (
                        migrating(job)
                        and pod is not None
                        and pod["metadata"]["uid"] == job["spec"]["podRef"]["uid"]
                    ):
                        node = pod["spec"]["nodeName"]
                        per_node[node] = per_node.get(node, 0) + 1
                # a workload's unavailable replicas: those not Ready and serving
                per_workload: dict[str, int] = {}
                for rs in replica_sets:
                    serving = [
                        p
                        for p in pods.values()
                        if _owned_by(p, rs) and _ready(p) and not p["metadata"].get("deletionTimestamp")
                    ]
                    per_workload[rs["metadata"]["name"]] = rs["spec"]["replicas"] - len(serving)
                for key, count in per_node.items():
                    most_per_node[key] = max(most_per_node.get(key, 0), count)
                for key, count in per_workload.items():
                    most_per_workload[key] = max(most_per_workload.get(key, 0), count)
                assert all(count <= 2 for count in per_node.values()), per_node
                assert all(count <= 2 for count in per_workload.values()), per_workload
                await asyncio.sleep(0.2)
        # migrations went on under the limits, up to them on both hot nodes
        assert len(succeeded) >= 6, succeeded
        assert most_per_node == dict.fromkeys(hots, 2)
        assert max(most_per_workload.values()) >= 1
        assert {source[p] for p in succeeded} == set(hots)
