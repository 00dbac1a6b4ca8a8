"""Callback fan-out: consumers register per type and are called after a change.

As upstream's callback runner: one pending signal per type (a burst of changes coalesces
into one run), one runner task per type, started only after every informer synced.
Callbacks run on the event loop and receive the states informer; one failing callback is
logged and does not stop the others.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class CallbackType(enum.StrEnum):
    NODE_SLO_SPEC = "NodeSLOSpec"
    ALL_PODS = "AllPods"
    NODE_TOPOLOGY = "NodeTopology"
    NODE_METADATA = "NodeMetadata"


Callback = Callable[[Any], None]


class CallbackRunner:
    def __init__(self, target: Any) -> None:
        self.target = target
        self._callbacks: dict[CallbackType, list[tuple[str, Callback]]] = {t: [] for t in CallbackType}
        self._pending = {t: asyncio.Event() for t in CallbackType}
        self._tasks: list[asyncio.Task[None]] = []

    def register(self, kind: CallbackType, name: str, callback: Callback) -> None:
        self._callbacks[kind].append((name, callback))

    def signal(self, kind: CallbackType) -> None:
        self._pending[kind].set()

    def run_now(self, kind: CallbackType) -> None:
        for name, callback in self._callbacks[kind]:
            try:
                callback(self.target)
            except Exception:
                log.exception("%s callback %s failed", kind, name)

    async def _runner(self, kind: CallbackType) -> None:
        event = self._pending[kind]
        while True:
            await event.wait()
            event.clear()
            self.run_now(kind)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._runner(kind), name=f"callbacks-{kind}") for kind in CallbackType
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
