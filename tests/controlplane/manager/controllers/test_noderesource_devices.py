"""The noderesource controller's device plug-ins: GPUDeviceResource and RDMADeviceResource.

Against the fake apiserver (with the Device CRD) on a fake clock: what node status and
labels hold after a Device is created, changed or deleted, and which writes were made
(counted from the requests the fake received).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from controlplane.manager.controllers.noderesource.devices import (
    DeviceView,
    device_changes,
    device_view,
)
from controlplane.manager.manager import Manager
from koordinator.api.features import CONTROL_PLANE_FEATURES, FeatureGates
from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from tests.controlplane.manager.controllers.golden import NOW, base_metrics, base_pods
from tests.controlplane.manager.controllers.harness import SLOHarness, running, started_fake
from tests.controlplane.manager.controllers.objects import config_map, node, node_metric
from tests.controlplane.manager.test_manager_server import options
from tests.koordinator.api.builders import GiB, device, gpu, rdma
from tests.polling import eventually

Obj = dict[str, Any]

NODE_PATH = "/api/v1/nodes/node-1"
STATUS_PATH = NODE_PATH + "/status"
MODEL = "node.koordinator.sh/gpu-model"
DRIVER = "node.koordinator.sh/gpu-driver-version"
VENDOR = "node.koordinator.sh/gpu-vendor"
GPU = "koordinator.sh/gpu"
GPU_CORE = "koordinator.sh/gpu-core"
GPU_MEMORY = "koordinator.sh/gpu-memory"
GPU_RATIO = "koordinator.sh/gpu-memory-ratio"
GPU_SHARED = "koordinator.sh/gpu.shared"
RDMA = "koordinator.sh/rdma"
BATCH_CPU = "kubernetes.io/batch-cpu"
MID_CPU = "kubernetes.io/mid-cpu"
NORMALIZATION_RATIO = "node.koordinator.sh/cpu-normalization-ratio"
DEVICE_NAMES = (GPU, GPU_CORE, GPU_MEMORY, GPU_RATIO, GPU_SHARED, RDMA)
GPU_LABELS = {MODEL: "A100-SXM4-80GB", DRIVER: "535.104.05", VENDOR: "nvidia"}

#: two healthy 16 GiB GPUs, one unhealthy, one RDMA NIC
TWO_GPUS = {
    GPU: 200,
    GPU_CORE: 200,
    GPU_MEMORY: 32 * GiB,
    GPU_RATIO: 200,
    GPU_SHARED: 200,
    RDMA: 100,
}


def gpu_device(
    *, labels: dict[str, str] | None = None, healthy: tuple[bool, ...] = (True, True, False)
) -> Obj:
    gpus = [gpu(minor, memory=16 * GiB, healthy=ok) for minor, ok in enumerate(healthy)]
    return device(*gpus, rdma(0), labels=GPU_LABELS if labels is None else labels)


def devices_of(harness: SLOHarness) -> dict[str, int]:
    """The device resources in node status (capacity and allocatable must agree)."""
    status = harness.fake.get(res.NODES, "node-1")["status"]
    allocatable, capacity = status["allocatable"], status["capacity"]
    found = {}
    for name in DEVICE_NAMES:
        assert (name in allocatable) == (name in capacity), name
        if name in allocatable:
            assert Quantity.parse(capacity[name]) == Quantity.parse(allocatable[name]), name
            found[name] = Quantity.parse(allocatable[name]).value()
    return found


def labels_of(harness: SLOHarness) -> dict[str, str]:
    return harness.fake.get(res.NODES, "node-1")["metadata"].get("labels") or {}


def node_writes(harness: SLOHarness) -> list[str]:
    return [
        r.path for r in harness.fake.requests if r.method == "PATCH" and r.path in (NODE_PATH, STATUS_PATH)
    ]


def colocation(**config: Any) -> list[Obj]:
    """A node with pods and a fresh NodeMetric: batch and mid resources are calculated."""
    return [node(), *base_pods(), node_metric(pods=base_metrics()), config_map({"enable": True, **config})]


async def settled(harness: SLOHarness, expected: dict[str, int]) -> None:
    await eventually(lambda: devices_of(harness) == expected)
    await harness.settle("noderesource")


async def test_a_node_without_nodemetric_gets_its_device_resources_and_gpu_labels():
    objects = [node(), config_map({"enable": True}), gpu_device()]
    async with running(objects, NOW) as harness:
        await settled(harness, TWO_GPUS)
        labels = labels_of(harness)
        assert (labels[MODEL], labels[DRIVER]) == ("A100-SXM4-80GB", "535.104.05")
        assert VENDOR not in labels  # upstream never writes the vendor label
        status = harness.fake.get(res.NODES, "node-1")["status"]
        assert status["allocatable"][GPU_MEMORY] == "32Gi"
        assert BATCH_CPU not in status["allocatable"]  # no NodeMetric: batch is degraded


async def test_gpu_shared_needs_EnableSyncGPUSharedResource():
    objects = [node(), config_map({"enable": True}), gpu_device()]
    async with running(objects, NOW, gates={"EnableSyncGPUSharedResource": False}) as harness:
        await settled(harness, {k: v for k, v in TWO_GPUS.items() if k != GPU_SHARED})


async def test_batch_and_device_resources_go_in_one_status_write():
    async with running([*colocation(), gpu_device()], NOW) as harness:
        harness.fake.record_requests = True
        await settled(harness, TWO_GPUS)
        status = harness.fake.get(res.NODES, "node-1")["status"]
        assert status["allocatable"][BATCH_CPU] == "4600"  # as without a Device (golden base case)
        assert MID_CPU in status["allocatable"]
    # the first reconcile saw both (caches synced first): one label patch, one status patch
    assert node_writes(harness) == [NODE_PATH, STATUS_PATH]


async def test_an_rdma_nic_alone_gives_rdma():
    objects = [node(), config_map({"enable": True}), device(rdma(0), rdma(1, healthy=False))]
    async with running(objects, NOW) as harness:
        await settled(harness, {RDMA: 100})
        assert MODEL not in labels_of(harness)


async def test_deleting_the_device_removes_its_resources_and_keeps_the_labels():
    async with running([node(), config_map({"enable": True}), gpu_device()], NOW) as harness:
        await settled(harness, TWO_GPUS)
        harness.fake.delete(res.DEVICES, "node-1")
        await settled(harness, {})
        assert labels_of(harness)[MODEL] == "A100-SXM4-80GB"


async def test_a_device_change_of_labels_alone_is_not_acted_on():
    async with running([node(), config_map({"enable": True}), gpu_device()], NOW) as harness:
        await settled(harness, TWO_GPUS)
        harness.fake.record_requests = True
        before = harness.reconciles("noderesource")
        changed = harness.fake.get(res.DEVICES, "node-1")
        changed["metadata"]["labels"][DRIVER] = "550.54.15"
        harness.fake.update(res.DEVICES, changed)
        await harness.settle("noderesource")
        assert harness.reconciles("noderesource") == before
        assert node_writes(harness) == []
        assert labels_of(harness)[DRIVER] == "535.104.05"
        # the next spec change brings the new label along
        changed = harness.fake.get(res.DEVICES, "node-1")
        changed["spec"]["devices"][2]["health"] = True
        harness.fake.update(res.DEVICES, changed)
        await settled(
            harness,
            TWO_GPUS | {GPU: 300, GPU_CORE: 300, GPU_MEMORY: 48 * GiB, GPU_RATIO: 300, GPU_SHARED: 300},
        )
        assert labels_of(harness)[DRIVER] == "550.54.15"


async def test_labels_a_device_loses_stay_on_the_node():
    async with running([node(), config_map({"enable": True}), gpu_device()], NOW) as harness:
        await settled(harness, TWO_GPUS)
        changed = harness.fake.get(res.DEVICES, "node-1")
        changed["metadata"]["labels"] = {}
        changed["spec"]["devices"] = changed["spec"]["devices"][:1]
        harness.fake.update(res.DEVICES, changed)
        await settled(
            harness, {GPU: 100, GPU_CORE: 100, GPU_MEMORY: 16 * GiB, GPU_RATIO: 100, GPU_SHARED: 100}
        )
        assert labels_of(harness)[MODEL] == "A100-SXM4-80GB"


async def test_without_a_healthy_gpu_every_gpu_name_is_removed():
    # deliberate difference: upstream writes gpu = gpu.shared = 0 and leaves gpu-core,
    # gpu-memory and gpu-memory-ratio on the node as they were
    stale = {GPU_CORE: "200", GPU_MEMORY: "32Gi", GPU_RATIO: "200", GPU: "200"}
    objects = [node(extended=stale), config_map({"enable": True}), gpu_device(healthy=(False,))]
    async with running(objects, NOW) as harness:
        await settled(harness, {RDMA: 100})


async def test_an_unchanged_node_is_not_written():
    written = {
        GPU: "200",
        GPU_CORE: "200",
        GPU_MEMORY: "32Gi",
        GPU_RATIO: "200",
        GPU_SHARED: "200",
        RDMA: "100",
    }
    labelled = node(extended=written, labels={MODEL: "A100-SXM4-80GB", DRIVER: "535.104.05"})
    # what the CPUNormalization plug-in holds on a node while normalization is disabled
    labelled["metadata"].setdefault("annotations", {})[NORMALIZATION_RATIO] = "1.00"
    async with running([labelled, config_map({"enable": True}), gpu_device()], NOW) as harness:
        harness.fake.record_requests = True
        await harness.settle("noderesource")
        assert devices_of(harness) == TWO_GPUS
    assert node_writes(harness) == []


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(json.dumps({"enable": False}), id="colocation-disabled"),
        pytest.param('{"enable": true, "resourceDiffThreshold": 2}', id="config-broken-since-start"),
    ],
)
async def test_device_resources_do_not_depend_on_the_colocation_config(config):
    cm = config_map()
    cm["data"]["colocation-config"] = config
    objects = [node(extended={BATCH_CPU: "1234"}), node_metric(pods=base_metrics()), cm, gpu_device()]
    async with running(objects, NOW) as harness:
        await settled(harness, TWO_GPUS)
        allocatable = harness.fake.get(res.NODES, "node-1")["status"]["allocatable"]
        # batch: removed when colocation is disabled, left alone while the config is unavailable
        assert allocatable.get(BATCH_CPU) == (None if "false" in config else "1234")


async def test_a_disabled_device_plugin_leaves_its_resources_and_labels_alone():
    stale = {GPU_CORE: "700"}
    objects = [node(extended=stale), config_map({"enable": True}), gpu_device()]
    plugins = ("MidResource", "BatchResource", "RDMADeviceResource")
    async with running(objects, NOW, plugins=plugins) as harness:
        await settled(harness, {GPU_CORE: 700, RDMA: 100})
        assert MODEL not in labels_of(harness)


async def test_without_device_plugins_devices_are_not_watched():
    objects = [node(), config_map({"enable": True}), gpu_device()]
    async with running(objects, NOW, plugins=("MidResource", "BatchResource")) as harness:
        await harness.settle("noderesource")
        assert devices_of(harness) == {}
        controller = harness.set.controllers["noderesource"]
        assert getattr(controller, "devices", None) is None


async def test_a_disabled_batch_plugin_leaves_batch_resources_alone():
    extended = {
        BATCH_CPU: "1234",
        "kubernetes.io/batch-memory": "1Gi",
        MID_CPU: "500",
        "kubernetes.io/mid-memory": "1Gi",
    }
    # no NodeMetric: both would be removed, but only MidResource runs
    async with running(
        [node(extended=extended), config_map({"enable": True})], NOW, plugins=("MidResource",)
    ) as harness:
        await eventually(
            lambda: MID_CPU not in harness.fake.get(res.NODES, "node-1")["status"]["allocatable"]
        )
        await harness.settle("noderesource")
        status = harness.fake.get(res.NODES, "node-1")["status"]
        assert status["allocatable"][BATCH_CPU] == status["capacity"][BATCH_CPU] == "1234"
        assert "kubernetes.io/mid-memory" not in status["capacity"]


# --- the pure part ------------------------------------------------------------------------------


def view(obj: Obj, sync_gpu_shared: bool = True) -> DeviceView:
    return device_view(obj, sync_gpu_shared=sync_gpu_shared)


ALL = ("GPUDeviceResource", "RDMADeviceResource")


def test_an_unreadable_device_leaves_resources_alone_but_copies_labels():
    broken = copy.deepcopy(gpu_device())
    broken["spec"]["devices"][0]["resources"][GPU_CORE] = "lots"
    record = view(broken)
    assert record.gpu is None
    assert record.rdma is None
    assert "lots" in record.problem
    changes = device_changes(
        record, allocatable={GPU_CORE: 100}, capacity={GPU_CORE: 100}, labels={}, plugins=ALL
    )
    assert changes.resources == {}
    assert changes.labels == {MODEL: "A100-SXM4-80GB", DRIVER: "535.104.05"}


def test_only_differences_are_changed():
    record = view(gpu_device())
    have = {name: amount for name, amount in TWO_GPUS.items() if name != RDMA} | {
        GPU_CORE: 100,
        "huawei.com/npu-core": 4,
    }
    changes = device_changes(
        record,
        allocatable=have,
        capacity=have | {GPU_RATIO: 100},
        labels={MODEL: "A100-SXM4-80GB"},
        plugins=ALL,
    )
    assert changes.resources == {GPU_CORE: 200, GPU_RATIO: 200, RDMA: 100, "huawei.com/npu-core": None}
    assert changes.labels == {DRIVER: "535.104.05"}
    assert not device_changes(record, allocatable={}, capacity={}, labels={}, plugins=())


async def test_the_manager_hands_its_plugins_and_gates_to_the_controllers(tmp_path):
    gates = FeatureGates(CONTROL_PLANE_FEATURES, {"EnableSyncGPUSharedResource": False})
    fake = await started_fake()
    try:
        async with fake.client() as client:
            settings = options(
                tmp_path,
                controllers=("noderesource",),
                noderesource_plugins=("RDMADeviceResource",),
                gates=gates,
            )
            manager = Manager(settings, client)
            assert manager.controllers is not None
            assert manager.controllers.settings.noderesource_plugins == ("RDMADeviceResource",)
            assert manager.controllers.settings.gates is gates
    finally:
        await fake.stop()
