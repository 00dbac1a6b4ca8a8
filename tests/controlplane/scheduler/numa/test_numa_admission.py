"""NodeNUMAResource as a hint provider and the admission of a pod under a NUMA policy
(resource_manager.go ``GetTopologyHints``, topology_hint.go, the topology manager's Admit).
The node is TOPO_2S4N (4 NUMA nodes of 8 CPUs) with 8 cpu and 16Gi per NUMA zone unless a case
says otherwise; expected hints and allocations are worked out by hand."""

from __future__ import annotations

import json

import pytest

from controlplane.scheduler.numa.admission import admit, topology_hints
from controlplane.scheduler.numa.allocation import NodeAllocation, PodAllocation
from controlplane.scheduler.numa.allocator import ResourceOptions
from controlplane.scheduler.numa.hints import NUMATopologyHint
from controlplane.scheduler.numa.options import TopologyOptions, with_amplification
from controlplane.scheduler.numa.scoring import ResourceAllocationScorer
from controlplane.scheduler.numa.status import RejectionError
from controlplane.scheduler.numa.topology import NodeCPUTopology
from koordinator.api.cpuset import format_cpuset, parse_cpuset
from koordinator.api.extension.node import ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO
from koordinator.api.extension.numa import NUMANodeResource
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.numa.builders import TOPO_2S4N

Q = Quantity.parse


def four_numa(**extra: str) -> TopologyOptions:
    zones = [
        NUMANodeResource(
            node=n, resources={"cpu": Q("8"), "memory": Q("16Gi"), **{k: Q(v) for k, v in extra.items()}}
        )
        for n in range(4)
    ]
    return TopologyOptions(cpu_topology=TOPO_2S4N, numa_node_resources=zones)


def ls_pod(
    cpu: str, memory: str | None = None, scorer: ResourceAllocationScorer | None = None
) -> ResourceOptions:
    requests = {"cpu": Q(cpu)}
    if memory:
        requests["memory"] = Q(memory)
    return ResourceOptions(requests=requests, numa_scorer=scorer)


def bound_pod(cpus: int, policy: str = "FullPCPUs") -> ResourceOptions:
    return ResourceOptions(
        requests={"cpu": Q(str(cpus))},
        num_cpus_needed=cpus,
        request_cpu_bind=True,
        required_cpu_bind_policy=True,
        cpu_bind_policy=policy,
    )


def holding(uid: str, cpus: str, numa: dict[int, str]) -> PodAllocation:
    return PodAllocation(
        uid=uid,
        cpuset=frozenset(parse_cpuset(cpus)),
        numa_node_resources=tuple(NUMANodeResource(node=n, resources={"cpu": Q(c)}) for n, c in numa.items()),
    )


def shape(hints: dict[str, list[NUMATopologyHint]]) -> dict[str, list[tuple[str, bool]]]:
    return {
        name: [("".join(map(str, sorted(h.affinity or ()))), h.preferred) for h in values]
        for name, values in hints.items()
    }


def test_hints_prefer_the_fewest_numa_nodes() -> None:
    """4 CPUs fit any one NUMA node: all 15 sets are hints, the 4 single ones preferred."""
    got = shape(topology_hints(four_numa(), NodeAllocation(), ls_pod("4"), "BestEffort"))
    assert got["cpu"][:5] == [("0", True), ("1", True), ("2", True), ("3", True), ("01", False)]
    assert len(got["cpu"]) == 15
    assert sum(p for _, p in got["cpu"]) == 4


def test_restricted_prefers_every_hint() -> None:
    got = shape(topology_hints(four_numa(), NodeAllocation(), ls_pod("12"), "Restricted"))
    assert got["cpu"][0] == ("01", True)
    assert all(preferred for _, preferred in got["cpu"])


def test_hints_skip_sets_the_trial_allocation_rejects() -> None:
    """12 CPUs: no single NUMA node; pairs and larger sets fit, pairs preferred."""
    got = shape(topology_hints(four_numa(), NodeAllocation(), ls_pod("12"), "SingleNUMANode"))
    assert [m for m, _ in got["cpu"]][:6] == ["01", "02", "03", "12", "13", "23"]
    assert [m for m, p in got["cpu"] if p] == ["01", "02", "03", "12", "13", "23"]


def test_hints_avoid_numa_nodes_without_a_resource() -> None:
    """Hugepages are used up on NUMA 0: NUMA 0 alone fails the trial allocation (no hint at all),
    hugepages hints leave out every set containing NUMA 0, while cpu keeps multi-node sets with
    NUMA 0 (their trial allocation takes the hugepages from the other node)."""
    options = four_numa(**{"hugepages-1Gi": "2Gi"})
    node = NodeAllocation()
    node.add(
        PodAllocation(
            uid="x", numa_node_resources=(NUMANodeResource(node=0, resources={"hugepages-1Gi": Q("2Gi")}),)
        )
    )
    ro = ResourceOptions(requests={"cpu": Q("2"), "hugepages-1Gi": Q("1Gi")})
    got = shape(topology_hints(options, node, ro, "BestEffort"))
    assert all("0" not in m for m, _ in got["hugepages-1Gi"])
    assert [m for m, p in got["hugepages-1Gi"] if p] == ["1", "2", "3"]
    assert [m for m, p in got["cpu"] if p] == ["1", "2", "3"]
    assert "01" in [m for m, _ in got["cpu"]]


def test_resource_that_fits_nowhere_gets_an_empty_list() -> None:
    got = topology_hints(four_numa(), NodeAllocation(), ls_pod("40"), "BestEffort")
    assert got == {"cpu": []}


def test_resources_not_reported_per_numa_get_no_hints() -> None:
    ro = ResourceOptions(requests={"cpu": Q("2"), "nvidia.com/gpu": Q("1")})
    assert set(topology_hints(four_numa(), NodeAllocation(), ro, "BestEffort")) == {"cpu"}


def test_bound_pod_hints_follow_free_whole_cores() -> None:
    """NUMA 0 keeps one whole core (6-7) and NUMA 1 none: 4 FullPCPUs fit NUMA 2 and 3 alone."""
    node = NodeAllocation()
    node.add(holding("x", "0-5,8-15", {0: "6", 1: "8"}))
    got = shape(topology_hints(four_numa(), node, bound_pod(4), "BestEffort"))
    assert [m for m, p in got["cpu"] if p] == ["2", "3"]


def test_amplified_node_counts_bound_cpus_amplified() -> None:
    """Ratio 1.5 (zones 12 cpu): 6 bound CPUs on NUMA 0 count 9, leaving 3 < 4 there."""
    options = with_amplification(
        four_numa(), {ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: json.dumps({"cpu": 1.5})}
    )
    node = NodeAllocation()
    node.add(holding("x", "0-5", {0: "6"}))
    got = shape(topology_hints(options, node, ls_pod("4"), "BestEffort"))
    assert [m for m, p in got["cpu"] if p] == ["1", "2", "3"]


def test_no_numa_zones_rejects() -> None:
    with pytest.raises(RejectionError) as err:
        admit(TopologyOptions(cpu_topology=TOPO_2S4N), NodeAllocation(), ls_pod("1"), "BestEffort")
    assert (err.value.code, err.value.reasons) == (
        "UnschedulableAndUnresolvable",
        ("node(s) missing NUMA resources",),
    )


def test_single_numa_node_admission_allocates_on_the_lowest_node() -> None:
    got = admit(four_numa(), NodeAllocation(), ls_pod("4", "4Gi"), "SingleNUMANode", uid="u")
    assert got.hint.affinity == frozenset({0})
    assert [
        (z.node, {k: str(v) for k, v in z.resources.items()}) for z in got.allocation.numa_node_resources
    ] == [(0, {"cpu": "4", "memory": "4Gi"})]


def test_numa_scorer_moves_the_pod_to_the_emptier_node() -> None:
    """A pod holds 4 cpu on NUMA 0. LeastAllocated NUMA scores for cpu 4 / memory 4Gi: NUMA 0 =
    (0 + 75) // 2 = 37, NUMA 1 = (50 + 75) // 2 = 62; merged {1} sums cpu and memory hints,
    124 > 74, so NUMA 1 wins among equal sizes."""
    node = NodeAllocation()
    node.add(holding("x", "", {0: "4"}))
    ro = ls_pod("4", "4Gi", ResourceAllocationScorer("LeastAllocated"))
    hints = topology_hints(four_numa(), node, ro, "SingleNUMANode")
    assert [h.score for h in hints["cpu"][:2]] == [37, 62]
    assert admit(four_numa(), node, ro, "SingleNUMANode").hint.affinity == frozenset({1})


def test_single_numa_node_rejects_a_pod_wider_than_a_numa_node() -> None:
    with pytest.raises(RejectionError) as err:
        admit(four_numa(), NodeAllocation(), ls_pod("12"), "SingleNUMANode")
    assert err.value.code == "Unschedulable"
    assert err.value.reasons == (
        "Unaligned NUMA Hint cause cpu prefer [11 0101 1001 0110 1010 1100] among "
        "[11 0101 1001 0110 1010 1100 0111 1011 1101 1110 1111]",
    )


def test_restricted_admission_splits_evenly_over_two_nodes() -> None:
    got = admit(four_numa(), NodeAllocation(), ls_pod("12"), "Restricted")
    assert got.hint.affinity == frozenset({0, 1})
    assert {z.node: str(z.resources["cpu"]) for z in got.allocation.numa_node_resources} == {0: "6", 1: "6"}


@pytest.mark.parametrize(
    ("policy", "reasons"),
    [
        pytest.param("Restricted", ("Unsatisfied NUMA cpu",), id="Restricted: no NUMA set can hold it"),
        pytest.param("BestEffort", ("Insufficient NUMA cpu",), id="BestEffort admits, then allocation fails"),
    ],
)
def test_request_larger_than_the_node(policy: str, reasons: tuple[str, ...]) -> None:
    with pytest.raises(RejectionError) as err:
        admit(four_numa(), NodeAllocation(), ls_pod("40"), policy)
    assert err.value.reasons == reasons


@pytest.mark.parametrize(
    ("exclusive", "want"),
    [
        pytest.param("Required", {1, 2}, id="Required: avoid the NUMA node of single-node pods"),
        pytest.param("Preferred", {0, 1}, id="Preferred: lowest pair"),
    ],
)
def test_numa_exclusivity(exclusive: str, want: set[int]) -> None:
    """A pod bound to CPUs 0-1 makes NUMA 0 'single'; a 12-CPU pod must span two NUMA nodes."""
    node = NodeAllocation()
    node.add(holding("x", "0-1", {0: "2"}))
    got = admit(four_numa(), node, ls_pod("12"), "Restricted", exclusive_policy=exclusive)
    assert got.hint.affinity == frozenset(want)
    assert sum(z.resources["cpu"].value() for z in got.allocation.numa_node_resources) == 12


def test_bound_pod_admission_gets_cpuset_inside_the_hint() -> None:
    node = NodeAllocation()
    node.add(holding("x", "0-7", {0: "8"}))
    got = admit(four_numa(), node, bound_pod(4), "SingleNUMANode")
    assert got.hint.affinity == frozenset({1})
    assert format_cpuset(got.allocation.cpuset) == "8-11"


def test_other_providers_hints_are_merged() -> None:
    """A device provider that can only serve NUMA 3 pulls the pod there."""
    gpu = {"koordinator.sh/gpu": [NUMATopologyHint(affinity=frozenset({3}), preferred=True)]}
    got = admit(four_numa(), NodeAllocation(), ls_pod("2"), "Restricted", other_providers_hints=[gpu])
    assert got.hint.affinity == frozenset({3})


def test_invalid_topology_reads_insufficient_numa_node_resources() -> None:
    options = TopologyOptions(
        cpu_topology=NodeCPUTopology.empty(), numa_node_resources=four_numa().numa_node_resources
    )
    with pytest.raises(RejectionError) as err:
        admit(options, NodeAllocation(), bound_pod(2), "Restricted")
    assert err.value.reasons == ("node(s) Insufficient NUMA Node resources",)
