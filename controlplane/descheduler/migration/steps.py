"""The steps of one admitted PodMigrationJob (upstream's ``doMigrate``), one step and at most
one write of the job at a time: each write's update event brings the job back, and waiting
steps ask for it again after 3 s.

* Pending: the pod must exist (``MissingPod``, ``InvalidPodRef``); its UID is recorded and
  the job is Running.
* EvictDirectly: the pod is evicted (:mod:`.evictor`); once it is gone the job has Succeeded.
* ReservationFirst: a Reservation (:mod:`.reservation`) is created and recorded in the job;
  the job waits while it is Pending (an unschedulable one is reported, and waited on until
  the TTL), fails when it expired, could not be scheduled or landed on the pod's own node;
  once it is scheduled the pod is evicted; then the job waits for the replacement to be
  bound to it and Ready, and has Succeeded with that pod in ``status.podRef``. A job made
  for an unschedulable Pending pod succeeds once the pod is scheduled.
* A failure deletes the Reservation the job created (upstream keeps it until the job is
  collected). Conditions, reasons, messages and Events are upstream's; evictions count in
  ``descheduler_pods_evicted``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from controlplane.descheduler.metrics import DeschedulerMetrics
from controlplane.descheduler.migration import jobs as job_api
from controlplane.descheduler.migration.arbitration import ObjectLimiters
from controlplane.descheduler.migration.args import MODE_EVICT_DIRECTLY, MigrationControllerArgs
from controlplane.descheduler.migration.evictor import Evictor, TooManyEvictionsError, policy_for
from controlplane.descheduler.migration.reservation import reservation_for
from controlplane.descheduler.migration.workloads import is_ready
from controlplane.reactor import Result, TemporaryError
from koordinator.api.extension.constants import ANNOTATION_EVICT_REASON, ANNOTATION_EVICT_TRIGGER
from koordinator.api.extension.reservation import LABEL_RESERVATION_ORDER
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient, PatchType
from koordinator.kube.clock import Clock
from koordinator.kube.errors import AlreadyExistsError, ApiError, ConflictError, KubeError, NotFoundError
from koordinator.kube.events import NORMAL, WARNING, EventRecorder

__all__ = ["JOB_KIND", "REQUEUE_S", "JobSteps"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
JOB_KIND = "PodMigrationJob"
#: upstream's defaultRequeueAfter
REQUEUE_S = 3.0


def _key(pod: Obj) -> str:
    meta = job_api.meta(pod)
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


class JobSteps:
    def __init__(
        self,
        args: MigrationControllerArgs,
        client: ApiClient,
        *,
        recorder: EventRecorder,
        metrics: DeschedulerMetrics,
        clock: Clock,
        limiters: ObjectLimiters,
        pod_of_job: Callable[[Obj], Obj | None],
        pod_by_key: Callable[[str], Obj | None],
        cached_reservation: Callable[[str], Obj | None],
    ) -> None:
        self.args = args
        self.client = client
        self.recorder = recorder
        self.metrics = metrics
        self.clock = clock
        self.limiters = limiters
        self.pod_of_job = pod_of_job
        self.pod_by_key = pod_by_key
        self.cached_reservation = cached_reservation
        self.evictor = Evictor(client, args.evict_qps, args.evict_burst, clock)

    async def run(self, job: Obj) -> Result | None:
        """The next step of an admitted job that is not over."""
        if self.expired(job):
            await self.fail(job, job_api.REASON_TIMEOUT, "Abort job caused by timeout")
            return None
        if job_api.phase(job) != job_api.PHASE_RUNNING:
            return await self._start(job)
        mode = (job.get("spec") or {}).get("mode") or self.args.default_job_mode
        if mode == MODE_EVICT_DIRECTLY:
            return await self._evict_directly(job)
        return await self._reservation_first(job)

    def expired(self, job: Obj) -> bool:
        """Past its TTL since creation (a job without one never is)."""
        ttl = job_api.ttl_seconds(job)
        born = job_api.created(job)
        return ttl > 0 and born is not None and self.clock.time() - born >= ttl

    async def _start(self, job: Obj) -> Result | None:
        ref = job_api.pod_ref(job)
        if not ref.get("namespace") or not ref.get("name"):
            await self.fail(job, job_api.REASON_INVALID_POD_REF, "Abort job caused by invalid PodRef")
            return None
        pod = self.pod_of_job(job)
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
        pod = self.pod_of_job(job)
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
            await self.fail(job, job_api.REASON_FORBIDDEN, "Reservation is already bound by another Pod")
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
        reservation = self.cached_reservation(name)
        if reservation is None:
            try:
                reservation = await self.client.get(res.RESERVATIONS, name)
            except NotFoundError:
                await self.fail(
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
            await self.fail(
                job, job_api.REASON_RESERVATION_EXPIRED, "Reservation expired", event=False, edit=edit
            )
            return None
        node = str(r_status.get("nodeName") or "")
        scheduled = bool(node) and r_scheduled is not None and r_scheduled.get("status") == job_api.TRUE
        if not scheduled:
            message = str(r_scheduled.get("message") or "") if r_scheduled else ""
            await self.fail(job, job_api.REASON_UNSCHEDULABLE, message, event=False, edit=edit)
            return None
        pod = self.pod_of_job(job)
        if not (job.get("status") or {}).get("nodeName"):
            if pod is not None and (pod.get("spec") or {}).get("nodeName") == node:
                await self.fail(
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
        pod = self.pod_of_job(job)
        if pod is None:
            await self._missing_pod(job)
            return None
        job_uid = str(job_api.meta(job).get("uid") or job_api.meta(job).get("name"))
        options = dict((job.get("spec") or {}).get("reservationOptions") or {})
        body = reservation_for(
            pod,
            job_uid,
            job_api.ttl_seconds(job) or None,
            int(self.clock.time() * 1000),
            options.get("template"),
        )
        try:
            created = await self.client.create(res.RESERVATIONS, body)
        except AlreadyExistsError:
            created = await self.client.get(res.RESERVATIONS, body["metadata"]["name"])
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
        # as upstream, the job keeps the template the Reservation was made from
        options["template"] = {"metadata": body["metadata"], "spec": body["spec"]}
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
        new_pod = self.pod_by_key(bound_key)
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
        await self.fail(
            job,
            job_api.REASON_MISSING_POD,
            f'Abort job caused by missing Pod "{ref.get("namespace")}/{ref.get("name")}"',
        )

    async def fail(
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
        await self.delete_reservation(job)
        edit = edit or job_api.StatusEdit(job, self.clock.time())
        edit.set(phase=job_api.PHASE_FAILED, reason=reason, message=message)
        await self._write(job, edit)
        if event:
            await self._event(job, WARNING, reason, message)

    async def delete_reservation(self, job: Obj) -> None:
        name = job_api.reservation_ref(job).get("name")
        if name:
            await self.delete_reservation_named(str(name))

    async def delete_reservation_named(self, name: str) -> None:
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
