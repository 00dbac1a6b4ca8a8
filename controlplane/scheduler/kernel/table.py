"""The columnar node table the filter/score kernel reads, and what a pod asks of it.

One row per node, one column per resource, in flat row-major ``array('q')`` buffers that
both the compiled kernel (typed memoryviews) and its pure-Python twin index the same way:
``alloc[i * R + r]`` is node ``i``'s allocatable of resource ``r``. Resource 0 is CPU in
milli-cores and resource 1 is memory in bytes (the two the scheduler also tracks with
upstream's non-zero defaults for scoring); other resources (ephemeral storage, extended
resources such as ``kubernetes.io/batch-cpu``) get a column the first time a node or pod
names one. Rows of deleted nodes are masked out and reused.

:meth:`live` is the mask of rows holding a node; filters other than the kernel's own
narrow it per pod (one byte per row), and the kernel skips the rows it zeroes.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

CPU, MEMORY = "cpu", "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
#: upstream's non-zero defaults for pods that request no CPU or memory (scoring only)
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
#: distinct request sets whose vectors are kept (past it the memo starts over)
_VECTORS_KEPT = 4096

#: the compiled kernel keeps the balanced fractions on its stack
MAX_BALANCED_RESOURCES = 64
#: kernel resource strategies (NodeResourcesFit scoringStrategy.type)
LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO = 0, 1, 2


def is_scalar(name: str) -> bool:
    """Upstream's ``IsScalarResourceName``: extended, hugepages and attachable-volume resources,
    which a pod that does not request them is neither filtered nor scored on."""
    return name not in (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)


@dataclass
class PodVector:
    """A pod's requests in table order: actual (filter; balanced score) and, for CPU and
    memory, with upstream's non-zero defaults (fit score)."""

    req: array[int]  # 'q', one per resource
    nonzero: array[int]  # 'q', (cpu, memory)


@dataclass
class ScoreConfig:
    """The kernel's share of the score plug-ins: NodeResourcesFit and
    NodeResourcesBalancedAllocation, each with its resources and its plug-in weight."""

    strategy: int = LEAST_ALLOCATED
    #: per resource: its weight in NodeResourcesFit's score (0 = not scored)
    fit_weights: array[int] = field(default_factory=lambda: array("q"))
    fit_plugin_weight: int = 1
    #: RequestedToCapacityRatio's shape, utilization (0-100) and score (0-100, already scaled)
    shape_utilization: array[int] = field(default_factory=lambda: array("q"))
    shape_score: array[int] = field(default_factory=lambda: array("q"))
    #: per resource: 1 when NodeResourcesBalancedAllocation considers it
    balanced: array[int] = field(default_factory=lambda: array("B"))
    balanced_plugin_weight: int = 1


class NodeTable:
    """Nodes as rows, resources as columns; :meth:`grow` and :meth:`resource` keep every
    buffer the right size, so kernel calls never see a short one."""

    def __init__(self, resources: Iterable[str] = (CPU, MEMORY, EPHEMERAL_STORAGE)) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.resources: list[str] = []
        self.column: dict[str, int] = {}
        self.capacity = 0
        self.count = 0  # rows in use (including masked ones)
        self.alloc = array("q")
        self.req = array("q")
        self.nonzero = array("q")  # (cpu, memory) per row, non-zero requested
        self.pods_alloc = array("q")
        self.pods = array("q")
        #: 1 for a row that holds a node (other filters narrow it per pod)
        self.mask = bytearray()
        self.scalar = array("B")
        self._free: list[int] = []
        #: the compiled kernel bound to these buffers (it holds views of them, which an
        #: array[int] cannot be resized under): dropped before any buffer is resized
        self.bound: object = None
        #: pods' vectors by their requests: most pods ask for what others asked for already
        self._vectors: dict[tuple[tuple[str, int], ...], PodVector] = {}
        for name in (CPU, MEMORY, *resources):
            self.resource(name)

    @property
    def width(self) -> int:
        return len(self.resources)

    def resource(self, name: str) -> int:
        """The column of ``name``, added (zero everywhere) on first sight."""
        found = self.column.get(name)
        if found is not None:
            return found
        self.bound = None
        old = self.width
        new = old + 1
        for attr in ("alloc", "req"):
            before: array[int] = getattr(self, attr)
            after = array("q", bytes(8 * self.capacity * new))
            for row in range(self.capacity):
                after[row * new : row * new + old] = before[row * old : row * old + old]
            setattr(self, attr, after)
        self.resources.append(name)
        self.column[name] = old
        self.scalar.append(1 if is_scalar(name) else 0)
        return old

    def grow(self, rows: int) -> None:
        """Room for at least ``rows`` rows (capacity doubles)."""
        if rows <= self.capacity:
            return
        self.bound = None
        capacity = max(rows, 2 * self.capacity, 16)
        extra = capacity - self.capacity
        self.alloc.extend(array("q", bytes(8 * extra * self.width)))
        self.req.extend(array("q", bytes(8 * extra * self.width)))
        self.nonzero.extend(array("q", bytes(16 * extra)))
        self.pods_alloc.extend(array("q", bytes(8 * extra)))
        self.pods.extend(array("q", bytes(8 * extra)))
        self.mask.extend(bytes(extra))
        self.capacity = capacity

    # --- rows --------------------------------------------------------------------------

    def row(self, node: str) -> int:
        """The row of ``node``, taking a free one (or a new one) for a node not seen yet."""
        found = self.index.get(node)
        if found is not None:
            return found
        if self._free:
            row = self._free.pop()
            self.names[row] = node
        else:
            row = self.count
            self.grow(row + 1)
            self.names.append(node)
            self.count += 1
        self.index[node] = row
        return row

    def set_node(self, node: str, allocatable: Mapping[str, int], pods: int) -> int:
        """Set a node's allocatable (every resource it lists; others 0) and its pod limit."""
        for name in allocatable:
            self.resource(name)
        row = self.row(node)
        width = self.width
        base = row * width
        for col, name in enumerate(self.resources):
            self.alloc[base + col] = allocatable.get(name, 0)
        self.pods_alloc[row] = pods
        self.mask[row] = 1
        return row

    def live(self) -> bytearray:
        """A fresh mask of the rows that hold a node (the caller may narrow it)."""
        return self.mask[: self.count]

    def remove_node(self, node: str) -> None:
        row = self.index.pop(node, None)
        if row is None:
            return
        width = self.width
        base = row * width
        for col in range(width):
            self.alloc[base + col] = 0
            self.req[base + col] = 0
        self.nonzero[2 * row] = self.nonzero[2 * row + 1] = 0
        self.pods_alloc[row] = self.pods[row] = 0
        self.mask[row] = 0
        self.names[row] = ""
        self._free.append(row)

    def add_pod(self, row: int, pod: PodVector, sign: int = 1) -> None:
        """Account a pod on a row (``sign=-1`` removes it): the kernel's assume/forget."""
        width = self.width
        base = row * width
        for col in range(min(width, len(pod.req))):
            self.req[base + col] += sign * pod.req[col]
        self.nonzero[2 * row] += sign * pod.nonzero[0]
        self.nonzero[2 * row + 1] += sign * pod.nonzero[1]
        self.pods[row] += sign

    # --- pods --------------------------------------------------------------------------

    def pod_vector(self, requests: Mapping[str, int]) -> PodVector:
        """A pod's requests (CPU in milli-cores, others in units) in table order; shared
        between pods asking for the same (vectors are never changed)."""
        key = tuple(requests.items())
        found = self._vectors.get(key)
        if found is not None and len(found.req) == self.width:
            return found
        for name, value in requests.items():
            if value and name != PODS:
                self.resource(name)
        req = array("q", (requests.get(name, 0) for name in self.resources))
        cpu, memory = requests.get(CPU, 0), requests.get(MEMORY, 0)
        nonzero = array("q", (cpu or DEFAULT_MILLI_CPU_REQUEST, memory or DEFAULT_MEMORY_REQUEST))
        if len(self._vectors) >= _VECTORS_KEPT:
            self._vectors.clear()
        vector = self._vectors[key] = PodVector(req, nonzero)
        return vector

    def score_config(
        self,
        strategy: int = LEAST_ALLOCATED,
        fit_resources: Mapping[str, int] | None = None,
        balanced_resources: Iterable[str] = (CPU, MEMORY),
        *,
        fit_plugin_weight: int = 1,
        balanced_plugin_weight: int = 1,
        shape: Iterable[tuple[int, int]] = (),
    ) -> ScoreConfig:
        """The kernel's score configuration over this table's columns (resources named here
        get a column; ``shape`` is RequestedToCapacityRatio's (utilization, score 0-10))."""
        fit = dict(fit_resources or {CPU: 1, MEMORY: 1})
        balanced = set(balanced_resources)
        if len(balanced) > MAX_BALANCED_RESOURCES:
            raise ValueError(
                f"NodeResourcesBalancedAllocation takes at most {MAX_BALANCED_RESOURCES} resources"
            )
        for name in (*fit, *balanced):
            self.resource(name)
        points = list(shape)
        return ScoreConfig(
            strategy=strategy,
            fit_weights=array("q", (fit.get(name, 0) for name in self.resources)),
            fit_plugin_weight=fit_plugin_weight,
            shape_utilization=array("q", (u for u, _ in points)),
            shape_score=array("q", (s * 10 for _, s in points)),
            balanced=array("B", (1 if name in balanced else 0 for name in self.resources)),
            balanced_plugin_weight=balanced_plugin_weight,
        )
