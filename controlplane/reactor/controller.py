"""A controller: a :class:`WorkQueue` and workers that run one reconcile function over its keys.

``Controller(name, reconcile, workers=N)``; informer handlers call :meth:`Controller.enqueue`
(or :meth:`enqueue_after`), :meth:`Controller.run` works the queue until cancelled. The
reconcile function takes a key and returns ``None`` (done), or a :class:`Result` asking
for the key again (after a delay, or with backoff). Exceptions are sorted by
:func:`~controlplane.reactor.errors.is_temporary`: temporary failures come back with
backoff, permanent ones are logged, counted and -- when the error names the object -- told
to the user as a Warning Event, and wait for the next change.

Stopping: cancelling :meth:`run` stops handing out keys. With ``drain_on_cancel`` (the
default, used for a graceful shutdown) reconciles in progress get ``drain_timeout`` seconds
to finish before they are cancelled; without it (leadership lost: another replica may
already be writing) they are cancelled at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from controlplane.reactor.errors import PermanentError, TemporaryError, is_temporary
from controlplane.reactor.metrics import (
    RESULT_ERROR,
    RESULT_REQUEUE,
    RESULT_REQUEUE_AFTER,
    RESULT_SUCCESS,
    ReactorMetrics,
)
from controlplane.reactor.queue import WorkQueue
from controlplane.reactor.ratelimit import RateLimiter
from controlplane.reactor.tasks import cancel_and_wait
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.events import WARNING, EventRecorder

__all__ = ["Controller", "Reconciler", "Result"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Result:
    """What a successful reconcile asks for: the key again after ``requeue_after`` seconds,
    or (``requeue``) again with backoff."""

    requeue_after: float | None = None
    requeue: bool = False


Reconciler = Callable[[str], Awaitable[Result | None]]


class Controller:
    def __init__(
        self,
        name: str,
        reconcile: Reconciler,
        *,
        workers: int = 1,
        clock: Clock = SYSTEM_CLOCK,
        rate_limiter: RateLimiter | None = None,
        metrics: ReactorMetrics | None = None,
        recorder: EventRecorder | None = None,
        drain_timeout: float = 10.0,
    ) -> None:
        if workers < 1:
            raise ValueError("a controller needs at least one worker")
        self.name = name
        self.reconcile = reconcile
        self.workers = workers
        self.clock = clock
        self.metrics = metrics
        self.recorder = recorder
        self.drain_timeout = drain_timeout
        self.drain_on_cancel = True
        self.queue = WorkQueue(name, clock=clock, rate_limiter=rate_limiter, metrics=metrics)
        self._active = 0
        self._running = False
        # label children resolved once (a labels() lookup per reconcile adds up over thousands)
        self._m_results = (
            {
                result: metrics.reconcile_total.labels(name, result)
                for result in (RESULT_SUCCESS, RESULT_ERROR, RESULT_REQUEUE, RESULT_REQUEUE_AFTER)
            }
            if metrics is not None
            else {}
        )
        self._m_time = metrics.reconcile_time.labels(name) if metrics is not None else None
        if metrics is not None:
            metrics.max_concurrent.labels(name).set(workers)
            metrics.active_workers.labels(name).set_function(lambda: float(self._active))

    def __repr__(self) -> str:
        return f"Controller({self.name!r}, workers={self.workers})"

    # --- feeding ---------------------------------------------------------------------------

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    def enqueue_after(self, key: str, delay: float) -> None:
        self.queue.add_after(key, delay)

    def enqueue_all(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.queue.add(key)

    @property
    def running(self) -> bool:
        return self._running

    # --- running ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Work the queue until cancelled (see the module docstring for how it stops)."""
        if self._running:
            raise RuntimeError(f"{self!r} is already running")
        self._running = True
        tasks = [
            asyncio.create_task(self._worker(), name=f"{self.name}-worker-{n}") for n in range(self.workers)
        ]
        log.info("controller %s: started %d worker(s)", self.name, self.workers)
        try:
            # asyncio.wait, not gather: cancelling this task must not cancel the workers
            # before they had the chance to drain
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = [t for t in done if not t.cancelled() and t.exception() is not None]
            if failed:
                # a worker died outside a reconcile (a bug in the loop itself): stop, loudly
                for task in tasks:
                    task.cancel()
                error = failed[0].exception()
                assert error is not None
                raise error
        except asyncio.CancelledError:
            await self._stop(tasks)
            raise
        finally:
            self._running = False

    async def _stop(self, tasks: list[asyncio.Task[None]]) -> None:
        self.queue.shutdown()
        pending = [t for t in tasks if not t.done()]
        if pending and self.drain_on_cancel and self.drain_timeout > 0:
            _, pending_set = await asyncio.wait(pending, timeout=self.drain_timeout)
            pending = list(pending_set)
            if pending:
                log.warning(
                    "controller %s: %d reconcile(s) still running after %.0fs; cancelling them",
                    self.name,
                    len(pending),
                    self.drain_timeout,
                )
        await cancel_and_wait(tasks)  # the drained ones are done already
        await self.queue.close()
        log.info("controller %s: stopped", self.name)

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            if key is None:
                return
            try:
                await self._process(key)
            finally:
                self.queue.done(key)

    def _count(self, result: str) -> None:
        counter = self._m_results.get(result)
        if counter is not None:
            counter.inc()

    def _set_active(self, delta: int) -> None:
        self._active += delta

    async def _process(self, key: str) -> None:
        started = time.perf_counter()
        self._set_active(1)
        try:
            result = await self.reconcile(key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._failed(key, exc)
            return
        finally:
            self._set_active(-1)
            if self._m_time is not None:
                self._m_time.observe(time.perf_counter() - started)
        if result is not None and result.requeue_after is not None and result.requeue_after > 0:
            self.queue.forget(key)
            self.queue.add_after(key, result.requeue_after)
            self._count(RESULT_REQUEUE_AFTER)
        elif result is not None and result.requeue:
            self.queue.add_rate_limited(key)
            self._count(RESULT_REQUEUE)
        else:
            self.queue.forget(key)
            self._count(RESULT_SUCCESS)

    async def _failed(self, key: str, exc: Exception) -> None:
        self._count(RESULT_ERROR)
        if self.metrics is not None:
            self.metrics.reconcile_errors.labels(self.name).inc()
        if is_temporary(exc):
            retries = self.queue.num_requeues(key)
            if isinstance(exc, TemporaryError) and exc.retry_after is not None:
                self.queue.add_after(key, exc.retry_after)
            else:
                self.queue.add_rate_limited(key)
            log.warning("controller %s: %s failed (retry %d): %s", self.name, key, retries + 1, exc)
            return
        self.queue.forget(key)
        if self.metrics is not None:
            self.metrics.terminal_errors.labels(self.name).inc()
        if isinstance(exc, PermanentError):
            log.error("controller %s: %s failed permanently: %s", self.name, key, exc)
            if exc.involved is not None and self.recorder is not None:
                await self.recorder.record(
                    exc.involved, WARNING, exc.reason, str(exc), kind=exc.kind or "Pod"
                )
        else:
            log.error(
                "controller %s: %s failed with an unexpected error; not retried until it changes",
                self.name,
                key,
                exc_info=exc,
            )
