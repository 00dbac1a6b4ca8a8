"""NodeNUMAResource scores (scoring.go, least_allocated.go, most_allocated.go): the two
strategies, weights and skipped resources, the node-level score with amplified CPUs and the
NUMA-level score of a trial allocation. Figures are hand-computed."""

from __future__ import annotations

import pytest

from controlplane.scheduler.numa.allocation import NodeAllocation, PodAllocation
from controlplane.scheduler.numa.options import TopologyOptions
from controlplane.scheduler.numa.scoring import (
    ResourceAllocationScorer,
    least_requested_score,
    most_requested_score,
    node_score,
    numa_allocation_score,
    resource_units,
)
from koordinator.api.cpuset import parse_cpuset
from koordinator.api.extension.numa import NUMANodeResource
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.numa.builders import TOPO_2S4N

Q = Quantity.parse


def rl(**values: str) -> dict[str, Quantity]:
    return {k.replace("_", "-"): Q(v) for k, v in values.items()}


@pytest.mark.parametrize(
    ("requested", "capacity", "least", "most"),
    [
        pytest.param(3000, 4000, 25, 75, id="three quarters used"),
        pytest.param(1, 8, 87, 12, id="integer division rounds down"),
        pytest.param(5, 4, 0, 100, id="over-requested"),
        pytest.param(1, 0, 0, 0, id="no capacity"),
    ],
)
def test_strategies(requested: int, capacity: int, least: int, most: int) -> None:
    assert (least_requested_score(requested, capacity), most_requested_score(requested, capacity)) == (
        least,
        most,
    )


@pytest.mark.parametrize(
    ("strategy", "want"),
    [
        pytest.param("LeastAllocated", 56, id="LeastAllocated (25 + 87) // 2"),
        pytest.param("MostAllocated", 43, id="MostAllocated (75 + 12) // 2"),
    ],
)
def test_weighted_average_includes_the_pod(strategy: str, want: int) -> None:
    """cpu 2 used + 1 requested of 4, memory 0 used + 1Gi of 8Gi."""
    scorer = ResourceAllocationScorer(strategy)
    assert scorer.score(rl(cpu="2"), rl(cpu="4", memory="8Gi"), rl(cpu="1", memory="1Gi")) == want


def test_weights() -> None:
    """cpu weight 3 (score 25), memory weight 1 (score 87): (75 + 87) // 4 = 40."""
    scorer = ResourceAllocationScorer("LeastAllocated", {"cpu": 3, "memory": 1})
    assert scorer.score(rl(cpu="2"), rl(cpu="4", memory="8Gi"), rl(cpu="1", memory="1Gi")) == 40


def test_scalar_resource_not_requested_is_skipped() -> None:
    scorer = ResourceAllocationScorer("LeastAllocated", {"cpu": 1, "nvidia.com/gpu": 1})
    assert scorer.score(rl(cpu="2"), {"cpu": Q("4"), "nvidia.com/gpu": Q("8")}, rl(cpu="1")) == 25


def test_resource_without_allocatable_is_skipped() -> None:
    scorer = ResourceAllocationScorer("MostAllocated")
    assert scorer.score(rl(cpu="1"), rl(cpu="4"), rl(cpu="1", memory="1Gi")) == 50


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="not supported"):
        ResourceAllocationScorer("RequestedToCapacityRatio")


def test_framework_units() -> None:
    got = resource_units(
        {"cpu": Q("1500m"), "memory": Q("1Ki"), "pods": Q("10"), "foo": Q("1"), "hugepages-2Mi": Q("2Mi")}
    )
    assert got == {"cpu": 1500, "memory": 1024, "hugepages-2Mi": 2 * 1024 * 1024}


@pytest.mark.parametrize(
    ("ratio", "bound", "want"),
    [
        pytest.param(0.0, 2, 66, id="no ratio: (12000 - 4000) * 100 // 12000"),
        pytest.param(1.5, 2, 58, id="2 bound CPUs count 3: (12000 - 5000) * 100 // 12000"),
        pytest.param(1.5, 0, 66, id="nothing bound"),
    ],
)
def test_node_score_with_amplified_cpus(ratio: float, bound: int, want: int) -> None:
    scorer = ResourceAllocationScorer("LeastAllocated", {"cpu": 1})
    assert (
        node_score(
            scorer, rl(cpu="3"), rl(cpu="12"), rl(cpu="1"), cpu_amplification_ratio=ratio, bound_cpus=bound
        )
        == want
    )


def test_node_score_ignores_amplification_for_pods_without_cpu() -> None:
    scorer = ResourceAllocationScorer("LeastAllocated", {"cpu": 1, "memory": 1})
    got = node_score(
        scorer,
        rl(cpu="3"),
        rl(cpu="12", memory="8Gi"),
        rl(memory="1Gi"),
        cpu_amplification_ratio=2,
        bound_cpus=3,
    )
    assert got == (75 + 87) // 2


def options() -> TopologyOptions:
    zones = [NUMANodeResource(node=n, resources=rl(cpu="8", memory="16Gi")) for n in range(4)]
    return TopologyOptions(cpu_topology=TOPO_2S4N, numa_node_resources=zones)


def test_numa_score_uses_the_chosen_numa_nodes() -> None:
    """Another pod took 4 cpu / 8Gi on NUMA 1; the trial puts 2 cpu / 4Gi there:
    cpu (8000 - 6000) * 100 // 8000 = 25, memory (16 - 12) * 100 // 16 = 25."""
    node = NodeAllocation()
    node.add(
        PodAllocation(
            uid="x", numa_node_resources=(NUMANodeResource(node=1, resources=rl(cpu="4", memory="8Gi")),)
        )
    )
    trial = PodAllocation(
        uid="p", numa_node_resources=(NUMANodeResource(node=1, resources=rl(cpu="2", memory="4Gi")),)
    )
    scorer = ResourceAllocationScorer("LeastAllocated")
    got = numa_allocation_score(
        scorer, trial, options(), node, rl(cpu="20"), rl(cpu="32", memory="64Gi"), rl(cpu="2", memory="4Gi")
    )
    assert got == 25


def test_numa_score_counts_all_bound_cpus_as_requested_cpu() -> None:
    """With a cpuset, requested cpu becomes every bound CPU of the node (6 held elsewhere, on
    NUMA 2), whatever NUMA they are on: cpu (8000 - 6000 - 2000) -> 0; memory 100 -> 50."""
    node = NodeAllocation()
    node.add(PodAllocation(uid="x", cpuset=frozenset(parse_cpuset("16-21"))))
    trial = PodAllocation(
        uid="p",
        cpuset=frozenset({8, 9}),
        numa_node_resources=(NUMANodeResource(node=1, resources=rl(cpu="2")),),
    )
    scorer = ResourceAllocationScorer("LeastAllocated")
    assert numa_allocation_score(scorer, trial, options(), node, {}, {}, rl(cpu="2")) == 50


def test_numa_score_without_numa_allocation_is_node_level() -> None:
    scorer = ResourceAllocationScorer("MostAllocated", {"cpu": 1})
    trial = PodAllocation(uid="p")
    assert (
        numa_allocation_score(
            scorer, trial, options(), NodeAllocation(), rl(cpu="2"), rl(cpu="8"), rl(cpu="2")
        )
        == 50
    )
