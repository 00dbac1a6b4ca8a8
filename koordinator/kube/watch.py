"""Watch streams: newline-delimited ``WatchEvent`` JSON turned into :class:`WatchEvent` objects.

An ``ERROR`` event carries a ``Status``; it is raised as the matching typed error (a
too-old resourceVersion arrives this way as :class:`~koordinator.kube.errors.GoneError`).
Lines are split by hand instead of with ``readline`` so one object larger than aiohttp's
line buffer still decodes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from koordinator.kube.errors import ApiConnectionError, KubeError, error_from_status
from koordinator.kube.managedfields import strip_managed_fields

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"
ERROR = "ERROR"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


class WatchStream:
    """An open watch; iterate it with ``async for`` and close it (or use ``async with``).

    Iteration ends when the server closes the stream (``timeoutSeconds`` elapsed); the
    caller re-watches from the last resourceVersion it saw.
    """

    def __init__(self, response: aiohttp.ClientResponse, strip_managed_fields: bool = False) -> None:
        self._response = response
        self._strip = strip_managed_fields
        self._chunks = response.content.iter_any()
        self._buffer = b""
        self._pending: deque[bytes] = deque()
        self._closed = False

    async def __aenter__(self) -> WatchStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._response.close()

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self

    async def _next_line(self) -> bytes | None:
        while not self._pending:
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                rest, self._buffer = self._buffer.strip(), b""
                return rest or None
            except (aiohttp.ClientError, OSError) as exc:
                raise ApiConnectionError(f"watch stream broken: {exc!r}") from exc
            data = self._buffer + chunk
            lines = data.split(b"\n")
            self._buffer = lines.pop()
            self._pending.extend(line for line in lines if line.strip())
        return self._pending.popleft()

    async def __anext__(self) -> WatchEvent:
        if self._closed:
            raise StopAsyncIteration
        line = await self._next_line()
        if line is None:
            self.close()
            raise StopAsyncIteration
        try:
            raw = orjson.loads(strip_managed_fields(line) if self._strip else line)
        except orjson.JSONDecodeError as exc:
            self.close()
            raise KubeError(f"undecodable watch event: {line[:200]!r}") from exc
        etype = raw.get("type") if isinstance(raw, dict) else None
        obj = raw.get("object") if isinstance(raw, dict) else None
        if not isinstance(etype, str) or not isinstance(obj, dict):
            self.close()
            raise KubeError(f"malformed watch event: {line[:200]!r}")
        if etype == ERROR:
            self.close()
            raise error_from_status(obj)
        return WatchEvent(etype, obj)
