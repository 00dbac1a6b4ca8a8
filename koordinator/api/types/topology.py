"""``topology.node.k8s.io`` NodeResourceTopology (v1alpha1, the stored version, and v1alpha2).

The koordlet writes one per node: NUMA zones with their resources, plus the CPU topology
and share pools as annotations (see :mod:`koordinator.api.extension.topology`). Unlike the
other CRDs the payload sits at the top level (``topologyPolicies``, ``zones``), not in a spec.
"""

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from koordinator.api.model import Model, field
from koordinator.api.quantity import Quantity
from koordinator.api.types.core import Resource

__all__ = [
    "AttributeInfo",
    "CostInfo",
    "NodeResourceTopology",
    "NodeResourceTopologyV1Alpha2",
    "ResourceInfo",
    "Zone",
]

GROUP = "topology.node.k8s.io"


@dataclass
class CostInfo(Model):
    name: str = field("name", default="", omitempty=False, required=True)
    value: int = field("value", default=0, omitempty=False, required=True, format="int64")


@dataclass
class AttributeInfo(Model):
    name: str = field("name", default="", omitempty=False, required=True)
    value: str = field("value", default="", omitempty=False, required=True)


@dataclass
class ResourceInfo(Model):
    name: str = field("name", default="", omitempty=False, required=True)
    capacity: Quantity = field("capacity", factory=Quantity, omitempty=False, required=True)
    allocatable: Quantity = field("allocatable", factory=Quantity, omitempty=False, required=True)
    available: Quantity = field("available", factory=Quantity, omitempty=False, required=True)


@dataclass
class Zone(Model):
    name: str = field(
        "name", default="", omitempty=False, required=True, description="node-<id> for NUMA zones."
    )
    type: str = field("type", default="", omitempty=False, required=True, description="Node for NUMA zones.")
    parent: str = field("parent", default="")
    costs: list[CostInfo] = field("costs", factory=list)
    attributes: list[AttributeInfo] = field("attributes", factory=list)
    resources: list[ResourceInfo] = field("resources", factory=list)


@dataclass
class NodeResourceTopology(Resource):
    """v1alpha1, the version the koordlet writes and the apiserver stores."""

    API_VERSION: ClassVar[str] = f"{GROUP}/v1alpha1"
    KIND: ClassVar[str] = "NodeResourceTopology"
    __api_description__ = "The NUMA zones of one node and the resources of each, named after the node."

    topology_policies: list[str] = field(
        "topologyPolicies",
        factory=list,
        omitempty=False,
        required=True,
        description="Topology manager policies.",
    )
    zones: list[Zone] = field("zones", factory=list, omitempty=False, required=True)


@dataclass
class NodeResourceTopologyV1Alpha2(Resource):
    """v1alpha2: node-level attributes added, topologyPolicies optional (deprecated)."""

    API_VERSION: ClassVar[str] = f"{GROUP}/v1alpha2"
    KIND: ClassVar[str] = "NodeResourceTopology"
    __api_description__ = "The NUMA zones of one node and the resources of each, named after the node."

    topology_policies: list[str] = field("topologyPolicies", factory=list, description="Deprecated.")
    zones: list[Zone] = field("zones", factory=list, omitempty=False, required=True)
    attributes: list[AttributeInfo] = field("attributes", factory=list)
