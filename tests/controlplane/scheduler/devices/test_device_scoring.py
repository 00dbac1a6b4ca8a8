"""DeviceShare scoring (upstream ``scoring.go``, ``device_allocator.go`` ``score``), hand-computed."""

from __future__ import annotations

import pytest

from controlplane.scheduler.devices.allocator import score
from controlplane.scheduler.devices.scoring import (
    DEFAULT_SCORING_RESOURCES,
    DeviceScorer,
    ScoringStrategy,
    least_requested_score,
    most_requested_score,
    normalize_scores,
)
from tests.controlplane.scheduler.devices.builders import GiB, allocated, claim, mixed_node

CORE = "koordinator.sh/gpu-core"
MEM = "koordinator.sh/gpu-memory"
RATIO = "koordinator.sh/gpu-memory-ratio"
LEAST = DeviceScorer()
MOST = DeviceScorer(ScoringStrategy.MOST_ALLOCATED)
HALF_USED_GPU = {CORE: 100, RATIO: 100, MEM: 80 * GiB}, {CORE: 50, RATIO: 50, MEM: 40 * GiB}


def test_default_resources_and_weights():
    assert DEFAULT_SCORING_RESOURCES == {
        "koordinator.sh/gpu-memory-ratio": 1,
        "koordinator.sh/gpu-memory": 1,
        "koordinator.sh/rdma": 1,
        "koordinator.sh/fpga": 1,
    }
    assert DeviceScorer().strategy == ScoringStrategy.LEAST_ALLOCATED


@pytest.mark.parametrize(
    ("requested", "capacity", "least", "most"),
    [
        pytest.param(30, 100, 70, 30, id="30-of-100"),
        pytest.param(100, 100, 0, 100, id="full"),
        pytest.param(150, 100, 0, 100, id="over-capacity-least-0-most-capped"),
        pytest.param(1, 3, 66, 33, id="integer-division-truncates"),
        pytest.param(0, 0, 0, 0, id="no-capacity"),
    ],
)
def test_per_resource_scores(requested, capacity, least, most):
    assert least_requested_score(requested, capacity) == least
    assert most_requested_score(requested, capacity) == most


@pytest.mark.parametrize(
    ("scorer", "expected"),
    [
        pytest.param(LEAST, 25, id="least-ratio-0-memory-50"),
        pytest.param(MOST, 75, id="most-ratio-100-memory-50"),
        pytest.param(DeviceScorer(weights={RATIO: 3, MEM: 1}), 12, id="weighted-mean-floor"),
        pytest.param(DeviceScorer(weights={}), 0, id="no-weights"),
    ],
)
def test_device_score_of_a_half_used_gpu(scorer, expected):
    """requested = total - free + pod: ratio 100-50+50 = 100 of 100, memory 80-40+0 = 40 of 80 GiB."""
    total, free = HALF_USED_GPU
    assert scorer.score_device({RATIO: 50}, total, free) == expected


def test_resources_the_device_lacks_are_left_out():
    """Only ``gpu-memory-ratio`` exists on this device, so the other default weights do not dilute it."""
    assert LEAST.score_device({RATIO: 30}, {RATIO: 100}, {RATIO: 100}) == 70


@pytest.mark.parametrize(
    ("requests", "scorer", "expected"),
    [
        pytest.param({"nvidia.com/gpu": 1}, LEAST, 66, id="least-ratio-50-memory-83"),
        pytest.param({"nvidia.com/gpu": 1}, MOST, 33, id="most-ratio-50-memory-16"),
        pytest.param({"nvidia.com/gpu": 1, "koordinator.sh/rdma": 1}, LEAST, 165, id="gpu-66-plus-rdma-99"),
        pytest.param({"nvidia.com/gpu": 2}, LEAST, 66, id="per-gpu-request-not-the-total"),
    ],
)
def test_node_score_sums_device_types(requests, scorer, expected):
    """GPUs 0-2 healthy (300 ratio, 240 GiB), GPU 1 half used; per-device request added once."""
    assert score(mixed_node(), claim(requests), scorer) == expected


def test_node_score_follows_numa_affinity():
    """Only GPU 2 (and unhealthy 3) on NUMA 1: ratio 100 of 100 -> 0, memory 0 of 80 GiB -> 100."""
    assert score(mixed_node(), claim({"nvidia.com/gpu": 1}), LEAST, numa_nodes={1}) == 50


def test_node_without_free_devices_scores_zero():
    node = mixed_node()
    whole = {CORE: "100", RATIO: "100", MEM: "80Gi"}
    node.restore_pod("full", allocated({"gpu": [{"minor": m, "resources": whole} for m in (0, 2)]}))
    node.restore_pod(
        "rest", allocated({"gpu": [{"minor": 1, "resources": {CORE: "50", RATIO: "50", MEM: "40Gi"}}]})
    )
    assert score(node, claim({RATIO: 10}), LEAST) == 0


@pytest.mark.parametrize(
    ("scores", "reverse", "expected"),
    [
        pytest.param([165, 0, 66], False, [100, 0, 40], id="best-node-gets-100"),
        pytest.param([165, 0, 66], True, [0, 100, 60], id="reversed"),
        pytest.param([0, 0], False, [0, 0], id="all-zero"),
        pytest.param([0, 0], True, [100, 100], id="all-zero-reversed"),
    ],
)
def test_normalize_scores(scores, reverse, expected):
    assert normalize_scores(scores, reverse=reverse) == expected
