"""envtest tier: a stock kube-scheduler (v1.34.4, built from its Go module with the node tier)
configured with ``koord-scheduler extender`` places pods by Koordinator's verdicts on a
real kube-apiserver: LoadAwareScheduling keeps a pod off the hot node, and ElasticQuota
keeps a pod over its quota pending with upstream's message, while one within it binds.

The module runs its own etcd and kube-apiserver: the stock scheduler takes every pending
pod of ``default-scheduler`` it sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.scheduler import config as schedconfig
from controlplane.scheduler.extender import serve
from controlplane.scheduler.profiles import EXTENDER
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from tests.controlplane.scheduler.quota.builders import cpu_quota
from tests.controlplane.scheduler.test_loadaware import metric
from tests.envtest import Envtest, apply_crds, create_namespace, own_envtest
from tests.polling import eventually_awaited
from testsupport.envtest.controlplane import free_port
from testsupport.nodetier import NodeTierError, provision_node_binaries

ROOT = Path(__file__).resolve().parents[3]
CRDS = [
    ROOT / "crds" / name
    for name in (
        "slo.koordinator.sh_nodemetrics.yaml",
        "scheduling.sigs.k8s.io_elasticquotas.yaml",
        "scheduling.koordinator.sh_devices.yaml",
        "topology.node.k8s.io_noderesourcetopologies.yaml",
    )
]
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def kube_scheduler_bin() -> Path:
    try:
        return provision_node_binaries() / "bin" / "kube-scheduler"
    except NodeTierError as exc:
        pytest.skip(f"kube-scheduler is built with the node tier's binaries, unavailable: {exc}")


@pytest.fixture(scope="module")
def envtest_extender(envtest_bin: Path) -> Iterator[Envtest]:
    with own_envtest(envtest_bin) as plane:
        yield plane


@contextlib.contextmanager
def stock_scheduler(binary: Path, plane: Envtest, extender_port: int, workdir: Path) -> Iterator[None]:
    """kube-scheduler with the extender: filter, prioritize and bind through it."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(plane.kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "extenders": [
            {
                "urlPrefix": f"http://127.0.0.1:{extender_port}",
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "bindVerb": "bind",
                "weight": 1,
                "nodeCacheCapable": True,
                "httpTimeout": "30s",
            }
        ],
    }
    path = workdir / "kube-scheduler.yaml"
    path.write_text(json.dumps(config))
    log = (workdir / "kube-scheduler.log").open("wb")
    process = subprocess.Popen(
        [str(binary), f"--config={path}", "--secure-port=0", "--v=2"], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@contextlib.asynccontextmanager
async def koord_extender(client: ApiClient, port: int) -> AsyncIterator[None]:
    task = asyncio.create_task(serve(client, schedconfig.load(str(EXTENDER)), "127.0.0.1", port))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def add_node(client: ApiClient, name: str, cpu: str) -> None:
    created = await client.create(res.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    created["status"] = {
        "capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
        "allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
    }
    created = await client.replace_status(res.NODES, created)
    created["spec"]["taints"] = []
    await client.replace(res.NODES, created)


async def report(client: ApiClient, name: str, cpu: str) -> None:
    body = metric(name, cpu, "4Gi", updated=time.time())
    created = await client.create(res.NODE_METRICS, {k: v for k, v in body.items() if k != "status"})
    created["status"] = body["status"]
    await client.replace_status(res.NODE_METRICS, created)


def pod(name: str, cpu: str, labels: Obj | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]},
    }


async def node_of(client: ApiClient, name: str) -> str | None:
    found: str | None = (await client.get(res.PODS, name, "default"))["spec"].get("nodeName")
    return found


async def test_a_stock_kube_scheduler_places_pods_by_loadaware_and_quota_verdicts(
    envtest_extender, kube_scheduler_bin, tmp_path
):
    port = free_port()
    async with envtest_extender.client() as client:
        await apply_crds(client, CRDS)
        await create_namespace(client, "koordinator-system")
        for name in ("hot", "cool"):
            await add_node(client, name, "4")
        await report(client, "hot", "3500m")  # 88 %: over LoadAware's 65 %
        await report(client, "cool", "1")
        await client.create(res.ELASTIC_QUOTAS, cpu_quota("team", "1", "1", namespace="default"))
        async with koord_extender(client, port):
            with stock_scheduler(kube_scheduler_bin, envtest_extender, port, tmp_path):
                # both nodes have room, and the stock scheduler's own score would rather
                # take either; the extender's filter drops the hot one
                for i in range(3):
                    await client.create(res.PODS, pod(f"web-{i}", "200m"))
                for name in ("web-0", "web-1", "web-2"):
                    await eventually_awaited(functools.partial(_is, client, name, "cool"), 60)
                # within the team's quota (1 CPU) binds; over it stays pending, in the
                # quota's words
                team = {"quota.scheduling.koordinator.sh/name": "team"}
                await client.create(res.PODS, pod("small", "500m", team))
                await client.create(res.PODS, pod("big", "2", team))
                await eventually_awaited(lambda: _is(client, "small", "cool"), 60)

                async def refused() -> bool:
                    listed = await client.list(res.EVENTS, "default")
                    return any(
                        e["reason"] == "FailedScheduling"
                        and e["involvedObject"]["name"] == "big"
                        and "Insufficient quotas, quotaName: team" in e["message"]
                        for e in listed["items"]
                    )

                await eventually_awaited(refused, 60)
                assert await node_of(client, "big") is None


async def _is(client: ApiClient, name: str, node: str) -> bool:
    return await node_of(client, name) == node
