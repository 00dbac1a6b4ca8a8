"""NodeResourcesFitPlus (score): NodeResourcesFit's score with a strategy and a weight per
resource (Koordinator's ``plugins/noderesourcefitplus``).

For each resource the pod requests (more than zero) that ``resources`` configures: the
single-resource NodeResourcesFit score of its ``type`` -- LeastAllocated
``(allocatable - requested) * 100 / allocatable`` (0 when over) or MostAllocated
``min(requested, allocatable) * 100 / allocatable`` -- with ``requested`` the node's
requests plus the pod's (CPU and memory with upstream's non-zero defaults, 100m and
200 MiB, for containers that ask for none), 0 on a node without the resource; the node's
score is their weighted mean (integer division), 100 when none applies. Not normalized.

The score depends on every node's requests, which change with each placement, so it is
computed per row for each pod (a loop over the table's columns in Python: about a
microsecond per node and configured resource the pod requests).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.kernel.table import CPU, MEMORY, NodeTable, PodVector
from controlplane.scheduler.kernel.twin import MAX_NODE_SCORE, Extra
from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.interface import final_row_scores
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.resourcescore import least_requested_score, most_requested_score

NAME = "NodeResourcesFitPlus"
LEAST_ALLOCATED, MOST_ALLOCATED = "LeastAllocated", "MostAllocated"


@dataclass(frozen=True)
class ResourceStrategy:
    type: str
    weight: int


@dataclass(frozen=True)
class FitPlusArgs:
    resources: Mapping[str, ResourceStrategy]


def fit_plus_args(raw: Mapping[str, Any] | None, path: str = NAME) -> FitPlusArgs:
    """NodeResourcesFitPlusArgs (``resources``: name -> {type, weight}; no defaults)."""
    raw = raw or {}
    unknown = set(raw) - {"apiVersion", "kind", "resources"}
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {sorted(unknown)}")
    listed = raw.get("resources") or {}
    if not isinstance(listed, Mapping):
        raise ArgsError(f"{path}.resources: must be a map of resource names to {{type, weight}}")
    out = {}
    for name, item in listed.items():
        where = f"{path}.resources[{name}]"
        if not isinstance(item, Mapping) or set(item) - {"type", "weight"}:
            raise ArgsError(f"{where}: must be {{type, weight}}")
        kind = item.get("type")
        if kind not in (LEAST_ALLOCATED, MOST_ALLOCATED):
            raise ArgsError(
                f"{where}.type: Unsupported value: {kind!r}: "
                f"supported values: {LEAST_ALLOCATED}, {MOST_ALLOCATED}"
            )
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or weight <= 0:
            raise ArgsError(f"{where}.weight: Invalid value: {weight!r}: must be a positive integer")
        out[str(name)] = ResourceStrategy(str(kind), weight)
    return FitPlusArgs(out)


def resource_score(kind: str, requested: int, allocatable: int) -> int:
    if kind == MOST_ALLOCATED:
        return most_requested_score(requested, allocatable)
    return least_requested_score(requested, allocatable)


class NodeResourcesFitPlus:
    NAME = NAME
    reverse = False

    def __init__(self, args: FitPlusArgs | None = None) -> None:
        self.args = args or fit_plus_args(None)
        self._cluster: Cluster | None = None

    def _terms(self, pod: PodInfo, table: NodeTable) -> list[tuple[int, int, str, int]]:
        """(column or -1, non-zero slot or -1, type, weight) of each configured resource the pod requests."""
        terms = []
        for name, value in pod.requests.items():
            strategy = self.args.resources.get(name)
            if strategy is None or value <= 0:
                continue
            slot = 0 if name == CPU else 1 if name == MEMORY else -1
            terms.append((table.column.get(name, -1), slot, strategy.type, strategy.weight))
        return terms

    @staticmethod
    def _row(table: NodeTable, row: int, pod: PodVector, terms: list[tuple[int, int, str, int]]) -> int:
        total = weights = 0
        width = table.width
        for col, slot, kind, weight in terms:
            score = 0
            if col >= 0:
                allocatable = table.alloc[row * width + col]
                if slot >= 0:
                    requested = table.nonzero[2 * row + slot] + pod.nonzero[slot]
                else:
                    requested = table.req[row * width + col] + (pod.req[col] if col < len(pod.req) else 0)
                score = resource_score(kind, requested, allocatable)
            total += score * weight
            weights += weight
        return total // weights if weights else MAX_NODE_SCORE

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        self._cluster = cluster
        table = cluster.table
        terms = self._terms(pod, table)
        vector = table.pod_vector(pod.requests)
        row_score = self._row
        scores = array("q", (row_score(table, row, vector, terms) for row in range(table.count)))
        return final_row_scores(NAME, weight, scores)

    def raw_score(self, pod: PodInfo, node: NodeInfo) -> int:
        cluster = self._cluster
        if cluster is None:
            return 0
        table = cluster.table
        return self._row(table, node.row, table.pod_vector(pod.requests), self._terms(pod, table))

    def window_scores(self, pod: PodInfo, cluster: Cluster, rows: Sequence[int]) -> list[int]:
        """The final scores of ``rows`` (``simulate``: no normalization)."""
        table = cluster.table
        terms, vector = self._terms(pod, table), table.pod_vector(pod.requests)
        return [self._row(table, row, vector, terms) for row in rows]
