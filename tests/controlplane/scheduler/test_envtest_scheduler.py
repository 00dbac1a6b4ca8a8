"""koord-scheduler against a real kube-apiserver and etcd (the envtest tier): pods bound, an
unschedulable pod told why in upstream's words and bound once a fitting node arrives, and
two replicas as separate processes where the leader is killed and the other takes over
without binding any pod twice.

The envtest apiserver runs upstream's default admission plug-ins, so every new Node gets the
``node.kubernetes.io/not-ready`` taint that a node lifecycle controller would remove; the
tests remove it as that controller would. Each test labels its nodes and selects them in its
pods, so that nodes other tests leave in the shared apiserver never take its pods.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.scheduler.config import parse
from controlplane.scheduler.process import ProcessOptions, SchedulerProcess
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from tests.envtest import Envtest, create_namespace
from tests.polling import eventually_awaited

ROOT = Path(__file__).resolve().parents[3]
Obj = dict[str, Any]


async def add_node(client: ApiClient, name: str, cpu: str, tag: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"test-tag": tag}},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
            "capacity": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
        },
    }
    created = await client.create(res.NODES, body)
    # the status is the kubelet's to write, and the not-ready taint a lifecycle controller's to remove
    created["status"] = body["status"]
    created = await client.replace(res.NODES, created, subresource="status")
    created["spec"]["taints"] = []
    await client.replace(res.NODES, created)


async def add_pod(
    client: ApiClient, namespace: str, name: str, cpu: str, tag: str, priority_class: str = ""
) -> None:
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": "koord-scheduler",
            "nodeSelector": {"test-tag": tag},  # only this test's nodes (others stay in the apiserver)
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
        },
    }
    if priority_class:
        body["spec"]["priorityClassName"] = priority_class
    await client.create(res.PODS, body)


async def nodes_of(client: ApiClient, namespace: str) -> dict[str, str | None]:
    listed = await client.list(res.PODS, namespace)
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in listed["items"]}


async def events(client: ApiClient, namespace: str, reason: str) -> list[Obj]:
    listed = await client.list(res.EVENTS, namespace)
    return [e for e in listed["items"] if e["reason"] == reason]


async def reported(client: ApiClient, namespace: str, reason: str, count: int) -> list[Obj]:
    """The Events of ``reason`` once there are ``count`` (each is written after its binding)."""

    async def enough() -> bool:
        return len(await events(client, namespace, reason)) >= count

    await eventually_awaited(enough, 30)
    return await events(client, namespace, reason)


async def test_pods_bind_and_an_unschedulable_pod_waits_for_a_fitting_node(
    envtest: Envtest, envtest_client: ApiClient, envtest_namespace: str
):
    ns, tag = envtest_namespace, uuid.uuid4().hex[:6]
    await add_node(envtest_client, f"big-a-{tag}", "2000", tag)
    process = SchedulerProcess(envtest_client, parse(None), ProcessOptions(leader_elect=False, secure_port=0))
    task = asyncio.create_task(process.run())
    try:
        await add_pod(envtest_client, ns, "first", "1500", tag)
        await add_pod(envtest_client, ns, "second", "1500", tag)
        await eventually_awaited(lambda: _bound(envtest_client, ns, "first", f"big-a-{tag}"), 30)
        await eventually_awaited(lambda: _has_events(envtest_client, ns, "FailedScheduling"), 30)
        (failed,) = await events(envtest_client, ns, "FailedScheduling")
        assert failed["involvedObject"]["name"] == "second"
        assert re.fullmatch(
            r"0/\d+ nodes are available: (.*, )?\d+ Insufficient cpu(, .*)?\. "
            r"preemption: 0/\d+ nodes are available: .*\.\.",
            failed["message"],
        )
        second = await envtest_client.get(res.PODS, "second", ns)
        condition = next(c for c in second["status"]["conditions"] if c["type"] == "PodScheduled")
        assert (condition["status"], condition["reason"], condition["message"]) == (
            "False",
            "Unschedulable",
            failed["message"],
        )
        await add_node(envtest_client, f"big-b-{tag}", "2000", tag)
        await eventually_awaited(lambda: _bound(envtest_client, ns, "second", f"big-b-{tag}"), 30)
        scheduled = await reported(envtest_client, ns, "Scheduled", 2)
        assert sorted(e["message"] for e in scheduled) == [
            f"Successfully assigned {ns}/first to big-a-{tag}",
            f"Successfully assigned {ns}/second to big-b-{tag}",
        ]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await process.stop()


async def test_preemption_deletes_the_lower_priority_pod_and_the_preemptor_binds(
    envtest_client: ApiClient, envtest_namespace: str
):
    ns, tag = envtest_namespace, uuid.uuid4().hex[:6]
    for name, value in ((f"low-{tag}", 1), (f"high-{tag}", 1000)):
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        await envtest_client.create(res.PRIORITY_CLASSES, body)
    await add_node(envtest_client, f"only-{tag}", "3000", tag)
    process = SchedulerProcess(envtest_client, parse(None), ProcessOptions(leader_elect=False, secure_port=0))
    task = asyncio.create_task(process.run())
    try:
        await add_pod(envtest_client, ns, "batch", "2000", tag, f"low-{tag}")
        await eventually_awaited(lambda: _bound(envtest_client, ns, "batch", f"only-{tag}"), 30)
        await add_pod(envtest_client, ns, "critical", "2000", tag, f"high-{tag}")

        async def victim_deleting() -> bool:
            batch = await envtest_client.get(res.PODS, "batch", ns)
            return bool(batch["metadata"].get("deletionTimestamp"))

        await eventually_awaited(victim_deleting, 30)
        # no kubelet here: finish the graceful deletion as the kubelet would
        await envtest_client.delete(res.PODS, "batch", ns, grace_period_seconds=0)
        await eventually_awaited(lambda: _bound(envtest_client, ns, "critical", f"only-{tag}"), 30)
        critical = await envtest_client.get(res.PODS, "critical", ns)
        assert critical["status"].get("nominatedNodeName") == f"only-{tag}"
        preempted = await reported(envtest_client, ns, "Preempted", 1)
        assert [e["involvedObject"]["name"] for e in preempted] == ["batch"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await process.stop()


async def _bound(client: ApiClient, namespace: str, pod: str, node: str) -> bool:
    return (await nodes_of(client, namespace)).get(pod) == node


async def _has_events(client: ApiClient, namespace: str, reason: str) -> bool:
    return bool(await events(client, namespace, reason))


@pytest.fixture
def replicas(envtest: Envtest, tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], Path]]]:
    started = []
    for i in range(2):
        log = tmp_path / f"replica-{i}.log"
        argv = [
            sys.executable,
            "-m",
            "controlplane.scheduler",
            "--kubeconfig",
            str(envtest.kubeconfig),
            "--secure-port",
            "0",
            "--leader-elect-lease-duration",
            "4s",
            "--leader-elect-renew-deadline",
            "3s",
            "--leader-elect-retry-period",
            "500ms",
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ})
        started.append((proc, log))
    try:
        yield started
    finally:
        for _, log in started:  # shown by pytest when the test fails
            print(f"--- {log.name}\n{log.read_text()[-4000:]}")
        for proc, _ in started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


async def test_the_leader_is_killed_and_the_other_replica_takes_over(
    envtest_client: ApiClient, envtest_namespace: str, replicas: list[tuple[subprocess.Popen[bytes], Path]]
):
    ns, tag = envtest_namespace, uuid.uuid4().hex[:6]
    await create_namespace(envtest_client, "koordinator-system")
    await add_node(envtest_client, f"big-{tag}", "100000", tag)

    async def holder() -> str:
        lease = await envtest_client.get(res.LEASES, "koord-scheduler", "koordinator-system")
        return str(lease.get("spec", {}).get("holderIdentity") or "")

    async with asyncio.timeout(60):
        while True:
            with_holder = await _quiet(holder)
            leader = next(
                (i for i, (_, log) in enumerate(replicas) if with_holder and with_holder in log.read_text()),
                None,
            )
            if leader is not None:
                break
            await asyncio.sleep(0.2)
    for i in range(5):
        await add_pod(envtest_client, ns, f"a{i}", "1", tag)
    await eventually_awaited(lambda: _all_bound(envtest_client, ns, 5), 60)
    await reported(envtest_client, ns, "Scheduled", 5)  # the leader is done with them
    proc, _ = replicas[leader]
    proc.kill()  # no goodbye: the lease has to expire
    proc.wait()
    for i in range(5):
        await add_pod(envtest_client, ns, f"b{i}", "1", tag)
    await eventually_awaited(lambda: _all_bound(envtest_client, ns, 10), 60)
    scheduled = await reported(envtest_client, ns, "Scheduled", 10)
    per_pod: dict[str, int] = {}
    for event in scheduled:
        per_pod[event["involvedObject"]["name"]] = per_pod.get(event["involvedObject"]["name"], 0) + 1
    assert per_pod == {f"{p}{i}": 1 for p in "ab" for i in range(5)}  # every pod bound exactly once
    survivor, _ = replicas[1 - leader]
    assert survivor.poll() is None


async def _quiet(call: Any) -> Any:
    try:
        return await call()
    except Exception:
        return None


async def _all_bound(client: ApiClient, namespace: str, count: int) -> bool:
    placed = await nodes_of(client, namespace)
    return len(placed) == count and all(placed.values())
