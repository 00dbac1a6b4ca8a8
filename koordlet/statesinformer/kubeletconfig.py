"""The kubelet's running configuration (``/configz``), as far as the NodeResourceTopology
reports it: the CPU manager policy, its options and reserved CPUs, and the topology
manager policy and scope.

Upstream's NodeResourceTopology reporter (``states_noderesourcetopology.go``, ``calcNodeTopo``)
reads them through ``GetKubeletConfiguration`` on every sync, unless
``--disable-query-kubelet-config``. The reserved CPUs of the static policy are the
kubelet's own (``GetStaticCPUManagerPolicyReservedCPUs``,
``pkg/koordlet/util/kubelet/kubelet.go``): ``reservedSystemCPUs`` when set, else
``ceil(systemReserved.cpu + kubeReserved.cpu)`` CPUs picked by topology
(:func:`~koordlet.statesinformer.cpu_assignment.take_by_topology`), as the kubelet picks
them. The NRT's ``topologyPolicies`` entry comes from ``topologyManagerPolicy`` and
``topologyManagerScope`` (``getTopologyPolicy``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordinator.api.cpuset import CPUSetError, format_cpuset, parse_cpuset
from koordinator.api.quantity import Quantity, QuantityError
from koordlet.statesinformer.cpu_assignment import take_by_topology
from koordlet.system.topology import CPUTopology

__all__ = [
    "CPU_MANAGER_POLICY_STATIC",
    "NO_TOPOLOGY_POLICY",
    "KubeletConfigError",
    "KubeletConfiguration",
    "ReservedCPUsError",
    "topology_policy",
]

CPU_MANAGER_POLICY_STATIC = "static"

#: (scope, kubelet topology manager policy) -> NodeResourceTopology ``topologyPolicies``
_TOPOLOGY_POLICIES = {
    ("container", "single-numa-node"): "SingleNUMANodeContainerLevel",
    ("container", "restricted"): "RestrictedContainerLevel",
    ("container", "best-effort"): "BestEffortContainerLevel",
    ("pod", "single-numa-node"): "SingleNUMANodePodLevel",
    ("pod", "restricted"): "RestrictedPodLevel",
    ("pod", "best-effort"): "BestEffortPodLevel",
}
NO_TOPOLOGY_POLICY = "None"
#: the resources a kubelet can reserve (``parseResourceList``)
_RESERVABLE = frozenset({"cpu", "memory", "ephemeral-storage", "pid"})


class KubeletConfigError(ValueError):
    """A ``/configz`` answer whose fields do not have their types."""


class ReservedCPUsError(ValueError):
    """The static policy's reserved CPUs cannot be told (upstream logs it and reports none)."""


def topology_policy(policy: str, scope: str) -> str:
    """The ``topologyPolicies`` entry for the kubelet's topology manager policy and scope
    (``getTopologyPolicy``): ``None`` for the ``none`` policy and anything unknown."""
    return _TOPOLOGY_POLICIES.get((scope, policy), NO_TOPOLOGY_POLICY)


def _string(config: Mapping[str, Any], key: str) -> str:
    value = config.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise KubeletConfigError(f"{key}: expected a string, got {type(value).__name__}")
    return value


def _string_map(config: Mapping[str, Any], key: str) -> dict[str, str]:
    value = config.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise KubeletConfigError(f"{key}: expected a map of strings")
    return {str(k): v for k, v in value.items()}


@dataclass(frozen=True)
class KubeletConfiguration:
    """The fields of the kubelet's configuration the NodeResourceTopology needs."""

    cpu_manager_policy: str = ""
    cpu_manager_policy_options: Mapping[str, str] = field(default_factory=dict)
    reserved_system_cpus: str = ""
    kube_reserved: Mapping[str, str] = field(default_factory=dict)
    system_reserved: Mapping[str, str] = field(default_factory=dict)
    topology_manager_policy: str = ""
    topology_manager_scope: str = ""

    @classmethod
    def from_configz(cls, config: Mapping[str, Any]) -> KubeletConfiguration:
        """From the ``kubeletconfig`` object of ``/configz`` (v1beta1 field names);
        :class:`KubeletConfigError` when one of these fields has the wrong type."""
        return cls(
            cpu_manager_policy=_string(config, "cpuManagerPolicy"),
            cpu_manager_policy_options=_string_map(config, "cpuManagerPolicyOptions"),
            reserved_system_cpus=_string(config, "reservedSystemCPUs"),
            kube_reserved=_string_map(config, "kubeReserved"),
            system_reserved=_string_map(config, "systemReserved"),
            topology_manager_policy=_string(config, "topologyManagerPolicy"),
            topology_manager_scope=_string(config, "topologyManagerScope"),
        )

    @property
    def topology_policy(self) -> str:
        return topology_policy(self.topology_manager_policy, self.topology_manager_scope)

    def static_reserved_cpus(self, topology: CPUTopology) -> frozenset[int]:
        """The CPUs the static CPU manager policy keeps for the system, as the kubelet
        computes them; none under another policy. :class:`ReservedCPUsError` where the
        kubelet itself could not start its static policy with this configuration."""
        if self.cpu_manager_policy != CPU_MANAGER_POLICY_STATIC:
            return frozenset()
        online = frozenset(topology.cpus())
        try:
            explicit = frozenset(parse_cpuset(self.reserved_system_cpus))
        except CPUSetError as err:
            raise ReservedCPUsError(f"unable to parse reserved-cpus list: {err}") from None
        if not explicit <= online:
            raise ReservedCPUsError(
                f"reserved-cpus: {self.reserved_system_cpus} is not a subset of online-cpus: "
                f"{format_cpuset(online)}"
            )
        kube_reserved = dict(self.kube_reserved)
        system_reserved = dict(self.system_reserved)
        if explicit:  # --reserved-cpus overrides the CPU of kubeReserved and systemReserved
            kube_reserved.pop("cpu", None)
            system_reserved["cpu"] = str(len(explicit))
        milli = _reserved_cpu_milli(kube_reserved) + _reserved_cpu_milli(system_reserved)
        if milli <= 0:
            raise ReservedCPUsError(
                "[cpumanager] unable to determine reserved CPU resources for static policy"
            )
        count = math.ceil(milli / 1000)  # fractional CPUs cannot be reserved exclusively
        reserved = explicit or take_by_topology(topology, online, count) or frozenset()
        if len(reserved) != count:
            raise ReservedCPUsError(
                f"[cpumanager] unable to reserve the required amount of CPUs "
                f"(size of {format_cpuset(reserved)} did not equal {count})"
            )
        return reserved


def _reserved_cpu_milli(reserved: Mapping[str, str]) -> int:
    """The milli-CPUs of a kubeReserved/systemReserved map, each entry checked as the
    kubelet's ``parseResourceList`` does."""
    milli = 0
    for name, text in reserved.items():
        if name not in _RESERVABLE:
            raise ReservedCPUsError(f"cannot reserve {name!r} resource")
        try:
            quantity = Quantity.parse(text)
        except QuantityError as err:
            raise ReservedCPUsError(f"{name}: {err}") from None
        if quantity.sign() < 0:
            raise ReservedCPUsError(f"resource quantity for {name!r} cannot be negative: {text}")
        if name == "cpu":
            milli = quantity.milli_value()
    return milli
