"""The scheduler: informers feed the cluster and the queue; one loop runs scheduling cycles;
binding runs beside it, bounded.

* **Informers.** Nodes become compact :class:`~controlplane.scheduler.cluster.NodeSpec`
  records, pods :class:`~controlplane.scheduler.podinfo.PodInfo` records (never decoded
  dicts); pods in phase Succeeded or Failed are not watched, as upstream. A pending pod
  of one of our profiles goes to the queue; a bound pod counts on its node (confirming an
  assumed one). Node and pod changes become cluster events for the queue.
* **A cycle** pops a pod, runs its profile's framework, and on success *assumes* the pod
  on the node (the next cycle already sees it) and hands it to a binder; it never awaits.
* **Binding** posts ``pods/<name>/binding`` from at most ``bind_concurrency`` tasks at once;
  a failure forgets the assumed pod and sends it back to the queue with a backoff. The
  ``Scheduled`` Event says where it went.
* **No fit**: the pod goes back to the queue (moved on again by the events its rejecting
  plug-ins registered), gets a ``FailedScheduling`` Event with upstream's text, and its
  ``PodScheduled`` condition says ``Unschedulable`` with that message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeSpec, node_spec
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.framework import Framework, ScheduleResult
from controlplane.scheduler.metrics import SCHEDULED, UNSCHEDULABLE, SchedulerMetrics
from controlplane.scheduler.plugins.defaultpreemption import Candidate
from controlplane.scheduler.podinfo import PodInfo, pod_info
from controlplane.scheduler.queue import (
    ASSIGNED_POD_DELETE,
    NODE_ADD,
    NODE_ALLOCATABLE,
    NODE_LABEL,
    NODE_TAINT,
    QueuedPod,
    SchedulingQueue,
)
from controlplane.scheduler.registry import plugin_events
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient, PatchType
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.errors import KubeError, NotFoundError
from koordinator.kube.events import NORMAL, WARNING, EventRecorder
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.informer.informer import Tombstone

log = logging.getLogger(__name__)

#: pods that can no longer be scheduled or run are not watched (upstream's pod informer)
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
DEFAULT_BIND_CONCURRENCY = 16
#: cycles between yields to the event loop (informers and binders run in between)
CYCLES_PER_YIELD = 16


class Scheduler:
    def __init__(
        self,
        client: ApiClient,
        config: SchedulerConfig,
        *,
        recorder: EventRecorder | None = None,
        clock: Clock = SYSTEM_CLOCK,
        bind_concurrency: int = DEFAULT_BIND_CONCURRENCY,
        seed: int | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.client = client
        self.metrics = metrics or SchedulerMetrics()
        self.recorder = recorder
        self.clock = clock
        self.cluster = Cluster()
        self.frameworks = {
            p.scheduler_name: Framework(
                p, self.cluster, percentage=config.percentage_of_nodes_to_score, seed=seed
            )
            for p in config.profiles
        }
        self.queue = SchedulingQueue(
            plugin_events(),
            clock=clock.monotonic,
            initial_backoff=config.pod_initial_backoff_seconds,
            max_backoff=config.pod_max_backoff_seconds,
        )
        #: pod key -> node, while its binding is in flight
        self.assumed: dict[str, str] = {}
        self._binding = asyncio.Semaphore(bind_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self.bound = 0
        self.bind_failures = 0

    # --- informers -----------------------------------------------------------------------

    def attach(self, factory: InformerFactory) -> None:
        """Register the node and pod consumers on ``factory``'s shared informers."""
        factory.informer(res.NODES).add_consumer(
            _node_record,
            name="scheduler",
            on_add=self._node_added,
            on_update=self._node_updated,
            on_delete=self._node_deleted,
        )
        factory.informer(res.PODS, field_selector=POD_FIELD_SELECTOR).add_consumer(
            _pod_record,
            name="scheduler",
            on_add=self._pod_added,
            on_update=self._pod_updated,
            on_delete=self._pod_deleted,
        )

    def _node_added(self, spec: NodeSpec | None) -> None:
        if spec is None:
            return
        self.cluster.set_node_spec(spec)
        self.queue.on_event(NODE_ADD)

    def _node_updated(self, old: NodeSpec | None, new: NodeSpec | None) -> None:
        if new is None:
            return
        self.cluster.set_node_spec(new)
        if old is None:
            self.queue.on_event(NODE_ADD)
            return
        if old.allocatable != new.allocatable or old.pods != new.pods:
            self.queue.on_event(NODE_ALLOCATABLE)
        if old.taints != new.taints or old.unschedulable != new.unschedulable:
            self.queue.on_event(NODE_TAINT)
        if old.labels != new.labels:
            self.queue.on_event(NODE_LABEL)

    def _node_deleted(self, spec: NodeSpec | Tombstone[NodeSpec | None] | None) -> None:
        name = spec.key if isinstance(spec, Tombstone) else spec.name if spec is not None else None
        if name:
            self.cluster.remove_node(name.rsplit("/", 1)[-1])

    def _ours(self, pod: PodInfo) -> bool:
        return pod.scheduler_name in self.frameworks

    def _pod_added(self, pod: PodInfo | None) -> None:
        if pod is None:
            return
        if pod.node_name:
            self.assumed.pop(pod.key, None)
            self.cluster.place(pod, pod.node_name)
            self.queue.delete(pod.key)
        elif self._ours(pod) and pod.key not in self.assumed:
            self.queue.add(pod)

    def _pod_updated(self, old: PodInfo | None, new: PodInfo | None) -> None:
        if new is None:
            return
        if new.node_name:
            self._pod_added(new)
        elif self._ours(new) and new.key not in self.assumed:
            self.queue.update(new)

    def _pod_deleted(self, pod: PodInfo | Tombstone[PodInfo | None] | None) -> None:
        key = pod.key if isinstance(pod, (Tombstone, PodInfo)) else None
        if key is None:
            return
        self.queue.delete(key)
        self.assumed.pop(key, None)
        if key in self.cluster.placed:
            self.cluster.unplace(key)
            self.queue.on_event(ASSIGNED_POD_DELETE)

    # --- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        """Schedule until cancelled; flushes the queue's backoff and leftovers as upstream."""
        self.metrics.record_pending(self.queue.pending())
        flusher = asyncio.create_task(self._flush_loop(), name="scheduler-queue-flush")
        try:
            while True:
                await self.queue.wait()
                for _ in range(CYCLES_PER_YIELD):
                    qp = self.queue.pop()
                    if qp is None:
                        break
                    self.schedule_one(qp)
                await asyncio.sleep(0)
        finally:
            flusher.cancel()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(flusher, *self._tasks, return_exceptions=True)

    async def _flush_loop(self) -> None:
        ticks = 0
        while True:
            await self.clock.sleep(1.0)
            self.queue.flush_backoff()
            self.metrics.record_pending(self.queue.pending())
            ticks += 1
            if ticks % 30 == 0:
                self.queue.flush_unschedulable_leftover()

    def schedule_one(self, qp: QueuedPod) -> ScheduleResult:
        """One scheduling cycle: place and assume, or record why not. Never awaits."""
        cycle = self.queue.cycle
        pod = qp.pod
        started = self.clock.monotonic()
        framework = self.frameworks[pod.scheduler_name]
        result = framework.schedule(pod)
        outcome = SCHEDULED if result.node is not None else UNSCHEDULABLE
        self.metrics.schedule_attempts.labels(outcome, pod.scheduler_name).inc()
        self.metrics.attempt_duration.labels(outcome, pod.scheduler_name).observe(
            self.clock.monotonic() - started
        )
        if result.node is None:
            self.queue.failed(qp, result.rejected_by, cycle)
            self._spawn(self._report_unschedulable(pod, result.message))
            if result.preemption is not None:
                self._spawn(self._preempt(pod, result.preemption))
            return result
        self.metrics.pod_scheduling_sli_duration.labels(str(qp.attempts)).observe(
            self.clock.monotonic() - qp.initial
        )
        self.cluster.place(pod, result.node)
        self.assumed[pod.key] = result.node
        self.queue.done(pod.key)
        self._spawn(self._bind(qp, result.node))
        return result

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- binding and reporting -----------------------------------------------------------

    async def _bind(self, qp: QueuedPod, node: str) -> None:
        pod = qp.pod
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        async with self._binding:
            started = self.clock.monotonic()
            try:
                await self.client.create_subresource(res.PODS, pod.name, "binding", body, pod.namespace)
            except KubeError as err:
                self._observe_bind(pod, "Error", started)
                self.bind_failures += 1
                log.warning("binding %s to %s failed: %s", pod.key, node, err)
                # forget the assumed pod; try again later unless it is gone (deleted meanwhile)
                if self.assumed.pop(pod.key, None) is not None:
                    self.cluster.unplace(pod.key)
                    if not isinstance(err, NotFoundError):
                        self.queue.retry(qp)
                return
        self._observe_bind(pod, "Success", started)
        self.bound += 1
        if self.recorder is not None:
            await self.recorder.record(
                _ref(pod), NORMAL, "Scheduled", f"Successfully assigned {pod.key} to {node}"
            )

    async def _preempt(self, pod: PodInfo, candidate: Candidate) -> None:
        """Evict the victims through the API and nominate the node for the preemptor."""
        for victim in candidate.victims:
            try:
                await self.client.delete(res.PODS, victim.name, victim.namespace)
            except NotFoundError:
                continue
            except KubeError as err:
                log.warning("preempting %s for %s failed: %s", victim.key, pod.key, err)
                return
            if self.recorder is not None:
                await self.recorder.record(
                    _ref(victim), NORMAL, "Preempted", f"Preempted by pod {pod.uid} on node {candidate.node}"
                )
        self.metrics.preemption_attempts.inc()
        self.metrics.preemption_victims.observe(len(candidate.victims))
        try:
            await self.client.patch(
                res.PODS,
                pod.name,
                {"status": {"nominatedNodeName": candidate.node}},
                pod.namespace,
                subresource="status",
            )
        except KubeError as err:
            log.debug("nominatedNodeName of %s not written: %s", pod.key, err)

    def _observe_bind(self, pod: PodInfo, status: str, started: float) -> None:
        self.metrics.extension_point_duration.labels("Bind", status, pod.scheduler_name).observe(
            self.clock.monotonic() - started
        )

    async def _report_unschedulable(self, pod: PodInfo, message: str) -> None:
        if self.recorder is not None:
            await self.recorder.record(_ref(pod), WARNING, "FailedScheduling", message)
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        try:
            # strategic merge: conditions merge by type, the others stay
            await self.client.patch(
                res.PODS,
                pod.name,
                {"status": {"conditions": [condition]}},
                pod.namespace,
                patch_type=PatchType.STRATEGIC,
                subresource="status",
            )
        except KubeError as err:
            log.debug("PodScheduled condition of %s not written: %s", pod.key, err)

    async def drain(self) -> None:
        """Wait for the bindings and reports in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _ref(pod: PodInfo) -> Mapping[str, Any]:
    return {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}}


def _node_record(obj: Mapping[str, Any]) -> NodeSpec | None:
    try:
        return node_spec(obj)
    except (ValueError, KeyError) as err:
        log.warning("node %s ignored: %s", (obj.get("metadata") or {}).get("name"), err)
        return None


def _pod_record(obj: Mapping[str, Any]) -> PodInfo | None:
    try:
        return pod_info(obj)
    except ValueError as err:
        log.warning("pod %s ignored: %s", (obj.get("metadata") or {}).get("name"), err)
        return None
