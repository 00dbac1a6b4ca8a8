"""Stopping a group of asyncio tasks: the one shutdown step every control-plane loop shares."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` (those already done are left as they are) and wait until each has
    ended, whatever it raised: its failure was handled, or reported, where it mattered."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
