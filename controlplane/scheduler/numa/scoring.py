"""NodeNUMAResource scores (upstream ``scoring.go``, ``least_allocated.go``, ``most_allocated.go``).

Resources are compared in the framework's units: cpu in milli, memory and ephemeral storage
in bytes, scalar resources (names with a ``/``, ``hugepages-*``, ``attachable-volumes-*``) in
whole units; other names are ignored. A scalar resource the pod does not request is skipped.
For each weighted resource with a non-zero allocatable:

* LeastAllocated: ``(allocatable - requested) * 100 // allocatable`` (0 when over-requested);
* MostAllocated: ``min(requested, allocatable) * 100 // allocatable``;

and the score is the weighted sum divided (integer division) by the summed weights, where
``requested`` already includes the pod.

* :func:`node_score` is the score without a NUMA policy; with a cpu amplification ratio above
  1 and a pod requesting cpu, the CPUs bound on the node count amplified in ``requested``.
* :func:`numa_allocation_score` is the score of a trial allocation under a NUMA policy: over
  the NUMA nodes the pod got (their allocatable and what others took there) or the whole node
  when none, with requested cpu replaced by all bound CPUs (amplified) when the pod gets a
  cpuset. It uses the node scorer, as upstream does.
* The NUMA scorer scores each candidate NUMA set for the hints (see :mod:`.admission`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controlplane.scheduler.numa.allocation import NodeAllocation, PodAllocation
from controlplane.scheduler.numa.options import TopologyOptions, amplify
from controlplane.scheduler.resourcescore import MAX_NODE_SCORE, least_requested_score, most_requested_score
from koordinator.api import resourcelist
from koordinator.api.extension.numa import NUMANodeResource
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import ResourceList

__all__ = [
    "LEAST_ALLOCATED",
    "MAX_NODE_SCORE",
    "MOST_ALLOCATED",
    "ResourceAllocationScorer",
    "least_requested_score",
    "most_requested_score",
    "node_score",
    "node_score_units",
    "numa_allocation_score",
    "resource_units",
]

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
_DEFAULT_WEIGHTS = {"cpu": 1, "memory": 1}
_PLAIN = ("cpu", "memory", "ephemeral-storage")


def _is_scalar(name: str) -> bool:
    return "/" in name or name.startswith(("hugepages-", "attachable-volumes-"))


def resource_units(resources: Mapping[str, Quantity]) -> dict[str, int]:
    """A ResourceList in the framework's units (``framework.NewResource``), scored names only."""
    units: dict[str, int] = {}
    for name, quantity in resources.items():
        if name == "cpu":
            units[name] = quantity.milli_value()
        elif name in _PLAIN or _is_scalar(name):
            units[name] = quantity.value()
    return units


@dataclass(frozen=True)
class ResourceAllocationScorer:
    """LeastAllocated or MostAllocated over weighted resources (default cpu and memory, weight 1)."""

    strategy: str = LEAST_ALLOCATED
    weights: Mapping[str, int] = field(default_factory=lambda: dict(_DEFAULT_WEIGHTS))

    def __post_init__(self) -> None:
        if self.strategy not in (LEAST_ALLOCATED, MOST_ALLOCATED):
            raise ValueError(f"scoring strategy {self.strategy} is not supported")

    def score_units(
        self, requested: Mapping[str, int], allocatable: Mapping[str, int], pod: Mapping[str, int]
    ) -> int:
        """The score from values already in framework units."""
        score_of = least_requested_score if self.strategy == LEAST_ALLOCATED else most_requested_score
        total = weight_sum = 0
        for name, weight in self.weights.items():
            pod_request = pod.get(name, 0)
            if pod_request == 0 and _is_scalar(name):
                continue
            if name not in _PLAIN and name not in allocatable:
                continue
            capacity = allocatable.get(name, 0)
            if capacity == 0:
                continue
            total += score_of(requested.get(name, 0) + pod_request, capacity) * weight
            weight_sum += weight
        return total // weight_sum if weight_sum else 0

    def score(
        self,
        requested: Mapping[str, Quantity],
        allocatable: Mapping[str, Quantity],
        pod_requests: Mapping[str, Quantity],
    ) -> int:
        """The score of a node (or NUMA set) that has ``requested`` out of ``allocatable`` taken,
        for a pod requesting ``pod_requests``."""
        return self.score_units(
            resource_units(requested), resource_units(allocatable), resource_units(pod_requests)
        )


def node_score(
    scorer: ResourceAllocationScorer,
    node_requested: Mapping[str, Quantity],
    node_allocatable: Mapping[str, Quantity],
    pod_requests: Mapping[str, Quantity],
    *,
    cpu_amplification_ratio: float = 0.0,
    bound_cpus: int = 0,
) -> int:
    """The node-level score (``scoreWithAmplifiedCPUs``): ``pod_requests`` are the resource
    options' requests (amplified for a binding pod), ``bound_cpus`` how many CPUs cpusets hold on
    the node (counted amplified when the ratio is above 1)."""
    return node_score_units(
        scorer,
        resource_units(node_requested),
        resource_units(node_allocatable),
        resource_units(pod_requests),
        cpu_amplification_ratio=cpu_amplification_ratio,
        bound_cpus=bound_cpus,
    )


def node_score_units(
    scorer: ResourceAllocationScorer,
    node_requested: Mapping[str, int],
    node_allocatable: Mapping[str, int],
    pod_requests: Mapping[str, int],
    *,
    cpu_amplification_ratio: float = 0.0,
    bound_cpus: int = 0,
) -> int:
    """:func:`node_score` over values already in framework units (cpu in milli)."""
    if pod_requests.get("cpu", 0) != 0 and cpu_amplification_ratio > 1:
        bound = bound_cpus * 1000
        node_requested = {
            **node_requested,
            "cpu": node_requested.get("cpu", 0) - bound + amplify(bound, cpu_amplification_ratio),
        }
    return scorer.score_units(node_requested, node_allocatable, pod_requests)


def numa_allocation_score(
    scorer: ResourceAllocationScorer,
    allocation: PodAllocation,
    options: TopologyOptions,
    node: NodeAllocation,
    node_requested: Mapping[str, Quantity],
    node_allocatable: Mapping[str, Quantity],
    pod_requests: Mapping[str, Quantity],
    *,
    reusable: Mapping[int, ResourceList] | None = None,
    preferred_cpus: Iterable[int] = (),
) -> int:
    """The score of a trial ``allocation`` under a NUMA policy (``calculateAllocatableAndRequested``
    then the node scorer)."""
    zones: Iterable[NUMANodeResource] = allocation.numa_node_resources
    if allocation.numa_node_resources:
        _, taken = node.available_numa_resources(
            options.numa_node_resources,
            reusable,
            cpu_amplification_ratio=options.cpu_amplification_ratio(),
            topology=options.cpu_topology,
        )
        total_requested: ResourceList = {}
        total_allocatable: ResourceList = {}
        for zone in zones:
            total_requested = resourcelist.add(total_requested, taken.get(zone.node, {}))
            total_allocatable = resourcelist.add(total_allocatable, options.numa_resources_of(zone.node))
        requested = resource_units(total_requested)
        allocatable = resource_units(total_allocatable)
    else:
        requested = resource_units(node_requested)
        allocatable = resource_units(node_allocatable)
    if allocation.cpuset and options.cpu_topology is not None:
        preferred = frozenset(preferred_cpus) - allocation.cpuset
        _, held = node.available_cpus(
            options.cpu_topology, options.max_ref_count, options.reserved_cpus, preferred
        )
        requested["cpu"] = amplify(len(held) * 1000, options.cpu_amplification_ratio())
    return scorer.score_units(requested, allocatable, resource_units(pod_requests))
