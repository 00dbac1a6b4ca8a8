"""The scheduling queue, as upstream's ``PriorityQueue`` (``pkg/scheduler/backend/queue``).

* **activeQ**: pods ready to be tried, highest priority first, then the one queued longest
  (PrioritySort).
* **backoffQ**: pods that failed and wait out their backoff, 1 s doubled per attempt up to
  10 s (``podInitialBackoffSeconds``, ``podMaxBackoffSeconds``); :meth:`flush` moves those
  whose backoff ended to activeQ (upstream every second).
* **gated**: pods a PreEnqueue plug-in holds back (SchedulingGates); they are kept with the
  unschedulable pods and asked again when they change or an event moves them.
* **unschedulable**: pods no node fits. They leave only on a cluster event one of the
  plug-ins that rejected them registered (a node added, a pod deleted, allocatable or
  taints changed, ...), or after 5 minutes there (``flush``, upstream every 30 s). A pod
  whose cycle overlapped such an event goes to backoffQ instead, so the event is not lost.

The queue is synchronous and driven by a clock reading (:data:`koordinator.kube.clock.Now`);
the scheduler's loop awaits :meth:`wait` for work.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from controlplane.scheduler.podinfo import PodInfo
from koordinator.kube.clock import SYSTEM_CLOCK, Now

#: pods stay at most this long in unschedulable before another try
MAX_IN_UNSCHEDULABLE_S = 300.0
ACTIVE, BACKOFF, UNSCHEDULABLE, GATED = "active", "backoff", "unschedulable", "gated"
#: the PreEnqueue plug-ins of a pod's profile: None, or (the plug-in, why) when one holds it back
Gate = Callable[[PodInfo], tuple[str, str] | None]


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """What changed: ``resource`` (Node, Pod, ...) and ``action`` (Add, Delete, Update, or
    one of the node updates upstream tells apart: UpdateNodeAllocatable, UpdateNodeTaint,
    UpdateNodeLabel)."""

    resource: str
    action: str

    def matches(self, registered: ClusterEvent) -> bool:
        if registered.resource not in (self.resource, "*"):
            return False
        return registered.action in (self.action, "*") or (
            registered.action == "Update" and self.action.startswith("Update")
        )


NODE_ADD = ClusterEvent("Node", "Add")
NODE_ALLOCATABLE = ClusterEvent("Node", "UpdateNodeAllocatable")
NODE_TAINT = ClusterEvent("Node", "UpdateNodeTaint")
NODE_LABEL = ClusterEvent("Node", "UpdateNodeLabel")
ASSIGNED_POD_DELETE = ClusterEvent("Pod", "Delete")
#: a pod bound (or assumed) to a node was added, or its labels changed; a node went away
ASSIGNED_POD_ADD = ClusterEvent("Pod", "Add")
ASSIGNED_POD_LABEL = ClusterEvent("Pod", "UpdatePodLabel")
NODE_DELETE = ClusterEvent("Node", "Delete")
#: upstream's UpdatePodSchedulingGatesEliminated: a pod's last scheduling gate was removed
POD_GATES_REMOVED = ClusterEvent("Pod", "UpdatePodSchedulingGatesEliminated")
PV_ADD = ClusterEvent("PersistentVolume", "Add")
PV_UPDATE = ClusterEvent("PersistentVolume", "Update")
PVC_ADD = ClusterEvent("PersistentVolumeClaim", "Add")
PVC_UPDATE = ClusterEvent("PersistentVolumeClaim", "Update")
STORAGE_CLASS_ADD = ClusterEvent("StorageClass", "Add")
STORAGE_CLASS_UPDATE = ClusterEvent("StorageClass", "Update")
CSI_NODE_ADD = ClusterEvent("CSINode", "Add")
CSI_NODE_UPDATE = ClusterEvent("CSINode", "Update")
#: a NodeMetric (the koordlet's usage report) came, changed or went: LoadAwareScheduling's
#: ``nodemetrics.v1alpha1.slo.koordinator.sh`` event
NODE_METRIC_CHANGE = ClusterEvent("NodeMetric", "*")
#: upstream's "UnschedulableTimeout": every plug-in is interested
UNSCHEDULABLE_TIMEOUT = ClusterEvent("*", "UnschedulableTimeout")


@dataclass(slots=True)
class QueuedPod:
    pod: PodInfo
    #: when the pod entered the queue last (the PrioritySort tie-breaker)
    timestamp: float
    #: first time it was queued (for the scheduling e2e duration)
    initial: float
    attempts: int = 0
    #: plug-ins that rejected it in its last attempt
    rejected_by: frozenset[str] = frozenset()
    #: when it last failed (backoff runs from here)
    failed_at: float = 0.0
    where: str = ACTIVE
    seq: int = 0
    #: held back by a PreEnqueue plug-in (kept with the unschedulable pods)
    gated: bool = False

    @property
    def key(self) -> str:
        return self.pod.key


class _Entry(NamedTuple):
    """A heap entry, ordered as a tuple (``seq`` is unique: ``key`` never decides)."""

    sort: tuple[float, ...]
    seq: int
    key: str


class SchedulingQueue:
    def __init__(
        self,
        events: Mapping[str, Iterable[ClusterEvent]],
        *,
        clock: Now = SYSTEM_CLOCK.monotonic,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_in_unschedulable: float = MAX_IN_UNSCHEDULABLE_S,
        gate: Gate | None = None,
    ) -> None:
        #: plug-in name -> the cluster events that may make a pod it rejected schedulable
        self.events = {name: frozenset(evs) for name, evs in events.items()}
        self.clock = clock
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_in_unschedulable = max_in_unschedulable
        self.gate = gate
        self.pods: dict[str, QueuedPod] = {}
        #: the pods parked unschedulable (gated ones included), which cluster events move:
        #: an event costs the pods it may help, not the whole queue
        self._parked: dict[str, QueuedPod] = {}
        self._active: list[_Entry] = []
        self._backoff: list[_Entry] = []
        self._seq = itertools.count()
        #: scheduling cycle counter, and the cycle of the last event that moved pods
        self.cycle = 0
        self.move_request_cycle = -1
        self._wakeup = asyncio.Event()

    # --- bookkeeping ---------------------------------------------------------------------

    def _place(self, qp: QueuedPod, where: str) -> None:
        """Set where the pod is, keeping the index of parked pods."""
        qp.where = where
        if where == UNSCHEDULABLE:
            self._parked[qp.key] = qp
        elif self._parked.get(qp.key) is qp:
            del self._parked[qp.key]

    def _held(self, qp: QueuedPod) -> bool:
        """Run the PreEnqueue plug-ins: a gated pod is kept unschedulable, marked gated."""
        verdict = self.gate(qp.pod) if self.gate is not None else None
        qp.gated = verdict is not None
        if verdict is None:
            return False
        self._place(qp, UNSCHEDULABLE)
        qp.rejected_by = frozenset({verdict[0]})
        return True

    def _push_active(self, qp: QueuedPod) -> None:
        if self._held(qp):
            return
        self._place(qp, ACTIVE)
        qp.seq = next(self._seq)
        heapq.heappush(self._active, _Entry((-qp.pod.priority, qp.timestamp), qp.seq, qp.key))
        self._wakeup.set()

    def _push_backoff(self, qp: QueuedPod) -> None:
        self._place(qp, BACKOFF)
        qp.seq = next(self._seq)
        heapq.heappush(self._backoff, _Entry((self.backoff_expiry(qp),), qp.seq, qp.key))

    def _live(self, entry: _Entry, where: str) -> QueuedPod | None:
        qp = self.pods.get(entry.key)
        return qp if qp is not None and qp.where == where and qp.seq == entry.seq else None

    def backoff_duration(self, attempts: int) -> float:
        """Upstream's ``calculateBackoffDuration``: initial, doubled per further attempt, capped."""
        duration = self.initial_backoff
        for _ in range(1, attempts):
            if duration > self.max_backoff - duration:
                return self.max_backoff
            duration += duration
        return min(duration, self.max_backoff)

    def backoff_expiry(self, qp: QueuedPod) -> float:
        return qp.failed_at + self.backoff_duration(qp.attempts)

    def _backing_off(self, qp: QueuedPod, now: float) -> bool:
        return qp.attempts > 0 and self.backoff_expiry(qp) > now

    # --- informer side -------------------------------------------------------------------

    def add(self, pod: PodInfo) -> None:
        """A new pending pod (or one seen again): straight to activeQ."""
        existing = self.pods.get(pod.key)
        if existing is not None:
            self.update(pod)
            return
        now = self.clock()
        qp = QueuedPod(pod, now, now)
        self.pods[pod.key] = qp
        self._push_active(qp)

    def update(self, pod: PodInfo) -> None:
        """A pending pod changed: an unschedulable one is tried again (after its backoff)."""
        qp = self.pods.get(pod.key)
        if qp is None:
            self.add(pod)
            return
        changed = qp.pod != pod
        qp.pod = pod
        if qp.gated and changed:
            self._push_active(qp)  # PreEnqueue again: never tried, so no backoff
        elif qp.where == UNSCHEDULABLE and changed:
            self._requeue(qp, self.clock())
        elif qp.where == ACTIVE and changed:
            self._push_active(qp)  # its priority may have changed; the old entry goes stale

    def delete(self, key: str) -> None:
        """A pod deleted, or bound (it leaves the queue for good)."""
        self.pods.pop(key, None)
        self._parked.pop(key, None)

    # --- scheduler side ------------------------------------------------------------------

    def pop(self) -> QueuedPod | None:
        """The next pod to try (flushing finished backoffs first), or None."""
        self.flush_backoff()
        while self._active:
            entry = heapq.heappop(self._active)
            qp = self._live(entry, ACTIVE)
            if qp is not None:
                self._place(qp, "in-flight")
                qp.attempts += 1
                self.cycle += 1
                return qp
        self._wakeup.clear()
        return None

    async def wait(self) -> None:
        """Until activeQ may have a pod (callers then :meth:`pop`)."""
        await self._wakeup.wait()

    def failed(
        self, qp: QueuedPod, rejected_by: Iterable[str], cycle: int, *, unschedulable: bool = True
    ) -> None:
        """The pod's attempt in ``cycle`` failed: unschedulable (no node fits; ``rejected_by``
        the plug-ins that rejected it) or an error (always backoffQ)."""
        if self.pods.get(qp.key) is not qp:
            return  # deleted meanwhile
        now = self.clock()
        qp.failed_at = now
        qp.timestamp = now
        qp.rejected_by = frozenset(rejected_by)
        if not unschedulable or self.move_request_cycle >= cycle or not qp.rejected_by:
            self._push_backoff(qp)
        else:
            self._place(qp, UNSCHEDULABLE)

    def retry(self, qp: QueuedPod, rejected_by: Iterable[str] = (), cycle: int | None = None) -> None:
        """A pod that left the queue (assumed) did not bind: back, with a backoff after an
        error, or unschedulable when plug-ins (``rejected_by``, Permit) rejected it in
        ``cycle``."""
        self.pods[qp.key] = qp
        rejected = frozenset(rejected_by)
        self.failed(qp, rejected, self.cycle if cycle is None else cycle, unschedulable=bool(rejected))

    def done(self, key: str) -> None:
        """The pod was placed (assumed); it leaves the queue."""
        self.pods.pop(key, None)
        self._parked.pop(key, None)

    # --- moves ---------------------------------------------------------------------------

    def _requeue(self, qp: QueuedPod, now: float) -> None:
        if self._backing_off(qp, now):
            self._push_backoff(qp)
        else:
            self._push_active(qp)

    def _interested(self, qp: QueuedPod, event: ClusterEvent) -> bool:
        if event == UNSCHEDULABLE_TIMEOUT:
            return True
        return any(event.matches(e) for name in qp.rejected_by for e in self.events.get(name, ()))

    def on_event(self, event: ClusterEvent) -> int:
        """Move the unschedulable pods a rejecting plug-in of which cares about ``event``;
        returns how many moved. Pods in flight see it through the move request cycle."""
        now = self.clock()
        moved = 0
        for qp in list(self._parked.values()):
            if self._interested(qp, event):
                self._requeue(qp, now)
                moved += 1
        self.move_request_cycle = self.cycle
        return moved

    def flush_backoff(self) -> None:
        """Pods whose backoff ended go to activeQ."""
        now = self.clock()
        while self._backoff and self._backoff[0].sort[0] <= now:
            entry = heapq.heappop(self._backoff)
            qp = self._live(entry, BACKOFF)
            if qp is not None:
                self._push_active(qp)

    def flush_unschedulable_leftover(self) -> int:
        """Pods unschedulable for longer than the limit are tried again."""
        now = self.clock()
        moved = 0
        for qp in list(self._parked.values()):
            if now - qp.timestamp > self.max_in_unschedulable:
                self._requeue(qp, now)
                moved += 1
        return moved

    def pending(self) -> dict[str, int]:
        """``scheduler_pending_pods`` by queue."""
        counts = {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, GATED: 0}
        for qp in self.pods.values():
            if qp.gated:
                counts[GATED] += 1
            elif qp.where in counts:
                counts[qp.where] += 1
        return counts
