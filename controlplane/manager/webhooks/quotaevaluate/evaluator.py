"""The quota evaluator: concurrent admissions of one quota checked together, their sum persisted.

Upstream's ``quotaEvaluator`` (``pkg/webhook/quotaevaluate/evaluator.go``), on asyncio:

* :meth:`QuotaEvaluator.evaluate` queues the pod under its quota's ``namespace/name`` and
  waits for the verdict (``None``: admitted, else the refusal), at most 10 s;
* at most :data:`WORKERS` (16) quotas are worked on at once, each by one batch at a time;
  pods arriving while their quota's batch runs form the next batch of that quota, which
  then queues behind the other quotas' batches (the work queue's order);
* a batch reads the quota, checks its pods in arrival order against the admission limit
  (each admitted pod raises the total the next one is checked against), writes the new
  total into the ``child-request`` annotation once, and admits its pods only when that
  write succeeded;
* a write refused because the quota changed is retried on a fresh read: first by adding
  the batch's admitted total to the new ``child-request`` (if it still fits), otherwise by
  checking the undecided pods again. Three retries, one more per doubling of the pods the
  batch admitted, at most :attr:`QuotaUpdatePolicy.max_retries`; a conflict may first wait
  a random ``[jitter/2, jitter)`` (:attr:`QuotaUpdatePolicy.retry_jitter`, off by default,
  bounded per batch by :attr:`QuotaUpdatePolicy.max_total_jitter`). When every retry
  failed the pods are refused with the reason.

Only CREATE is evaluated (upstream's ``Handles``). A dry-run CREATE is checked against the
quota as it is and never written, so a dry run leaves no charge behind.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import dataclass, field
from typing import Any, Final

from controlplane.manager.webhooks.fielderrors import aggregate
from controlplane.manager.webhooks.quotaevaluate.accessor import QuotaAccessError, QuotaAccessor
from controlplane.manager.webhooks.quotaevaluate.usage import (
    MIN_RETRIES,
    POD_RESOURCES,
    QuotaReadError,
    admission_limit,
    charged_names,
    child_request,
    exceeded_message,
    mask_non_zero,
    pod_usage,
    quota_key,
    retries_for_batch,
)
from koordinator.api import resourcelist
from koordinator.api.extension.quota import ANNOTATION_CHILD_REQUEST
from koordinator.api.jsonutil import marshal
from koordinator.api.resourcelist import ResourceList, ResourceListError
from koordinator.kube.clock import SYSTEM_CLOCK, Clock

__all__ = [
    "EVALUATION_TIMEOUT_S",
    "TIMED_OUT",
    "WORKERS",
    "Attributes",
    "QuotaEvaluator",
    "QuotaUpdatePolicy",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: quotas worked on at once (upstream builds its evaluator with 16 workers)
WORKERS = 16
#: how long one admission waits for its verdict
EVALUATION_TIMEOUT_S = 10.0
#: the refusal of an admission that waited too long (``apierrors.NewInternalError``'s text)
TIMED_OUT = "Internal error occurred: elastic quota evaluation timed out"
CREATE = "CREATE"


@dataclass(frozen=True)
class QuotaUpdatePolicy:
    """How hard a batch tries to write its total (upstream's ``--quota-update-*`` settings)."""

    #: retries of a batch's write: the upper bound of the per-batch budget (never below 3)
    max_retries: int = MIN_RETRIES
    #: seconds: a conflicting write waits a random ``[jitter/2, jitter)`` first (0: never)
    retry_jitter: float = 0.0
    #: seconds of jitter one batch may spend in all
    max_total_jitter: float = 1.0
    #: on a conflict, read the quota from the apiserver rather than the cache
    conflict_fresh_get: bool = False


@dataclass(frozen=True)
class Attributes:
    """One pod to admit into ``quota_namespace/quota_name``."""

    quota_namespace: str
    quota_name: str
    operation: str
    pod: Obj
    dry_run: bool = False

    @property
    def key(self) -> str:
        return f"{self.quota_namespace}/{self.quota_name}"


class _Undecided:
    """The verdict of a pod not decided yet (upstream's ``defaultDeny``)."""

    def __repr__(self) -> str:
        return "DEFAULT DENY"


UNDECIDED: Final = _Undecided()


@dataclass(eq=False)
class _Waiter:
    attributes: Attributes
    finished: asyncio.Future[None]
    result: str | _Undecided | None = UNDECIDED


@dataclass
class _Batch:
    """What one batch carries across its retries (upstream's ``quotaCheckContext``)."""

    admission: ResourceList = field(default_factory=dict)
    fatal: str | None = None
    #: the total charged so far: ``child-request`` plus the pods admitted in this batch
    used: ResourceList = field(default_factory=dict)
    #: the sum of the pods admitted in this batch, for the fast retry
    delta: ResourceList = field(default_factory=dict)
    names: frozenset[str] = frozenset()
    jitter_spent: float = 0.0


class QuotaEvaluator:
    """Batches admissions per quota; see the module docstring."""

    def __init__(
        self,
        accessor: QuotaAccessor,
        *,
        workers: int = WORKERS,
        policy: QuotaUpdatePolicy | None = None,
        timeout: float = EVALUATION_TIMEOUT_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if workers < 1:
            raise ValueError("the quota evaluator needs at least one worker")
        self.accessor = accessor
        self.policy = policy or QuotaUpdatePolicy()
        self.timeout = timeout
        self.clock = clock
        self._slots = asyncio.Semaphore(workers)
        self._work: dict[str, list[_Waiter]] = {}
        self._dirty: dict[str, list[_Waiter]] = {}
        self._in_progress: set[str] = set()
        self._runners: dict[str, asyncio.Task[None]] = {}

    # --- the entry point -------------------------------------------------------------------

    async def evaluate(self, attributes: Attributes) -> str | None:
        """``None`` when the pod is admitted (and charged), else the refusal message."""
        if attributes.operation != CREATE:
            return None
        if attributes.dry_run:
            return await self._dry_run(attributes)
        waiter = _Waiter(attributes, asyncio.get_running_loop().create_future())
        self._add_work(waiter)
        try:
            async with asyncio.timeout(self.timeout):
                await asyncio.shield(waiter.finished)
        except TimeoutError:
            return TIMED_OUT
        result = waiter.result
        return repr(result) if isinstance(result, _Undecided) else result

    async def aclose(self) -> None:
        """Stop the batches in progress; their pods are refused."""
        runners = list(self._runners.values())
        for runner in runners:
            runner.cancel()
        await asyncio.gather(*runners, return_exceptions=True)

    # --- the work queue --------------------------------------------------------------------

    def _add_work(self, waiter: _Waiter) -> None:
        key = waiter.attributes.key
        if key in self._in_progress:
            self._dirty.setdefault(key, []).append(waiter)
        else:
            self._work.setdefault(key, []).append(waiter)
        if key not in self._runners:
            self._runners[key] = asyncio.create_task(self._run(key), name=f"quota-admission-{key}")

    async def _run(self, key: str) -> None:
        """Work ``key``'s batches one at a time, taking a worker slot for each."""
        try:
            while self._work.get(key):
                async with self._slots:
                    batch = self._work.pop(key, [])
                    self._in_progress.add(key)
                    try:
                        await self._check_batch(key, batch)
                    finally:
                        self._in_progress.discard(key)
                        dirty = self._dirty.pop(key, [])
                        if dirty:
                            self._work[key] = dirty
        finally:
            self._runners.pop(key, None)
            for waiter in self._work.pop(key, []) + self._dirty.pop(key, []):
                if not waiter.finished.done():
                    waiter.finished.set_result(None)

    # --- one batch -------------------------------------------------------------------------

    async def _check_batch(self, key: str, waiters: list[_Waiter]) -> None:
        """Decide every waiter of the batch; each is told, whatever happens."""
        try:
            namespace, _, name = key.partition("/")
            try:
                quota = await self.accessor.get_quota(namespace, name)
            except QuotaAccessError as exc:
                for waiter in waiters:
                    waiter.result = str(exc)
                return
            await self._check_quota(key, quota, waiters)
        except Exception as exc:
            log.exception("quota admission of %s failed", key)
            for waiter in waiters:
                if isinstance(waiter.result, _Undecided):
                    waiter.result = f"elastic quota evaluation of {key} failed: {exc}"
        finally:
            for waiter in waiters:
                if not waiter.finished.done():
                    waiter.finished.set_result(None)

    async def _check_quota(self, key: str, quota: Obj, waiters: list[_Waiter]) -> None:
        remaining = max(self.policy.max_retries, MIN_RETRIES)
        batch: _Batch | None = None
        while True:
            batch = self._begin(batch, quota)
            if not self._fast_retry(batch):
                changed = 0
                for waiter in waiters:
                    if not isinstance(waiter.result, _Undecided):
                        continue
                    before = batch.used
                    error = self._check_request(quota, waiter.attributes, batch)
                    if error is not None:
                        waiter.result = error
                    elif resourcelist.equal(before, batch.used):
                        waiter.result = None
                    else:
                        changed += 1
                if changed <= 0:
                    return
                remaining = min(remaining, retries_for_batch(changed, self.policy.max_retries))
            error = await self._persist(quota, batch, remaining)
            if error is None:
                self._decide(waiters, None)
                return
            if remaining <= 0:
                self._decide(waiters, f"failed to persist the child-request of elastic quota {key}: {error}")
                return
            try:
                quota = await self.accessor.get_quota(*key.split("/", 1))
            except QuotaAccessError:
                self._decide(waiters, f"failed to persist the child-request of elastic quota {key}: {error}")
                return
            remaining -= 1

    @staticmethod
    def _decide(waiters: list[_Waiter], result: str | None) -> None:
        for waiter in waiters:
            if isinstance(waiter.result, _Undecided):
                waiter.result = result

    @staticmethod
    def _begin(batch: _Batch | None, quota: Obj) -> _Batch:
        """The batch state re-read from ``quota`` (a fresh copy on every retry)."""
        batch = batch or _Batch()
        problems: list[str] = []
        try:
            used = child_request(quota)
        except QuotaReadError as exc:
            problems.append(str(exc))
            used = {}
        try:
            batch.admission = admission_limit(quota)
        except QuotaReadError as exc:
            problems.append(str(exc))
            batch.admission = {}
        batch.fatal = aggregate(problems) or None
        batch.used = used
        names = charged_names(quota)
        if not batch.names or names != batch.names:
            batch.names, batch.delta = names, {}
        return batch

    @staticmethod
    def _fast_retry(batch: _Batch) -> bool:
        """On a retry: charge the batch's admitted total again at once when it still fits."""
        if batch.fatal is not None or not batch.delta:
            return False
        total = mask_non_zero(resourcelist.add(batch.used, batch.delta), batch.names)
        fits, _ = resourcelist.less_than_or_equal(total, batch.admission)
        if not fits:
            batch.delta = {}
            return False
        batch.used = total
        return True

    def _check_request(self, quota: Obj, attributes: Attributes, batch: _Batch) -> str | None:
        """Charge one pod to ``batch``; the refusal, or ``None`` (admitted or nothing to charge)."""
        if attributes.operation != CREATE:
            return None
        if batch.fatal is not None:
            return batch.fatal
        if not batch.names & POD_RESOURCES:
            return None
        try:
            requested = mask_non_zero(pod_usage(attributes.pod, self.clock.time()), batch.names)
        except ResourceListError as exc:
            return f"invalid resources of the pod: {exc}"
        if not requested:
            return None
        total = resourcelist.add(batch.used, requested)
        fits, over = resourcelist.less_than_or_equal(resourcelist.mask(total, requested), batch.admission)
        if not fits:
            return exceeded_message(quota_key(quota), requested, batch.used, batch.admission, over)
        batch.used = total
        batch.delta = resourcelist.add(batch.delta, requested)
        return None

    async def _persist(self, quota: Obj, batch: _Batch, remaining: int) -> str | None:
        """Write ``batch.used`` into ``child-request``; the failure, or ``None``."""
        updated = copy.deepcopy(quota)
        metadata = updated.setdefault("metadata", {})
        annotations = metadata.get("annotations")
        if not isinstance(annotations, dict):
            annotations = metadata["annotations"] = {}
        annotations[ANNOTATION_CHILD_REQUEST] = marshal(resourcelist.to_json(batch.used))
        jitter = self._jitter(batch, remaining)
        batch.jitter_spent += jitter
        try:
            await self.accessor.update_quota(updated, jitter)
        except QuotaAccessError as exc:
            return str(exc)
        return None

    def _jitter(self, batch: _Batch, remaining: int) -> float:
        jitter = self.policy.retry_jitter
        if jitter <= 0 or remaining <= 0 or batch.jitter_spent + jitter > self.policy.max_total_jitter:
            return 0.0
        return jitter

    async def _dry_run(self, attributes: Attributes) -> str | None:
        try:
            quota = await self.accessor.get_quota(attributes.quota_namespace, attributes.quota_name)
        except QuotaAccessError as exc:
            return str(exc)
        return self._check_request(quota, attributes, self._begin(None, quota))
