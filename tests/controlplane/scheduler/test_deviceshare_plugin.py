"""DeviceShare in the framework: ``simulate`` and the live scheduler place device pods by the
nodes' Device objects, book what pods hold (restored from their ``device-allocated``
annotation), and write the allocation on the pod. Figures hand-computed from upstream's
rules: LeastAllocated over gpu-memory-ratio and gpu-memory (weight 1 each), normalized."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.deviceshare import device_share_args
from controlplane.scheduler.simulate import simulate
from koordinator.kube import resources as res
from tests.controlplane.scheduler.devices.builders import GPU_80G, allocated, device, gpu
from tests.controlplane.scheduler.live import running
from tests.controlplane.scheduler.profile import only_scoring
from tests.controlplane.scheduler.test_simulate import write
from tests.polling import eventually
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]
CRDS = Path(__file__).resolve().parents[3] / "crds"
GPU_CORE, GPU_RATIO, GPU_MEMORY = (
    "koordinator.sh/gpu-core",
    "koordinator.sh/gpu-memory-ratio",
    "koordinator.sh/gpu-memory",
)
ALLOCATED = "scheduling.koordinator.sh/device-allocated"


def node(name: str, gpus: int) -> Obj:
    allocatable = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    if gpus:  # what the slo-controller's device plug-in publishes
        allocatable |= {GPU_CORE: str(100 * gpus), GPU_RATIO: str(100 * gpus)}
        allocatable[GPU_MEMORY] = str(gpus * GPU_80G)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": allocatable},
    }


def pod(name: str, requests: Obj, *, node_name: str = "", annotations: Obj | None = None) -> Obj:
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": "koord-scheduler",
            "containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}],
        },
    }
    if node_name:
        obj["spec"]["nodeName"] = node_name
    if annotations:
        obj["metadata"]["annotations"] = annotations
    return obj


def bound_to(fake: FakeApiServer, name: str) -> str | None:
    node: str | None = fake.get(res.PODS, name, "default")["spec"].get("nodeName")
    return node


def config() -> Any:
    """DeviceShare the only score plug-in, after kube-scheduler's filters."""
    return only_scoring("DeviceShare")


SHARE = {GPU_CORE: "50", GPU_RATIO: "50"}


def cluster_files(tmp_path: Path, pending: list[Obj]) -> tuple[str, str, str]:
    """gpu-2: two GPUs, GPU 0 half held by a bound pod; gpu-1: one free GPU; cpu-only: none."""
    holder = pod(
        "holder",
        SHARE,
        node_name="gpu-2",
        annotations=allocated(
            {"gpu": [{"minor": 0, "resources": {GPU_CORE: "50", GPU_RATIO: "50", GPU_MEMORY: "40Gi"}}]}
        ),
    )
    nodes = write(tmp_path, "nodes.yaml", [node("gpu-2", 2), node("gpu-1", 1), node("cpu-only", 0)])
    objects = write(
        tmp_path,
        "objects.yaml",
        [device(gpu(0), gpu(1), name="gpu-2"), device(gpu(0), name="gpu-1"), holder],
    )
    return nodes, write(tmp_path, "pods.yaml", pending), objects


def test_a_shared_gpu_pod_goes_where_the_devices_are_least_allocated_and_gets_memory_too(tmp_path):
    nodes, pods, objects = cluster_files(tmp_path, [pod("share", SHARE)])
    [result] = simulate(config(), nodes, pods, [objects], seed=1)
    # The score is over each node's devices (requested = total - free + the pod's, per
    # resource; LeastAllocated (total - requested) * 100 / total; mean of the weights):
    #   gpu-1: ratio (100 - 50) * 100 / 100 = 50; memory (the pod asks none) 100 -> 75
    #   gpu-2: ratio 200 - 150 + 50 = 100 -> 50; memory 40Gi of 160Gi -> 75      -> 62
    # normalized to the highest: 100 and 62 * 100 / 75 = 82
    assert result["node"] == "gpu-1"
    assert result["scores"] == {
        "gpu-1": {"DeviceShare": 100, "total": 100},
        "gpu-2": {"DeviceShare": 82, "total": 82},
    }
    # no GPU at all: NodeResourcesFit, which runs first, already refuses the node
    assert result["filtered"] == {
        "cpu-only": ["Insufficient koordinator.sh/gpu-core", "Insufficient koordinator.sh/gpu-memory-ratio"]
    }
    # gpu-memory from the ratio and that GPU's 80 GiB: 50% is 40 GiB
    assert result["devices"] == {
        "gpu": [{"minor": 0, "resources": {GPU_CORE: "50", GPU_MEMORY: "40Gi", GPU_RATIO: "50"}}]
    }


def test_a_pod_needing_two_whole_gpus_fits_no_node_with_a_gpu_half_held(tmp_path):
    nodes, pods, objects = cluster_files(tmp_path, [pod("two", {"nvidia.com/gpu": "2"})])
    [result] = simulate(config(), nodes, pods, [objects], seed=1)
    # nvidia.com/gpu: 2 is gpu-core = gpu-memory-ratio = 200, two whole GPUs; gpu-2's GPU 0
    # is half held, and NodeResourcesFit counts nvidia.com/gpu, which no node publishes
    assert result["node"] is None
    assert set(result["filtered"]) == {"gpu-1", "gpu-2", "cpu-only"}


def test_half_gpu_pods_fill_the_freest_devices_first_and_never_past_a_whole_gpu(tmp_path):
    nodes, pods, objects = cluster_files(tmp_path, [pod(f"half-{i}", SHARE) for i in range(6)])
    results = simulate(config(), nodes, pods, [objects], seed=1)
    placed = [(r["node"], r["devices"]["gpu"][0]["minor"]) if r["node"] else None for r in results]
    # free halves: gpu-2 GPU 0 one (the holder has the other), gpu-2 GPU 1 two, gpu-1 GPU 0
    # two; each pod takes the node its devices leave least allocated (see above), and on
    # a node the device scoring best, then the lowest minor
    assert placed == [("gpu-1", 0), ("gpu-2", 1), ("gpu-2", 0), ("gpu-1", 0), ("gpu-2", 1), None]


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ({GPU_CORE: "50"}, "invalid resource device requests"),
        ({"nvidia.com/gpu": "1", GPU_RATIO: "50"}, "invalid resource device requests"),
        ({GPU_RATIO: "150"}, "invalid resource device requests: [koordinator.sh/gpu-memory-ratio]"),
    ],
    ids=["core-alone", "mixed-whole-and-ratio", "ratio-over-100-not-a-multiple"],
)
def test_an_invalid_device_request_is_refused_on_every_node(tmp_path, requests, message):
    nodes, pods, objects = cluster_files(tmp_path, [pod("bad", requests)])
    [result] = simulate(config(), nodes, pods, [objects], seed=1)
    assert result["node"] is None
    assert result["status"].startswith("0/3 nodes are available: ")
    assert message in result["status"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"scoringStrategy": {"type": "Balanced"}}, "scoringStrategy.type: Unsupported value"),
        ({"scoringStrategy": {"resources": [{"name": GPU_RATIO, "weight": 0}]}}, "not in range [1-100]"),
        ({"unknownField": 1}, "unknown field(s)"),
    ],
    ids=["strategy", "weight", "unknown"],
)
def test_bad_args_are_refused_naming_the_field(args, message):
    with pytest.raises(ArgsError, match=re.escape(message)):
        device_share_args(args)


async def test_the_live_scheduler_writes_the_allocation_and_a_restart_keeps_it_booked():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.koordinator.sh_devices.yaml")
        fake.create(res.NODES, node("gpu-1", 1))
        fake.create(res.DEVICES, device(gpu(0), name="gpu-1"))
        fake.create(res.PODS, pod("first", {GPU_RATIO: "60", GPU_CORE: "60"}))
        async with running(fake, config()):
            await eventually(lambda: bound_to(fake, "first") == "gpu-1")
        written = json.loads(fake.get(res.PODS, "first", "default")["metadata"]["annotations"][ALLOCATED])
        assert written == {
            "gpu": [
                {
                    "minor": 0,
                    "resources": {GPU_CORE: "60", GPU_MEMORY: "48Gi", GPU_RATIO: "60"},
                }
            ]
        }
        # a new scheduler books "first" from its annotation: 60% is taken, 50% does not fit
        fake.create(res.PODS, pod("second", SHARE))
        async with running(fake, config()) as scheduler:
            await eventually(lambda: scheduler.queue.pending()["unschedulable"] == 1)
            fake.delete(res.PODS, "first", "default", gracePeriodSeconds=0)  # the kubelet confirms
            await eventually(lambda: bound_to(fake, "second") == "gpu-1")
