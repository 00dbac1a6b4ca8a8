"""Device picks on one node (upstream ``device_allocator.go``, ``allocator_gpu.go``,
``devicehandler_default.go``).

Most cases use :func:`mixed_node`: GPU 0, 1 and RDMA 1 on NUMA 0 / ``pci0``; GPU 2, 3 and
RDMA 2 on NUMA 1 / ``pci1``; GPU 3 unhealthy; GPU 1 half used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from controlplane.scheduler.devices.allocator import allocate
from controlplane.scheduler.devices.errors import DeviceShareError
from controlplane.scheduler.devices.inventory import NodeDevices
from controlplane.scheduler.devices.scoring import DeviceScorer, ScoringStrategy
from koordinator.api.extension.device import (
    DeviceAllocation,
    DeviceAllocationExtension,
    set_device_allocations,
)
from tests.controlplane.scheduler.devices.builders import (
    GiB,
    allocated,
    claim,
    device,
    gpu,
    hints,
    joint,
    mixed_node,
    rdma,
)

RDMA = "koordinator.sh/rdma"
RATIO = "koordinator.sh/gpu-memory-ratio"
MEM = "koordinator.sh/gpu-memory"
CORE = "koordinator.sh/gpu-core"
LEAST = DeviceScorer()
MOST = DeviceScorer(ScoringStrategy.MOST_ALLOCATED)
ANY_VF = hints({"rdma": {"vfSelector": {}}})


def minors(result: Mapping[str, Sequence[DeviceAllocation]], device_type: str = "gpu") -> list[int]:
    return [item.minor for item in result.get(device_type, [])]


def annotation(result: Mapping[str, list[DeviceAllocation]]) -> str:
    return set_device_allocations({}, result)


def extension_of(item: DeviceAllocation) -> DeviceAllocationExtension:
    assert item.extension is not None
    return item.extension


def four_gpus(*, topology: bool = True) -> NodeDevices:
    """GPU 0, 1 on ``pci0`` and 2, 3 on ``pci1``, all healthy; GPU 3 a quarter used."""
    node = NodeDevices.from_device(
        device(
            gpu(0, numa=0 if topology else None),
            gpu(1, numa=0 if topology else None),
            gpu(2, numa=1 if topology else None, pcie="pci1"),
            gpu(3, numa=1 if topology else None, pcie="pci1"),
        )
    )
    node.restore_pod("user", allocated({"gpu": [{"minor": 3, "resources": {CORE: "25", RATIO: "25"}}]}))
    return node


# ---- GPUs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topology", "expected"),
    [
        pytest.param(True, [2], id="topology-bin-packs-next-to-the-used-gpu"),
        pytest.param(False, [0], id="no-topology-lowest-free-minor"),
    ],
)
def test_whole_gpu_placement(topology, expected):
    """With a topology tree the PCIe switch that already has a used GPU wins; without one, minor order."""
    assert minors(allocate(four_gpus(topology=topology), claim({"nvidia.com/gpu": 1}))) == expected


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        pytest.param({"nvidia.com/gpu": 1}, [0], id="one-whole-gpu-skips-the-half-used-one"),
        pytest.param({"nvidia.com/gpu": 2}, [0, 2], id="two-whole-gpus-across-numa-nodes"),
        pytest.param({RATIO: 50}, [0], id="half-gpu-least-allocated-prefers-an-empty-gpu"),
        pytest.param({MEM: 40 * GiB}, [0], id="memory-request-fits-the-first-scope"),
    ],
)
def test_gpu_picks_on_the_mixed_node(requests, expected):
    assert minors(allocate(mixed_node(), claim(requests), scorer=LEAST)) == expected


def test_most_allocated_packs_a_shared_gpu_onto_the_used_one():
    assert minors(allocate(mixed_node(), claim({RATIO: 50}), scorer=MOST)) == [1]


def test_shared_gpu_scoring_keeps_upstreams_swapped_arguments():
    """koordinator#3073: in the topology walk every partly used GPU scores as full, so the lowest minor wins.

    GPU 0 is 25% used and GPU 1 50% used; MostAllocated should pick GPU 1 but upstream picks 0.
    """
    node = NodeDevices.from_device(device(gpu(0), gpu(1)))
    node.restore_pod("a", allocated({"gpu": [{"minor": 0, "resources": {RATIO: "25"}}]}))
    node.restore_pod("b", allocated({"gpu": [{"minor": 1, "resources": {RATIO: "50"}}]}))
    assert minors(allocate(node, claim({RATIO: 25}), scorer=MOST)) == [0]


def test_default_pass_orders_by_score_then_minor():
    """Without topology, MostAllocated ranks the 50% used GPU above the 25% used one."""
    node = NodeDevices.from_device(device(gpu(0, numa=None), gpu(1, numa=None)))
    node.restore_pod("a", allocated({"gpu": [{"minor": 0, "resources": {RATIO: "25"}}]}))
    node.restore_pod("b", allocated({"gpu": [{"minor": 1, "resources": {RATIO: "50"}}]}))
    assert minors(allocate(node, claim({RATIO: 25}), scorer=MOST)) == [1]
    assert minors(allocate(node, claim({RATIO: 25}), scorer=LEAST)) == [0]


def test_whole_gpus_fill_both_memory_and_ratio_in_the_annotation():
    result = allocate(mixed_node(), claim({"nvidia.com/gpu": 1}))
    assert annotation(result) == (
        '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
        '"koordinator.sh/gpu-memory":"80Gi","koordinator.sh/gpu-memory-ratio":"100"}}]}'
    )


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        pytest.param({RATIO: 50}, {MEM: "40Gi", RATIO: "50"}, id="ratio-50-is-half-the-bytes"),
        pytest.param({MEM: 8 * GiB}, {MEM: "8Gi", RATIO: "10"}, id="8Gi-of-80Gi-is-ratio-10"),
        pytest.param({MEM: 7 * GiB}, {MEM: "7Gi", RATIO: "8"}, id="ratio-is-floored"),
        pytest.param(
            {CORE: 30, MEM: 2 * GiB}, {CORE: "30", MEM: "2Gi", RATIO: "2"}, id="core-kept-ratio-added"
        ),
    ],
)
def test_gpu_memory_and_ratio_are_derived_from_the_gpus_total(requests, expected):
    (item,) = allocate(mixed_node(), claim(requests))["gpu"]
    assert {name: str(value) for name, value in item.resources.items()} == expected


def test_bytes_to_ratio_uses_floating_point_like_upstream():
    """29 GiB of 100 GiB: 0.29 x 100 is 28.999... in float64, so the ratio is 28, not 29."""
    node = NodeDevices.from_device(device(gpu(0, memory=100 * GiB)))
    (item,) = allocate(node, claim({MEM: 29 * GiB}))["gpu"]
    assert item.resources[RATIO].value() == 28


@pytest.mark.parametrize(
    ("scope", "requests", "expected"),
    [
        pytest.param("PCIe", {"nvidia.com/gpu": 1}, [0], id="pcie-scope-one-gpu"),
        pytest.param("Node", {"nvidia.com/gpu": 2}, [0, 2], id="node-scope-spans-numa"),
    ],
)
def test_required_topology_scope_satisfied(scope, requests, expected):
    pod = claim(requests, hints({"gpu": {"requiredTopologyScope": scope}}))
    assert minors(allocate(mixed_node(), pod)) == expected


@pytest.mark.parametrize(
    ("scope", "requests"),
    [
        pytest.param("PCIe", {"nvidia.com/gpu": 2}, id="two-free-gpus-on-different-pcie"),
        pytest.param("NUMANode", {"nvidia.com/gpu": 2}, id="two-free-gpus-on-different-numa"),
        pytest.param("Device", {"nvidia.com/gpu": 1}, id="device-scope-is-deeper-than-any-scope"),
    ],
)
def test_required_topology_scope_violated(scope, requests):
    pod = claim(requests, hints({"gpu": {"requiredTopologyScope": scope}}))
    with pytest.raises(DeviceShareError) as caught:
        allocate(mixed_node(), pod)
    assert caught.value.reasons == ("Insufficient Topology Scoped GPU Devices",)
    assert caught.value.code == "Unschedulable"


@pytest.mark.parametrize(
    ("numa_nodes", "expected"),
    [
        pytest.param({1}, [2], id="numa-1-affinity"),
        pytest.param({0}, [0], id="numa-0-affinity"),
    ],
)
def test_numa_affinity_limits_the_candidates(numa_nodes, expected):
    assert minors(allocate(mixed_node(), claim({"nvidia.com/gpu": 1}), numa_nodes=numa_nodes)) == expected


def test_numa_affinity_too_small_for_the_request():
    with pytest.raises(DeviceShareError) as caught:
        allocate(mixed_node(), claim({"nvidia.com/gpu": 2}), numa_nodes={0})
    assert caught.value.reasons == ("Insufficient GPU Devices",)


def test_gpu_selector_from_the_hint():
    node = NodeDevices.from_device(device(gpu(0, labels={"model": "A100"}), gpu(1, labels={"model": "H100"})))
    pod = claim({"nvidia.com/gpu": 1}, hints({"gpu": {"selector": {"matchLabels": {"model": "H100"}}}}))
    assert minors(allocate(node, pod)) == [1]


@pytest.mark.parametrize(
    ("node", "requests", "code", "reason"),
    [
        pytest.param(
            NodeDevices.from_device(device(rdma(1))),
            {"nvidia.com/gpu": 1},
            "UnschedulableAndUnresolvable",
            "Insufficient gpu devices",
            id="node-without-gpus",
        ),
        pytest.param(
            mixed_node(),
            {"nvidia.com/gpu": 3},
            "Unschedulable",
            "Insufficient GPU Devices",
            id="topology-too-few",
        ),
        pytest.param(
            NodeDevices.from_device(device(gpu(0, numa=None), gpu(1, numa=None, healthy=False))),
            {"nvidia.com/gpu": 2},
            "Unschedulable",
            "Insufficient gpu devices",
            id="no-topology-default-pass-too-few",
        ),
        pytest.param(
            NodeDevices.from_device(device(gpu(0, healthy=False))),
            {RATIO: 10},
            "Unschedulable",
            "Insufficient GPU Devices",
            id="only-unhealthy-gpus",
        ),
    ],
)
def test_gpu_failures_carry_upstreams_reason(node, requests, code, reason):
    with pytest.raises(DeviceShareError) as caught:
        allocate(node, claim(requests))
    assert (caught.value.code, caught.value.reasons) == (code, (reason,))


def test_multi_gpu_share_falls_back_to_the_default_pass():
    """``gpu.shared: 2`` cannot use the topology walk; without a required scope it goes by minor."""
    result = allocate(mixed_node(), claim({"koordinator.sh/gpu.shared": 2, RATIO: 100}))
    assert minors(result) == [0, 1]
    assert [item.resources[RATIO].value() for item in result["gpu"]] == [50, 50]


def test_multi_gpu_share_with_a_required_scope_is_unsupported():
    pod = claim(
        {"koordinator.sh/gpu.shared": 2, RATIO: 100}, hints({"gpu": {"requiredTopologyScope": "PCIe"}})
    )
    with pytest.raises(DeviceShareError) as caught:
        allocate(mixed_node(), pod)
    assert caught.value.reasons == ("node(s) Unsupported Multi-Shared GPU",)


def test_required_and_preferred_minors():
    node = NodeDevices.from_device(device(*(gpu(m, numa=None) for m in range(4))))
    assert minors(allocate(node, claim({"nvidia.com/gpu": 1}), required={"gpu": {3}})) == [3]
    assert minors(allocate(node, claim({"nvidia.com/gpu": 1}), preferred={"gpu": {2}})) == [2]


# ---- RDMA, VFs and hints -------------------------------------------------------------------


def test_rdma_gets_a_virtual_function_when_the_hint_asks():
    result = allocate(mixed_node(), claim({RDMA: 1}, ANY_VF))
    assert annotation(result) == (
        '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
    )


def test_next_pod_gets_the_next_free_vf_then_the_next_nic():
    node = mixed_node()
    first = allocate(node, claim({RDMA: 1}, ANY_VF), scorer=MOST)
    node.add_pod("p1", first)
    second = allocate(node, claim({RDMA: 1}, ANY_VF), scorer=MOST)
    node.add_pod("p2", second)
    third = allocate(node, claim({RDMA: 1}, ANY_VF), scorer=MOST)
    vf = [vf for r in (first, second, third) for vf in extension_of(r["rdma"][0]).virtual_functions]
    assert [(v.minor, v.bus_id) for v in vf] == [
        (0, "0000:1f:00.2"),
        (1, "0000:1f:00.3"),
        (0, "0000:90:00.2"),
    ]
    assert minors(third, "rdma") == [2]


@pytest.mark.parametrize(
    ("node", "hint", "code", "reason"),
    [
        pytest.param(
            NodeDevices.from_device(device(rdma(1, vfs=0))),
            {"vfSelector": {}},
            "UnschedulableAndUnresolvable",
            "Insufficient rdma VirtualFunctions",
            id="node-has-no-vfs",
        ),
        pytest.param(
            mixed_node(),
            {"vfSelector": {"matchLabels": {"type": "fakeG"}}},
            "Unschedulable",
            "Insufficient rdma devices",
            id="no-vf-group-matches",
        ),
        pytest.param(
            mixed_node(),
            {"selector": {"matchLabels": {"nic": "missing"}}},
            "Unschedulable",
            "Insufficient rdma devices",
            id="no-nic-matches-the-selector",
        ),
    ],
)
def test_rdma_failures(node, hint, code, reason):
    with pytest.raises(DeviceShareError) as caught:
        allocate(node, claim({RDMA: 1}, hints({"rdma": hint})))
    assert (caught.value.code, caught.value.reasons) == (code, (reason,))


@pytest.mark.parametrize(
    ("requests", "hint", "expected"),
    [
        pytest.param({RDMA: 1}, {"allocateStrategy": "ApplyForAll"}, [(1, 1), (2, 1)], id="apply-for-all"),
        pytest.param(
            {RDMA: 1},
            {"allocateStrategy": "ApplyForAll", "selector": {"matchLabels": {"nic": "a"}}},
            [(1, 1)],
            id="apply-for-all-matching-selector",
        ),
        pytest.param(
            {RDMA: 2}, {"allocateStrategy": "RequestsAsCount"}, [(1, 1), (2, 1)], id="requests-as-count"
        ),
        pytest.param(
            {RDMA: 2},
            {"allocateStrategy": "RequestsAsCount", "exclusivePolicy": "DeviceLevel"},
            [(1, 100), (2, 100)],
            id="requests-as-count-device-exclusive",
        ),
        pytest.param({RDMA: 200}, {}, [(1, 100), (2, 100)], id="200-is-two-whole-nics"),
    ],
)
def test_rdma_allocate_strategies(requests, hint, expected):
    node = NodeDevices.from_device(
        device(rdma(1, labels={"nic": "a"}), rdma(2, pcie="pci1", labels={"nic": "b"}))
    )
    result = allocate(node, claim(requests, hints({"rdma": hint})))
    assert [(item.minor, item.resources[RDMA].value()) for item in result["rdma"]] == expected


def test_pcie_level_exclusive_policy_has_no_effect_as_upstream():
    """Upstream drops the result of its PCIe-level filter, so a shared NIC stays a candidate."""
    node = mixed_node()
    node.restore_pod("other", allocated({"rdma": [{"minor": 1, "resources": {RDMA: "1"}}]}))
    result = allocate(node, claim({RDMA: 1}, hints({"rdma": {"exclusivePolicy": "PCIeLevel"}})))
    assert minors(result, "rdma") == [1]


# ---- joint GPU + RDMA ----------------------------------------------------------------------


def test_joint_allocation_puts_the_nic_on_the_gpus_pcie_switch():
    node = mixed_node()
    node.restore_pod("whole", allocated({"gpu": [{"minor": 0, "resources": {CORE: "100", RATIO: "100"}}]}))
    requests = {"nvidia.com/gpu": 1, RDMA: 1}
    together = allocate(node, claim(requests, ANY_VF, joint(["gpu", "rdma"])))
    apart = allocate(node, claim(requests, ANY_VF))
    assert (minors(together), minors(together, "rdma")) == ([2], [2])
    assert (minors(apart), minors(apart, "rdma")) == ([2], [1])


def test_joint_allocation_annotation_matches_upstream_text():
    result = allocate(mixed_node(), claim({"nvidia.com/gpu": 1, RDMA: 1}, ANY_VF, joint(["gpu", "rdma"])))
    assert annotation(result) == (
        '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"80Gi",'
        '"koordinator.sh/gpu-memory-ratio":"100"}}],'
        '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
    )


@pytest.mark.parametrize(
    "scope",
    [pytest.param("SamePCIe", id="same-pcie-required"), pytest.param("", id="preferred-only")],
)
def test_secondary_takes_one_device_per_primary_pcie_switch(scope):
    """Two GPUs on two switches: the NIC request of 1 becomes one NIC per switch (upstream's max count)."""
    result = allocate(
        mixed_node(), claim({"nvidia.com/gpu": 2, RDMA: 1}, ANY_VF, joint(["gpu", "rdma"], scope))
    )
    assert (minors(result), minors(result, "rdma")) == ([0, 2], [1, 2])


def test_same_pcie_violation():
    """The only free NIC is on another switch than the GPU: allocation succeeds, the scope check fails."""
    node = mixed_node()
    node.restore_pod("nic", allocated({"rdma": [{"minor": 1, "resources": {RDMA: "100"}}]}))
    pod = claim({"nvidia.com/gpu": 1, RDMA: 1}, ANY_VF, joint(["gpu", "rdma"], "SamePCIe"))
    with pytest.raises(DeviceShareError) as caught:
        allocate(node, pod)
    assert caught.value.reasons == ("node(s) Device Joint-Allocate rules violation",)
    loose = claim({"nvidia.com/gpu": 1, RDMA: 1}, ANY_VF, joint(["gpu", "rdma"]))
    assert minors(allocate(node, loose), "rdma") == [2]


def test_well_planned_secondary_devices_wait_for_reserve():
    node = mixed_node()
    node.update_device(
        device(
            gpu(0),
            gpu(1),
            gpu(2, numa=1, pcie="pci1"),
            gpu(3, numa=1, pcie="pci1", healthy=False),
            rdma(1),
            rdma(2, numa=1, pcie="pci1", bus="0000:90"),
            labels={"node.koordinator.sh/secondary-device-well-planned": "true"},
        )
    )
    pod = claim({"nvidia.com/gpu": 1, RDMA: 1}, ANY_VF, joint(["gpu", "rdma"]))
    assert sorted(allocate(node, pod, reserve=False)) == ["gpu"]
    assert sorted(allocate(node, pod, reserve=True)) == ["gpu", "rdma"]
