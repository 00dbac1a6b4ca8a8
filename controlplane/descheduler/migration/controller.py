"""The MigrationController plug-in and PodMigrationJob controller (upstream's
``migration/controller.go``, ``evict.go`` and ``arbitrator``).

**As a plug-in** (Evict and Filter): :meth:`MigrationController.filter` is
:mod:`.admission`; :meth:`MigrationController.evict` then creates a PodMigrationJob (named by
a new UUID; ``koordinator.sh/evict-reason``, ``evict-trigger`` and ``job-created-by``
annotations; the default mode, TTL and delete options), or with ``dryRun`` only logs.

**Arbitration** (every ``arbitrationArgs.interval``): waiting jobs in order; a job past its
TTL fails (``Timeout``), a pod that fails a gate fails its job (``ForbiddenMigratePod``), one
over a limit keeps waiting, the others are admitted (the ``passed-arbitration``
annotation), which starts their reconcile.

**Reconcile** of an admitted job, one step (and at most one write) at a time:

* paused, or ended: nothing; past its TTL since creation: its Reservation is deleted and it
  fails (``Timeout``);
* Pending: the pod must exist (``MissingPod``, ``InvalidPodRef``); its UID is recorded, and
  the job is Running;
* EvictDirectly: the pod is evicted (:mod:`.evictor`), and once it is gone the job has
  Succeeded;
* ReservationFirst: a Reservation (:mod:`.reservation`) is created and recorded in the
  job; the job waits while it is Pending (an unschedulable one is reported and waited on
  until the TTL), fails when it expired, could not be scheduled or landed on the pod's own
  node; once scheduled, the pod is evicted; then the job waits for the replacement pod to
  be bound to the Reservation and Ready, and has Succeeded with that pod in
  ``status.podRef``. A job created for an unschedulable Pending pod succeeds once the pod
  is scheduled.

Every failure after the Reservation was created deletes it (upstream keeps it until the job
is collected). Deleting a job deletes its Reservation. Jobs older than their TTL plus 5
minutes (30 minutes without a TTL) are deleted every minute. Events use upstream's reasons
and words; successful evictions count in ``descheduler_pods_evicted``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.descheduler.lownodeload.sorting import pod_order
from controlplane.descheduler.metrics import DeschedulerMetrics
from controlplane.descheduler.migration import jobs as job_api
from controlplane.descheduler.migration.admission import Admission
from controlplane.descheduler.migration.arbitration import (
    ANNOTATION_PASSED,
    JobView,
    Limits,
    ObjectLimiters,
    is_migrating,
    order_jobs,
    passed,
)
from controlplane.descheduler.migration.args import (
    MODE_EVICT_DIRECTLY,
    NAME,
    MigrationControllerArgs,
)
from controlplane.descheduler.migration.evictor import Evictor, TooManyEvictionsError, policy_for
from controlplane.descheduler.migration.gates import GateContext, refusal
from controlplane.descheduler.migration.reservation import reservation_for
from controlplane.descheduler.migration.workloads import (
    Workload,
    controller_of,
    expected_replicas,
    is_ready,
    max_unavailable,
)
from controlplane.descheduler.nodefit import fits_any
from controlplane.reactor import Controller, Result, TemporaryError
from controlplane.reactor.tasks import cancel_and_wait
from koordinator.api.extension.constants import (
    ANNOTATION_EVICT_REASON,
    ANNOTATION_EVICT_TRIGGER,
    ANNOTATION_JOB_CREATED_BY,
)
from koordinator.api.extension.reservation import LABEL_RESERVATION_ORDER
from koordinator.api.goparse import format_duration
from koordinator.api.selectors import LabelSelector, SelectorError
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient, PatchType
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.errors import AlreadyExistsError, ApiError, ConflictError, KubeError, NotFoundError
from koordinator.kube.events import NORMAL, WARNING, EventRecorder
from koordinator.kube.informer import Consumer
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.informer.informer import Tombstone
from koordinator.kube.informer.store import index_by_controller, index_by_node_name

__all__ = ["MigrationController"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
JOB_KIND = "PodMigrationJob"
#: upstream's defaultRequeueAfter
REQUEUE_S = 3.0
SCAVENGE_EVERY_S = 60.0
#: a job is collected this long after its TTL (or after creation, without one)
COLLECT_AFTER_TTL_S = 300.0
COLLECT_WITHOUT_TTL_S = 1800.0
RESERVATION_KEY = "reservation/"
OWNER_RESOURCES = {
    ("apps", "ReplicaSet"): res.REPLICA_SETS,
    ("apps", "StatefulSet"): res.STATEFUL_SETS,
    ("batch", "Job"): res.JOBS,
}


def _pod_key_of_job(job: Any) -> list[str]:
    ref = job_api.pod_ref(job)
    return [f"{ref.get('namespace') or ''}/{ref.get('name') or ''}"] if ref.get("name") else []


def _reservation_of_job(job: Any) -> list[str]:
    name = job_api.reservation_ref(job).get("name")
    return [str(name)] if name else []


def _key(pod: Obj) -> str:
    meta = job_api.meta(pod)
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


class MigrationController:
    name = NAME

    def __init__(
        self,
        args: MigrationControllerArgs,
        client: ApiClient,
        factory: InformerFactory,
        *,
        recorder: EventRecorder,
        metrics: DeschedulerMetrics,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.args = args
        self.client = client
        self.recorder = recorder
        self.metrics = metrics
        self.clock = clock
        #: this process's jobs carry it (``koordinator.sh/job-created-by``)
        self.reconciler_uid = str(uuid.uuid4())
        try:
            self._fit_nodes = LabelSelector.parse(args.node_selector) if args.node_selector else None
        except SelectorError as err:
            raise ValueError(f"MigrationControllerArgs.nodeSelector: {err}") from None
        self.reactor = Controller(
            NAME, self.reconcile, workers=args.max_concurrent_reconciles, clock=clock, recorder=recorder
        )
        self.jobs: Consumer[Obj] = factory.informer(res.POD_MIGRATION_JOBS).add_consumer(
            name="migration-jobs",
            indexers={"pod": _pod_key_of_job, "reservation": _reservation_of_job},
            on_add=lambda job: self._on_job(job),
            on_update=lambda old, new: self._on_job(new),
            on_delete=self._on_job_deleted,
        )
        self.pods: Consumer[Obj] = factory.informer(res.PODS).add_consumer(
            name="migration-pods",
            indexers={"node": index_by_node_name, "controller": index_by_controller},
            on_update=lambda old, new: self._enqueue_jobs_of_pod(new),
            on_delete=lambda pod: self._enqueue_jobs_of_pod(pod.last if isinstance(pod, Tombstone) else pod),
        )
        self.reservations: Consumer[Obj] = factory.informer(res.RESERVATIONS).add_consumer(
            name="migration-reservations",
            on_update=lambda old, new: self.reactor.enqueue_all(self._jobs_of_reservation(new)),
        )
        self.nodes: Consumer[Obj] = factory.informer(res.NODES).add_consumer(name="migration-nodes")
        self.owners: dict[tuple[str, str], Consumer[Obj]] = {
            key: factory.informer(resource).add_consumer(name=f"migration-{resource.plural}")
            for key, resource in OWNER_RESOURCES.items()
        }
        self.evictor = Evictor(client, args.evict_qps, args.evict_burst, clock)
        self.limiters = ObjectLimiters(
            args.object_limiters,
            self.expected_replicas,
            lambda replicas: max_unavailable(replicas, args.max_migrating_per_workload),
            clock,
        )
        self.limits = Limits(
            args, self._all_jobs, self._pod_of_job, self._workload_pods, self.expected_replicas, self.limiters
        )
        self.priority_classes: Consumer[Obj] | None = None
        if args.priority_threshold_name:
            self.priority_classes = factory.informer(res.PRIORITY_CLASSES).add_consumer(
                name="migration-priorityclasses"
            )
        self.gates = GateContext(self._misfit, self.expected_replicas, self._priority_of_class)
        self.admission = Admission(args, self.gates, self.limits, self._jobs_of_pod)
        #: jobs created here that the informer has not delivered yet
        self._assumed: dict[str, Obj] = {}
        #: jobs admitted here whose annotation the informer has not delivered yet
        self._admitted: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []

    # ---- cluster views -----------------------------------------------------------------------

    def _all_jobs(self) -> list[Obj]:
        stored = self.jobs.store.values()
        names = {str(job_api.meta(j).get("name")) for j in stored}
        jobs = list(stored) + [j for name, j in self._assumed.items() if name not in names]
        return [
            {
                **j,
                "metadata": {
                    **job_api.meta(j),
                    "annotations": {**(job_api.meta(j).get("annotations") or {}), ANNOTATION_PASSED: "true"},
                },
            }
            if str(job_api.meta(j).get("name")) in self._admitted
            else j
            for j in jobs
        ]

    def _pod_of_job(self, job: Obj) -> Obj | None:
        keys = _pod_key_of_job(job)
        return self.pods.store.get(keys[0]) if keys else None

    def _workload_pods(self, workload: Workload) -> Sequence[Obj]:
        return self.pods.store.by_index("controller", workload.uid)

    def expected_replicas(self, workload: Workload) -> int:
        consumer = self.owners.get((workload.group, workload.kind))
        owner = consumer.store.get(workload.key) if consumer is not None else None
        return expected_replicas(workload, owner, len(self._workload_pods(workload)))

    def _priority_of_class(self, name: str) -> int | None:
        found = self.priority_classes.store.get(name) if self.priority_classes is not None else None
        value = found.get("value") if found is not None else None
        return value if isinstance(value, int) else None

    def pods_on_node(self, node: str) -> Sequence[Obj]:
        return self.pods.store.by_index("node", node)

    def _misfit(self, pod: Obj) -> str | None:
        nodes = [
            n
            for n in self.nodes.store.values()
            if self._fit_nodes is None or self._fit_nodes.matches(job_api.meta(n).get("labels") or {})
        ]
        return None if fits_any(pod, nodes, self.pods_on_node) is not None else "fits no other node"

    def _jobs_of_pod(self, pod: Obj) -> list[Obj]:
        return [
            j
            for j in self.jobs.store.by_index("pod", _key(pod))
            if job_api.phase(j) in ("", job_api.PHASE_PENDING, job_api.PHASE_RUNNING)
        ] + [j for j in self._assumed.values() if _pod_key_of_job(j) == [_key(pod)]]

    def _jobs_of_reservation(self, reservation: Obj) -> list[str]:
        name = str(job_api.meta(reservation).get("name") or "")
        return [str(job_api.meta(j).get("name")) for j in self.jobs.store.by_index("reservation", name)]

    # ---- informer events ---------------------------------------------------------------------

    def _on_job(self, job: Obj) -> None:
        name = str(job_api.meta(job).get("name") or "")
        self._assumed.pop(name, None)
        if passed(job) or job_api.phase(job) in job_api.TERMINAL:
            self._admitted.discard(name)
        if (
            not self.args.arbitration_enabled
            or passed(job)
            or job_api.phase(job) not in ("", job_api.PHASE_PENDING)
        ):
            self.reactor.enqueue(name)

    def _on_job_deleted(self, job: Obj | Tombstone[Obj]) -> None:
        obj = job.last if isinstance(job, Tombstone) else job
        if obj is None:
            return
        self._admitted.discard(str(job_api.meta(obj).get("name") or ""))
        for name in _reservation_of_job(obj):
            self.reactor.enqueue(RESERVATION_KEY + name)

    def _enqueue_jobs_of_pod(self, pod: Obj | None) -> None:
        if pod is None:
            return
        for job in self.jobs.store.by_index("pod", _key(pod)):
            self.reactor.enqueue(str(job_api.meta(job).get("name")))

    # ---- the plug-in -------------------------------------------------------------------------

    def filter(self, pod: Obj) -> bool:
        return self.filter_reason(pod) is None

    def filter_reason(self, pod: Obj) -> str | None:
        """Why the pod may not get a job now (None: it may)."""
        return self.admission.reason(pod)

    async def evict(self, pod: Obj, reason: str, plugin: str) -> bool:
        key = _key(pod)
        if self.args.dry_run:
            log.info("MigrationController in dry run mode: pod %s would be migrated (%s)", key, reason)
            return True
        why = self.filter_reason(pod)
        if why is not None:
            log.info("pod %s not migrated: %s", key, why)
            return False
        exceeded = self.limiters.exceeded(pod) if self.args.gate("ObjectLimiter") else None
        if exceeded:
            log.info("pod %s not migrated: %s", key, exceeded)
            return False
        job = self.new_job(pod, reason, plugin)
        try:
            created = await self.client.create(res.POD_MIGRATION_JOBS, job)
        except KubeError as err:
            log.error("cannot create a PodMigrationJob for pod %s: %s", key, err)
            return False
        self._assumed[str(job_api.meta(created).get("name"))] = created
        log.info("PodMigrationJob %s created for pod %s: %s", job_api.meta(created).get("name"), key, reason)
        return True

    def new_job(self, pod: Obj, reason: str, plugin: str) -> dict[str, Any]:
        meta = job_api.meta(pod)
        spec: dict[str, Any] = {
            "podRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "namespace": meta.get("namespace"),
                "name": meta.get("name"),
                "uid": meta.get("uid"),
            },
            "mode": self.args.default_job_mode,
        }
        if self.args.default_job_ttl_s > 0:
            spec["ttl"] = format_duration(round(self.args.default_job_ttl_s * 1e9))
        if self.args.default_delete_options:
            spec["deleteOptions"] = dict(self.args.default_delete_options)
        return {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": JOB_KIND,
            "metadata": {
                "name": str(uuid.uuid4()),
                "annotations": {
                    ANNOTATION_EVICT_REASON: reason,
                    ANNOTATION_EVICT_TRIGGER: plugin,
                    ANNOTATION_JOB_CREATED_BY: self.reconciler_uid,
                },
            },
            "spec": spec,
            "status": {"phase": job_api.PHASE_PENDING},
        }

    # ---- running -----------------------------------------------------------------------------

    async def run(self) -> None:
        loops = [self.reactor.run(), self._scavenge_loop()]
        if self.args.arbitration_enabled:
            loops.append(self._arbitration_loop())
        self._tasks = [asyncio.create_task(loop) for loop in loops]
        try:
            await asyncio.gather(*self._tasks)
        finally:
            await cancel_and_wait(self._tasks)

    async def _arbitration_loop(self) -> None:
        while True:
            try:
                await self.arbitrate()
            except Exception:
                log.exception("arbitration round failed")
            await self.clock.sleep(self.args.arbitration_interval_s)

    async def _scavenge_loop(self) -> None:
        while True:
            await self.clock.sleep(SCAVENGE_EVERY_S)
            try:
                await self.scavenge()
            except Exception:
                log.exception("collecting old PodMigrationJobs failed")

    async def arbitrate(self) -> None:
        """One arbitration round over the waiting jobs."""
        waiting = [
            j
            for j in self.jobs.store.values()
            if job_api.phase(j) in ("", job_api.PHASE_PENDING)
            and not passed(j)
            and str(job_api.meta(j).get("name")) not in self._admitted
            and not (j.get("spec") or {}).get("paused")
        ]
        if not waiting:
            return
        views = [JobView(j, self._pod_of_job(j)) for j in waiting]
        batch_counts: dict[str, int] = {}
        for job in self._all_jobs():
            pod = self._pod_of_job(job)
            workload = controller_of(pod) if pod is not None else None
            if workload is not None and workload.kind == "Job" and is_migrating(job, admitted_only=True):
                batch_counts[workload.uid] = batch_counts.get(workload.uid, 0) + 1

        def pod_rank(pod: Obj) -> tuple[Any, ...]:
            return pod_order(pod, {}, {}, {}, _key(pod))

        for view in order_jobs(views, pod_rank, batch_counts):
            name = str(job_api.meta(view.job).get("name"))
            if self._expired(view.job):
                await self._fail(view.job, job_api.REASON_TIMEOUT, "Abort job caused by timeout")
                continue
            if view.pod is not None:
                why = refusal(view.pod, self.args, self.gates)
                if why is not None:
                    await self._fail(
                        view.job,
                        job_api.REASON_FORBIDDEN,
                        f'Pod "{_key(view.pod)}" is forbidden to migrate because it does not meet '
                        "the requirements",
                        detail=why,
                    )
                    continue
                wait = self.limits.refusal(view.pod, admitted_only=True, exclude_job=name)
                if wait is not None:
                    log.debug("PodMigrationJob %s waits: %s", name, wait)
                    continue
            try:
                await self.client.patch(
                    res.POD_MIGRATION_JOBS,
                    name,
                    {"metadata": {"annotations": {ANNOTATION_PASSED: "true"}}},
                    patch_type=PatchType.MERGE,
                )
            except KubeError as err:
                log.warning("cannot admit PodMigrationJob %s: %s", name, err)
                continue
            self._admitted.add(name)

    async def scavenge(self) -> None:
        """Delete jobs older than their TTL plus 5 minutes (30 minutes without a TTL)."""
        now = self.clock.time()
        for job in self.jobs.store.values():
            born = job_api.created(job)
            ttl = job_api.ttl_seconds(job)
            if born is None or now - born < (ttl + COLLECT_AFTER_TTL_S if ttl > 0 else COLLECT_WITHOUT_TTL_S):
                continue
            name = str(job_api.meta(job).get("name"))
            await self._delete_reservation(job)
            with contextlib.suppress(NotFoundError):
                await self.client.delete(res.POD_MIGRATION_JOBS, name)
            log.info("PodMigrationJob %s collected", name)

    # ---- reconcile ---------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        if key.startswith(RESERVATION_KEY):
            name = key[len(RESERVATION_KEY) :]
            if not self.jobs.store.by_index("reservation", name):
                await self._delete_reservation_named(name)
            return None
        job = self.jobs.store.get(key)
        if job is None or (job.get("spec") or {}).get("paused"):
            return None
        phase = job_api.phase(job)
        if phase not in ("", job_api.PHASE_PENDING, job_api.PHASE_RUNNING):
            return None
        if self.args.arbitration_enabled and phase != job_api.PHASE_RUNNING and not passed(job):
            return None  # arbitration admits it first
        if self._expired(job):
            await self._fail(job, job_api.REASON_TIMEOUT, "Abort job caused by timeout")
            return None
        if phase != job_api.PHASE_RUNNING:
            return await self._start(job)
        mode = (job.get("spec") or {}).get("mode") or self.args.default_job_mode
        if mode == MODE_EVICT_DIRECTLY:
            return await self._evict_directly(job)
        return await self._reservation_first(job)

    def _expired(self, job: Obj) -> bool:
        """Past its TTL since creation (a job without one never is)."""
        ttl = job_api.ttl_seconds(job)
        born = job_api.created(job)
        return ttl > 0 and born is not None and self.clock.time() - born >= ttl

    async def _start(self, job: Obj) -> Result | None:
        ref = job_api.pod_ref(job)
        if not ref.get("namespace") or not ref.get("name"):
            await self._fail(job, job_api.REASON_INVALID_POD_REF, "Abort job caused by invalid PodRef")
            return None
        pod = self._pod_of_job(job)
        if pod is None:
            await self._missing_pod(job)
            return None
        uid = job_api.meta(pod).get("uid")
        if ref.get("uid") != uid:
            updated = {**job, "spec": {**(job.get("spec") or {}), "podRef": {**ref, "uid": uid}}}
            job = await self._replace(updated)
        edit = job_api.StatusEdit(job, self.clock.time())
        edit.set(phase=job_api.PHASE_RUNNING)
        await self._write(job, edit)
        return None

    async def _evict_directly(self, job: Obj) -> Result | None:
        result = await self._evict_pod(job, None)
        if result is not None:
            return result
        ref = job_api.pod_ref(job)
        edit = job_api.StatusEdit(job, self.clock.time())
        edit.set(
            phase=job_api.PHASE_SUCCEEDED,
            status=job_api.STATUS_COMPLETE,
            reason="",
            message=f'Pod "{ref.get("namespace")}/{ref.get("name")}" has been evicted',
        )
        await self._write(job, edit)
        return None

    async def _evict_pod(self, job: Obj, reservation: Obj | None) -> Result | None:
        """None once the pod is evicted; otherwise what the reconcile should return."""
        status = job.get("status") or {}
        eviction = job_api.condition(status, job_api.COND_EVICTION)
        if eviction is not None and eviction.get("status") == job_api.TRUE:
            return None
        ref = job_api.pod_ref(job)
        pod = self._pod_of_job(job)
        key = f"{ref.get('namespace')}/{ref.get('name')}"
        gone = pod is None or (ref.get("uid") and job_api.meta(pod).get("uid") != ref.get("uid"))
        if gone:
            if eviction is None:
                await self._missing_pod(job)
                return Result()
            edit = job_api.StatusEdit(job, self.clock.time())
            edit.condition(
                job_api.COND_EVICTION,
                job_api.TRUE,
                job_api.REASON_EVICT_COMPLETE,
                f'Pod "{key}" has been evicted',
            )
            await self._write(job, edit)
            await self._event(job, NORMAL, job_api.REASON_EVICT_COMPLETE, f'Pod "{key}" has been evicted')
            return Result()
        assert pod is not None
        if eviction is not None and eviction.get("reason") == job_api.REASON_EVICTING:
            return Result(requeue_after=REQUEUE_S)
        if (
            reservation is not None
            and (reservation.get("status") or {}).get("phase") == job_api.PHASE_SUCCEEDED
        ):
            await self._fail(job, job_api.REASON_FORBIDDEN, "Reservation is already bound by another Pod")
            return Result()
        annotations = job_api.meta(job).get("annotations") or {}
        trigger = str(annotations.get(ANNOTATION_EVICT_TRIGGER) or "")
        reason = str(annotations.get(ANNOTATION_EVICT_REASON) or trigger or "NotSet")
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        namespace = str(job_api.meta(pod).get("namespace") or "")
        options = (job.get("spec") or {}).get("deleteOptions") or self.args.default_delete_options
        try:
            await self.evictor.evict(
                pod, policy_for(pod, job, self.args.eviction_policy), options, trigger, reason
            )
        except TooManyEvictionsError:
            return Result(requeue_after=self.evictor.retry_after_s)
        except KubeError as err:
            self.metrics.pods_evicted.labels("error", trigger, namespace, node).inc()
            await self._event(
                job, WARNING, job_api.REASON_EVICTING, f'Failed evict Pod "{key}" caused by {err}'
            )
            raise TemporaryError(
                f"PodMigrationJob {job_api.meta(job).get('name')}: evicting {key}: {err}"
            ) from err
        self.limiters.track(pod)
        self.metrics.pods_evicted.labels("success", trigger, namespace, node).inc()
        message = f'Pod "{key}" evicted from node "{node}" by the reason "{reason}"'
        edit = job_api.StatusEdit(job, self.clock.time())
        edit.condition(job_api.COND_EVICTION, job_api.FALSE, job_api.REASON_EVICTING, message)
        await self._write(job, edit)
        await self._event(job, NORMAL, job_api.REASON_EVICTING, message)
        await self.recorder.record(
            pod, NORMAL, "Descheduled", f'Pod evicted from node "{node}" by the reason "{reason}"'
        )
        return Result(requeue_after=REQUEUE_S)

    async def _reservation_first(self, job: Obj) -> Result | None:
        ref = job_api.reservation_ref(job)
        if not ref.get("name"):
            return await self._create_reservation(job)
        name = str(ref["name"])
        reservation = self.reservations.store.get(name)
        if reservation is None:
            try:
                reservation = await self.client.get(res.RESERVATIONS, name)
            except NotFoundError:
                await self._fail(
                    job,
                    job_api.REASON_MISSING_RESERVATION,
                    f'Abort job caused by missing Reservation "{name}"',
                )
                return None
        labels = job_api.meta(reservation).get("labels") or {}
        if LABEL_RESERVATION_ORDER not in labels:
            patch = {"metadata": {"labels": {LABEL_RESERVATION_ORDER: str(int(self.clock.time() * 1000))}}}
            await self.client.patch(res.RESERVATIONS, name, patch, patch_type=PatchType.MERGE)
        edit = job_api.StatusEdit(job, self.clock.time())
        edit.condition(job_api.COND_RESERVATION_CREATED, job_api.TRUE)
        r_status = reservation.get("status") or {}
        scheduled_cond = job_api.condition(job.get("status") or {}, job_api.COND_RESERVATION_SCHEDULED)
        r_scheduled = job_api.condition(r_status, "Scheduled")
        unschedulable = r_scheduled is not None and r_scheduled.get("reason") == "Unschedulable"
        if unschedulable and (scheduled_cond is None or scheduled_cond.get("status") == job_api.FALSE):
            message = str(r_scheduled.get("message") or "") if r_scheduled else ""
            if edit.condition(
                job_api.COND_RESERVATION_SCHEDULED, job_api.FALSE, job_api.REASON_UNSCHEDULABLE, message
            ):
                await self._event(
                    job, WARNING, job_api.REASON_UNSCHEDULABLE, message or "Reservation is unschedulable"
                )
        r_phase = str(r_status.get("phase") or "")
        if r_phase in ("", job_api.PHASE_PENDING):
            await self._write(job, edit)
            return Result(requeue_after=REQUEUE_S)
        r_ready = job_api.condition(r_status, "Ready")
        if r_phase == job_api.PHASE_FAILED and r_ready is not None and r_ready.get("reason") == "Expired":
            await self._fail(
                job, job_api.REASON_RESERVATION_EXPIRED, "Reservation expired", event=False, edit=edit
            )
            return None
        node = str(r_status.get("nodeName") or "")
        scheduled = bool(node) and r_scheduled is not None and r_scheduled.get("status") == job_api.TRUE
        if not scheduled:
            message = str(r_scheduled.get("message") or "") if r_scheduled else ""
            await self._fail(job, job_api.REASON_UNSCHEDULABLE, message, event=False, edit=edit)
            return None
        pod = self._pod_of_job(job)
        if not (job.get("status") or {}).get("nodeName"):
            if pod is not None and (pod.get("spec") or {}).get("nodeName") == node:
                await self._fail(
                    job,
                    job_api.REASON_FORBIDDEN,
                    f'Scheduler assignes the Reservation "{name}" on the same node as the Pod',
                    edit=edit,
                )
                return None
            edit.set(nodeName=node)
            edit.condition(job_api.COND_RESERVATION_SCHEDULED, job_api.TRUE)
            await self._write(job, edit)
            await self._event(
                job,
                NORMAL,
                job_api.REASON_RESERVATION_SCHEDULED,
                f'Assigned Reservation "{name}" to node "{node}"',
            )
            return None
        if edit.changed:
            # the next steps write the job again: continue from the version this write makes
            await self._write(job, edit)
            return None
        owners = (reservation.get("spec") or {}).get("owners") or []
        if any(((o or {}).get("object") or {}).get("kind") == "Pod" for o in owners):
            return await self._pending_pod_scheduled(job, pod, node)
        result = await self._evict_pod(job, reservation)
        if result is not None:
            return result
        return await self._wait_for_replacement(job, reservation, name)

    async def _create_reservation(self, job: Obj) -> Result | None:
        pod = self._pod_of_job(job)
        if pod is None:
            await self._missing_pod(job)
            return None
        job_uid = str(job_api.meta(job).get("uid") or job_api.meta(job).get("name"))
        body = reservation_for(pod, job_uid, job_api.ttl_seconds(job) or None, int(self.clock.time() * 1000))
        try:
            created = await self.client.create(res.RESERVATIONS, body)
        except AlreadyExistsError:
            created = await self.client.get(res.RESERVATIONS, job_uid)
        except ApiError as err:
            message = f"Failed to create Reservation caused by {err.message or err}"
            edit = job_api.StatusEdit(job, self.clock.time())
            edit.condition(
                job_api.COND_RESERVATION_CREATED,
                job_api.FALSE,
                job_api.REASON_FAILED_CREATE_RESERVATION,
                message,
            )
            await self._write(job, edit)
            await self._event(job, WARNING, job_api.REASON_FAILED_CREATE_RESERVATION, message)
            raise TemporaryError(f"PodMigrationJob {job_api.meta(job).get('name')}: {message}") from err
        meta = job_api.meta(created)
        options = dict((job.get("spec") or {}).get("reservationOptions") or {})
        options["reservationRef"] = {
            "kind": "Reservation",
            "apiVersion": "v1alpha1",
            "name": meta.get("name"),
            "uid": meta.get("uid"),
        }
        await self._replace({**job, "spec": {**(job.get("spec") or {}), "reservationOptions": options}})
        await self._event(
            job,
            NORMAL,
            job_api.REASON_RESERVATION_CREATED,
            f'Successfully create Reservation "{meta.get("name")}"',
        )
        return None

    async def _pending_pod_scheduled(self, job: Obj, pod: Obj | None, node: str) -> Result | None:
        if pod is None:
            await self._missing_pod(job)
            return None
        edit = job_api.StatusEdit(job, self.clock.time())
        scheduled = job_api.condition(pod.get("status") or {}, "PodScheduled")
        if scheduled is None or scheduled.get("status") != job_api.TRUE:
            message = str((scheduled or {}).get("message") or "")
            edit.condition(job_api.COND_POD_SCHEDULED, job_api.FALSE, job_api.REASON_UNSCHEDULABLE, message)
            await self._write(job, edit)
            return Result(requeue_after=REQUEUE_S)
        message = f'Assign Pod "{_key(pod)}" to node "{(pod.get("spec") or {}).get("nodeName") or node}"'
        edit.condition(job_api.COND_POD_SCHEDULED, job_api.TRUE)
        edit.set(phase=job_api.PHASE_SUCCEEDED, status=job_api.STATUS_COMPLETE, reason="", message=message)
        await self._write(job, edit)
        await self._event(job, NORMAL, job_api.REASON_COMPLETE, message)
        return None

    async def _wait_for_replacement(self, job: Obj, reservation: Obj, name: str) -> Result | None:
        edit = job_api.StatusEdit(job, self.clock.time())
        owners = (reservation.get("status") or {}).get("currentOwners") or []
        if not owners:
            if edit.condition(
                job_api.COND_POD_BOUND_RESERVATION,
                job_api.FALSE,
                job_api.REASON_WAIT_FOR_BIND,
                "Waiting for Pod bind Reservation",
            ):
                await self._write(job, edit)
                await self._event(
                    job, NORMAL, job_api.REASON_WAIT_FOR_BIND, "Waiting for Pod bind Reservation"
                )
            return Result(requeue_after=REQUEUE_S)
        bound = owners[0] or {}
        bound_key = f"{bound.get('namespace') or ''}/{bound.get('name') or ''}"
        pod_ref = {k: bound[k] for k in ("kind", "apiVersion", "namespace", "name", "uid") if bound.get(k)}
        edit.set(podRef={"kind": "Pod", **pod_ref})
        if edit.condition(job_api.COND_RESERVATION_BOUND, job_api.TRUE):
            await self._event(
                job, NORMAL, job_api.REASON_POD_BOUND_RESERVATION, f'Reservation bound by pod "{bound_key}"'
            )
        new_pod = self.pods.store.get(bound_key)
        if new_pod is not None and not is_ready(new_pod):
            if edit.condition(
                job_api.COND_BOUND_POD_READY,
                job_api.FALSE,
                job_api.REASON_WAIT_FOR_READY,
                f"Waiting for Bound Pod {bound_key} Ready",
            ):
                await self._event(
                    job, NORMAL, job_api.REASON_WAIT_FOR_READY, f"Waiting for Bound Pod {bound_key} Ready"
                )
            await self._write(job, edit)
            return Result(requeue_after=REQUEUE_S)
        if edit.condition(job_api.COND_BOUND_POD_READY, job_api.TRUE):
            await self._event(job, NORMAL, job_api.REASON_BOUND_POD_READY, f'Bind pod "{bound_key}" is ready')
        message = f'Bind Pod "{bound_key}" in Reservation "{name}"'
        edit.condition(job_api.COND_POD_BOUND_RESERVATION, job_api.TRUE, "", message)
        edit.set(phase=job_api.PHASE_SUCCEEDED, status=job_api.STATUS_COMPLETE, reason="", message=message)
        await self._write(job, edit)
        await self._event(job, NORMAL, job_api.REASON_COMPLETE, message)
        return None

    # ---- writes ------------------------------------------------------------------------------

    async def _missing_pod(self, job: Obj) -> None:
        ref = job_api.pod_ref(job)
        await self._fail(
            job,
            job_api.REASON_MISSING_POD,
            f'Abort job caused by missing Pod "{ref.get("namespace")}/{ref.get("name")}"',
        )

    async def _fail(
        self,
        job: Obj,
        reason: str,
        message: str,
        *,
        event: bool = True,
        detail: str = "",
        edit: job_api.StatusEdit | None = None,
    ) -> None:
        """The job fails (with the changes ``edit`` already holds); a Reservation it created is
        deleted."""
        name = job_api.meta(job).get("name")
        log.info(
            "PodMigrationJob %s failed: %s: %s%s", name, reason, message, f" ({detail})" if detail else ""
        )
        await self._delete_reservation(job)
        edit = edit or job_api.StatusEdit(job, self.clock.time())
        edit.set(phase=job_api.PHASE_FAILED, reason=reason, message=message)
        await self._write(job, edit)
        self._admitted.discard(str(name))
        if event:
            await self._event(job, WARNING, reason, message)

    async def _delete_reservation(self, job: Obj) -> None:
        for name in _reservation_of_job(job):
            await self._delete_reservation_named(name)

    async def _delete_reservation_named(self, name: str) -> None:
        try:
            await self.client.delete(res.RESERVATIONS, name)
        except NotFoundError:
            return
        log.info("Reservation %s deleted", name)

    async def _replace(self, job: Obj) -> Obj:
        try:
            return await self.client.replace(res.POD_MIGRATION_JOBS, dict(job))
        except (ConflictError, NotFoundError) as err:
            raise TemporaryError(f"PodMigrationJob {job_api.meta(job).get('name')}: {err}") from err

    async def _write(self, job: Obj, edit: job_api.StatusEdit) -> None:
        if not edit.changed:
            return
        try:
            await self.client.replace_status(res.POD_MIGRATION_JOBS, {**job, "status": edit.status})
        except (ConflictError, NotFoundError) as err:
            raise TemporaryError(f"PodMigrationJob {job_api.meta(job).get('name')}: {err}") from err

    async def _event(self, job: Obj, event_type: str, reason: str, message: str) -> None:
        await self.recorder.record(job, event_type, reason, message, kind=JOB_KIND)

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
