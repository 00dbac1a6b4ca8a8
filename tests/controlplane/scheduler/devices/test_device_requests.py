"""Device request validation, normalization and the per-device split.

Upstream: ``utils.go`` (combinations, mapper), ``devicehandler_gpu.go`` (count and per-GPU request).
"""

from __future__ import annotations

import pytest

from controlplane.scheduler.devices.errors import DeviceShareError
from controlplane.scheduler.devices.requests import (
    DeviceRequest,
    normalize_device_requests,
    pod_device_requests,
)
from koordinator.api.devices import transform_deprecated

GiB = 1024**3
CORE = "koordinator.sh/gpu-core"
MEM = "koordinator.sh/gpu-memory"
RATIO = "koordinator.sh/gpu-memory-ratio"
SHARED = "koordinator.sh/gpu.shared"
KGPU = "koordinator.sh/gpu"
RDMA = "koordinator.sh/rdma"
FPGA = "koordinator.sh/fpga"


@pytest.mark.parametrize(
    ("requests", "normalized"),
    [
        pytest.param(
            {"nvidia.com/gpu": 2}, {CORE: 200, RATIO: 200}, id="nvidia-gpu-N-is-100N-core-and-ratio"
        ),
        pytest.param({"amd.com/gpu": 1}, {CORE: 100, RATIO: 100}, id="amd-gpu-counts-whole-devices"),
        pytest.param({"dcu.com/gpu": 3}, {CORE: 300, RATIO: 300}, id="hygon-dcu-counts-whole-devices"),
        pytest.param({KGPU: 50}, {CORE: 50, RATIO: 50}, id="koordinator-gpu-N-is-N-core-and-ratio"),
        pytest.param({KGPU: 200}, {CORE: 200, RATIO: 200}, id="koordinator-gpu-multiple-of-100"),
        pytest.param({MEM: 8 * GiB}, {MEM: 8 * GiB}, id="gpu-memory-alone"),
        pytest.param({RATIO: 50}, {RATIO: 50}, id="gpu-memory-ratio-alone"),
        pytest.param({CORE: 50, MEM: 8 * GiB}, {CORE: 50, MEM: 8 * GiB}, id="core-plus-memory"),
        pytest.param({CORE: 200, RATIO: 200}, {CORE: 200, RATIO: 200}, id="core-plus-ratio-multi-gpu"),
        pytest.param({SHARED: 2, RATIO: 100}, {SHARED: 2, RATIO: 100}, id="shared-plus-ratio"),
        pytest.param({SHARED: 2, MEM: 16 * GiB}, {SHARED: 2, MEM: 16 * GiB}, id="shared-plus-memory"),
        pytest.param(
            {SHARED: 2, CORE: 100, RATIO: 200}, {SHARED: 2, CORE: 100, RATIO: 200}, id="shared-core-ratio"
        ),
        pytest.param(
            {SHARED: 1, CORE: 50, MEM: GiB}, {SHARED: 1, CORE: 50, MEM: GiB}, id="shared-core-memory"
        ),
        pytest.param({"kubernetes.io/gpu": 100}, {CORE: 100, RATIO: 100}, id="deprecated-kubernetes-io-gpu"),
        pytest.param(
            {"kubernetes.io/gpu-core": 100, "kubernetes.io/gpu-memory-ratio": 100},
            {CORE: 100, RATIO: 100},
            id="deprecated-core-and-ratio-renamed",
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, "cpu": 4000, "memory": GiB}, {CORE: 100, RATIO: 100}, id="cpu-ignored"
        ),
    ],
)
def test_valid_gpu_combinations_normalize(requests, normalized):
    assert pod_device_requests(requests) == {"gpu": normalized}


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        pytest.param(
            {KGPU: 150},
            "invalid resource unit koordinator.sh/gpu: 150",
            id="koordinator-gpu-over-100-not-x100",
        ),
        pytest.param(
            {RDMA: 150}, "invalid resource unit koordinator.sh/rdma: 150", id="rdma-over-100-not-x100"
        ),
        pytest.param(
            {FPGA: 250}, "invalid resource unit koordinator.sh/fpga: 250", id="fpga-over-100-not-x100"
        ),
        pytest.param(
            {KGPU: 150, "nvidia.com/gpu": 1},
            "invalid resource unit koordinator.sh/gpu: 150",
            id="unit-checked-before-combination",
        ),
        pytest.param(
            {RATIO: 150},
            "invalid resource device requests: [koordinator.sh/gpu-memory-ratio]",
            id="ratio-150",
        ),
        pytest.param(
            {CORE: 150, RATIO: 150},
            "invalid resource device requests: [koordinator.sh/gpu-core koordinator.sh/gpu-memory-ratio]",
            id="core-and-ratio-150",
        ),
        pytest.param(
            {CORE: 50}, "invalid resource device requests: [koordinator.sh/gpu-core]", id="core-alone"
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, CORE: 50},
            "invalid resource device requests: [koordinator.sh/gpu-core nvidia.com/gpu]",
            id="whole-gpu-mixed-with-core",
        ),
        pytest.param(
            {KGPU: 50, SHARED: 1},
            "invalid resource device requests: [koordinator.sh/gpu koordinator.sh/gpu.shared]",
            id="koordinator-gpu-with-shared",
        ),
        pytest.param(
            {SHARED: 2}, "invalid resource device requests: [koordinator.sh/gpu.shared]", id="shared-alone"
        ),
        pytest.param(
            {SHARED: 2, RATIO: 101},
            "invalid resource device requests: [koordinator.sh/gpu-memory-ratio koordinator.sh/gpu.shared]",
            id="shared-ratio-not-a-multiple",
        ),
        pytest.param(
            {SHARED: 1, RATIO: 200},
            "invalid resource device requests: [koordinator.sh/gpu-memory-ratio koordinator.sh/gpu.shared]",
            id="shared-ratio-over-100-per-gpu",
        ),
        pytest.param(
            {SHARED: 2, CORE: 3, MEM: GiB},
            "invalid resource device requests: [koordinator.sh/gpu-core koordinator.sh/gpu-memory "
            "koordinator.sh/gpu.shared]",
            id="shared-core-not-a-multiple",
        ),
        pytest.param(
            {CORE: 50, MEM: GiB, RATIO: 50},
            "invalid resource device requests: [koordinator.sh/gpu-core koordinator.sh/gpu-memory "
            "koordinator.sh/gpu-memory-ratio]",
            id="memory-and-ratio-together",
        ),
    ],
)
def test_invalid_combinations_are_rejected_with_upstream_message(requests, message):
    with pytest.raises(DeviceShareError) as caught:
        pod_device_requests(requests)
    assert caught.value.reasons == (message,)
    assert caught.value.unresolvable


@pytest.mark.parametrize(
    ("requests", "count", "per_device", "shared"),
    [
        pytest.param({"nvidia.com/gpu": 1}, 1, {CORE: 100, RATIO: 100}, False, id="one-whole-gpu"),
        pytest.param({"nvidia.com/gpu": 4}, 4, {CORE: 100, RATIO: 100}, False, id="ratio-400-is-4-gpus"),
        pytest.param({KGPU: 50}, 1, {CORE: 50, RATIO: 50}, True, id="half-gpu-is-shared"),
        pytest.param({RATIO: 100}, 1, {RATIO: 100}, False, id="ratio-100-is-one-whole"),
        pytest.param({CORE: 100, RATIO: 300}, 3, {CORE: 33, RATIO: 100}, False, id="core-divided-by-count"),
        pytest.param({MEM: 8 * GiB}, 1, {MEM: 8 * GiB}, True, id="memory-request-is-always-shared"),
        pytest.param({SHARED: 2, RATIO: 100}, 2, {RATIO: 50}, True, id="gpu-shared-is-the-count"),
        pytest.param({SHARED: 2, MEM: 16 * GiB}, 2, {MEM: 8 * GiB}, True, id="gpu-shared-splits-memory"),
        pytest.param(
            {SHARED: 2, CORE: 200, RATIO: 200}, 2, {CORE: 100, RATIO: 100}, False, id="shared-whole"
        ),
    ],
)
def test_gpu_count_and_per_gpu_request(requests, count, per_device, shared):
    gpu = normalize_device_requests(requests)["gpu"]
    assert (gpu.count, gpu.per_device, gpu.shared) == (count, per_device, shared)


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        pytest.param({RDMA: 1}, DeviceRequest("rdma", {RDMA: 1}, 1, {RDMA: 1}, True), id="rdma-share"),
        pytest.param(
            {RDMA: 100}, DeviceRequest("rdma", {RDMA: 100}, 1, {RDMA: 100}, False), id="rdma-one-nic"
        ),
        pytest.param(
            {RDMA: 200}, DeviceRequest("rdma", {RDMA: 200}, 2, {RDMA: 100}, False), id="rdma-200-two"
        ),
        pytest.param(
            {"kubernetes.io/rdma": 100},
            DeviceRequest("rdma", {RDMA: 100}, 1, {RDMA: 100}, False),
            id="rdma-old",
        ),
        pytest.param({FPGA: 300}, DeviceRequest("fpga", {FPGA: 300}, 3, {FPGA: 100}, False), id="fpga-three"),
    ],
)
def test_rdma_and_fpga_count_whole_devices_above_100(requests, expected):
    assert normalize_device_requests(requests) == {expected.device_type: expected}


def test_each_device_type_is_normalized_on_its_own():
    """GPU and RDMA requests of one pod are validated and split separately."""
    result = normalize_device_requests({"nvidia.com/gpu": 2, RDMA: 1, "cpu": 1000})
    assert sorted(result) == ["gpu", "rdma"]
    assert result["gpu"].count == 2
    assert result["rdma"].per_device == {RDMA: 1}


@pytest.mark.parametrize(
    "requests",
    [
        pytest.param({"cpu": 1000, "memory": GiB}, id="no-device-names"),
        pytest.param({"nvidia.com/gpu": 0, RDMA: 0}, id="zero-values-dropped"),
        pytest.param({}, id="empty"),
    ],
)
def test_pods_without_device_requests_normalize_to_nothing(requests):
    assert normalize_device_requests(requests) == {}


def test_current_name_wins_over_deprecated_alias():
    """As upstream's pod transformer: the deprecated name is only renamed when the new one is absent."""
    assert transform_deprecated({"kubernetes.io/gpu-core": 10, CORE: 50}) == {
        "kubernetes.io/gpu-core": 10,
        CORE: 50,
    }
    assert transform_deprecated({"kubernetes.io/fpga": 100}) == {FPGA: 100}
    assert transform_deprecated({"koordinator.sh/batch-cpu": 1000}) == {"koordinator.sh/batch-cpu": 1000}
