"""An allocation for a given NUMA hint (resource_manager.go ``Allocate``): the per-NUMA split,
trimming by the required bind policy, the cpuset per NUMA node, amplified requests and the
rejections. The node is 2 sockets x 1 NUMA x 26 cores x 2 threads (NUMA 0 = CPUs 0-51, NUMA
1 = 52-103), each NUMA zone cpu 52 and memory 128Gi; one pod may already hold a cpuset."""

from __future__ import annotations

import json

import pytest

from controlplane.scheduler.numa.allocation import NodeAllocation, PodAllocation
from controlplane.scheduler.numa.allocator import (
    ResourceOptions,
    allocate,
    distribute_evenly,
    filter_cpus_by_required_policy,
    satisfies_required_policy,
    split_quantity,
)
from controlplane.scheduler.numa.hints import NUMATopologyHint
from controlplane.scheduler.numa.options import TopologyOptions, with_amplification
from controlplane.scheduler.numa.status import RejectionError
from controlplane.scheduler.numa.topology import NodeCPUTopology
from koordinator.api.cpuset import format_cpuset, parse_cpuset
from koordinator.api.extension.node import ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO
from koordinator.api.extension.numa import NUMANodeResource
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.numa.builders import TOPO_2S4N

Q = Quantity.parse
TOPO_52 = NodeCPUTopology.uniform(2, 1, 26, 2)


def options(ratio: float | None = None) -> TopologyOptions:
    zones = [NUMANodeResource(node=n, resources={"cpu": Q("52"), "memory": Q("128Gi")}) for n in (0, 1)]
    annotations = {ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: json.dumps({"cpu": ratio})} if ratio else {}
    return with_amplification(TopologyOptions(cpu_topology=TOPO_52, numa_node_resources=zones), annotations)


def node_with(held: tuple[str, str, str] | None) -> NodeAllocation:
    node = NodeAllocation()
    if held:
        cpus, numa0, numa1 = held
        node.add(
            PodAllocation(
                uid="other",
                cpuset=frozenset(parse_cpuset(cpus)),
                numa_node_resources=(
                    NUMANodeResource(node=0, resources={"cpu": Q(numa0)}),
                    NUMANodeResource(node=1, resources={"cpu": Q(numa1)}),
                ),
            )
        )
    return node


def run(
    hint: set[int],
    cpu: str,
    *,
    bind: str = "",
    held: tuple[str, str, str] | None = None,
    ratio: float | None = None,
    original: str | None = None,
) -> tuple[str, dict[int, str]]:
    ro = ResourceOptions(
        requests={"cpu": Q(cpu)},
        original_requests={"cpu": Q(original)} if original else None,
        num_cpus_needed=Q(original or cpu).value() if bind else 0,
        request_cpu_bind=bool(bind),
        required_cpu_bind_policy=bool(bind),
        cpu_bind_policy=bind,
        hint=NUMATopologyHint(affinity=frozenset(hint)),
    )
    got = allocate(options(ratio), node_with(held), ro)
    return format_cpuset(got.cpuset), {z.node: str(z.resources["cpu"]) for z in got.numa_node_resources}


@pytest.mark.parametrize(
    ("hint", "cpu", "bind", "held", "ratio", "original", "want"),
    [
        pytest.param({0}, "4", "", None, None, None, ("", {0: "4"}), id="no binding: NUMA share only"),
        pytest.param({0}, "4", "FullPCPUs", None, None, None, ("0-3", {0: "4"}), id="FullPCPUs in NUMA 0"),
        pytest.param(
            {0}, "4", "FullPCPUs", ("4-104", "48", "52"), None, None, ("0-3", {0: "4"}), id="last free cores"
        ),
        pytest.param(
            {0}, "4", "SpreadByPCPUs", None, None, None, ("0,2,4,6", {0: "4"}), id="SpreadByPCPUs in NUMA 0"
        ),
        pytest.param(
            {0},
            "4",
            "SpreadByPCPUs",
            ("1,3,5,7-104", "48", "52"),
            None,
            None,
            ("0,2,4,6", {0: "4"}),
            id="one thread left per core is enough to spread",
        ),
        pytest.param(
            {0},
            "6",
            "SpreadByPCPUs",
            None,
            1.5,
            "4",
            ("0,2,4,6", {0: "4"}),
            id="amplified request 6, NUMA share and cpuset from the original 4",
        ),
        pytest.param(
            {0, 1},
            "8",
            "FullPCPUs",
            ("0-43,53-96", "48", "48"),
            None,
            None,
            ("44-47,98-101", {0: "4", 1: "4"}),
            id="two NUMA nodes, whole cores on each",
        ),
        pytest.param(
            {0, 1}, "4", "", None, None, None, ("", {0: "2", 1: "2"}), id="even split over two NUMA nodes"
        ),
        pytest.param(
            {0, 1}, "4", "FullPCPUs", None, None, None, ("0-1,52-53", {0: "2", 1: "2"}), id="a core each"
        ),
        pytest.param(
            {0, 1},
            "4",
            "FullPCPUs",
            ("4-101", "48", "50"),
            None,
            None,
            ("0-1,102-103", {0: "2", 1: "2"}),
            id="the last free core of each NUMA node",
        ),
        pytest.param(
            {0, 1},
            "4",
            "SpreadByPCPUs",
            ("1,3,5,7-101,103", "48", "50"),
            None,
            None,
            ("0,2,4,102", {0: "3", 1: "1"}),
            id="NUMA 1 trimmed to one usable core: 3 + 1",
        ),
        pytest.param(
            {0, 1},
            "4",
            "SpreadByPCPUs",
            ("4-100", "48", "49"),
            None,
            None,
            ("0,2,101-102", {0: "2", 1: "2"}),
            id="balanced 2 + 2",
        ),
        pytest.param(
            {0, 1},
            "5",
            "SpreadByPCPUs",
            ("1,3,5,7-97,103", "48", "47"),
            None,
            None,
            ("0,2,4,98,100", {0: "3", 1: "2"}),
            id="odd count: smaller node first gets the floor",
        ),
        pytest.param(
            {0, 1},
            "3.5",
            "",
            ("0-49,52-101", "50", "50"),
            1.5,
            None,
            ("", {0: "1750m", 1: "1750m"}),
            id="shared CPUs split in milli",
        ),
    ],
)
def test_allocate(
    hint: set[int],
    cpu: str,
    bind: str,
    held: tuple[str, str, str] | None,
    ratio: float | None,
    original: str | None,
    want: tuple[str, dict[int, str]],
) -> None:
    assert run(hint, cpu, bind=bind, held=held, ratio=ratio, original=original) == want


@pytest.mark.parametrize(
    ("hint", "cpu", "bind", "held", "ratio", "reason"),
    [
        pytest.param({0}, "54", "", None, None, "Insufficient NUMA cpu", id="more than NUMA 0"),
        pytest.param({0, 1}, "108", "", None, None, "Insufficient NUMA cpu", id="more than both NUMA nodes"),
        pytest.param(
            {0},
            "4",
            "FullPCPUs",
            ("1,3,5,7-104", "48", "52"),
            None,
            "Insufficient NUMA cpu",
            id="no whole free core: NUMA cpu trimmed to 0",
        ),
        pytest.param(
            {0},
            "4",
            "SpreadByPCPUs",
            ("4-104", "48", "52"),
            None,
            "Insufficient NUMA cpu",
            id="two cores left for four spread CPUs",
        ),
        pytest.param(
            {0},
            "4",
            "",
            ("0-49,52-101", "50", "50"),
            1.5,
            "Insufficient NUMA cpu",
            id="amplified: 50 bound CPUs count 75 of 78",
        ),
    ],
)
def test_allocate_rejections(
    hint: set[int], cpu: str, bind: str, held: tuple[str, str, str] | None, ratio: float | None, reason: str
) -> None:
    with pytest.raises(RejectionError) as err:
        run(hint, cpu, bind=bind, held=held, ratio=ratio)
    assert err.value.code == "Unschedulable"
    assert err.value.reasons == (reason,)


@pytest.mark.parametrize(
    ("strategy", "want"),
    [
        pytest.param("LeastAllocated", "52-55", id="LeastAllocated: the idle NUMA node"),
        pytest.param("MostAllocated", "48-51", id="MostAllocated: the last 4 CPUs of the busy NUMA node"),
    ],
)
def test_cpuset_without_hint_uses_the_whole_node_by_strategy(strategy: str, want: str) -> None:
    ro = ResourceOptions(
        requests={"cpu": Q("4")},
        num_cpus_needed=4,
        request_cpu_bind=True,
        cpu_bind_policy="FullPCPUs",
        numa_allocate_strategy=strategy,
    )
    got = allocate(options(), node_with(("0-47", "48", "0")), ro, uid="u", name="p", namespace="ns")
    assert (format_cpuset(got.cpuset), got.numa_node_resources, got.uid) == (want, (), "u")


def test_required_full_pcpus_counts_only_whole_free_cores() -> None:
    """CPU 103 is free but its sibling 102 is not: no whole core is left for the pod."""
    ro = ResourceOptions(
        requests={"cpu": Q("1")},
        num_cpus_needed=1,
        request_cpu_bind=True,
        required_cpu_bind_policy=True,
        cpu_bind_policy="FullPCPUs",
    )
    with pytest.raises(RejectionError) as err:
        allocate(options(), node_with(("0-102", "51", "51")), ro)
    assert err.value.reasons == ("not enough cpus available to satisfy request",)


def test_required_policy_must_hold_for_the_result() -> None:
    """3 CPUs with FullPCPUs required (Filter would have refused it): the accumulator returns a
    core and a half, which the final check rejects."""
    ro = ResourceOptions(
        requests={"cpu": Q("3")},
        num_cpus_needed=3,
        request_cpu_bind=True,
        required_cpu_bind_policy=True,
        cpu_bind_policy="FullPCPUs",
    )
    with pytest.raises(RejectionError) as err:
        allocate(options(), NodeAllocation(), ro)
    assert err.value.reasons == ("insufficient CPUs to satisfy required cpu bind policy FullPCPUs",)


def test_invalid_topology_is_unresolvable() -> None:
    ro = ResourceOptions(
        requests={"cpu": Q("2")}, num_cpus_needed=2, request_cpu_bind=True, cpu_bind_policy="FullPCPUs"
    )
    broken = TopologyOptions(cpu_topology=NodeCPUTopology.empty())
    with pytest.raises(RejectionError) as err:
        allocate(broken, NodeAllocation(), ro)
    assert (err.value.code, err.value.reasons) == (
        "UnschedulableAndUnresolvable",
        ("node(s) invalid CPU Topology",),
    )


def test_no_numa_zones_is_unresolvable() -> None:
    ro = ResourceOptions(requests={"cpu": Q("2")}, hint=NUMATopologyHint(affinity=frozenset({0})))
    with pytest.raises(RejectionError) as err:
        allocate(TopologyOptions(cpu_topology=TOPO_2S4N), NodeAllocation(), ro)
    assert err.value.reasons == ("insufficient resources on NUMA Node",)


@pytest.mark.parametrize(
    ("policy", "cpus", "want"),
    [
        pytest.param("FullPCPUs", "0-2,5", "0-1", id="FullPCPUs keeps whole cores"),
        pytest.param("SpreadByPCPUs", "0-2,5", "0,2,5", id="SpreadByPCPUs keeps the lowest thread per core"),
        pytest.param("Default", "0-2,5", "0-2,5", id="other policies keep all"),
    ],
)
def test_filter_cpus_by_required_policy(policy: str, cpus: str, want: str) -> None:
    assert format_cpuset(filter_cpus_by_required_policy(policy, parse_cpuset(cpus), TOPO_2S4N)) == want


@pytest.mark.parametrize(
    ("policy", "cpus", "ok"),
    [
        pytest.param("FullPCPUs", "0-3", True, id="two whole cores"),
        pytest.param("FullPCPUs", "0-2", False, id="a half core"),
        pytest.param("SpreadByPCPUs", "0,2,4", True, id="one thread per core"),
        pytest.param("SpreadByPCPUs", "0-1", False, id="two threads of a core"),
    ],
)
def test_satisfies_required_policy(policy: str, cpus: str, ok: bool) -> None:
    assert satisfies_required_policy(policy, parse_cpuset(cpus), TOPO_2S4N) is ok


@pytest.mark.parametrize(
    ("name", "quantity", "parts", "bind", "want"),
    [
        pytest.param("cpu", "3500m", 2, "", "1750m", id="shared cpu in milli"),
        pytest.param("cpu", "5", 2, "SpreadByPCPUs", "2", id="bound cpu in whole CPUs"),
        pytest.param(
            "cpu", "6", 2, "FullPCPUs", "2", id="required FullPCPUs in whole cores: 3 cores -> 1 each"
        ),
        pytest.param("memory", "3Gi", 2, "", "1536Mi", id="memory in bytes"),
    ],
)
def test_split_quantity(name: str, quantity: str, parts: int, bind: str, want: str) -> None:
    ro = ResourceOptions(
        requests={}, request_cpu_bind=bool(bind), required_cpu_bind_policy=bool(bind), cpu_bind_policy=bind
    )
    assert str(split_quantity(name, Q(quantity), parts, ro, 2)) == want


def test_distribution_order_follows_upstreams_positional_comparator() -> None:
    """Hint {2, 3}: upstream compares the availability of NUMA 1 and NUMA 0 (the positions), not
    of 2 and 3; NUMA 1 having less than NUMA 0 swaps the visit to 3 then 2, so NUMA 3 gets the
    even share first and NUMA 2 what is left."""
    available = {
        0: {"cpu": Q("8")},
        1: {"cpu": Q("1")},
        2: {"cpu": Q("2")},
        3: {"cpu": Q("8")},
    }
    ro = ResourceOptions(requests={"cpu": Q("6")})
    result, reasons = distribute_evenly({"cpu": Q("6")}, available, {2, 3}, ro, 2)
    assert reasons == ["Insufficient NUMA cpu"]
    assert {z.node: str(z.resources["cpu"]) for z in result} == {2: "2", 3: "3"}


def test_resources_not_reported_per_numa_are_not_distributed() -> None:
    available = {0: {"cpu": Q("8")}}
    requests = {"cpu": Q("2"), "koordinator.sh/gpu-memory": Q("10Gi")}
    result, reasons = distribute_evenly(requests, available, {0}, ResourceOptions(requests=requests), 2)
    assert reasons == []
    assert result == [NUMANodeResource(node=0, resources={"cpu": Q("2")})]
