"""A virtual clock for tests: time moves only when the test says so.

:meth:`FakeClock.advance` moves time and wakes every sleeper whose deadline passed.
:meth:`FakeClock.step` waits until a given number of tasks are asleep on the clock and
then jumps to the earliest deadline, so a test can drive several actors (leader-election
contenders, resync timers) through minutes of virtual time deterministically while their
real I/O still happens in real time between steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Callable


class FakeClock:
    def __init__(self, epoch: float = 1_767_225_600.0) -> None:
        self._now = 0.0
        self._epoch = epoch
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._changed: asyncio.Event | None = None

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._epoch + self._now

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _prune(self) -> None:
        self._sleepers = [s for s in self._sleepers if not s[2].done()]
        heapq.heapify(self._sleepers)

    @property
    def sleeping(self) -> int:
        """How many tasks are waiting on this clock now."""
        return sum(1 for _, _, fut in self._sleepers if not fut.done())

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), future))
        self._event().set()
        try:
            await future
        finally:
            self._event().set()

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper that is due."""
        if seconds < 0:
            raise ValueError("time cannot go backwards")
        self._now += seconds
        self._prune()
        while self._sleepers and self._sleepers[0][0] <= self._now + 1e-9:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    async def wait_sleeping(self, count: int, unless: Callable[[], bool] | None = None) -> bool:
        """Wait (real time) until ``count`` tasks sleep on this clock, or ``unless()`` holds.

        Returns False when it stopped because of ``unless``. Bound it with ``asyncio.timeout``.
        """
        while self.sleeping < count:
            if unless is not None and unless():
                return False
            event = self._event()
            event.clear()
            if unless is None:
                await event.wait()
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.01):
                    await event.wait()
        return True

    async def step(self, actors: int, unless: Callable[[], bool] | None = None) -> float:
        """Once ``actors`` tasks sleep, jump to the earliest deadline; returns the new time.

        With ``unless``, return without moving time as soon as ``unless()`` holds.
        """
        if not await self.wait_sleeping(actors, unless):
            return self._now
        self._prune()
        target = self._sleepers[0][0]
        self.advance(max(0.0, target - self._now))
        # let the woken tasks run up to their next await
        for _ in range(3):
            await asyncio.sleep(0)
        return self._now
