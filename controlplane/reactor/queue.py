"""A per-key work queue with client-go's semantics, on the event loop.

* **Deduplication**: a key waiting in the queue is there once, however often it is added.
* **One worker per key**: :meth:`WorkQueue.get` marks the key as processing until
  :meth:`WorkQueue.done`; a key added meanwhile is remembered and queued again by ``done``,
  so the same key is never reconciled by two workers at once and no change is lost.
* **Delays**: :meth:`add_after` holds a key until its time (the earliest wins when a key
  is delayed twice); :meth:`add_rate_limited` delays it by the rate limiter's backoff,
  :meth:`forget` resets that backoff.
* **Shutdown**: :meth:`shutdown` wakes every waiting :meth:`get` with ``None``; keys in
  progress may still call :meth:`done`.

Time comes from an injectable clock (delays and the duration metrics).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import itertools

from controlplane.reactor.metrics import ReactorMetrics
from controlplane.reactor.ratelimit import RateLimiter, default_rate_limiter
from koordinator.kube.clock import SYSTEM_CLOCK, Clock

__all__ = ["WorkQueue"]


class WorkQueue:
    def __init__(
        self,
        name: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        rate_limiter: RateLimiter | None = None,
        metrics: ReactorMetrics | None = None,
    ) -> None:
        self.name = name
        self.clock = clock
        self.rate_limiter = rate_limiter if rate_limiter is not None else default_rate_limiter(clock)
        self.metrics = metrics
        self._queue: collections.deque[str] = collections.deque()
        #: keys waiting to be processed (queued, or re-added while processing)
        self._dirty: set[str] = set()
        #: key -> when it was picked up
        self._processing: dict[str, float] = {}
        #: key -> when it was first added since it was last picked up
        self._added_at: dict[str, float] = {}
        self._delayed: list[tuple[float, int, str]] = []
        self._delayed_at: dict[str, float] = {}
        self._seq = itertools.count()
        self._getters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._delay_wakeup: asyncio.Event | None = None
        self._delayer: asyncio.Task[None] | None = None
        self._idle: asyncio.Event | None = None
        self._shutting_down = False
        # label children resolved once: a labels() lookup per operation would cost more than the queue
        self._m_adds = metrics.adds.labels(name) if metrics is not None else None
        self._m_retries = metrics.retries.labels(name) if metrics is not None else None
        self._m_queue_duration = metrics.queue_duration.labels(name) if metrics is not None else None
        self._m_work_duration = metrics.work_duration.labels(name) if metrics is not None else None
        if metrics is not None:
            metrics.watch_queue(name, self._unfinished_seconds, self._longest_seconds)
            # the depth is read when scraped rather than set on every add and get
            metrics.depth.labels(name).set_function(lambda: float(len(self._queue)))

    # --- state ----------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys ready to be picked up."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    @property
    def processing(self) -> frozenset[str]:
        return frozenset(self._processing)

    @property
    def delayed(self) -> int:
        """Keys waiting for their delay to pass."""
        return len(self._delayed_at)

    def is_idle(self) -> bool:
        """Nothing queued, nothing in progress and nothing delayed."""
        return not self._queue and not self._processing and not self._delayed_at

    async def wait_idle(self) -> None:
        """Until :meth:`is_idle` (bound it with ``asyncio.timeout``)."""
        while not self.is_idle():
            if self._idle is None:
                self._idle = asyncio.Event()
            self._idle.clear()
            await self._idle.wait()

    def num_requeues(self, key: str) -> int:
        return self.rate_limiter.retries(key)

    def _unfinished_seconds(self) -> float:
        now = self.clock.monotonic()
        return sum(now - started for started in self._processing.values())

    def _longest_seconds(self) -> float:
        now = self.clock.monotonic()
        return max((now - started for started in self._processing.values()), default=0.0)

    def _check_idle(self) -> None:
        if self._idle is not None and self.is_idle():
            self._idle.set()

    # --- adding ------------------------------------------------------------------------------

    def add(self, key: str) -> None:
        """Queue ``key`` unless it is already waiting (re-queued after ``done`` if in progress)."""
        if self._shutting_down or key in self._dirty:
            return
        if self._m_adds is not None:
            self._m_adds.inc()
        self._dirty.add(key)
        self._added_at.setdefault(key, self.clock.monotonic())
        if key in self._processing:
            return
        self._queue.append(key)
        self._wake_getter()

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds (at once when ``delay <= 0``)."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        at = self.clock.monotonic() + delay
        current = self._delayed_at.get(key)
        if current is not None and current <= at:
            return
        self._delayed_at[key] = at
        heapq.heappush(self._delayed, (at, next(self._seq), key))
        self._ensure_delayer()
        assert self._delay_wakeup is not None
        self._delay_wakeup.set()

    def add_rate_limited(self, key: str) -> None:
        """Queue ``key`` after its backoff; counts a retry."""
        if self._shutting_down:
            return
        if self._m_retries is not None:
            self._m_retries.inc()
        self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: str) -> None:
        """Reset ``key``'s backoff (after a success)."""
        self.rate_limiter.forget(key)

    # --- taking -------------------------------------------------------------------------------

    def _wake_getter(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def get(self) -> str | None:
        """The next key (now marked as processing), or ``None`` once the queue shuts down."""
        while not self._queue or self._shutting_down:
            if self._shutting_down:
                return None
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # pass the wake-up on if this getter was chosen just as it was cancelled
                if waiter.done() and not waiter.cancelled() and self._queue:
                    self._wake_getter()
                raise
        key = self._queue.popleft()
        now = self.clock.monotonic()
        self._dirty.discard(key)
        self._processing[key] = now
        added = self._added_at.pop(key, now)
        if self._m_queue_duration is not None:
            self._m_queue_duration.observe(max(0.0, now - added))
        return key

    def done(self, key: str) -> None:
        """``key`` is no longer processed; queue it again if it was added meanwhile."""
        started = self._processing.pop(key, None)
        if started is not None and self._m_work_duration is not None:
            self._m_work_duration.observe(max(0.0, self.clock.monotonic() - started))
        if key in self._dirty and not self._shutting_down:
            self._queue.append(key)
            self._wake_getter()
        self._check_idle()

    # --- delays -------------------------------------------------------------------------------

    def _ensure_delayer(self) -> None:
        if self._delay_wakeup is None:
            self._delay_wakeup = asyncio.Event()
        if self._delayer is None or self._delayer.done():
            self._delayer = asyncio.get_running_loop().create_task(
                self._release_delayed(), name=f"workqueue-{self.name}-delays"
            )

    async def _release_delayed(self) -> None:
        assert self._delay_wakeup is not None
        wakeup = self._delay_wakeup
        while not self._shutting_down:
            now = self.clock.monotonic()
            while self._delayed and self._delayed[0][0] <= now:
                at, _, key = heapq.heappop(self._delayed)
                if self._delayed_at.get(key) == at:
                    del self._delayed_at[key]
                    self.add(key)
            self._check_idle()
            wakeup.clear()
            if not self._delayed:
                await wakeup.wait()
                continue
            sleeper = asyncio.ensure_future(self._sleep_until(self._delayed[0][0]))
            woken = asyncio.ensure_future(wakeup.wait())
            try:
                await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (sleeper, woken):
                    if not task.done():
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task

    async def _sleep_until(self, at: float) -> None:
        # the remaining time is measured when the sleep starts, not when it was scheduled
        await self.clock.sleep(at - self.clock.monotonic())

    # --- shutdown -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop handing out keys: waiting getters return ``None``; delayed keys are dropped."""
        self._shutting_down = True
        self._delayed.clear()
        self._delayed_at.clear()
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        if self._delay_wakeup is not None:
            self._delay_wakeup.set()
        self._check_idle()

    async def close(self) -> None:
        """:meth:`shutdown` and wait for the delay task to end."""
        self.shutdown()
        if self._delayer is not None:
            self._delayer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._delayer
            self._delayer = None
