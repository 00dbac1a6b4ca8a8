"""envtest tier: Koordinator's colocation loop on a real kube-apiserver and etcd.

koord-scheduler runs in-process with Koordinator's shipped profile
(:data:`controlplane.scheduler.profiles.KOORDINATOR`: LoadAwareScheduling, NodeNUMAResource,
DeviceShare, Reservation, ElasticQuota, Coscheduling) and, for the colocation loop, koord-manager's
noderesource controller as well:

* the controller turns NodeMetrics (written as the koordlet writes them) into
  ``kubernetes.io/batch-cpu``/``batch-memory`` on the Nodes, and a BE pod asking for them is
  bound to the cool node, never to the hot one (LoadAwareScheduling's usage threshold);
* a pod over its ElasticQuota's runtime in a three-level tree is refused with upstream's
  "Insufficient quotas" message and bound once another tenant's pod is deleted;
* a gang of four with room for three binds none, then all four once a node with room joins;
* an LSR pod on a SingleNUMANode node gets a ``resource-status`` cpuset of whole cores on one
  NUMA node from the node's NodeResourceTopology, and a GPU-share pod a ``device-allocated``
  matching the node's Device object;
* a Reservation is scheduled and Available, its owner lands on it with
  ``reservation-allocated`` and the Reservation records it, and one past its TTL is failed
  and then collected.

The module runs its own etcd and kube-apiserver: the noderesource controller acts on every
node of the cluster, and the quota tree's root spans all of them. Each test still labels its
nodes and selects them in its pods, and names its quotas apart. No kubelet runs: the tests
write node status, remove the ``node.kubernetes.io/not-ready`` taint (as the node lifecycle
controller would) and delete pods with ``gracePeriodSeconds=0``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.scheduler.config import load
from controlplane.scheduler.plugins.reservation import reservation_args
from controlplane.scheduler.profiles import KOORDINATOR
from controlplane.scheduler.scheduler import Scheduler
from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.timeutil import format_time
from tests.controlplane.manager.controllers.harness import controller_set
from tests.controlplane.manager.controllers.objects import GI, config_map, node_metric, pod_metric
from tests.controlplane.scheduler.devices.builders import device, gpu
from tests.controlplane.scheduler.numa.builders import TOPO_2S4N, make_nrt
from tests.controlplane.scheduler.quota.builders import cpu_quota
from tests.envtest import Envtest, own_envtest, prepare_koordinator
from tests.polling import eventually_awaited

ROOT = Path(__file__).resolve().parents[3]
CRDS = [
    ROOT / "crds" / name
    for name in (
        "slo.koordinator.sh_nodemetrics.yaml",
        "slo.koordinator.sh_nodeslos.yaml",
        "scheduling.sigs.k8s.io_elasticquotas.yaml",
        "scheduling.sigs.k8s.io_podgroups.yaml",
        "scheduling.koordinator.sh_devices.yaml",
        "scheduling.koordinator.sh_reservations.yaml",
        "topology.node.k8s.io_noderesourcetopologies.yaml",
    )
]
SCHEDULER = "koord-scheduler"
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
Q = "quota.scheduling.koordinator.sh"
GANG = "gang.scheduling.koordinator.sh"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def envtest_koord(envtest_bin: Path) -> Iterator[Envtest]:
    """A control plane of this module's own."""
    with own_envtest(envtest_bin) as plane:
        yield plane


@pytest.fixture
async def cluster(envtest_koord: Envtest) -> AsyncIterator[tuple[ApiClient, str, str]]:
    """An admin client with the CRDs installed, a fresh namespace and a tag for the test's nodes."""
    async with envtest_koord.client() as client:
        namespace, tag = await prepare_koordinator(client, CRDS)
        yield client, namespace, tag


# ---- the apiserver's objects, written as their owners write them ---------------------------------


async def add_node(
    client: ApiClient, name: str, tag: str, cpu: str, memory: str, allocatable: tuple[str, str] | None = None
) -> None:
    """A Node whose status the kubelet wrote, without the not-ready taint."""
    alloc_cpu, alloc_memory = allocatable or (cpu, memory)
    status = {
        "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
        "allocatable": {"cpu": alloc_cpu, "memory": alloc_memory, "pods": "110"},
    }
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "test-tag": tag}},
    }
    created = await client.create(res.NODES, body)
    created["status"] = status
    created = await client.replace_status(res.NODES, created)
    created["spec"]["taints"] = []
    await client.replace(res.NODES, created)


async def add_node_metric(client: ApiClient, metric: Obj) -> None:
    """As the koordlet reports: create the NodeMetric, then write its status."""
    created = await client.create(res.NODE_METRICS, {k: v for k, v in metric.items() if k != "status"})
    created["status"] = metric["status"]
    await client.replace_status(res.NODE_METRICS, created)


def pod(
    name: str,
    namespace: str,
    tag: str,
    requests: dict[str, str],
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    priority_class: str = "",
    node_name: str = "",
) -> Obj:
    spec: Obj = {
        "schedulerName": SCHEDULER,
        "nodeSelector": {"test-tag": tag},  # this test's nodes only
        "containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_name:
        spec["nodeName"] = node_name
    meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


# ---- the components, in-process ------------------------------------------------------------------


@contextlib.asynccontextmanager
async def koord_scheduler(client: ApiClient, gc_duration_s: int | None = None) -> AsyncIterator[Scheduler]:
    """koord-scheduler with the shipped Koordinator profile, its informers synced
    (``gc_duration_s``: Reservation's ``gcDurationSeconds`` instead of its 24 hours)."""
    factory = InformerFactory(client, freeze_after_sync=False)
    config = load(str(KOORDINATOR))
    if gc_duration_s is not None:
        config.profiles[0].args["Reservation"] = reservation_args({"gcDurationSeconds": gc_duration_s})
    scheduler = Scheduler(client, config, recorder=EventRecorder(client, SCHEDULER))
    scheduler.attach(factory)
    factory.start()
    task: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(30):
            await factory.wait_for_sync()
        task = asyncio.create_task(scheduler.run())
        yield scheduler
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await factory.stop()
        await scheduler.drain()


# ---- reading back ------------------------------------------------------------------------------


async def node_of(client: ApiClient, namespace: str, name: str) -> str | None:
    found = await client.get(res.PODS, name, namespace)
    node: str | None = found["spec"].get("nodeName")
    return node


async def events(client: ApiClient, namespace: str, reason: str, pod_name: str) -> list[Obj]:
    listed = await client.list(res.EVENTS, namespace)
    return [e for e in listed["items"] if e["reason"] == reason and e["involvedObject"]["name"] == pod_name]


def batch_of(node: Obj) -> tuple[int, int] | None:
    allocatable = node["status"].get("allocatable") or {}
    if BATCH_CPU not in allocatable:
        return None
    return Quantity.parse(allocatable[BATCH_CPU]).value(), Quantity.parse(allocatable[BATCH_MEMORY]).value()


# ---- 1. the colocation loop --------------------------------------------------------------------


async def test_batch_resources_from_node_metrics_and_a_be_pod_bound_to_the_cool_node(cluster):
    client, ns, tag = cluster
    cool, hot = f"cool-{tag}", f"hot-{tag}"
    await client.create(res.CONFIG_MAPS, config_map({"enable": True}))
    # 16 cores and 64Gi each, of which the kubelet reserves 1 core and 4Gi
    for name in (cool, hot):
        await add_node(client, name, tag, "16", "64Gi", allocatable=("15", "60Gi"))
    # a prod (LS) web server on the cool node, already running
    web = pod(
        "web",
        ns,
        tag,
        {"cpu": "4", "memory": "8Gi"},
        labels={"koordinator.sh/qosClass": "LS"},
        node_name=cool,
    )
    web = await client.create(res.PODS, web)
    web["status"] = {"phase": "Running"}
    await client.replace_status(res.PODS, web)
    now = format_time(time.time())
    # cool: 4.5 of 15 allocatable cores used (30 %), 3 of them by the web server
    await add_node_metric(
        client,
        node_metric(
            cool,
            update_time=now,
            node_usage=("4500m", "12Gi"),
            system_usage=("500m", "2Gi"),
            pods=[pod_metric("web", "3", "9Gi", namespace=ns)],
        ),
    )
    # hot: 12 of 15 cores used (80 %, above LoadAware's 65 %), by batch work that batch
    # resources do not give back (the koordlet reports it as koord-batch)
    await add_node_metric(
        client,
        node_metric(
            hot,
            update_time=now,
            node_usage=("12", "20Gi"),
            system_usage=("500m", "2Gi"),
            pods=[pod_metric("spark-executor", "11500m", "18Gi", namespace=ns, priority="koord-batch")],
        ),
    )

    async with controller_set(client, ("noderesource",)):

        async def both_written() -> bool:
            return all([batch_of(await client.get(res.NODES, n)) is not None for n in (cool, hot)])

        await eventually_awaited(both_written, 30)
        # the "usage" policy with the default thresholds (cpu 60 %, memory 65 % reclaimable):
        # batch = capacity - capacity x (100 - threshold)/100 - max(systemUsed, kubelet reserved)
        #         - sum(HP pods' usage)
        # cool cpu:    16000 - 6400 - max(500, 1000) - web 3000              = 5600 milli-cores
        # cool memory: 64Gi - 24051816857 (35 %) - max(2Gi, 4Gi) - web 9Gi
        assert batch_of(await client.get(res.NODES, cool)) == (5600, 64 * GI - 24051816857 - 4 * GI - 9 * GI)
        # hot: no HP pods (the batch executor's usage is not taken off): 16000 - 6400 - 1000
        assert batch_of(await client.get(res.NODES, hot)) == (8600, 64 * GI - 24051816857 - 4 * GI)

    be_labels = {"koordinator.sh/qosClass": "BE"}
    batch_requests = {BATCH_CPU: "1000", BATCH_MEMORY: "1Gi"}
    async with koord_scheduler(client):
        await client.create(
            res.PODS, pod("be-job", ns, tag, batch_requests, labels=be_labels, priority_class="koord-batch")
        )
        # Both nodes fit 1000 batch-cpu, and NodeResourcesFit (LeastAllocated over cpu, memory,
        # batch-cpu, batch-memory) would rather pick the hot node, which has more of each free.
        # (given the hot node's usage equal to the cool one's, the pod goes there). Only
        # LoadAwareScheduling's Filter drops the hot node (cpu usage 12/15 = 80 % >
        # usageThresholds.cpu 65 on a fresh NodeMetric), so the cool node is the only choice.
        await eventually_awaited(lambda: _on(client, ns, "be-job", cool), 30)
        # The same pod held to the hot node is refused, in LoadAwareScheduling's words.
        pinned = pod("be-pinned", ns, tag, batch_requests, labels=be_labels, priority_class="koord-batch")
        pinned["spec"]["nodeSelector"]["kubernetes.io/hostname"] = hot
        await client.create(res.PODS, pinned)

        async def refused() -> bool:
            return bool(await events(client, ns, "FailedScheduling", "be-pinned"))

        await eventually_awaited(refused, 30)
        (failed,) = await events(client, ns, "FailedScheduling", "be-pinned")
        assert re.match(
            r"0/\d+ nodes are available: .*\b1 node\(s\) cpu usage exceed threshold\b", failed["message"]
        )
        assert await node_of(client, ns, "be-pinned") is None


async def _on(client: ApiClient, namespace: str, pod_name: str, node: str) -> bool:
    return await node_of(client, namespace, pod_name) == node


# ---- 2. ElasticQuota ---------------------------------------------------------------------------


async def test_a_pod_over_its_quotas_runtime_waits_until_another_tenants_pod_is_deleted(cluster):
    client, ns, tag = cluster
    org, a, b = f"org-{tag}", f"a-{tag}", f"b-{tag}"
    await add_node(client, f"quota-{tag}", tag, "4", "64Gi")
    # koordinator's root (implicit) -> org (4 CPU) -> a, b (2 CPU guaranteed each, may borrow up to 4)
    await client.create(res.ELASTIC_QUOTAS, cpu_quota(org, "4", "4", namespace=ns, is_parent=True))
    await client.create(res.ELASTIC_QUOTAS, cpu_quota(a, "2", "4", namespace=ns, parent=org))
    await client.create(res.ELASTIC_QUOTAS, cpu_quota(b, "2", "4", namespace=ns, parent=org))
    quota_pod = {"cpu": "2"}
    for name, tenant in (("a-1", a), ("b-1", b)):
        await client.create(
            res.PODS, pod(name, ns, tag, quota_pod, labels={f"{Q}/name": tenant}, node_name=f"quota-{tag}")
        )
    await client.create(res.PODS, pod("a-2", ns, tag, {"cpu": "1"}, labels={f"{Q}/name": a}))
    async with koord_scheduler(client):
        # a asks 3 (min 2) while b uses its 2 and org has 4: nothing is left to lend, a's runtime is 2
        async def refused() -> bool:
            return bool(await events(client, ns, "FailedScheduling", "a-2"))

        await eventually_awaited(refused, 30)
        failed = (await events(client, ns, "FailedScheduling", "a-2"))[0]
        assert re.match(
            r"0/\d+ nodes are available: "
            + re.escape(
                f"Insufficient quotas, quotaName: {a}, runtime: cpu:2,memory:0, used: cpu:2, "
                "pod's request: cpu:1, exceedDimensions: [cpu]. "
            ),
            failed["message"],
        ), failed["message"]
        assert await node_of(client, ns, "a-2") is None
        # b's pod ends (no kubelet to finish a graceful deletion): b's min goes to a
        await client.delete(res.PODS, "b-1", ns, grace_period_seconds=0)
        await eventually_awaited(lambda: _on(client, ns, "a-2", f"quota-{tag}"), 30)

        async def used_written() -> bool:
            status = (await client.get(res.ELASTIC_QUOTAS, a, ns)).get("status") or {}
            return bool((status.get("used") or {}).get("cpu") == "3")

        await eventually_awaited(used_written, 30)


# ---- 3. Coscheduling ---------------------------------------------------------------------------


async def test_a_gang_of_four_with_room_for_three_binds_none_then_all_once_a_node_joins(cluster):
    client, ns, tag = cluster
    await add_node(client, f"small-{tag}", tag, "3", "32Gi")
    names = [f"w{i}" for i in range(4)]
    gang = {f"{GANG}/name": "train", f"{GANG}/min-available": "4"}
    async with koord_scheduler(client):
        for name in names:
            await client.create(res.PODS, pod(name, ns, tag, {"cpu": "1"}, annotations=gang))

        # three fit and wait at Permit; the fourth fits nowhere, so the Strict gang (the
        # default mode) rejects the three waiting members and none binds
        rejected = re.compile(
            re.escape(f'Gang "{ns}/train" gets rejected due to member Pod "')
            + r'w\d" is unschedulable with reason "0/\d+ nodes are available: 1 Insufficient cpu, .*", '
            + r"alreadyWaitForBound: 3"
        )

        async def gang_rejected() -> bool:
            listed = (await client.list(res.EVENTS, ns))["items"]
            return any(e["reason"] == "FailedScheduling" and rejected.fullmatch(e["message"]) for e in listed)

        await eventually_awaited(gang_rejected, 30)
        assert [await node_of(client, ns, n) for n in names] == [None] * 4
        await add_node(client, f"more-{tag}", tag, "2", "32Gi")

        async def all_bound() -> bool:
            return all([await node_of(client, ns, n) for n in names])

        await eventually_awaited(all_bound, 30)
        scheduled = [e for n in names for e in await events(client, ns, "Scheduled", n)]
        assert len({e["involvedObject"]["name"] for e in scheduled}) == 4
        annotations = (await client.get(res.PODS, "w0", ns))["metadata"]["annotations"]
        assert annotations["internal.scheduling.koordinator.sh/bind-gang-group-id"] == f"{ns}/train"
        assert annotations["internal.scheduling.koordinator.sh/bind-gang-member-count"] == "4"


# ---- 4. NodeNUMAResource and DeviceShare -----------------------------------------------------


async def _annotation(client: ApiClient, namespace: str, name: str, key: str) -> Obj | None:
    annotations = (await client.get(res.PODS, name, namespace))["metadata"].get("annotations") or {}
    return json.loads(annotations[key]) if key in annotations else None


async def test_an_lsr_pod_gets_whole_cores_of_one_numa_node_from_the_nodes_topology(cluster):
    client, ns, tag = cluster
    name = f"numa-{tag}"
    await add_node(client, name, tag, "32", "64Gi")
    node = await client.get(res.NODES, name)
    node["metadata"]["labels"]["node.koordinator.sh/numa-topology-policy"] = "SingleNUMANode"
    await client.replace(res.NODES, node)
    # the koordlet's report: 2 sockets x 2 NUMA nodes x 4 cores x 2 threads
    topology = make_nrt(TOPO_2S4N, name)
    for zone in range(4):
        topology.zone(zone, cpu="8", memory="16Gi")
    await client.create(res.NODE_RESOURCE_TOPOLOGIES, topology.build())
    lsr = pod(
        "lsr",
        ns,
        tag,
        {"cpu": "4", "memory": "4Gi"},
        labels={"koordinator.sh/qosClass": "LSR"},
        priority_class="koord-prod",
    )
    async with koord_scheduler(client):
        await client.create(res.PODS, lsr)
        await eventually_awaited(lambda: _on(client, ns, "lsr", name), 30)
    # FullPCPUs (the default): two whole cores, and NUMA node 0's share of cpu and memory
    assert await _annotation(client, ns, "lsr", "scheduling.koordinator.sh/resource-status") == {
        "cpuset": "0-3",
        "numaNodeResources": [{"node": 0, "resources": {"cpu": "4", "memory": "4Gi"}}],
    }


async def test_a_gpu_share_pod_gets_a_device_allocation_matching_the_device_object(cluster):
    client, ns, tag = cluster
    name = f"gpu-{tag}"
    await add_node(client, name, tag, "16", "64Gi")
    node = await client.get(res.NODES, name)
    # what the slo-controller's device plug-in publishes for one 80 GiB GPU
    node["status"]["allocatable"] |= {
        "koordinator.sh/gpu-core": "100",
        "koordinator.sh/gpu-memory-ratio": "100",
        "koordinator.sh/gpu-memory": "80Gi",
    }
    await client.replace_status(res.NODES, node)
    await client.create(res.DEVICES, device(gpu(0, memory=80 * GI), name=name))
    share = {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}
    gpu_pod = pod("share", ns, tag, share)
    gpu_pod["spec"]["containers"][0]["resources"]["limits"] = share  # extended resources need both
    async with koord_scheduler(client):
        await client.create(res.PODS, gpu_pod)
        await eventually_awaited(lambda: _on(client, ns, "share", name), 30)
    # half of GPU 0: its core and ratio, and half of the 80 GiB the Device object reports
    assert await _annotation(client, ns, "share", "scheduling.koordinator.sh/device-allocated") == {
        "gpu": [
            {
                "minor": 0,
                "resources": {
                    "koordinator.sh/gpu-core": "50",
                    "koordinator.sh/gpu-memory": "40Gi",
                    "koordinator.sh/gpu-memory-ratio": "50",
                },
            }
        ]
    }


# ---- 5. Reservation --------------------------------------------------------------------------


def _reservation(name: str, tag: str, cpu: str, ttl: str, owner_label: str) -> Obj:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"namespace": "default"},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "nodeSelector": {"test-tag": tag},
                    "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
                },
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": owner_label}}}],
            "ttl": ttl,
        },
    }


async def _reservation_status(client: ApiClient, name: str) -> Obj:
    found: Obj = (await client.get(res.RESERVATIONS, name)).get("status") or {}
    return found


async def test_a_reservation_is_available_its_owner_lands_on_it_and_an_expired_one_is_cleaned(cluster):
    client, ns, tag = cluster
    name = f"res-{tag}"
    await add_node(client, name, tag, "4", "16Gi")
    kept, short = f"web-{tag}", f"short-{tag}"
    await client.create(res.RESERVATIONS, _reservation(kept, tag, "3", "1h", f"web-{tag}"))
    await client.create(res.RESERVATIONS, _reservation(short, tag, "1", "2s", f"none-{tag}"))
    async with koord_scheduler(client, gc_duration_s=2):

        async def available() -> bool:
            return (await _reservation_status(client, kept)).get("phase") == "Available"

        await eventually_awaited(available, 30)
        status = await _reservation_status(client, kept)
        assert (status["nodeName"], status["allocatable"]) == (name, {"cpu": "3"})
        # the owner lands in the reservation and carries its name and UID
        owner = pod("web-0", ns, tag, {"cpu": "3"}, labels={"app": f"web-{tag}"})
        await client.create(res.PODS, owner)
        await eventually_awaited(lambda: _on(client, ns, "web-0", name), 30)
        reserved = await client.get(res.RESERVATIONS, kept)
        assert await _annotation(client, ns, "web-0", "scheduling.koordinator.sh/reservation-allocated") == {
            "name": kept,
            "uid": reserved["metadata"]["uid"],
        }
        # the scheduler's Reservation controller: owners recorded (allocate-once: Succeeded),
        # the short one expired

        async def recorded() -> bool:
            status = await _reservation_status(client, kept)
            return status.get("phase") == "Succeeded" and bool(status.get("currentOwners"))

        await eventually_awaited(recorded, 30)
        status = await _reservation_status(client, kept)
        assert [o["name"] for o in status["currentOwners"]] == ["web-0"]
        assert status["allocated"] == {"cpu": "3"}

        async def expired() -> bool:
            return (await _reservation_status(client, short)).get("phase") == "Failed"

        await eventually_awaited(expired, 30)
        ready = [c for c in (await _reservation_status(client, short))["conditions"] if c["type"] == "Ready"]
        assert [(c["status"], c["reason"]) for c in ready] == [("False", "Expired")]

        # and collected gcDurationSeconds (2 s here) after it expired
        async def collected() -> bool:
            listed = await client.list(res.RESERVATIONS)
            return all(r["metadata"]["name"] != short for r in listed["items"])

        await eventually_awaited(collected, 30)
