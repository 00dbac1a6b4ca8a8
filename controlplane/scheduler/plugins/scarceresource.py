"""ScarceResourceAvoidance (score): keep nodes with scarce resources (GPUs ...) for the pods
that ask for them (Koordinator's ``plugins/scarceresourceavoidance``).

``diff`` is the resource types the node has (allocatable above zero) that the pod does
not request, ``scarce`` those of ``diff`` listed in the args' ``resources``; the score is
100 when either is empty, else ``(|diff| - |scarce|) * 100 / |diff|``. Not normalized.

Nodes share few distinct sets of resource types, so the rows are grouped by their set and
each group scores once per pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.kernel.twin import MAX_NODE_SCORE, NO_NORMALIZE, Extra
from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.interface import rows_mask
from controlplane.scheduler.podinfo import PodInfo

NAME = "ScarceResourceAvoidance"


@dataclass(frozen=True)
class ScarceArgs:
    resources: frozenset[str]


def scarce_args(raw: Mapping[str, Any] | None, path: str = NAME) -> ScarceArgs:
    """ScarceResourceAvoidanceArgs: ``resources``, the scarce resource names."""
    raw = raw or {}
    unknown = set(raw) - {"apiVersion", "kind", "resources"}
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {sorted(unknown)}")
    listed = raw.get("resources") or []
    if not isinstance(listed, list) or not all(isinstance(n, str) and n for n in listed):
        raise ArgsError(f"{path}.resources: must be a list of resource names")
    return ScarceArgs(frozenset(listed))


def _node_types(node: NodeInfo) -> frozenset[str]:
    """The resource types the node has (``pods`` is not a resource the scheduler keeps here)."""
    return frozenset(name for name, value in node.allocatable.items() if value > 0)


def avoidance_score(node_types: frozenset[str], requested: frozenset[str], scarce: frozenset[str]) -> int:
    diff = node_types - requested
    hit = diff & scarce
    if not diff or not hit:
        return MAX_NODE_SCORE
    return (len(diff) - len(hit)) * MAX_NODE_SCORE // len(diff)


class ScarceResourceAvoidance:
    NAME = NAME
    reverse = False

    def __init__(self, args: ScarceArgs | None = None) -> None:
        self.args = args or scarce_args(None)
        self._generation = -1
        #: the nodes' resource-type sets and the rows holding each (bit sets)
        self._groups: dict[frozenset[str], int] = {}

    def _grouped(self, cluster: Cluster) -> dict[frozenset[str], int]:
        if self._generation != cluster.generation:
            groups: dict[frozenset[str], int] = {}
            for info in cluster.nodes.values():
                types = _node_types(info)
                groups[types] = groups.get(types, 0) | (1 << info.row)
            self._groups, self._generation = groups, cluster.generation
        return self._groups

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        requested = frozenset(name for name, value in pod.requests.items() if value > 0)
        by_score: dict[int, int] = {}
        for types, rows in self._grouped(cluster).items():
            score = avoidance_score(types, requested, self.args.resources)
            if score:
                by_score[score] = by_score.get(score, 0) | rows
        if not by_score:
            return None
        n = cluster.table.count
        return Extra(
            NAME,
            weight,
            False,
            [(rows_mask(rows, n), score) for score, rows in by_score.items()],
            NO_NORMALIZE,
        )

    def raw_score(self, pod: PodInfo, node: NodeInfo) -> int:
        requested = frozenset(name for name, value in pod.requests.items() if value > 0)
        return avoidance_score(_node_types(node), requested, self.args.resources)

    def window_scores(self, pod: PodInfo, cluster: Cluster, rows: Sequence[int]) -> list[int]:
        """The final scores of ``rows`` (``simulate``: no normalization)."""
        by_row = cluster.by_row
        return [self.raw_score(pod, info) if (info := by_row[row]) is not None else 0 for row in rows]
