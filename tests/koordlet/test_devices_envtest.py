"""Envtest: a node's GPUs from the driver to a scheduled GPU-share pod.

On a real kube-apiserver, with the fake ``libnvidia-ml.so.1`` (two 80 GiB GPUs, loaded by
the real ``nvidia-ml-py``) and a fake sysfs tree for their NUMA nodes: the koordlet (cluster
mode, ``Accelerators`` gate) reports the node's ``Device``; koord-manager's noderesource
controller turns it into ``koordinator.sh/gpu-core``/``gpu-memory``/``gpu-memory-ratio`` on
the node, with the GPU model and driver labels; koord-scheduler then places a pod asking
for half a GPU on the node, with a ``device-allocated`` annotation naming one of the two
GPUs by minor.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import testsupport.nvml as fake
from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from tests.controlplane.manager.controllers.harness import controller_set
from tests.controlplane.scheduler.test_envtest_koordinator import CRDS as SCHEDULER_CRDS
from tests.controlplane.scheduler.test_envtest_koordinator import koord_scheduler
from tests.envtest import Envtest, apply_crds, create_namespace, own_envtest
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.clusterenv import KOORDLET_CRDS, StubKubelet, agent_config, register_node, running_agent
from tests.polling import eventually_awaited

pytestmark = pytest.mark.envtest

ROOT = Path(__file__).resolve().parents[2]
GI = 1024**3
GPUS = fake.FakeNVML(
    gpus=(
        fake.FakeGPU("NVIDIA A100-SXM4-80GB", "GPU-11111111", 0, "0000:3B:00.0"),
        fake.FakeGPU("NVIDIA A100-SXM4-80GB", "GPU-22222222", 1, "0000:86:00.0"),
    ),
    driver_version="535.104.05",
)


@pytest.fixture(scope="module")
def envtest_devices(envtest_bin: Path) -> Iterator[Envtest]:
    """A control plane of this module's own: the noderesource controller acts on every node."""
    with own_envtest(envtest_bin) as plane:
        yield plane


@pytest.fixture
async def cluster(envtest_devices: Envtest) -> AsyncIterator[ApiClient]:
    async with envtest_devices.client() as client:
        await apply_crds(
            client,
            [*KOORDLET_CRDS, *SCHEDULER_CRDS, ROOT / "crds" / "scheduling.koordinator.sh_devices.yaml"],
        )
        await create_namespace(client, "koordinator-system")
        yield client


def gpu_sysfs(host: FakeHost) -> None:
    """The GPUs' PCI directories under the host's /sys: NUMA node 0 and 1 below two roots."""
    sys_root = host.paths.sys_root
    for bdf, root, numa in (("0000:3b:00.0", "pci0000:3a", 0), ("0000:86:00.0", "pci0000:85", 1)):
        real = sys_root / "devices" / root / bdf
        real.mkdir(parents=True)
        (real / "numa_node").write_text(f"{numa}\n")
        link = sys_root / "bus" / "pci" / "devices" / bdf
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(real, link.parent))


async def annotation(client: ApiClient, namespace: str, name: str, key: str) -> Any:
    annotations = (await client.get(res.PODS, name, namespace))["metadata"].get("annotations") or {}
    return json.loads(annotations[key]) if key in annotations else None


async def test_gpus_reach_the_device_the_node_and_a_gpu_share_pod(cluster, nvml_fake, tmp_path):
    client = cluster
    nvml_fake.configure(GPUS)
    name = f"gpu-node-{uuid.uuid4().hex[:6]}"
    host = FakeHost(tmp_path, "v1")
    host.set_cpu_topology(sockets=1, cores_per_socket=4, threads_per_core=1)
    host.set_meminfo(MemTotal=64_000_000, MemFree=60_000_000, MemAvailable=60_000_000)
    host.set_proc_stat([100, 0, 100, 1000, 0, 0, 0, 0], {0: [50, 0, 50, 500, 0, 0, 0, 0]})
    gpu_sysfs(host)
    kubelet = await StubKubelet().start()
    # the kubelet's pod list must not be empty for the koordlet to call its pods synced
    cid = "containerd://" + "a" * 64
    running = make_pod("web", "prod").qos("LS").kube_qos("Burstable").container("main", cid=cid).build()
    rel = host.add_pod("Burstable", running["metadata"]["uid"], [cid])
    host.set_memory_stat(rel, inactive_anon=GI, active_anon=GI, unevictable=0)
    kubelet.pods = [running]
    await register_node(client, name, {"cpu": "16", "memory": "64Gi", "pods": "110"})
    node = await client.get(res.NODES, name)
    node["spec"]["taints"] = []  # as the node lifecycle controller leaves a Ready node
    await client.replace(res.NODES, node)
    for resource, kind in ((res.NODE_METRICS, "NodeMetric"), (res.NODE_SLOS, "NodeSLO")):
        body = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": kind, "metadata": {"name": name}}
        await client.create(resource, body)
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    await create_namespace(client, namespace)
    try:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(
                running_agent(agent_config(name, host, kubelet, Accelerators=True), client)
            )

            async def reported() -> bool:
                try:
                    device = await client.get(res.DEVICES, name)
                except Exception:
                    return False
                return len(device["spec"]["devices"]) == 2

            await eventually_awaited(reported, 30)
            device = await client.get(res.DEVICES, name)
            first = device["spec"]["devices"][0]
            assert (first["type"], first["id"], first["minor"], first["health"]) == (
                "gpu",
                "GPU-11111111",
                0,
                True,
            )
            assert first["topology"] == {
                "socketID": -1,
                "nodeID": 0,
                "pcieID": "pci0000:3a",
                "busID": "0000:3b:00.0",
            }
            assert Quantity.parse(first["resources"]["koordinator.sh/gpu-memory"]).value() == 80 * GI
            assert device["metadata"]["labels"]["node.koordinator.sh/gpu-model"] == "A100-SXM4-80GB"
            assert device["metadata"]["ownerReferences"][0]["kind"] == "Node"

            await stack.enter_async_context(controller_set(client, ["noderesource"]))

            async def published() -> bool:
                allocatable = (await client.get(res.NODES, name))["status"].get("allocatable") or {}
                return allocatable.get("koordinator.sh/gpu-core") == "200"

            await eventually_awaited(published, 30)
            node = await client.get(res.NODES, name)
            allocatable = node["status"]["allocatable"]
            assert allocatable["koordinator.sh/gpu-memory-ratio"] == "200"
            assert Quantity.parse(allocatable["koordinator.sh/gpu-memory"]).value() == 160 * GI
            assert node["metadata"]["labels"]["node.koordinator.sh/gpu-model"] == "A100-SXM4-80GB"
            assert node["metadata"]["labels"]["node.koordinator.sh/gpu-driver-version"] == "535.104.05"

            await stack.enter_async_context(koord_scheduler(client))
            share = {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "share", "namespace": namespace},
                "spec": {
                    "schedulerName": "koord-scheduler",
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"requests": share, "limits": share}}
                    ],
                },
            }
            await client.create(res.PODS, body)

            async def bound() -> bool:
                return bool((await client.get(res.PODS, "share", namespace))["spec"].get("nodeName") == name)

            await eventually_awaited(bound, 30)
            allocated = await annotation(
                client, namespace, "share", "scheduling.koordinator.sh/device-allocated"
            )
            (entry,) = allocated["gpu"]
            assert entry["minor"] in (0, 1)
            assert entry["resources"]["koordinator.sh/gpu-memory-ratio"] == "50"
            assert Quantity.parse(entry["resources"]["koordinator.sh/gpu-memory"]).value() == 40 * GI
    finally:
        await kubelet.stop()
