"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

Contenders share one Lease. A contender becomes leader by writing its identity into
``spec.holderIdentity`` when the lease is free or expired, and stays leader by renewing
``spec.renewTime`` every ``retry_period``. Expiry is judged on the contender's own clock:
a record is expired ``leaseDurationSeconds`` after this contender last *saw it change*
(clocks of different machines are never compared). Every write is a conditional update
on the Lease's resourceVersion, so two contenders can never both win.

* acquire: try every ``retry_period`` stretched by up to ``jitter_factor`` (1.2);
* renew: every ``retry_period``; leadership is lost once ``renew_deadline`` has passed
  since the last successful renewal *started*, or as soon as another holder is seen;
* fence (:meth:`LeaderElector.holds_lease`, :meth:`LeaderElector.check_lease`): the leader
  may act as leader only while its last successful acquire or renew request started less
  than ``renew_deadline`` ago on its own monotonic clock. Others take the lease over no
  sooner than ``lease_duration`` after they saw that renewal, which is after the request
  started, so the ``lease_duration - renew_deadline`` margin (5 s by default) covers the
  request's flight and clocks that run at slightly different rates. A process paused
  (SIGSTOP, a VM freeze, a long GC) past its lease finds the time gone on resuming: the
  check fails before any write, :meth:`check_lease` raises
  :class:`~koordinator.kube.errors.NotLeaderError` and wakes :meth:`LeaderElector.run`,
  which stops leading at once. Write the leader's objects through a client guarded by
  :meth:`check_lease` (:meth:`koordinator.kube.client.ApiClient.with_write_guard`) and,
  for writes that must not race a successor, on the resourceVersion they were decided on:
  the check is made before sending, and a process can be paused between the two;
* release (on cancellation, when ``release_on_cancel``): write an empty holder with a
  one-second duration so the next contender takes over at once;
* callbacks: ``on_started_leading`` runs as a task while leading and is cancelled on loss,
  ``on_stopped_leading`` runs after leading ends, ``on_new_leader`` on every observed
  change of holder.

:meth:`LeaderElector.run` may be called again after it returns: a replica that lost the
lease contends for it again.

Defaults are client-go's: 15 s lease duration, 10 s renew deadline, 2 s retry period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.errors import (
    ApiConnectionError,
    ApiError,
    ConflictError,
    NotFoundError,
    NotLeaderError,
)
from koordinator.kube.resources import LEASES
from koordinator.kube.timeutil import format_micro_time

log = logging.getLogger(__name__)
#: the longest a release on cancellation may take (an apiserver out of reach must not delay a stop)
RELEASE_TIMEOUT_S = 2.0

Obj = dict[str, Any]


class LeaderElectionConfigError(ValueError):
    """Durations that cannot work together."""


@dataclass(frozen=True)
class LeaderElectionConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    jitter_factor: float = 1.2
    release_on_cancel: bool = True

    def __post_init__(self) -> None:
        if not self.identity:
            raise LeaderElectionConfigError("leader election needs a non-empty identity")
        if self.lease_duration <= self.renew_deadline:
            raise LeaderElectionConfigError("lease_duration must be greater than renew_deadline")
        if self.renew_deadline <= self.jitter_factor * self.retry_period:
            raise LeaderElectionConfigError(
                "renew_deadline must be greater than retry_period * jitter_factor"
            )
        if self.retry_period <= 0:
            raise LeaderElectionConfigError("retry_period must be positive")


@dataclass(frozen=True)
class LeaderElectionRecord:
    holder_identity: str
    lease_duration_seconds: int
    acquire_time: str
    renew_time: str
    leader_transitions: int

    @classmethod
    def from_lease(cls, lease: Obj) -> LeaderElectionRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder_identity=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            leader_transitions=int(spec.get("leaseTransitions") or 0),
        )

    def as_spec(self) -> Obj:
        spec: Obj = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.leader_transitions,
        }
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


class LeaseLock:
    """Reads and conditionally writes one Lease, remembering the last version it saw."""

    def __init__(self, client: ApiClient, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self._lease: Obj | None = None

    async def get(self) -> tuple[LeaderElectionRecord, bytes]:
        lease = await self.client.get(LEASES, self.name, self.namespace)
        self._lease = lease
        raw = repr(sorted((lease.get("spec") or {}).items())).encode()
        return LeaderElectionRecord.from_lease(lease), raw

    async def create(self, record: LeaderElectionRecord) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.as_spec(),
        }
        self._lease = await self.client.create(LEASES, body)

    async def update(self, record: LeaderElectionRecord) -> None:
        if self._lease is None:
            raise NotFoundError(
                {"kind": "Status", "code": 404, "reason": "NotFound", "message": "lease not initialised"}
            )
        body = {**self._lease, "spec": {**(self._lease.get("spec") or {}), **record.as_spec()}}
        self._lease = await self.client.replace(LEASES, body)


class LeaderElector:
    def __init__(
        self,
        client: ApiClient,
        config: LeaderElectionConfig,
        *,
        on_started_leading: Callable[[], Awaitable[None]] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.lock = LeaseLock(client, config.namespace, config.name)
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self.clock = clock
        self._rng = rng or random.Random()
        self.observed_record: LeaderElectionRecord | None = None
        self.observed_time = 0.0
        self._observed_raw = b""
        self._reported_leader: str | None = None
        self._leading = False
        #: monotonic time the last successful acquire or renew request started (None: not leading)
        self._renewed_at: float | None = None
        #: the current term's (None between terms): set when a fence check fails, so run() stops leading
        self._fenced: asyncio.Event | None = None

    # --- state -------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return self.config.identity

    def is_leader(self) -> bool:
        return self.observed_record is not None and self.observed_record.holder_identity == self.identity

    @property
    def leader(self) -> str:
        """The holder this contender last observed ("" when none)."""
        return self.observed_record.holder_identity if self.observed_record else ""

    @property
    def leading(self) -> bool:
        """True while this contender runs as leader."""
        return self._leading

    def holds_lease(self) -> bool:
        """Whether this contender may act as leader now.

        True while the lease record it last saw names it and its last successful acquire or
        renew request started less than ``renew_deadline`` ago on its monotonic clock.
        """
        renewed = self._renewed_at
        return (
            renewed is not None
            and self.is_leader()
            and self.clock.monotonic() - renewed < self.config.renew_deadline
        )

    def check_lease(self) -> None:
        """The fence: return if :meth:`holds_lease`, else stop leading and raise :class:`NotLeaderError`.

        Call it before each write the leader makes (as a client's write guard). A failed
        check wakes :meth:`run`, which cancels ``on_started_leading`` at once.
        """
        if self.holds_lease():
            return
        if self._fenced is not None and not self._fenced.is_set():
            self._fenced.set()
            log.warning(
                "leader election %s: %s no longer holds the lease (%s); refusing writes and stepping down",
                self.config.name,
                self.identity,
                self._why_not_held(),
            )
        raise NotLeaderError(f"{self.identity} does not hold the {self.config.name} lease")

    def _why_not_held(self) -> str:
        if self._renewed_at is None:
            return "not leading"
        if not self.is_leader():
            return f"held by {self.leader or 'nobody'}"
        since = self.clock.monotonic() - self._renewed_at
        return f"last renewed {since:.1f}s ago, renew deadline {self.config.renew_deadline:.1f}s"

    def _lease_valid(self, now: float) -> bool:
        if self.observed_record is None:
            return False
        return self.observed_time + self.observed_record.lease_duration_seconds > now

    def _observe(self, record: LeaderElectionRecord) -> None:
        self.observed_record = record
        self.observed_time = self.clock.monotonic()

    def _report_transition(self) -> None:
        holder = self.leader
        if holder != self._reported_leader:
            self._reported_leader = holder
            if self.on_new_leader is not None and holder:
                try:
                    self.on_new_leader(holder)
                except Exception:
                    log.exception("leader election %s: on_new_leader failed", self.config.name)

    # --- one attempt ---------------------------------------------------------------------

    async def try_acquire_or_renew(self) -> bool:
        """One acquire or renew attempt; on success the fence counts from this call's start."""
        started = self.clock.monotonic()
        if await self._try_acquire_or_renew():
            self._renewed_at = started
            return True
        return False

    async def _try_acquire_or_renew(self) -> bool:
        now_wall = format_micro_time(self.clock.time())
        record = LeaderElectionRecord(self.identity, int(self.config.lease_duration), now_wall, now_wall, 0)
        try:
            if (
                self.is_leader()
                and self._lease_valid(self.clock.monotonic())
                and self.observed_record is not None
            ):
                optimistic = LeaderElectionRecord(
                    self.identity,
                    record.lease_duration_seconds,
                    self.observed_record.acquire_time,
                    now_wall,
                    self.observed_record.leader_transitions,
                )
                try:
                    await self.lock.update(optimistic)
                    self._observe(optimistic)
                    return True
                except ApiError as exc:
                    log.info(
                        "leader election %s: optimistic renew failed (%s); re-reading", self.config.name, exc
                    )
            try:
                old, raw = await self.lock.get()
            except NotFoundError:
                await self.lock.create(record)
                self._observe(record)
                return True
            if raw != self._observed_raw:
                self._observe(old)
                self._observed_raw = raw
            if old.holder_identity and self._lease_valid(self.clock.monotonic()) and not self.is_leader():
                return False
            if self.is_leader():
                record = LeaderElectionRecord(
                    self.identity,
                    record.lease_duration_seconds,
                    old.acquire_time,
                    now_wall,
                    old.leader_transitions,
                )
            else:
                record = LeaderElectionRecord(
                    self.identity,
                    record.lease_duration_seconds,
                    now_wall,
                    now_wall,
                    old.leader_transitions + 1,
                )
            await self.lock.update(record)
            self._observe(record)
            return True
        except (ApiError, ApiConnectionError) as exc:
            log.info("leader election %s: %s", self.config.name, exc)
            return False

    async def _attempt(self, budget: float) -> bool:
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
            async with asyncio.timeout(max(budget, 0.1)):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            return False

    # --- loops -----------------------------------------------------------------------------

    async def _acquire(self) -> None:
        cfg = self.config
        while True:
            succeeded = await self._attempt(cfg.renew_deadline)
            self._report_transition()
            if succeeded:
                log.info("leader election %s: %s acquired the lease", cfg.name, self.identity)
                return
            await self.clock.sleep(cfg.retry_period * (1.0 + self._rng.random() * cfg.jitter_factor))

    async def _renew(self) -> None:
        """Renew every ``retry_period``; return when the lease is no longer held."""
        cfg = self.config
        while True:
            if not self.holds_lease():
                self._report_transition()
                why = self._why_not_held()
                log.warning("leader election %s: %s lost the lease (%s)", cfg.name, self.identity, why)
                return
            assert self._renewed_at is not None
            # an attempt never outlives the lease it is renewing
            budget = self._renewed_at + cfg.renew_deadline - self.clock.monotonic()
            renewed = await self._attempt(budget)
            self._report_transition()
            if not renewed and not self.is_leader():
                log.warning(
                    "leader election %s: %s lost the lease to %s",
                    cfg.name,
                    self.identity,
                    self.leader or "nobody",
                )
                return
            wait = cfg.retry_period
            if not renewed:
                # wake when the lease lapses, to step down then rather than up to a retry period later
                wait = min(wait, max(0.0, self._renewed_at + cfg.renew_deadline - self.clock.monotonic()))
            await self.clock.sleep(wait)

    async def release(self) -> bool:
        """Give the lease up if this contender holds it."""
        if not self.is_leader() or self.observed_record is None:
            return True
        now_wall = format_micro_time(self.clock.time())
        record = LeaderElectionRecord("", 1, now_wall, now_wall, self.observed_record.leader_transitions)
        try:
            # a release only saves the next leader the wait for expiry: it must not hold up a stop
            async with asyncio.timeout(min(self.config.renew_deadline, RELEASE_TIMEOUT_S)):
                await self._release(record)
        except (ApiError, ApiConnectionError, TimeoutError) as exc:
            log.warning("leader election %s: release failed: %s", self.config.name, exc)
            return False
        self._observe(record)
        return True

    async def _release(self, record: LeaderElectionRecord) -> None:
        try:
            await self.lock.update(record)
        except ConflictError:
            # a renewal cancelled in flight may have landed: re-read, and release only what is still ours
            current, _ = await self.lock.get()
            if current.holder_identity != self.identity:
                return
            await self.lock.update(record)

    async def run(self) -> None:
        """Contend until leading, lead until the lease is lost or the task is cancelled.

        Returns after leadership is lost -- renewal failed, another holder was seen, or a
        :meth:`check_lease` failed -- or after the leading callback returned; it may then be
        called again to contend again. Cancelling the task releases the lease first when
        ``release_on_cancel`` is set. An error of the leading callback is raised, except
        :class:`NotLeaderError` (a write refused by the fence), which is the lease lost.
        """
        self._renewed_at = None
        await self._acquire()
        fenced = self._fenced = asyncio.Event()
        self._leading = True
        leading: asyncio.Task[None] | None = None
        if self.on_started_leading is not None:
            leading = asyncio.ensure_future(self.on_started_leading())
        renewing = asyncio.ensure_future(self._renew())
        fence = asyncio.ensure_future(fenced.wait())
        cancelled = False
        try:
            waiting: set[asyncio.Future[Any]] = {renewing, fence} | ({leading} if leading else set())
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            cancelled = True
        finally:
            # from here on every fence check fails: nothing is written while the callback stops
            self._renewed_at = None
            self._fenced = None
            self._leading = False
            fence.cancel()
            for task in (renewing, leading):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if cancelled and self.config.release_on_cancel:
                await self.release()
            if self.on_stopped_leading is not None:
                try:
                    self.on_stopped_leading()
                except Exception:
                    log.exception("leader election %s: on_stopped_leading failed", self.config.name)
        if cancelled:
            raise asyncio.CancelledError
        if leading is not None and leading.done() and not leading.cancelled():
            error = leading.exception()
            if error is not None and not isinstance(error, NotLeaderError):
                raise error
