"""CPU binding and NUMA placement: the ``resource-spec`` / ``resource-status`` pod annotations and
the node labels that shape NodeNUMAResource scheduling.

``scheduling.koordinator.sh/resource-spec`` is what the pod asks for (bind and exclusive
policies); ``scheduling.koordinator.sh/resource-status`` is what the scheduler allocated (a
cpuset and per-NUMA-node resources), which the koordlet applies.
"""

from __future__ import annotations

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.annotations import get_model
from koordinator.api.extension.constants import NODE_DOMAIN_PREFIX, SCHEDULING_DOMAIN_PREFIX
from koordinator.api.model import Model, field
from koordinator.api.types.core import ResourceList

__all__ = [
    "ANNOTATION_NUMA_TOPOLOGY_SPEC",
    "ANNOTATION_RESOURCE_SPEC",
    "ANNOTATION_RESOURCE_STATUS",
    "CPU_BIND_POLICIES",
    "CPU_EXCLUSIVE_POLICIES",
    "LABEL_NODE_CPU_BIND_POLICY",
    "LABEL_NODE_NUMA_ALLOCATE_STRATEGY",
    "LABEL_NUMA_TOPOLOGY_POLICY",
    "NODE_CPU_BIND_POLICIES",
    "NUMA_ALLOCATE_STRATEGIES",
    "NUMA_TOPOLOGY_POLICIES",
    "NUMANodeResource",
    "NUMATopologySpec",
    "ResourceSpec",
    "ResourceStatus",
    "get_numa_topology_spec",
    "get_resource_spec",
    "get_resource_status",
]

ANNOTATION_RESOURCE_SPEC = SCHEDULING_DOMAIN_PREFIX + "/resource-spec"
ANNOTATION_RESOURCE_STATUS = SCHEDULING_DOMAIN_PREFIX + "/resource-status"
ANNOTATION_NUMA_TOPOLOGY_SPEC = SCHEDULING_DOMAIN_PREFIX + "/numa-topology-spec"

CPU_BIND_POLICY_DEFAULT = "Default"
CPU_BIND_POLICY_FULL_PCPUS = "FullPCPUs"
CPU_BIND_POLICY_SPREAD_BY_PCPUS = "SpreadByPCPUs"
CPU_BIND_POLICY_CONSTRAINED_BURST = "ConstrainedBurst"
CPU_BIND_POLICIES = (
    CPU_BIND_POLICY_DEFAULT,
    CPU_BIND_POLICY_FULL_PCPUS,
    CPU_BIND_POLICY_SPREAD_BY_PCPUS,
    CPU_BIND_POLICY_CONSTRAINED_BURST,
)
CPU_EXCLUSIVE_POLICIES = ("None", "PCPULevel", "NUMANodeLevel")

LABEL_NODE_CPU_BIND_POLICY = NODE_DOMAIN_PREFIX + "/cpu-bind-policy"
NODE_CPU_BIND_POLICIES = ("None", "FullPCPUsOnly", "SpreadByPCPUs")
LABEL_NUMA_TOPOLOGY_POLICY = NODE_DOMAIN_PREFIX + "/numa-topology-policy"
NUMA_TOPOLOGY_POLICIES = ("", "BestEffort", "Restricted", "SingleNUMANode")
LABEL_NODE_NUMA_ALLOCATE_STRATEGY = NODE_DOMAIN_PREFIX + "/numa-allocate-strategy"
NUMA_ALLOCATE_STRATEGIES = ("MostAllocated", "LeastAllocated", "DistributeEvenly")


@dataclass
class ResourceSpec(Model):
    """``resource-spec``: CPU bind (Default, FullPCPUs, SpreadByPCPUs, ConstrainedBurst) and exclusivity."""

    required_cpu_bind_policy: str = field("requiredCPUBindPolicy", default="")
    preferred_cpu_bind_policy: str = field("preferredCPUBindPolicy", default="")
    preferred_cpu_exclusive_policy: str = field("preferredCPUExclusivePolicy", default="")


@dataclass
class NUMANodeResource(Model):
    node: int = field("node", default=0, omitempty=False)
    resources: ResourceList = field("resources", factory=dict)


@dataclass
class ResourceStatus(Model):
    """``resource-status``: the allocated cpuset and the NUMA nodes the pod is bound to."""

    cpuset: str = field("cpuset", default="")
    numa_node_resources: list[NUMANodeResource] = field("numaNodeResources", factory=list)


@dataclass
class NUMATopologySpec(Model):
    numa_topology_policy: str = field("numaTopologyPolicy", default="")
    single_numa_node_exclusive: str = field("singleNUMANodeExclusive", default="")


def get_resource_spec(annotations: Mapping[str, Any] | None) -> ResourceSpec:
    """The pod's resource spec; absent means ``preferredCPUBindPolicy: Default`` (as upstream)."""
    spec = get_model(annotations, ANNOTATION_RESOURCE_SPEC, ResourceSpec)
    if spec is None:
        return ResourceSpec(preferred_cpu_bind_policy=CPU_BIND_POLICY_DEFAULT)
    return spec


def get_resource_status(annotations: Mapping[str, Any] | None) -> ResourceStatus:
    """The allocation the scheduler recorded; empty when absent."""
    return get_model(annotations, ANNOTATION_RESOURCE_STATUS, ResourceStatus) or ResourceStatus()


def get_numa_topology_spec(annotations: Mapping[str, Any] | None) -> NUMATopologySpec:
    return get_model(annotations, ANNOTATION_NUMA_TOPOLOGY_SPEC, NUMATopologySpec) or NUMATopologySpec()
