"""Node extended resources from the Device object.

Upstream: slo-controller noderesource plug-ins ``gpudeviceresource`` and ``rdmadeviceresource``.
"""

from __future__ import annotations

from koordinator.api.devices import (
    GPU_NODE_RESOURCE_NAMES,
    RDMA_NODE_RESOURCE_NAMES,
    gpu_node_resources,
    node_device_resources,
    rdma_node_resources,
    to_ints,
    transform_deprecated,
)
from koordinator.api.quantity import Quantity
from tests.koordinator.api.builders import GiB, device, gpu, rdma

MIXED = device(
    gpu(0),
    gpu(1),
    gpu(2, numa=1, pcie="pci1"),
    gpu(3, numa=1, pcie="pci1", healthy=False),
    rdma(1),
    rdma(2, numa=1, pcie="pci1", healthy=False),
)


def test_healthy_gpus_are_summed_and_koordinator_gpu_is_the_core_sum():
    result = gpu_node_resources(MIXED)
    assert result.resources == {
        "koordinator.sh/gpu": 300,
        "koordinator.sh/gpu-core": 300,
        "koordinator.sh/gpu-memory": 240 * GiB,
        "koordinator.sh/gpu-memory-ratio": 300,
    }
    # deliberate difference: upstream leaves names it does not produce as they are on the node
    assert result.resets == (
        "huawei.com/npu-core",
        "huawei.com/npu-cpu",
        "huawei.com/npu-dvpp",
        "koordinator.sh/gpu.shared",
    )


def test_gpu_shared_is_100_per_healthy_gpu_behind_the_gate():
    assert gpu_node_resources(MIXED, sync_gpu_shared=True).resources["koordinator.sh/gpu.shared"] == 300


def test_rdma_is_100_per_healthy_nic():
    assert rdma_node_resources(MIXED).resources == {"koordinator.sh/rdma": 100}


def test_without_device_object_every_name_is_removed():
    result = node_device_resources(None)
    assert result.resources == {}
    assert result.resets == GPU_NODE_RESOURCE_NAMES + RDMA_NODE_RESOURCE_NAMES


def test_without_healthy_devices_of_a_kind_its_names_are_removed():
    # deliberate difference: upstream's GPUDeviceResource writes only gpu (and gpu.shared) = 0
    # here and leaves gpu-core, gpu-memory and gpu-memory-ratio on the node as they were
    result = node_device_resources(device(gpu(0, healthy=False), rdma(1)), sync_gpu_shared=True)
    assert result.resources == {"koordinator.sh/rdma": 100}
    assert result.resets == GPU_NODE_RESOURCE_NAMES


def test_koordinator_gpu_only_for_nvidia_or_unlabelled_vendors():
    huawei = device(gpu(0), labels={"node.koordinator.sh/gpu-vendor": "huawei"})
    nvidia = device(gpu(0), labels={"node.koordinator.sh/gpu-vendor": "nvidia"})
    assert "koordinator.sh/gpu" not in gpu_node_resources(huawei).resources
    assert gpu_node_resources(nvidia).resources["koordinator.sh/gpu"] == 100


def test_deprecated_device_names_count_as_current_ones():
    old = gpu(0) | {"resources": {"kubernetes.io/gpu-core": "100", "kubernetes.io/gpu-memory": "16Gi"}}
    assert gpu_node_resources(device(old)).resources == {
        "koordinator.sh/gpu": 100,
        "koordinator.sh/gpu-core": 100,
        "koordinator.sh/gpu-memory": 16 * GiB,
    }


def test_to_ints_rounds_up_and_renames_deprecated_names():
    amounts = {
        "kubernetes.io/gpu-core": Quantity.parse("50"),
        "koordinator.sh/gpu-memory": Quantity.parse("1500m"),
    }
    assert to_ints(amounts) == {"koordinator.sh/gpu-core": 50, "koordinator.sh/gpu-memory": 2}
    assert transform_deprecated({"kubernetes.io/rdma": 100, "koordinator.sh/rdma": 50}) == {
        "kubernetes.io/rdma": 100,
        "koordinator.sh/rdma": 50,
    }
