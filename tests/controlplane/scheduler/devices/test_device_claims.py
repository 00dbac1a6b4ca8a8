"""A pod's device claim: requests plus hint and joint-allocation annotations (upstream ``preparePod``)."""

from __future__ import annotations

import pytest

from controlplane.scheduler.devices.claims import build_claim
from controlplane.scheduler.devices.errors import DeviceShareError
from tests.controlplane.scheduler.devices.builders import hints, joint

GPU_AND_RDMA = {"nvidia.com/gpu": 1, "koordinator.sh/rdma": 1}


def test_pod_without_devices_is_skipped():
    assert build_claim({"cpu": 1000}, hints({"rdma": {}})) is None


@pytest.mark.parametrize(
    ("requests", "annotations", "types"),
    [
        pytest.param(GPU_AND_RDMA, joint(["gpu", "rdma"]), ("gpu", "rdma"), id="both-requested"),
        pytest.param(
            {"nvidia.com/gpu": 1}, joint(["gpu", "rdma"]), ("gpu",), id="unrequested-type-drops-out"
        ),
        pytest.param(
            GPU_AND_RDMA,
            {**joint(["gpu", "rdma"]), **hints({"rdma": {"allocateStrategy": "ApplyForAll"}})},
            ("gpu",),
            id="apply-for-all-type-drops-out",
        ),
        pytest.param(GPU_AND_RDMA, joint(["rdma", "gpu"]), ("rdma", "gpu"), id="first-listed-is-primary"),
        pytest.param(GPU_AND_RDMA, {}, (), id="no-annotation"),
    ],
)
def test_joint_allocation_types(requests, annotations, types):
    claim = build_claim(requests, annotations)
    assert claim is not None
    assert claim.joint_types == types
    assert claim.primary_device_type == (types[0] if types else "")


def test_joint_scope_and_gpu_scope_are_kept():
    annotations = {
        **joint(["gpu", "rdma"], "SamePCIe"),
        **hints({"gpu": {"requiredTopologyScope": "NUMANode"}}),
    }
    claim = build_claim(GPU_AND_RDMA, annotations)
    assert claim is not None
    assert (claim.joint_scope, claim.gpu_required_scope, claim.gpu_required_scope_level) == (
        "SamePCIe",
        "NUMANode",
        2,
    )


def test_vf_selector_means_every_device_needs_a_vf():
    claim = build_claim(GPU_AND_RDMA, hints({"rdma": {"vfSelector": {}}}))
    assert claim is not None
    assert claim.must_allocate_vf("rdma")
    assert not claim.must_allocate_vf("gpu")


@pytest.mark.parametrize(
    ("annotations", "prefix"),
    [
        pytest.param(
            {"scheduling.koordinator.sh/device-allocate-hint": "{"},
            "invalid DeviceAllocateHint annotation, err: ",
            id="hint-not-json",
        ),
        pytest.param(
            {"scheduling.koordinator.sh/device-joint-allocate": "[1]"},
            "invalid DeviceJointAllocate annotation, err: ",
            id="joint-not-an-object",
        ),
        pytest.param(
            hints({"rdma": {"selector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}}),
            "invalid Selector of DeviceHint, deviceType: rdma, err: ",
            id="bad-selector-operator",
        ),
        pytest.param(
            hints({"rdma": {"vfSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}}),
            "invalid VFSelector of DeviceHint, deviceType: rdma, err: ",
            id="in-without-values",
        ),
    ],
)
def test_malformed_annotations_are_unresolvable(annotations, prefix):
    with pytest.raises(DeviceShareError) as caught:
        build_claim(GPU_AND_RDMA, annotations)
    assert caught.value.unresolvable
    assert caught.value.reasons[0].startswith(prefix)
