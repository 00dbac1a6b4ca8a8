"""DeviceShare scoring: LeastAllocated / MostAllocated over weighted device resources.

A device (or a node's devices summed) is scored per configured resource the devices have:
``requested = total - free + pod request`` (just ``total`` when free exceeds it), then
LeastAllocated gives ``(total - requested) x 100 / total`` (0 when over) and MostAllocated
``min(requested, total) x 100 / total``; the weighted mean is taken with integer division.
A node's score is the sum over the pod's device types (so it can exceed 100 before the
framework's normalization, :func:`normalize_scores`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from controlplane.scheduler.resourcescore import MAX_NODE_SCORE, least_requested_score, most_requested_score
from koordinator.api.extension.resources import FPGA, GPU_MEMORY, GPU_MEMORY_RATIO, RDMA

__all__ = [
    "DEFAULT_SCORING_RESOURCES",
    "MAX_NODE_SCORE",
    "DeviceScorer",
    "ScoringStrategy",
    "least_requested_score",
    "most_requested_score",
    "normalize_scores",
]


#: Default ``scoringStrategy.resources`` of DeviceShareArgs (every weight 1).
DEFAULT_SCORING_RESOURCES: dict[str, int] = {GPU_MEMORY_RATIO: 1, GPU_MEMORY: 1, RDMA: 1, FPGA: 1}


class ScoringStrategy(StrEnum):
    LEAST_ALLOCATED = "LeastAllocated"
    MOST_ALLOCATED = "MostAllocated"


def _requested(total: int, free: int, pod: int) -> int:
    return total - free + pod if total >= free else total


@dataclass(frozen=True)
class DeviceScorer:
    """The configured strategy and resource weights (``DeviceShareArgs.scoringStrategy``)."""

    strategy: ScoringStrategy = ScoringStrategy.LEAST_ALLOCATED
    weights: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_SCORING_RESOURCES))

    def _combine(self, requested: Mapping[str, int], allocatable: Mapping[str, int]) -> int:
        one = (
            least_requested_score
            if self.strategy == ScoringStrategy.LEAST_ALLOCATED
            else most_requested_score
        )
        score = weight_sum = 0
        for name, value in requested.items():
            weight = self.weights[name]
            score += one(value, allocatable[name]) * weight
            weight_sum += weight
        return score // weight_sum if weight_sum else 0

    def score_device(
        self, request: Mapping[str, int], total: Mapping[str, int], free: Mapping[str, int]
    ) -> int:
        """One device's score for a per-device request."""
        requested: dict[str, int] = {}
        allocatable: dict[str, int] = {}
        for name in self.weights:
            capacity = total.get(name, 0)
            if capacity == 0:
                continue
            allocatable[name] = capacity
            requested[name] = _requested(capacity, free.get(name, 0), request.get(name, 0))
        return self._combine(requested, allocatable)

    def score_node(
        self,
        request: Mapping[str, int],
        totals: Mapping[int, Mapping[str, int]],
        frees: Mapping[int, Mapping[str, int]],
    ) -> int:
        """A device type's score on a node: the devices' totals and frees summed first."""
        requested: dict[str, int] = {}
        allocatable: dict[str, int] = {}
        for name in self.weights:
            capacity = sum(resources.get(name, 0) for resources in totals.values())
            if capacity == 0:
                continue
            free = sum(resources.get(name, 0) for resources in frees.values())
            allocatable[name] = capacity
            requested[name] = _requested(capacity, free, request.get(name, 0))
        return self._combine(requested, allocatable)


def normalize_scores(scores: Sequence[int], *, reverse: bool = False) -> list[int]:
    """The framework's default normalization: the best node gets 100, the rest pro rata."""
    highest = max(scores, default=0)
    if highest == 0:
        return [MAX_NODE_SCORE if reverse else score for score in scores]
    result = [MAX_NODE_SCORE * score // highest for score in scores]
    return [MAX_NODE_SCORE - score for score in result] if reverse else result
