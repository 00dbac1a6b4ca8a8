"""Waiting in tests for state that changes elsewhere (another task, a server, a process)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(predicate: Callable[[], object], within: float = 10.0, every: float = 0.05) -> None:
    """Return once ``predicate()`` is true; TimeoutError after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - the state lives outside this loop's reach
            await asyncio.sleep(every)
