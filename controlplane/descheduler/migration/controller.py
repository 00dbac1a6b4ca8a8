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

**Reconcile** of an admitted job: :mod:`.steps`. Deleting a job deletes its Reservation; jobs
older than their TTL plus 5 minutes (30 minutes without a TTL) are deleted every minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.descheduler.metrics import DeschedulerMetrics
from controlplane.descheduler.migration import jobs as job_api
from controlplane.descheduler.migration.admission import MigrationView, build_admission
from controlplane.descheduler.migration.arbitration import (
    ANNOTATION_PASSED,
    JobView,
    is_migrating,
    order_jobs,
    passed,
)
from controlplane.descheduler.migration.args import (
    NAME,
    MigrationControllerArgs,
)
from controlplane.descheduler.migration.gates import refusal
from controlplane.descheduler.migration.steps import JOB_KIND, JobSteps
from controlplane.descheduler.migration.workloads import (
    Workload,
    controller_of,
    expected_replicas,
)
from controlplane.descheduler.sorting import pod_order
from controlplane.reactor import Controller, Result
from controlplane.reactor.tasks import cancel_and_wait
from koordinator.api.extension.constants import (
    ANNOTATION_EVICT_REASON,
    ANNOTATION_EVICT_TRIGGER,
    ANNOTATION_JOB_CREATED_BY,
)
from koordinator.api.goparse import format_duration
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient, PatchType
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.errors import KubeError, NotFoundError
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer import Consumer
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.informer.informer import Tombstone
from koordinator.kube.informer.store import index_by_controller, index_by_node_name

__all__ = ["MigrationController"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
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
        self.priority_classes: Consumer[Obj] | None = None
        if args.priority_threshold_name:
            self.priority_classes = factory.informer(res.PRIORITY_CLASSES).add_consumer(
                name="migration-priorityclasses"
            )
        view = MigrationView(
            jobs=self._all_jobs,
            jobs_of_pod=self._jobs_of_pod,
            pod_of_job=self._pod_of_job,
            workload_pods=self._workload_pods,
            expected_replicas=self.expected_replicas,
            nodes=self.nodes.store.values,
            pods_on_node=self.pods_on_node,
            priority_class=lambda name: (
                self.priority_classes.store.get(name) if self.priority_classes is not None else None
            ),
        )
        self.admission = build_admission(args, view, clock)
        self.steps = JobSteps(
            args,
            client,
            recorder=recorder,
            metrics=metrics,
            clock=clock,
            limiters=self.admission.limits.limiters,
            pod_of_job=self._pod_of_job,
            pod_by_key=self.pods.store.get,
            cached_reservation=self.reservations.store.get,
        )
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

    def pods_on_node(self, node: str) -> Sequence[Obj]:
        return self.pods.store.by_index("node", node)

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
        exceeded = self.admission.limits.limiters.exceeded(pod) if self.args.gate("ObjectLimiter") else None
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
            if self.steps.expired(view.job):
                await self.steps.fail(view.job, job_api.REASON_TIMEOUT, "Abort job caused by timeout")
                continue
            if view.pod is not None:
                why = refusal(view.pod, self.args, self.admission.gates)
                if why is not None:
                    await self.steps.fail(
                        view.job,
                        job_api.REASON_FORBIDDEN,
                        f'Pod "{_key(view.pod)}" is forbidden to migrate because it does not meet '
                        "the requirements",
                        detail=why,
                    )
                    continue
                wait = self.admission.limits.refusal(view.pod, admitted_only=True, exclude_job=name)
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
            await self.steps.delete_reservation(job)
            with contextlib.suppress(NotFoundError):
                await self.client.delete(res.POD_MIGRATION_JOBS, name)
            log.info("PodMigrationJob %s collected", name)

    # ---- reconcile ---------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        if key.startswith(RESERVATION_KEY):
            name = key[len(RESERVATION_KEY) :]
            if not self.jobs.store.by_index("reservation", name):
                await self.steps.delete_reservation_named(name)
            return None
        job = self.jobs.store.get(key)
        if job is None or (job.get("spec") or {}).get("paused"):
            return None
        phase = job_api.phase(job)
        if phase not in ("", job_api.PHASE_PENDING, job_api.PHASE_RUNNING):
            return None
        if self.args.arbitration_enabled and phase != job_api.PHASE_RUNNING and not passed(job):
            return None  # arbitration admits it first
        return await self.steps.run(job)

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
