"""Pods that a Permit plug-in told to wait: each waits for every such plug-in to allow it,
and is rejected by the first that rejects it or whose timeout runs out (upstream's
``waitingPod``). Plug-ins reach them through :class:`WaitingPods` (a gang allowing its
members once enough arrived, say).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping

from controlplane.scheduler.podinfo import PodInfo


class WaitingPod:
    def __init__(self, pod: PodInfo, node: str, timeouts: Mapping[str, float]) -> None:
        self.pod = pod
        self.node = node
        #: the plug-ins that have not allowed it yet
        self.pending = set(timeouts)
        loop = asyncio.get_running_loop()
        #: None when allowed; (plug-in, message) when rejected
        self._verdict: asyncio.Future[tuple[str, str] | None] = loop.create_future()
        self._timers = [
            loop.call_later(
                timeout,
                self.reject,
                name,
                f"rejected due to timeout after waiting {_go_duration(timeout)} at plugin {name}",
            )
            for name, timeout in timeouts.items()
        ]

    def allow(self, plugin: str) -> None:
        """``plugin`` lets the pod go on; it binds once none is pending."""
        self.pending.discard(plugin)
        if not self.pending:
            self._settle(None)

    def reject(self, plugin: str, message: str) -> None:
        self._settle((plugin, message))

    def _settle(self, verdict: tuple[str, str] | None) -> None:
        if self._verdict.done():
            return
        for timer in self._timers:
            timer.cancel()
        self._verdict.set_result(verdict)

    async def wait(self) -> tuple[str, str] | None:
        """None once allowed; (plug-in, message) once rejected."""
        return await asyncio.shield(self._verdict)


class WaitingPods:
    """The waiting pods of a scheduler, by pod UID."""

    def __init__(self) -> None:
        self._pods: dict[str, WaitingPod] = {}

    def add(self, waiting: WaitingPod) -> None:
        self._pods[waiting.pod.uid] = waiting

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def get(self, uid: str) -> WaitingPod | None:
        return self._pods.get(uid)

    def __iter__(self) -> Iterator[WaitingPod]:
        return iter(list(self._pods.values()))

    def __len__(self) -> int:
        return len(self._pods)


def _go_duration(seconds: float) -> str:
    """A Go ``time.Duration`` string for whole and fractional seconds ("10s", "1.5s", "15m0s")."""
    if seconds >= 60:
        minutes, rest = divmod(seconds, 60)
        return f"{int(minutes)}m{rest:g}s"
    if seconds >= 1 or seconds == 0:
        return f"{seconds:g}s"
    return f"{seconds * 1000:g}ms"
