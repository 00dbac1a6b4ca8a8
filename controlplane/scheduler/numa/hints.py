"""NUMA topology hints and how the topology manager merges them (upstream
``frameworkext/topologymanager``: ``policy.go``, ``policy_best_effort.go``,
``policy_restricted.go``, ``policy_single_numa_node.go``; kubelet's topology manager with
Koordinator's scores and ``singleNUMANodeExclusive``).

A hint is a set of NUMA nodes (``None``: no preference) with ``preferred``, ``unsatisfied``
and a ``score``. Every provider gives, per resource, the hints it could satisfy; the merge
takes one hint per provider and resource in every combination, intersects them and keeps the
best: preferred over not, then the narrower set (fewer nodes, then the lower bitmask), and
among sets of equal size the higher summed score when the narrower rule does not already
decide. A merged hint that would break the pod's ``Required`` NUMA exclusivity is not
preferred.

* BestEffort always admits; an unsatisfied best hint becomes "all NUMA nodes".
* Restricted admits only a preferred best hint; a resource no provider can place rejects
  with ``Unsatisfied NUMA <resource>``, an unaligned result with ``Unaligned NUMA Hint cause
  <summary>`` (resource summaries joined by `` & ``).
* SingleNUMANode considers only one-node (or no-preference) preferred hints; a best hint
  spanning all nodes becomes "no preference"; summaries are joined by ``,``.

Upstream walks each provider's resources in Go map order (random); here resources are taken
in name order, which fixes the order of reasons and of equal-score ties.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from controlplane.scheduler.numa.status import unaligned_numa_hint, unsatisfied_numa_resource

__all__ = [
    "NUMA_EXCLUSIVE_PREFERRED",
    "NUMA_EXCLUSIVE_REQUIRED",
    "NUMA_POLICY_BEST_EFFORT",
    "NUMA_POLICY_NONE",
    "NUMA_POLICY_RESTRICTED",
    "NUMA_POLICY_SINGLE_NUMA_NODE",
    "MergeResult",
    "NUMATopologyHint",
    "bitmask_string",
    "check_exclusive_policy",
    "is_narrower",
    "iterate_masks",
    "merge_hints",
]

NUMA_POLICY_NONE = ""
NUMA_POLICY_BEST_EFFORT = "BestEffort"
NUMA_POLICY_RESTRICTED = "Restricted"
NUMA_POLICY_SINGLE_NUMA_NODE = "SingleNUMANode"
NUMA_EXCLUSIVE_REQUIRED = "Required"
NUMA_EXCLUSIVE_PREFERRED = "Preferred"
_SINGLE = "single"
_SHARED = "shared"

Providers = Sequence[Mapping[str, Sequence["NUMATopologyHint"] | None]]


@dataclass(frozen=True, slots=True)
class NUMATopologyHint:
    """A NUMA affinity (``None``: any node will do) and how good it is."""

    affinity: frozenset[int] | None = None
    unsatisfied: bool = False
    preferred: bool = False
    score: int = 0

    def __str__(self) -> str:
        return f"{{{bitmask_string(self.affinity)} preferred={self.preferred} score={self.score}}}"


@dataclass(frozen=True, slots=True)
class MergeResult:
    """The best hint, whether the pod is admitted, and the rejection reasons."""

    hint: NUMATopologyHint
    admit: bool
    reasons: tuple[str, ...] = ()


def _value(nodes: Iterable[int]) -> int:
    return sum(1 << node for node in nodes)


def bitmask_string(nodes: Iterable[int] | None) -> str:
    """A NUMA set written as the bitmask's ``%v`` (``"01"`` is node 0, ``"10"`` node 1, padded to
    an even width); ``None`` reads ``<nil>``."""
    if nodes is None:
        return "<nil>"
    value = _value(nodes)
    for shift in range(62, 0, -2):
        if value > (1 << shift):
            return format(value, f"0{shift + 2}b")
    return format(value, "02b")


def is_narrower(a: frozenset[int], b: frozenset[int]) -> bool:
    """Fewer NUMA nodes, or as many with a lower bitmask (``IsNarrowerThan``)."""
    if len(a) == len(b):
        return _value(a) < _value(b)
    return len(a) < len(b)


def iterate_masks(numa_nodes: Sequence[int]) -> Iterable[frozenset[int]]:
    """Every non-empty subset, smallest first, each size in list order (``IterateBitMasks``)."""
    for size in range(1, len(numa_nodes) + 1):
        for combination in itertools.combinations(numa_nodes, size):
            yield frozenset(combination)


def check_exclusive_policy(
    hint: NUMATopologyHint, exclusive_policy: str, numa_node_status: Sequence[str]
) -> bool:
    """Whether ``hint`` respects ``singleNUMANodeExclusive=Required``: a multi-node hint may not use
    a NUMA node held by single-node pods, a one-node hint may not use a shared one. A hint
    without affinity never passes. A NUMA node beyond ``numa_node_status`` counts as idle."""
    if hint.affinity is None:
        return False
    if exclusive_policy != NUMA_EXCLUSIVE_REQUIRED:
        return True

    def status(node: int) -> str:
        return numa_node_status[node] if 0 <= node < len(numa_node_status) else "idle"

    if len(hint.affinity) > 1:
        return all(status(node) != _SINGLE for node in hint.affinity)
    return bool(hint.affinity) and status(min(hint.affinity)) != _SHARED


def _merge_permutation(
    numa_nodes: Sequence[int], permutation: Sequence[NUMATopologyHint]
) -> NUMATopologyHint:
    preferred = True
    satisfied = True
    affinities: list[frozenset[int]] = []
    for hint in permutation:
        if hint.affinity is not None:
            affinities.append(hint.affinity)
            if hint.affinity != affinities[0]:
                preferred = False
        if not hint.preferred:
            preferred = False
        if hint.unsatisfied:
            satisfied = False
    merged = frozenset(numa_nodes).intersection(*affinities)
    widest = max((len(affinity) for affinity in affinities), default=0)
    satisfied = (not affinities or widest == len(merged)) and satisfied
    return NUMATopologyHint(affinity=merged, unsatisfied=not satisfied, preferred=preferred)


def _summary(resource: str, hints: Sequence[NUMATopologyHint]) -> str:
    preferred = [bitmask_string(h.affinity) for h in hints if not h.unsatisfied and h.preferred]
    possible = [bitmask_string(h.affinity) for h in hints if not h.unsatisfied]
    return f"{resource} prefer [{' '.join(preferred)}] among [{' '.join(possible)}]"


def _filter_providers_hints(
    providers_hints: Providers,
) -> tuple[list[list[NUMATopologyHint]], list[str], list[str]]:
    all_hints: list[list[NUMATopologyHint]] = []
    reasons: list[str] = []
    summary: list[str] = []
    for hints in providers_hints:
        if not hints:
            all_hints.append([NUMATopologyHint(preferred=True)])
            continue
        for resource in sorted(hints):
            resource_hints = hints[resource]
            if resource_hints is None:
                all_hints.append([NUMATopologyHint(preferred=True)])
            elif not resource_hints:
                all_hints.append([NUMATopologyHint(unsatisfied=True, preferred=False)])
                reasons.append(unsatisfied_numa_resource(resource))
            else:
                summary.append(_summary(resource, resource_hints))
                all_hints.append(list(resource_hints))
    summary.sort()
    return all_hints, reasons, summary


def _merge_filtered(
    numa_nodes: Sequence[int],
    filtered: Sequence[Sequence[NUMATopologyHint]],
    exclusive_policy: str,
    numa_node_status: Sequence[str],
) -> NUMATopologyHint:
    best = NUMATopologyHint(affinity=frozenset(numa_nodes))
    for permutation in itertools.product(*filtered):
        merged = _merge_permutation(numa_nodes, permutation)
        affinity = merged.affinity
        if not affinity:
            continue
        if not check_exclusive_policy(merged, exclusive_policy, numa_node_status):
            merged = replace(merged, preferred=False)
        score = sum(h.score for h in permutation if h.affinity is not None and h.affinity == affinity)
        merged = replace(merged, score=merged.score + score)
        if merged.preferred and not best.preferred:
            best = merged
            continue
        if not merged.preferred and best.preferred:
            continue
        assert best.affinity is not None
        if not is_narrower(affinity, best.affinity):
            if len(affinity) == len(best.affinity) and merged.score > best.score:
                best = merged
            continue
        best = merged
    return best


def merge_hints(
    policy: str,
    numa_nodes: Sequence[int],
    providers_hints: Providers,
    exclusive_policy: str = "",
    numa_node_status: Sequence[str] = (),
) -> MergeResult:
    """Merge the providers' hints under ``policy`` (BestEffort, Restricted or SingleNUMANode).

    ``providers_hints`` holds one mapping per hint provider: resource -> hints (``None``: no
    preference for that resource; an empty list: no NUMA node can hold it); an empty mapping
    means the provider has no preference at all."""
    all_nodes = frozenset(numa_nodes)
    filtered, reasons, summary = _filter_providers_hints(providers_hints)
    if policy == NUMA_POLICY_BEST_EFFORT:
        best = _merge_filtered(numa_nodes, filtered, exclusive_policy, numa_node_status)
        if best.unsatisfied:
            best = NUMATopologyHint(affinity=all_nodes)
        return MergeResult(best, True)
    if policy == NUMA_POLICY_RESTRICTED:
        if reasons:
            return MergeResult(NUMATopologyHint(affinity=all_nodes), False, tuple(reasons))
        best = _merge_filtered(numa_nodes, filtered, exclusive_policy, numa_node_status)
        if not best.preferred:
            return MergeResult(best, False, (unaligned_numa_hint(" & ".join(summary)),))
        return MergeResult(best, True)
    if policy == NUMA_POLICY_SINGLE_NUMA_NODE:
        if reasons:
            return MergeResult(NUMATopologyHint(), False, tuple(reasons))
        single = [
            [h for h in hints if h.preferred and (h.affinity is None or len(h.affinity) == 1)]
            for hints in filtered
        ]
        best = _merge_filtered(numa_nodes, single, exclusive_policy, numa_node_status)
        if best.affinity == all_nodes:
            best = NUMATopologyHint(preferred=best.preferred)
        if not best.preferred:
            return MergeResult(best, False, (unaligned_numa_hint(",".join(summary)),))
        return MergeResult(best, True)
    raise ValueError(f"unknown NUMA topology policy {policy!r}")
