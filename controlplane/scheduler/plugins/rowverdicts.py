"""What NodeNUMAResource and DeviceShare keep per pod shape: the pod's parsed request
(:class:`PodShapes`), and per node its verdict (:class:`RowVerdicts`), since their node
check is Python work (a trial CPU or device allocation).

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
from controlplane.scheduler.podinfo import PodInfo

MAX_SHAPES = 64
#: parsed requests kept at once; past it they are all dropped
MAX_REQUESTS = 256

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
#: a node's verdict for a shape: (passes, raw score)
Verdict = tuple[bool, int]


class PodShapes(Generic[K, V]):
    """A plug-in's parsed request of a pod, which depends on the pod's shape alone (``shape``
    of the record): parsed once per shape (``parse``), and the last pod's kept apart, as the
    points of one cycle ask for the same pod in turn."""

    def __init__(self, shape: Callable[[PodInfo], K], parse: Callable[[PodInfo, K], V]) -> None:
        self._shape = shape
        self._parse = parse
        self._parsed: dict[K, V] = {}
        self._last: tuple[PodInfo, K, V] | None = None

    def get(self, pod: PodInfo) -> tuple[K, V]:
        last = self._last
        if last is not None and last[0] is pod:
            return last[1], last[2]
        key = self._shape(pod)
        if key in self._parsed:
            value = self._parsed[key]
        else:
            value = self._parse(pod, key)
            if len(self._parsed) >= MAX_REQUESTS:
                self._parsed.clear()
            self._parsed[key] = value
        self._last = (pod, key, value)
        return key, value


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
