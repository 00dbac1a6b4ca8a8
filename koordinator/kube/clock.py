"""Time sources: the one :class:`Clock` protocol, the system clock, and :data:`Now` readings.

Leader election, resync and backoff read time through a clock so tests can drive them
with :class:`testsupport.fake.FakeClock` instead of waiting. Code that only reads
the time (rate limits, caches with a time to live, timestamps of samples) takes a
:data:`Now`, one of a clock's readings such as ``SYSTEM_CLOCK.monotonic``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol, TypeAlias

Now: TypeAlias = Callable[[], float]
"""One reading of a :class:`Clock` (its bound ``monotonic`` or ``time``, or a function like them)."""


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for durations)."""
        ...

    def time(self) -> float:
        """Seconds since the epoch (for timestamps written to the API)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock."""
        ...


class SystemClock:
    """The process's real clocks."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


SYSTEM_CLOCK = SystemClock()
