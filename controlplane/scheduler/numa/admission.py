"""NUMA admission of a pod on a node under a NUMA topology policy (upstream
``resource_manager.go`` ``GetTopologyHints``/``generateResourceHints``, ``topology_hint.go``
and the topology manager's ``Admit``).

:func:`topology_hints` is NodeNUMAResource as a hint provider. For every non-empty set of the
node's NUMA nodes (smallest first) it sums their free and total resources, scores the set with
the NUMA scorer, and keeps the set as a hint for every requested resource the NUMA zones
report, provided a trial allocation restricted to the set succeeds and none of its NUMA nodes
has none of that resource left. Hints of the fewest NUMA nodes per resource are preferred;
under Restricted every hint is. A resource the zones report but no set can hold gets an empty
list (later ``Unsatisfied NUMA <resource>``).

:func:`admit` is ``FilterByNUMANode`` + ``Admit``: hints (any failure reads
``node(s) Insufficient NUMA Node resources``), merged with other providers' hints under the
policy, rejected with the merge's reasons, then allocated with the best hint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controlplane.scheduler.numa.allocation import NodeAllocation, PodAllocation
from controlplane.scheduler.numa.allocator import ResourceOptions, allocate, trim_numa_resources
from controlplane.scheduler.numa.hints import (
    NUMA_POLICY_RESTRICTED,
    MergeResult,
    NUMATopologyHint,
    iterate_masks,
    merge_hints,
)
from controlplane.scheduler.numa.options import TopologyOptions
from controlplane.scheduler.numa.status import (
    ERR_INSUFFICIENT_NUMA_NODE_RESOURCES,
    ERR_INSUFFICIENT_RESOURCES_ON_NUMA,
    ERR_MISSING_NUMA_RESOURCES,
    UNSCHEDULABLE,
    UNSCHEDULABLE_AND_UNRESOLVABLE,
    RejectionError,
)
from koordinator.api import resourcelist
from koordinator.api.resourcelist import ResourceList

__all__ = ["NUMAAdmission", "admit", "topology_hints"]


def topology_hints(
    options: TopologyOptions, node: NodeAllocation, ro: ResourceOptions, policy: str
) -> dict[str, list[NUMATopologyHint]]:
    """Resource -> hints for the pod on this node; raises :class:`RejectionError` when the node
    reports no NUMA zones or its CPUs cannot be read."""
    zones = options.numa_node_resources
    if not zones:
        raise RejectionError(UNSCHEDULABLE, ERR_INSUFFICIENT_RESOURCES_ON_NUMA)
    available, _ = node.available_numa_resources(
        zones,
        ro.reusable_resources,
        cpu_amplification_ratio=options.cpu_amplification_ratio(),
        topology=options.cpu_topology,
    )
    available = trim_numa_resources(options, node, available, ro)

    names_by_numa = {name for zone in zones for name in zone.resources}
    lacking: dict[str, set[int]] = {
        name: {numa for numa, free in available.items() if free.get(name) is None or free[name].is_zero()}
        for name in names_by_numa
    }
    min_affinity = dict.fromkeys(ro.requests, len(zones))
    hints: dict[str, list[NUMATopologyHint]] = {}
    seen_names: set[str] = set()
    numa_nodes = [zone.node for zone in zones]
    for mask in iterate_masks(numa_nodes):
        free: ResourceList = {}
        total: ResourceList = {}
        for numa in sorted(mask):
            free = resourcelist.add(free, available.get(numa, {}))
            total = resourcelist.add(total, options.numa_resources_of(numa))
        seen_names.update(name for name in ro.requests if name in total)
        score = 0
        if ro.numa_scorer is not None:
            score = ro.numa_scorer.score(resourcelist.subtract_non_negative(total, free), total, ro.requests)
        try:
            allocate(options, node, ro.with_hint(NUMATopologyHint(affinity=mask)))
        except RejectionError:
            continue
        for name in sorted(seen_names):
            if mask & lacking.get(name, set()):
                continue
            min_affinity[name] = min(min_affinity.get(name, len(zones)), len(mask))
            hints.setdefault(name, []).append(NUMATopologyHint(affinity=mask, score=score))
    for name in ro.requests:
        if name in hints:
            hints[name] = [
                NUMATopologyHint(
                    affinity=h.affinity,
                    preferred=(h.affinity is not None and len(h.affinity) == min_affinity[name])
                    or policy == NUMA_POLICY_RESTRICTED,
                    score=h.score,
                )
                for h in hints[name]
            ]
        elif name in seen_names:
            hints[name] = []
    return hints


@dataclass(frozen=True)
class NUMAAdmission:
    """An admitted pod: the merged hint and the allocation made with it."""

    merge: MergeResult
    allocation: PodAllocation

    @property
    def hint(self) -> NUMATopologyHint:
        return self.merge.hint


def admit(
    options: TopologyOptions,
    node: NodeAllocation,
    ro: ResourceOptions,
    policy: str,
    *,
    exclusive_policy: str = "",
    other_providers_hints: Sequence[Mapping[str, Sequence[NUMATopologyHint] | None]] = (),
    uid: str = "",
    namespace: str = "",
    name: str = "",
) -> NUMAAdmission:
    """Admit the pod on the node under ``policy`` or raise :class:`RejectionError`.

    ``other_providers_hints`` are the hints of other providers (DeviceShare), merged after this
    plug-in's. ``exclusive_policy`` is the pod's ``singleNUMANodeExclusive`` (already defaulted)."""
    numa_nodes = options.numa_nodes()
    if not numa_nodes:
        raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_MISSING_NUMA_RESOURCES)
    status = node.numa_node_status(options.cpu_topology, len(numa_nodes))
    try:
        own = topology_hints(options, node, ro, policy)
    except RejectionError:
        raise RejectionError(UNSCHEDULABLE, ERR_INSUFFICIENT_NUMA_NODE_RESOURCES) from None
    merged = merge_hints(policy, numa_nodes, [own, *other_providers_hints], exclusive_policy, status)
    if not merged.admit and merged.reasons:
        raise RejectionError(UNSCHEDULABLE, *merged.reasons)
    allocation = allocate(options, node, ro.with_hint(merged.hint), uid=uid, namespace=namespace, name=name)
    return NUMAAdmission(merged, allocation)
