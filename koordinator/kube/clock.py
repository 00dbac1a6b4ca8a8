"""Time sources: a :class:`Clock` protocol and the system clock.

Leader election, resync and backoff read time through a clock so tests can drive them
with :class:`koordinator.kube.fake.FakeClock` instead of waiting.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


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
