"""GPU placement by topology: node -> NUMA node -> PCIe switch, as upstream's GPU allocator walks it.

The tree is built from the ``Device`` object when every GPU reports a topology. A request
for N GPUs is served from the deepest scope that holds N suitable GPUs; among scopes of the
same depth the one with more already-used scopes on its path wins (bin packing), and for a
shared GPU the better-scored device breaks the remaining tie. A required topology scope
(``requiredTopologyScope`` in the GPU hint) forbids serving from a shallower scope.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from koordinator.api.types.scheduling import DeviceInfo

__all__ = ["ScopeRequest", "TopologyScope", "allocate_from_topology", "build_gpu_topology"]

_Resources = Mapping[str, int]
#: ``score_device(request, total, free)``, the scorer's per-device score.
DeviceScoreFn = Callable[[_Resources, _Resources, _Resources], int]


@dataclass
class TopologyScope:
    """One scope of the tree and the GPUs in it (minor -> total resources)."""

    name: str
    level: int
    resources: dict[int, dict[str, int]]
    children: list[TopologyScope] = field(default_factory=list)
    numa_node: int = 0
    pcie: str = ""

    @property
    def minors(self) -> list[int]:
        return sorted(self.resources)


def _minor(info: DeviceInfo) -> int:
    return info.minor if info.minor is not None else 0


def build_gpu_topology(
    infos: Sequence[DeviceInfo], totals: Mapping[int, Mapping[str, int]]
) -> TopologyScope | None:
    """The tree of a node's GPUs, or ``None`` when there are none or one lacks a topology."""
    if not infos:
        return None
    by_numa: dict[int, dict[int, dict[str, int]]] = {}
    by_pcie: dict[int, dict[str, dict[int, dict[str, int]]]] = {}
    for info in infos:
        if info.topology is None:
            return None
        minor = _minor(info)
        node_id = info.topology.node_id
        resources = dict(totals.get(minor, {}))
        by_numa.setdefault(node_id, {})[minor] = resources
        by_pcie.setdefault(node_id, {}).setdefault(info.topology.pcie_id, {})[minor] = resources
    root = TopologyScope("Node", 1, {minor: dict(r) for minor, r in totals.items()})
    for node_id in sorted(by_numa):
        numa = TopologyScope("NUMANode", 2, by_numa[node_id], numa_node=node_id)
        for pcie_id in sorted(by_pcie[node_id]):
            numa.children.append(TopologyScope("PCIe", 3, by_pcie[node_id][pcie_id], pcie=pcie_id))
        root.children.append(numa)
    return root


@dataclass(frozen=True)
class ScopeRequest:
    """What the GPU allocator asks of the tree."""

    count: int
    per_gpu: Mapping[str, int]
    shared: bool
    #: Deepest scope level the GPUs must share (0: none required).
    required_level: int = 0


@dataclass
class _Device:
    satisfied: bool
    score: int


@dataclass
class _Result:
    minors: list[int]
    not_empties: int
    depth: int
    score: int


@dataclass
class _Walk:
    request: ScopeRequest
    free: Mapping[int, Mapping[str, int]]
    allocatable: AbstractSet[int]
    used: AbstractSet[int]
    score_device: DeviceScoreFn | None
    devices: dict[int, _Device] = field(default_factory=dict)

    def device(self, minor: int, total: Mapping[str, int]) -> _Device:
        known = self.devices.get(minor)
        if known is not None:
            return known
        free = self.free.get(minor, {})
        request = self.request.per_gpu
        satisfied = minor in self.allocatable and all(v <= free.get(k, 0) for k, v in request.items())
        score = 0
        if satisfied and self.request.shared and self.score_device is not None:
            # Upstream passes free and total the other way round here (koordinator#3073, still
            # open): a partly used GPU then scores as if fully allocated.
            score = self.score_device(request, free, total)
        device = _Device(satisfied, score)
        self.devices[minor] = device
        return device


def _better(best: _Result, candidate: _Result, shared: bool) -> _Result:
    if best.depth < candidate.depth or (
        best.depth == candidate.depth and best.not_empties < candidate.not_empties
    ):
        best = candidate
    if (
        shared
        and best.depth == candidate.depth
        and best.not_empties == candidate.not_empties
        and best.score < candidate.score
    ):
        best = candidate
    return best


def _from_scope(walk: _Walk, scope: TopologyScope, not_empties: int, depth: int) -> _Result | None:
    request = walk.request
    minors = scope.minors
    if len(minors) < request.count:
        return None
    depth += 1
    if any(minor in walk.used for minor in minors):
        not_empties += 1
    best: _Result | None = None
    for child in scope.children:
        if len(child.resources) < request.count:
            continue
        result = _from_scope(walk, child, not_empties, depth)
        if result is None or not result.minors:
            continue
        best = result if best is None else _better(best, result, request.shared)
    if best is not None:
        return best
    if request.required_level > scope.level:
        return None
    candidates: list[int] = []
    best_minor, best_score = -1, -1
    satisfied = False
    for minor in minors:
        device = walk.device(minor, scope.resources[minor])
        if not device.satisfied:
            continue
        if not request.shared:
            candidates.append(minor)
            if len(candidates) == request.count:
                satisfied = True
                break
            continue
        satisfied = True
        if device.score > best_score:
            best_minor, best_score = minor, device.score
    if not satisfied:
        return None
    if request.shared:
        candidates.append(best_minor)
    return _Result(candidates, not_empties, depth, best_score)


def allocate_from_topology(
    root: TopologyScope,
    request: ScopeRequest,
    *,
    free: Mapping[int, Mapping[str, int]],
    allocatable: AbstractSet[int],
    used: AbstractSet[int],
    score_device: DeviceScoreFn | None = None,
) -> list[int] | None:
    """Minors for the request, or ``None`` when no scope can serve it.

    ``allocatable``: minors the pod may use (healthy, passing the hint's selector and the
    NUMA affinity); ``used``: minors that already carry allocations (they make their scopes
    "not empty" for bin packing).
    """
    walk = _Walk(request, free, allocatable, used, score_device)
    result = _from_scope(walk, root, 0, 0)
    return result.minors if result is not None else None
