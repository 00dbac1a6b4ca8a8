"""Arbitration: which waiting PodMigrationJobs may start now (upstream's
``migration/arbitrator``).

Waiting jobs are ordered -- jobs of a batch Job's pods whose Job already migrates more pods
first, then jobs of the same batch Job together, then by pod (the LowNodeLoad pod order:
lower priority class, priority and QoS first), then newest first -- and each passes the
*retryable* limits or keeps waiting:

* ``maxMigratingPerNode``: other pods of its node being migrated;
* ``maxMigratingPerNamespace``: other pods of its namespace being migrated;
* ``maxMigratingGlobally``: jobs being migrated;
* per workload: ``maxMigratingPerWorkload`` (other pods of its workload being migrated) and
  ``maxUnavailablePerWorkload`` (its pods not Ready plus those being migrated), each
  defaulted by :func:`.workloads.max_unavailable`;
* the object limiters: a token bucket per workload (and per namespace) refilled at
  ``maxMigrating / duration`` with room for one, which each eviction draws from.

A job is *being migrated* when it is Running, or Pending and already admitted (the
``descheduler.koordinator.sh/passed-arbitration`` annotation); before a job exists
(the Filter extension point), every Pending job counts. The ``descheduler.alpha.kubernetes.io/evict``
annotation on the pod lets it past these limits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.descheduler.migration.args import (
    LIMITER_NAMESPACE,
    LIMITER_WORKLOAD,
    MigrationControllerArgs,
    ObjectLimiter,
)
from controlplane.descheduler.migration.gates import ANNOTATION_EVICT
from controlplane.descheduler.migration.workloads import Workload, controller_of, is_ready, max_unavailable
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.timeutil import parse_time

__all__ = [
    "ANNOTATION_PASSED",
    "JobView",
    "Limits",
    "ObjectLimiters",
    "is_migrating",
    "order_jobs",
]

Obj = Mapping[str, Any]

ANNOTATION_PASSED = "descheduler.koordinator.sh/passed-arbitration"
PENDING = "Pending"
RUNNING = "Running"


def phase_of(job: Obj) -> str:
    return str((job.get("status") or {}).get("phase") or "")


def passed(job: Obj) -> bool:
    return ((job.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PASSED) == "true"


def is_migrating(job: Obj, *, admitted_only: bool) -> bool:
    phase = phase_of(job)
    if phase == RUNNING:
        return True
    if phase in ("", PENDING):
        return passed(job) or not admitted_only
    return False


@dataclass(frozen=True)
class JobView:
    """A job with the pod it migrates (None: the pod is gone)."""

    job: Obj
    pod: Obj | None


class TokenBucket:
    def __init__(self, rate: float, clock: Clock) -> None:
        self.rate = rate
        self.clock = clock
        self.tokens = 1.0
        self.stamp = clock.monotonic()

    def _refill(self) -> None:
        now = self.clock.monotonic()
        self.tokens = min(1.0, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def available(self) -> bool:
        self._refill()
        return self.tokens >= 1.0

    def take(self) -> None:
        self._refill()
        self.tokens -= 1.0


class ObjectLimiters:
    """The ``objectLimiters`` buckets, by workload UID and by namespace."""

    def __init__(
        self,
        limiters: Mapping[str, ObjectLimiter],
        expected_replicas: Callable[[Workload], int],
        fallback: Callable[[int], int],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.limiters = limiters
        self.expected_replicas = expected_replicas
        self.fallback = fallback
        self.clock = clock
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def _bucket(self, kind: str, key: str, allowed: int) -> TokenBucket | None:
        limiter = self.limiters.get(kind)
        if limiter is None or limiter.duration_s <= 0 or allowed <= 0:
            return None
        bucket = self._buckets.get((kind, key))
        if bucket is None:
            bucket = self._buckets[(kind, key)] = TokenBucket(allowed / limiter.duration_s, self.clock)
        return bucket

    def _buckets_for(self, pod: Obj) -> list[tuple[str, TokenBucket]]:
        out: list[tuple[str, TokenBucket]] = []
        workload = controller_of(pod)
        limiter = self.limiters.get(LIMITER_WORKLOAD)
        if workload is not None and limiter is not None:
            replicas = self.expected_replicas(workload)
            allowed = (
                limiter.max_migrating.scaled(replicas) if limiter.max_migrating is not None else 0
            ) or self.fallback(replicas)
            bucket = self._bucket(LIMITER_WORKLOAD, workload.uid, allowed)
            if bucket is not None:
                out.append((f"workload {workload.kind} {workload.key}", bucket))
        limiter = self.limiters.get(LIMITER_NAMESPACE)
        if limiter is not None and limiter.max_migrating is not None and not limiter.max_migrating.percent:
            namespace = str((pod.get("metadata") or {}).get("namespace") or "")
            bucket = self._bucket(LIMITER_NAMESPACE, namespace, limiter.max_migrating.value)
            if bucket is not None:
                out.append((f"namespace {namespace}", bucket))
        return out

    def exceeded(self, pod: Obj) -> str | None:
        for what, bucket in self._buckets_for(pod):
            if not bucket.available():
                return f"{what} was migrated too recently (object limiter)"
        return None

    def track(self, pod: Obj) -> None:
        """One eviction of ``pod`` happened."""
        for _, bucket in self._buckets_for(pod):
            bucket.take()


@dataclass
class Limits:
    """The retryable limits over the jobs and pods the controller knows."""

    args: MigrationControllerArgs
    jobs: Callable[[], Iterable[Obj]]
    pod_of_job: Callable[[Obj], Obj | None]
    workload_pods: Callable[[Workload], Sequence[Obj]]
    expected_replicas: Callable[[Workload], int]
    limiters: ObjectLimiters

    def refusal(self, pod: Obj, *, admitted_only: bool, exclude_job: str = "") -> str | None:
        """Why ``pod`` may not start migrating now (None: it may)."""
        if ANNOTATION_EVICT in ((pod.get("metadata") or {}).get("annotations") or {}):
            return None
        args = self.args
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        namespace = str(meta.get("namespace") or "")
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        # the other pods being migrated (a job whose pod is gone still counts by its podRef)
        refs: list[Mapping[str, Any]] = []
        migrating: list[Obj] = []
        for job in self.jobs():
            name = str((job.get("metadata") or {}).get("name") or "")
            if name == exclude_job or not is_migrating(job, admitted_only=admitted_only):
                continue
            ref = (job.get("spec") or {}).get("podRef") or {}
            other = self.pod_of_job(job)
            other_uid = str((other.get("metadata") or {}).get("uid") or "") if other is not None else ""
            if (other_uid or ref.get("uid")) == uid:
                continue
            refs.append(ref)
            if other is not None:
                migrating.append(other)
        if args.gate("ObjectLimiter"):
            why = self.limiters.exceeded(pod)
            if why:
                return why
        limit = args.max_migrating_per_node
        if args.gate("MaxMigratingPerNode") and node and limit and limit > 0:
            count = sum(1 for p in migrating if (p.get("spec") or {}).get("nodeName") == node)
            if count >= limit:
                return f"node {node} already has {count} pod(s) migrating (maxMigratingPerNode {limit})"
        limit = args.max_migrating_per_namespace
        if args.gate("MaxMigratingPerNamespace") and limit and limit > 0:
            count = sum(1 for ref in refs if ref.get("namespace") == namespace)
            if count >= limit:
                return (
                    f"namespace {namespace} already has {count} pod(s) migrating "
                    f"(maxMigratingPerNamespace {limit})"
                )
        limit = args.max_migrating_globally
        if args.gate("MaxMigratingGlobally") and limit and limit > 0 and len(refs) >= limit:
            return f"{len(refs)} pod(s) already migrating (maxMigratingGlobally {limit})"
        return self._workload_refusal(pod, migrating)

    def _workload_refusal(self, pod: Obj, migrating: list[Obj]) -> str | None:
        workload = controller_of(pod)
        if workload is None:
            return None
        args = self.args
        replicas = self.expected_replicas(workload)
        siblings = [p for p in migrating if (c := controller_of(p)) is not None and c.uid == workload.uid]
        max_migrating = max_unavailable(replicas, args.max_migrating_per_workload)
        if args.gate("MaxMigratingPerWorkload") and siblings and len(siblings) >= max_migrating:
            return (
                f"workload {workload.kind} {workload.key} already has {len(siblings)} pod(s) migrating "
                f"(at most {max_migrating})"
            )
        if not args.gate("MaxUnavailablePerWorkload"):
            return None
        migrating_uids = {(p.get("metadata") or {}).get("uid") for p in siblings}
        # the pods of the workload not Ready (the candidate too, as upstream) or migrating
        unavailable = len(siblings) + sum(
            1
            for p in self.workload_pods(workload)
            if (p.get("metadata") or {}).get("uid") not in migrating_uids and not is_ready(p)
        )
        limit = max_unavailable(replicas, args.max_unavailable_per_workload)
        if unavailable >= limit:
            return (
                f"workload {workload.kind} {workload.key} already has {unavailable} pod(s) unavailable "
                f"(at most {limit})"
            )
        return None


def _created(job: Obj) -> float:
    raw = (job.get("metadata") or {}).get("creationTimestamp")
    try:
        return parse_time(raw) if isinstance(raw, str) and raw else 0.0
    except ValueError:
        return 0.0


def _batch_job(pod: Obj | None) -> str:
    workload = controller_of(pod) if pod is not None else None
    return workload.uid if workload is not None and workload.kind == "Job" else ""


def order_jobs(
    views: Sequence[JobView],
    pod_key: Callable[[Obj], tuple[Any, ...]],
    migrating_by_batch_job: Mapping[str, int],
) -> list[JobView]:
    """Upstream's four stable sorts, the last the primary key: creation time (newest
    first), pod order (jobs without a pod first), batch-Job grouping, batch Jobs with more
    migrating pods first."""
    ordered = sorted(views, key=lambda v: -_created(v.job))
    ordered.sort(key=lambda v: (0,) if v.pod is None else (1, *pod_key(v.pod)))
    first_seen: dict[str, int] = {}
    positions: list[int] = []
    for i, view in enumerate(ordered):
        group = _batch_job(view.pod)
        positions.append(first_seen.setdefault(group, i) if group else i)
    ordered = [view for _, _, view in sorted(zip(positions, range(len(ordered)), ordered, strict=True))]
    ordered.sort(key=lambda v: -migrating_by_batch_job.get(_batch_job(v.pod), 0) if _batch_job(v.pod) else 0)
    return ordered
