"""The scheduler: informers feed the cluster and the queue; one loop runs scheduling cycles;
binding runs beside it, bounded.

* **Informers.** Pods become compact :class:`~controlplane.scheduler.podinfo.PodInfo`
  records (never decoded dicts); pods in phase Succeeded or Failed are not watched, as
  upstream. A pending pod of one of our profiles goes to the queue; a bound pod counts on
  its node (confirming an assumed one). Everything else the plug-ins read (nodes,
  namespaces, PodDisruptionBudgets, storage) comes through
  :class:`~controlplane.scheduler.informers.ClusterFeed`. Changes become cluster events
  for the queue.
* **A cycle** pops a pod, runs its profile's framework, and on success *assumes* the pod
  on the node (the next cycle already sees it), runs Reserve and Permit, and hands it to a
  binding task; it never awaits.
* **Binding** waits on Permit when a plug-in asked it to, then runs PreBind, Bind and
  PostBind, at most ``bind_concurrency`` at once; a rejection or failure unreserves,
  forgets the assumed pod and sends it back to the queue. The ``Scheduled`` Event says
  where it went.
* **No fit**: the pod goes back to the queue (moved on again by the events its rejecting
  plug-ins registered), gets a ``FailedScheduling`` Event with upstream's text, and its
  ``PodScheduled`` condition (a reserve pod: its Reservation's ``Scheduled`` condition) says
  ``Unschedulable`` with that message. When preemption
  found a node, the victims are deleted and the pod is nominated to it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

from controlplane.scheduler.binding import PointError
from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.framework import Framework, ScheduleResult
from controlplane.scheduler.informers import ClusterFeed
from controlplane.scheduler.metrics import SCHEDULED, UNSCHEDULABLE, SchedulerMetrics
from controlplane.scheduler.plugins.defaultpreemption import Candidate
from controlplane.scheduler.plugins.interface import CycleState, Handle
from controlplane.scheduler.podinfo import POD_FIELD_SELECTOR, PodInfo, pod_info, refresh_pod_info
from controlplane.scheduler.queue import (
    ASSIGNED_POD_ADD,
    ASSIGNED_POD_DELETE,
    ASSIGNED_POD_LABEL,
    QueuedPod,
    SchedulingQueue,
)
from controlplane.scheduler.registry import BIND, REGISTRY, plugin_events
from controlplane.scheduler.reservation import lifecycle as reservation_lifecycle
from controlplane.scheduler.waiting import WaitingPod, WaitingPods
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient, PatchType
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.errors import KubeError, NotFoundError
from koordinator.kube.events import NORMAL, WARNING, EventQueue, EventRecorder
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.informer.informer import Tombstone

log = logging.getLogger(__name__)

DEFAULT_BIND_CONCURRENCY = 16
#: cycles between yields to the event loop (informers and binders run in between), and
#: the most time the loop keeps it (preemption cycles take milliseconds each)
CYCLES_PER_YIELD = 16
YIELD_AFTER_S = 0.002


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
        #: the Events, written by a task of :meth:`run` so that no cycle or binding waits on them
        self.events = EventQueue(recorder) if recorder is not None else None
        self._events_task: asyncio.Task[None] | None = None
        self.clock = clock
        self.cluster = Cluster()
        self.frameworks = {
            p.scheduler_name: Framework(
                p,
                self.cluster,
                percentage=config.percentage_of_nodes_to_score,
                seed=seed,
                metrics=self.metrics,
                gates=config.feature_gates,
            )
            for p in config.profiles
        }
        self.queue = SchedulingQueue(
            plugin_events(),
            clock=clock.monotonic,
            initial_backoff=config.pod_initial_backoff_seconds,
            max_backoff=config.pod_max_backoff_seconds,
            gate=self._gate,
        )
        #: pods a Permit plug-in told to wait, by UID
        self.waiting = WaitingPods()
        handle = Handle(self.waiting, self.queue.on_event, self)
        for framework in self.frameworks.values():
            framework.bind_handle(handle)
        #: the profiles with plug-ins told of every pod (gangs, quotas)
        self._pod_listeners = [fw for fw in self.frameworks.values() if fw.pod_listeners]
        #: pending pods nominated to a node (upstream's nominator): key -> (node, pod)
        self.nominated: dict[str, tuple[str, PodInfo]] = {}
        #: pod key -> node, while its binding is in flight
        self.assumed: dict[str, str] = {}
        #: the plug-ins a placed pod's arrival or label change may help (PodTopologySpread,
        #: InterPodAffinity), and the queued pods they rejected last: those events go to the
        #: queue only while some pod waits on them (every binding raises one)
        self._pod_event_plugins = frozenset(
            name
            for name, events in plugin_events().items()
            if any(ASSIGNED_POD_ADD.matches(e) or ASSIGNED_POD_LABEL.matches(e) for e in events)
        )
        self._waiting_on_pods: set[str] = set()
        self._binding = asyncio.Semaphore(bind_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self.bound = 0
        self.bind_failures = 0

    # --- informers -----------------------------------------------------------------------

    def attach(self, factory: InformerFactory) -> None:
        """Register the scheduler's consumers on ``factory``'s shared informers: its own
        for pods, and the cluster's for everything else the plug-ins read."""
        factory.informer(res.PODS, field_selector=POD_FIELD_SELECTOR).add_consumer(
            _pod_record,
            refresh=_pod_record,
            name="scheduler",
            on_add=self._pod_added,
            on_update=self._pod_updated,
            on_delete=self._pod_deleted,
        )
        for framework in self.frameworks.values():
            for name, plugin in framework.plugins.items():
                attach = getattr(plugin, "attach", None)
                if callable(attach):  # plug-ins that follow objects of their own (PodGroups)
                    attach(factory, f"scheduler/{framework.profile.scheduler_name}/{name}")
        feeds = frozenset(
            feed for fw in self.frameworks.values() for name in fw.enabled for feed in REGISTRY[name].feeds
        )
        ClusterFeed(self.cluster, self.queue).attach(factory, feeds)

    # --- reserve pods ---------------------------------------------------------------------

    def add_reserve_pod(self, pod: PodInfo) -> None:
        """Queue a reserve pod (``pod.reservation`` set: a Reservation's stand-in, which the
        plug-in owning reservations feeds in); once bound by that plug-in's Bind it is
        placed like any pod until :meth:`remove_reserve_pod`."""
        if not pod.reservation:
            raise ValueError(f"{pod.key} is not a reserve pod")
        if pod.node_name:
            self.cluster.place(pod, pod.node_name)
        elif pod.key not in self.assumed:
            self.queue.add(pod)

    def remove_reserve_pod(self, key: str) -> None:
        """The Reservation is gone (or was turned into the pod it reserved for)."""
        self._pod_deleted(self.cluster.placed[key][2] if key in self.cluster.placed else None)
        self.queue.delete(key)

    def _gate(self, pod: PodInfo) -> tuple[str, str] | None:
        framework = self.frameworks.get(pod.scheduler_name)
        return framework.points.gate(pod) if framework is not None else None

    def _nominate(self, pod: PodInfo, node: str) -> None:
        if node:
            self.nominated[pod.key] = (node, pod)
        else:
            self.nominated.pop(pod.key, None)

    def _ours(self, pod: PodInfo) -> bool:
        return pod.scheduler_name in self.frameworks

    def _tell_plugins(self, old: PodInfo | None, new: PodInfo | None) -> None:
        for framework in self._pod_listeners:
            framework.on_pod(old, new)

    def _pod_added(self, pod: PodInfo | None) -> None:
        if pod is None:
            return
        if self._pod_listeners:
            self._tell_plugins(None, pod)
        if pod.node_name:
            assumed = self.assumed.pop(pod.key, None) is not None
            self.nominated.pop(pod.key, None)
            previous = self.cluster.placed.get(pod.key)
            self.cluster.place(pod, pod.node_name)
            self.queue.delete(pod.key)
            self._waiting_on_pods.discard(pod.key)
            if self._waiting_on_pods:
                if previous is None or assumed:
                    self.queue.on_event(ASSIGNED_POD_ADD)
                elif previous[2].labels != pod.labels:
                    self.queue.on_event(ASSIGNED_POD_LABEL)
        elif self._ours(pod) and pod.key not in self.assumed:
            self._nominate(pod, pod.nominated_node)
            self.queue.add(pod)

    def _pod_updated(self, old: PodInfo | None, new: PodInfo | None) -> None:
        if new is None:
            return
        if self._pod_listeners:
            self._tell_plugins(old, new)
        if new.node_name:
            placed = self.cluster.placed.get(new.key)
            if placed is not None and placed[2] == new and new.key not in self.assumed:
                return  # a status the record does not keep (the kubelet's): nothing to redo
            self._pod_added(new)
        elif self._ours(new) and new.key not in self.assumed:
            node = new.nominated_node
            if not node and (old is None or not old.nominated_node) and new.key in self.nominated:
                # an update from before our nominatedNodeName patch landed: the nomination
                # made in memory stands (upstream's updateNominatedPod)
                node = self.nominated[new.key][0]
            self._nominate(new, node)
            self.queue.update(new)

    def _pod_deleted(self, pod: PodInfo | Tombstone[PodInfo | None] | None) -> None:
        key = pod.key if isinstance(pod, (Tombstone, PodInfo)) else None
        if key is None:
            return
        if self._pod_listeners:
            last = pod.last if isinstance(pod, Tombstone) else pod
            if last is not None:
                self._tell_plugins(last, None)
        self.queue.delete(key)
        self.nominated.pop(key, None)
        self._waiting_on_pods.discard(key)
        node = self.assumed.pop(key, None)
        placed = self.cluster.placed.get(key)
        if node is not None and placed is not None:
            waiting = self.waiting.get(placed[2].uid)
            if waiting is not None:
                waiting.reject("", "the pod was deleted while waiting on Permit")
            self._forget_hooks(placed[2], node)
        if placed is not None:
            self.cluster.unplace(key)
            self.queue.on_event(ASSIGNED_POD_DELETE)

    # --- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        """Schedule until cancelled; flushes the queue's backoff and leftovers as upstream."""
        self.metrics.record_pending(self.queue.pending())
        flusher = asyncio.create_task(self._flush_loop(), name="scheduler-queue-flush")
        if self.events is not None:
            self._events_task = asyncio.create_task(self.events.run(), name="scheduler-events")
        controllers = [
            asyncio.create_task(controller(self.client), name=f"scheduler-{name}-controller")
            for framework in self.frameworks.values()
            for name, plugin in framework.plugins.items()
            if callable(controller := getattr(plugin, "controller", None))
        ]
        try:
            while True:
                await self.queue.wait()
                started = time.perf_counter()
                for _ in range(CYCLES_PER_YIELD):
                    qp = self.queue.pop()
                    if qp is None:
                        break
                    self.schedule_one(qp)
                    if time.perf_counter() - started > YIELD_AFTER_S:
                        break
                await asyncio.sleep(0)
        finally:
            flusher.cancel()
            events, self._events_task = self._events_task, None
            background = [flusher, *controllers, *([events] if events is not None else [])]
            for task in [*background, *self._tasks]:
                task.cancel()
            await asyncio.gather(*background, *self._tasks, return_exceptions=True)

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
        nominated = self.nominated.get(pod.key)
        if nominated is not None and nominated[0] != pod.nominated_node:
            # nominated in memory, before the informer brought back our patch
            pod = dataclasses.replace(pod, nominated_node=nominated[0])
        result = framework.schedule(pod, self.nominated.values() if self.nominated else ())
        outcome = SCHEDULED if result.node is not None else UNSCHEDULABLE
        self.metrics.of(self.metrics.schedule_attempts, outcome, pod.scheduler_name).inc()
        self.metrics.of(self.metrics.attempt_duration, outcome, pod.scheduler_name).observe(
            self.clock.monotonic() - started
        )
        if result.rejected_by & self._pod_event_plugins:
            self._waiting_on_pods.add(pod.key)
        else:
            self._waiting_on_pods.discard(pod.key)
        if result.node is None:
            self.queue.failed(qp, result.rejected_by, cycle)
            self._spawn(self._report_unschedulable(pod, result.message))
            if result.clears_nomination and self.nominated.pop(pod.key, None) is not None:
                self._spawn(self._write_nomination(pod, None))
            if result.preemption is not None:
                # nominated at once, so that the next cycles leave it the room its victims
                # free; it waits for them to go rather than preempting again
                self._nominate(pod, result.preemption.node)
                self.cluster.evicting.update(v.key for v in result.preemption.victims)
                self._spawn(self._preempt(pod, result.preemption))
            return result
        self.metrics.of(self.metrics.pod_scheduling_sli_duration, str(qp.attempts)).observe(
            self.clock.monotonic() - qp.initial
        )
        node = result.node
        self.nominated.pop(pod.key, None)
        state: CycleState = {}
        self.cluster.place(pod, node)
        self.assumed[pod.key] = node
        refused, permit = framework.points.reserve_and_permit(
            state, pod, node, functools.partial(self._observed, pod)
        )
        if refused is not None:
            self._forget(pod, node)
            self.queue.failed(qp, {refused.plugin}, cycle)
            self._spawn(self._report_unschedulable(pod, refused.message))
            return ScheduleResult(pod.key, None, refused.message, rejected_by=frozenset({refused.plugin}))
        self.queue.done(pod.key)
        waiting = None
        if permit.waits:
            waiting = WaitingPod(pod, node, permit.waits)
            self.waiting.add(waiting)
        self._spawn(self._bind(qp, node, state, cycle, waiting))
        return result

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- binding and reporting -----------------------------------------------------------

    def _still_assumed(self, pod: PodInfo, node: str) -> bool:
        return self.assumed.get(pod.key) == node

    def _forget(self, pod: PodInfo, node: str) -> None:
        """Forget an assumed pod: off its node, and Koordinator's ForgetPod hooks."""
        self.waiting.remove(pod.uid)
        if self.assumed.pop(pod.key, None) is not None:
            self.cluster.unplace(pod.key)
            self._forget_hooks(pod, node)

    def _forget_hooks(self, pod: PodInfo, node: str) -> None:
        framework = self.frameworks.get(pod.scheduler_name)
        if framework is not None:
            framework.points.forget(pod, node)

    async def _bind(
        self, qp: QueuedPod, node: str, state: CycleState, cycle: int, waiting: WaitingPod | None
    ) -> None:
        """The binding cycle: wait on Permit, then PreBind, Bind and PostBind. A rejection
        sends the pod back as unschedulable, an error with a backoff; either unreserves it
        and forgets the assumed pod first (a pod deleted meanwhile is only unreserved)."""
        pod = qp.pod
        points = self.frameworks[pod.scheduler_name].points
        if waiting is not None:
            started = self.clock.monotonic()
            rejected = await waiting.wait()
            self.metrics.of(
                self.metrics.permit_wait_duration, "Success" if rejected is None else "Unschedulable"
            ).observe(self.clock.monotonic() - started)
            self.waiting.remove(pod.uid)
            if rejected is not None:
                points.unreserve(state, pod, node)
                if self._still_assumed(pod, node):
                    self._forget(pod, node)
                    self.queue.retry(qp, rejected_by={rejected[0]}, cycle=cycle)
                    await self._report_unschedulable(pod, rejected[1])
                return
        async with self._binding:
            started = self.clock.monotonic()
            try:
                if not self._still_assumed(pod, node):
                    raise PointError(BIND, "the pod was deleted before binding")
                await points.pre_bind(self.client, state, pod, node)
                self._observe(pod, "PreBind", "Success", started)
                started = self.clock.monotonic()
                await points.bind(self.client, state, pod, node)
            except (KubeError, PointError) as err:
                self._observe(pod, "Bind", "Error", started)
                points.unreserve(state, pod, node)
                if not self._still_assumed(pod, node):
                    return
                self.bind_failures += 1
                log.warning("binding %s to %s failed: %s", pod.key, node, err)
                self._forget(pod, node)
                if not isinstance(err, NotFoundError):  # gone: deleted meanwhile
                    self.queue.retry(qp)
                return
        self._observe(pod, "Bind", "Success", started)
        if pod.reservation:
            # no Pod object will come back bound: the reserve pod stays placed as it is
            self.assumed.pop(pod.key, None)
        started = self.clock.monotonic()
        points.post_bind(state, pod, node)
        self._observe(pod, "PostBind", "Success", started)
        self.bound += 1
        if self.events is not None:
            self.events.emit(_ref(pod), NORMAL, "Scheduled", f"Successfully assigned {pod.key} to {node}")

    async def _preempt(self, pod: PodInfo, candidate: Candidate) -> None:
        """Evict the victims through the API and nominate the node for the preemptor."""
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": f"{pod.scheduler_name}: preempting to accommodate a higher priority pod",
        }

        async def evict(victim: PodInfo) -> bool:
            try:
                # as upstream: the victim says why it goes before it is deleted
                await self._patch_status(victim, {"conditions": [condition]})
                await self.client.delete(res.PODS, victim.name, victim.namespace)
            except NotFoundError:
                return True
            except KubeError as err:
                log.warning("preempting %s for %s failed: %s", victim.key, pod.key, err)
                self.cluster.evicting.discard(victim.key)  # still there: the preemptor may try again
                return False
            if self.events is not None:
                self.events.emit(
                    _ref(victim), NORMAL, "Preempted", f"Preempted by pod {pod.uid} on node {candidate.node}"
                )
            return True

        # all at once, as upstream's goroutines
        if not all(await asyncio.gather(*(evict(v) for v in candidate.victims))):
            return
        self.metrics.preemption_attempts.inc()
        self.metrics.preemption_victims.observe(len(candidate.victims))
        await self._write_nomination(pod, candidate.node)

    async def _patch_status(self, pod: PodInfo, status: Mapping[str, Any]) -> None:
        """Patch the pod's status (strategic merge: conditions merge by type, None removes a
        field, the rest stays); KubeError when it cannot be written."""
        await self.client.patch(
            res.PODS,
            pod.name,
            {"status": status},
            pod.namespace,
            patch_type=PatchType.STRATEGIC,
            subresource="status",
        )

    async def _write_nomination(self, pod: PodInfo, node: str | None) -> None:
        """``status.nominatedNodeName`` (None clears it; a reserve pod's stays in memory)."""
        if pod.reservation:
            return
        try:
            await self._patch_status(pod, {"nominatedNodeName": node})
        except KubeError as err:
            log.debug("nominatedNodeName of %s not written: %s", pod.key, err)

    def _observe(self, pod: PodInfo, point: str, status: str, started: float) -> None:
        self._observed(pod, point, status, self.clock.monotonic() - started)

    def _observed(self, pod: PodInfo, point: str, status: str, seconds: float) -> None:
        self.metrics.of(self.metrics.extension_point_duration, point, status, pod.scheduler_name).observe(
            seconds
        )

    async def _report_unschedulable(self, pod: PodInfo, message: str) -> None:
        if self.events is not None:
            self.events.emit(_ref(pod), WARNING, "FailedScheduling", message)
        if pod.reservation:
            await self._report_unschedulable_reservation(pod.reservation, message)
            return
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        try:
            await self._patch_status(pod, {"conditions": [condition]})
        except KubeError as err:
            log.debug("PodScheduled condition of %s not written: %s", pod.key, err)

    async def _report_unschedulable_reservation(self, name: str, message: str) -> None:
        """A reserve pod has no Pod object: its Reservation's Scheduled condition says
        ``Unschedulable`` with the message (the phase stays Pending), as upstream's
        scheduler writes it."""
        try:
            current = await self.client.get(res.RESERVATIONS, name)
            await self.client.replace_status(
                res.RESERVATIONS, reservation_lifecycle.set_unschedulable(current, message, self.clock.time())
            )
        except KubeError as err:
            log.debug("Scheduled condition of Reservation %s not written: %s", name, err)

    async def drain(self) -> None:
        """Wait for the bindings and reports in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        events = self._events_task
        if self.events is not None and events is not None and not events.done():
            await self.events.flush()


def _ref(pod: PodInfo) -> Mapping[str, Any]:
    """What an Event about the pod names: the pod, or a reserve pod's Reservation."""
    if pod.reservation:
        return {
            "apiVersion": res.RESERVATIONS.api_version,
            "kind": res.RESERVATIONS.kind,
            "metadata": {"name": pod.reservation, "uid": pod.uid},
        }
    return {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}}


def _pod_record(obj: Mapping[str, Any], previous: PodInfo | None = None) -> PodInfo | None:
    """The record of a pod object; of a changed one from its stored ``previous`` record
    (its spec-derived fields kept when the spec is the same)."""
    try:
        return pod_info(obj) if previous is None else refresh_pod_info(obj, previous)
    except ValueError as err:
        log.warning("pod %s ignored: %s", (obj.get("metadata") or {}).get("name"), err)
        return None
