"""Per-node verdicts kept per pod shape, for plug-ins whose node check is Python work
(NodeNUMAResource's trial CPU allocation, DeviceShare's trial device allocation).

Pods of one shape (same CPU or device request, same policies) get the same answer from a
node until that node changes, so a plug-in keeps, per shape, the filter's byte mask and the
raw score of every row, and recomputes only the rows of the nodes that changed (the node
object or the pods placed on it, as the cluster tells; an allocation booked or released
there, its topology or devices reported again, as the plug-in tells). Nodes
arriving or leaving reset every shape. At most :data:`MAX_SHAPES` shapes are kept; past it
the least recently used goes.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from controlplane.scheduler.cluster import Cluster, NodeInfo

MAX_SHAPES = 64

K = TypeVar("K", bound=Hashable)
#: a node's verdict for a shape: (passes, raw score)
Verdict = tuple[bool, int]


class _Shape:
    __slots__ = ("dirty", "mask", "scores")

    def __init__(self, rows: int) -> None:
        self.mask = bytearray(rows)
        self.scores = array("q", bytes(8 * rows))
        self.dirty: set[str] = set()


class RowVerdicts(Generic[K]):
    def __init__(self, *, follow_pods: bool = True) -> None:
        """``follow_pods``: the pods placed on a node change its verdicts (NodeNUMAResource's
        score reads the node's requests); without it only the node object, and what the
        plug-in tells, do (DeviceShare's devices)."""
        self._shapes: dict[K, _Shape] = {}
        self._cluster: Cluster | None = None
        self._follow_pods = follow_pods

    def _bind(self, cluster: Cluster) -> None:
        if self._cluster is not cluster:
            self._cluster = cluster
            cluster.subscribe(self._cluster_changed)
            self._shapes.clear()

    def _cluster_changed(self, node: str | None, pod: object = None, sign: int = 0) -> None:
        if node is None:  # rows assigned or freed
            self._shapes.clear()
        elif pod is None or self._follow_pods:  # the node object (or its pods) changed
            self.touch(node)

    def touch(self, node: str) -> None:
        """The node changed: every shape recomputes its row at its next use."""
        for shape in self._shapes.values():
            shape.dirty.add(node)

    def reset(self) -> None:
        """Everything changed (arguments, a whole inventory)."""
        self._shapes.clear()

    def get(
        self, cluster: Cluster, key: K, verdict: Callable[[NodeInfo], Verdict]
    ) -> tuple[bytearray, array[int]]:
        """The mask and raw scores of every row for shape ``key`` (``verdict`` computes a
        node's), current for every node."""
        self._bind(cluster)
        shape = self._shapes.pop(key, None)
        rows = cluster.table.count
        if shape is None or len(shape.mask) != rows:
            if len(self._shapes) >= MAX_SHAPES:
                del self._shapes[next(iter(self._shapes))]
            shape = _Shape(rows)
            nodes = list(cluster.nodes.values())
        else:
            nodes = [info for name in shape.dirty if (info := cluster.nodes.get(name)) is not None]
        shape.dirty.clear()
        for info in nodes:
            passes, score = verdict(info)
            shape.mask[info.row] = passes
            shape.scores[info.row] = score
        self._shapes[key] = shape  # most recently used last
        return shape.mask, shape.scores
