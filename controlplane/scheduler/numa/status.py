"""NodeNUMAResource's verdicts: the framework status codes it answers with and upstream's exact
wording for each rejection (``plugin.go``, ``topology_hint.go``, ``resource_manager.go``,
``cpu_accumulator.go`` and the topology manager's ``manager.go``)."""

from __future__ import annotations

__all__ = [
    "ERROR",
    "ERR_CPU_BIND_POLICY_CONFLICT",
    "ERR_FAILED_TO_ALLOCATE_CPUS",
    "ERR_INSUFFICIENT_AMPLIFIED_CPU",
    "ERR_INSUFFICIENT_NUMA_NODE_RESOURCES",
    "ERR_INSUFFICIENT_RESOURCES_ON_NUMA",
    "ERR_INVALID_CPU_AMPLIFICATION_RATIO",
    "ERR_INVALID_CPU_TOPOLOGY",
    "ERR_INVALID_REQUESTED_CPUS",
    "ERR_MISSING_NUMA_RESOURCES",
    "ERR_NOT_ENOUGH_CPUS",
    "ERR_NOT_MATCH_NUMA_TOPOLOGY",
    "ERR_SMT_ALIGNMENT",
    "UNSCHEDULABLE",
    "UNSCHEDULABLE_AND_UNRESOLVABLE",
    "RejectionError",
    "insufficient_numa",
    "required_policy_unsatisfied",
    "unaligned_numa_hint",
    "unsatisfied_numa_resource",
]

#: framework status codes
UNSCHEDULABLE = "Unschedulable"
UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
ERROR = "Error"

ERR_NOT_MATCH_NUMA_TOPOLOGY = "node(s) NUMA Topology policy not match"
ERR_INVALID_REQUESTED_CPUS = "the requested CPUs must be integer"
ERR_INVALID_CPU_TOPOLOGY = "node(s) invalid CPU Topology"
ERR_SMT_ALIGNMENT = "node(s) requested cpus not multiple cpus per core"
ERR_CPU_BIND_POLICY_CONFLICT = "node(s) cpu bind policy conflicts with pod's required cpu bind policy"
ERR_INVALID_CPU_AMPLIFICATION_RATIO = "node(s) invalid CPU amplification ratio"
ERR_INSUFFICIENT_AMPLIFIED_CPU = "Insufficient amplified cpu"
#: FilterByNUMANode on a node whose NRT reports no NUMA zones
ERR_MISSING_NUMA_RESOURCES = "node(s) missing NUMA resources"
#: GetPodTopologyHints when the hints cannot be computed
ERR_INSUFFICIENT_NUMA_NODE_RESOURCES = "node(s) Insufficient NUMA Node resources"
ERR_INSUFFICIENT_RESOURCES_ON_NUMA = "insufficient resources on NUMA Node"
ERR_NOT_ENOUGH_CPUS = "not enough cpus available to satisfy request"
ERR_FAILED_TO_ALLOCATE_CPUS = "failed to allocate cpus"


def unsatisfied_numa_resource(resource: str) -> str:
    """A hint provider offered no NUMA affinity at all for ``resource``."""
    return f"Unsatisfied NUMA {resource}"


def unaligned_numa_hint(summary: str) -> str:
    """Restricted / SingleNUMANode could not find a preferred merged hint."""
    return f"Unaligned NUMA Hint cause {summary}"


def insufficient_numa(resource: str) -> str:
    """The chosen NUMA nodes cannot hold the pod's request of ``resource``."""
    return f"Insufficient NUMA {resource}"


def required_policy_unsatisfied(policy: str) -> str:
    return f"insufficient CPUs to satisfy required cpu bind policy {policy}"


class RejectionError(Exception):
    """A non-success status: ``code`` (one of the constants above) and its reasons."""

    def __init__(self, code: str, *reasons: str) -> None:
        super().__init__("; ".join(reasons) or code)
        self.code = code
        self.reasons: tuple[str, ...] = reasons

    @property
    def message(self) -> str:
        """The reasons joined as ``Status.Message()`` joins them."""
        return ", ".join(self.reasons)

    def __repr__(self) -> str:
        return f"RejectionError({self.code!r}, {', '.join(map(repr, self.reasons))})"
