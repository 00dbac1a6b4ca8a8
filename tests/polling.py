"""Waiting in tests for state that changes elsewhere (another task, a server, a process)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def eventually(predicate: Callable[[], object], within: float = 10.0, every: float = 0.05) -> None:
    """Return once ``predicate()`` is true; TimeoutError after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - the state lives outside this loop's reach
            await asyncio.sleep(every)


async def eventually_awaited(
    predicate: Callable[[], Awaitable[object]], within: float = 10.0, every: float = 0.2
) -> None:
    """:func:`eventually` for a predicate that must be awaited (it asks a server)."""
    async with asyncio.timeout(within):
        while not await predicate():  # noqa: ASYNC110 - the state lives outside this loop's reach
            await asyncio.sleep(every)
