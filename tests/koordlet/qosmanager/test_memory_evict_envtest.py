"""Envtest: memory pressure on a (fake) node makes the koordlet evict the right BE pod
through the real apiserver's Eviction API; a PodDisruptionBudget that forbids it stops
the eviction, and the pod's events say why."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import NotFoundError
from tests.fakes.host import FakeHost
from tests.koordlet.clusterenv import KOORDLET_CRDS, StubKubelet, agent_config, register_node, running_agent

GIB, MIB = 1 << 30, 1 << 20


async def _running_pod(
    client: ApiClient, namespace: str, node: str, name: str, qos: str, labels: dict[str, str]
) -> dict[str, Any]:
    """A pod bound to the node and Running/Ready, as the kubelet would report it."""
    container: dict[str, Any] = {"name": "main", "image": "registry.example/app:1"}
    if qos != "BE":  # requests make it Burstable (the apiserver computes status.qosClass)
        container["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"koordinator.sh/qosClass": qos, **labels},
        },
        "spec": {"nodeName": node, "containers": [container]},
    }
    created = await client.create(res.PODS, body, namespace)
    created["status"] = {
        **created.get("status", {}),
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [
            {"name": "main", "ready": True, "containerID": "containerd://" + uuid.uuid4().hex * 2}
        ],
    }
    return await client.replace_status(res.PODS, created)


async def _scenario(
    envtest: Any, client: ApiClient, tmp_path: Any, namespace: str
) -> tuple[str, FakeHost, StubKubelet, dict[str, dict[str, Any]]]:
    await envtest.apply_crds(client, KOORDLET_CRDS)
    node = f"mem-{uuid.uuid4().hex[:8]}"
    await register_node(client, node, {"cpu": "8", "memory": "16Gi"})
    await client.create(
        res.NODE_SLOS,
        {
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeSLO",
            "metadata": {"name": node},
            "spec": {"resourceUsedThresholdWithBE": {"enable": True}},
        },
    )
    host = FakeHost(tmp_path, "v1")
    host.set_cpu_topology(sockets=1, cores_per_socket=2, threads_per_core=1)
    host.set_proc_stat([100, 0, 100, 1000, 0, 0, 0, 0], {0: [50, 0, 50, 500, 0, 0, 0, 0]})
    # 16Gi of which 12Gi used: 75 % >= 70 %, release 1.12Gi to reach 68 %
    host.set_meminfo(MemTotal=16 * 1024 * 1024, MemFree=3 * 1024 * 1024, MemAvailable=4 * 1024 * 1024)
    pods = {
        "be-small": await _running_pod(client, namespace, node, "be-small", "BE", {}),
        "be-big": await _running_pod(client, namespace, node, "be-big", "BE", {"app": "big"}),
        "web": await _running_pod(client, namespace, node, "web", "LS", {}),
    }
    usage = {"be-small": 512 * MIB, "be-big": 2 * GIB, "web": 6 * GIB}
    for name, pod in pods.items():
        cid = pod["status"]["containerStatuses"][0]["containerID"]
        rel = host.add_pod(pod["status"]["qosClass"], pod["metadata"]["uid"], [cid])
        host.set_memory_stat(rel, active_anon=usage[name])
    kubelet = await StubKubelet().start()
    kubelet.pods = list(pods.values())
    return node, host, kubelet, pods


async def _events(client: ApiClient, namespace: str, pod: str, reason: str) -> list[dict[str, Any]]:
    items = (await client.list(res.EVENTS, namespace))["items"]
    return [e for e in items if e["involvedObject"]["name"] == pod and e["reason"] == reason]


async def _deleting(client: ApiClient, namespace: str, name: str) -> bool:
    try:
        pod = await client.get(res.PODS, name, namespace)
    except NotFoundError:
        return True
    return bool(pod["metadata"].get("deletionTimestamp"))


async def test_memory_pressure_evicts_the_biggest_be_pod(
    envtest, envtest_client, envtest_namespace, tmp_path
):
    client, ns = envtest_client, envtest_namespace
    node, host, kubelet, _ = await _scenario(envtest, client, tmp_path, ns)
    try:
        async with running_agent(agent_config(node, host, kubelet, BEMemoryEvict=True), envtest.client()):
            found: list[dict[str, Any]] = []
            for _ in range(300):
                found = await _events(client, ns, "be-big", "EvictPodSuccess")
                if found:
                    break
                await asyncio.sleep(0.1)
            assert found, "be-big was not evicted"
            assert await _deleting(client, ns, "be-big")
            assert not await _deleting(client, ns, "be-small")  # 2Gi alone releases the 1.12Gi
            assert not await _deleting(client, ns, "web")  # LS pods are never evicted
            assert "node memory usage 75% >= 70%" in found[0]["message"]
    finally:
        await kubelet.stop()
        await client.delete(res.NODES, node)


async def test_a_pdb_that_forbids_it_stops_the_eviction(envtest, envtest_client, envtest_namespace, tmp_path):
    client, ns = envtest_client, envtest_namespace
    node, host, kubelet, _ = await _scenario(envtest, client, tmp_path / "pdb", ns)
    await client.create(
        res.POD_DISRUPTION_BUDGETS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-big", "namespace": ns},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "big"}}},
        },
        ns,
    )
    pdb = await client.get(res.POD_DISRUPTION_BUDGETS, "keep-big", ns)
    pdb["status"] = {  # what the disruption controller would compute (no controller-manager here)
        "observedGeneration": pdb["metadata"]["generation"],
        "disruptionsAllowed": 0,
        "currentHealthy": 1,
        "desiredHealthy": 1,
        "expectedPods": 1,
    }
    await client.replace_status(res.POD_DISRUPTION_BUDGETS, pdb)
    try:
        async with running_agent(agent_config(node, host, kubelet, BEMemoryEvict=True), envtest.client()):
            refused: list[dict[str, Any]] = []
            for _ in range(300):
                refused = await _events(client, ns, "be-big", "EvictPodFail")
                if refused:
                    break
                await asyncio.sleep(0.1)
            assert refused, "no EvictPodFail event"
            assert "disruption budget" in refused[0]["message"]
            assert not await _deleting(client, ns, "be-big")
    finally:
        await kubelet.stop()
        await client.delete(res.NODES, node)
