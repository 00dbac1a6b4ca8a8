"""Serving ``/metrics`` to any number of scrapers with flat memory.

A rendering of the registry is a few megabytes on a busy node (about 2 MB at 100 pods
with PSI, 7 MB at 300), and rendering it once per request let 200 concurrent scrapes
take the agent from 70 MB to 660 MB. Here:

* **one rendering, shared**: scrapes that arrive while a rendering runs wait for that
  one (single flight), and a finished body is served again for
  :attr:`ScrapeLimits.share_window` seconds after it was rendered, so a flood costs at
  most one rendering per window plus the render time;
* **written in chunks**: the shared body goes out in :attr:`ScrapeLimits.chunk_bytes`
  slices of a memoryview, each write waiting for the socket to drain, so a slow reader
  holds about one chunk of transport buffer, never a copy of the body;
* **bounded concurrency**: at most :attr:`ScrapeLimits.max_in_flight` responses are
  written at a time; up to :attr:`ScrapeLimits.max_waiting` more wait, each at most
  :attr:`ScrapeLimits.wait_timeout` seconds, for a slot; any other scrape is answered
  ``503 Service Unavailable`` with ``Retry-After`` at once (logged once a minute with a
  count). A response that cannot be written within :attr:`ScrapeLimits.write_timeout`
  (a reader that stopped reading) is cut off, so it cannot hold a slot for ever.

The body is byte for byte what :func:`koordlet.metrics.render_async` writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from koordinator.kube.clock import SYSTEM_CLOCK, Now

log = logging.getLogger(__name__)

#: how often the refused scrapes are logged (with their count), at most
REFUSED_LOG_INTERVAL_S = 60.0


@dataclass(frozen=True)
class ScrapeLimits:
    """How ``/metrics`` is shared and bounded (see the module docstring)."""

    #: seconds a rendered body is served again after its rendering finished
    share_window: float = 1.0
    #: responses written at the same time
    max_in_flight: int = 8
    #: scrapes waiting for one of those slots; beyond them, 503 at once
    max_waiting: int = 64
    #: seconds a scrape waits for a slot before it gets a 503
    wait_timeout: float = 5.0
    #: seconds to write one response, headers to last byte, before the connection is cut
    write_timeout: float = 30.0
    #: bytes handed to the socket per write
    chunk_bytes: int = 64 * 1024
    #: the ``Retry-After`` of a 503, in seconds
    retry_after: int = 1


class SharedRendering:
    """A rendering shared by every caller: single flight, reused for ``share_window``
    seconds after it finished. A failed rendering is not kept: the next call retries."""

    def __init__(
        self,
        render: Callable[[], Awaitable[bytes]],
        share_window: float,
        clock: Now = SYSTEM_CLOCK.monotonic,
    ) -> None:
        self._render = render
        self.share_window = share_window
        self._clock = clock
        self._body: bytes | None = None
        self._rendered_at = 0.0
        self._running: asyncio.Task[bytes] | None = None

    async def body(self) -> bytes:
        if self._body is not None:
            if self._clock() - self._rendered_at < self.share_window:
                return self._body
            self._body = None  # stale: not kept alive beside the next rendering
        if self._running is None:
            self._running = asyncio.create_task(self._run(), name="metrics-rendering")
            self._running.add_done_callback(_retrieve)
        # shielded: a scraper that goes away does not cancel the others' rendering
        return await asyncio.shield(self._running)

    async def _run(self) -> bytes:
        try:
            body = await self._render()
        finally:
            self._running = None
        self._body, self._rendered_at = body, self._clock()
        return body


def _retrieve(task: asyncio.Task[bytes]) -> None:
    """Mark a failed rendering's exception as retrieved: its waiters get it (each answers
    500, logged by aiohttp); with none left, asyncio would log it as never retrieved."""
    if not task.cancelled():
        task.exception()


class MetricsEndpoint:
    """The aiohttp handler of ``/metrics``: one shared rendering, written in chunks to
    at most ``limits.max_in_flight`` scrapers at a time."""

    def __init__(self, render: Callable[[], Awaitable[bytes]], limits: ScrapeLimits | None = None) -> None:
        self.limits = limits = limits or ScrapeLimits()
        self.shared = SharedRendering(render, limits.share_window)
        self._slots = asyncio.Semaphore(limits.max_in_flight)
        self._waiting = 0
        self._refused = 0
        self._refused_logged_at = float("-inf")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if not await self._acquire():
            return self._refuse()
        try:
            body = await self.shared.body()
            return await self._send(request, body)
        finally:
            self._slots.release()

    async def _acquire(self) -> bool:
        """A slot to write a response in; False when none freed up in time or too many
        scrapes already wait for one."""
        if not self._slots.locked():
            await self._slots.acquire()
            return True
        if self._waiting >= self.limits.max_waiting:
            return False
        self._waiting += 1
        try:
            async with asyncio.timeout(self.limits.wait_timeout):
                await self._slots.acquire()
            return True
        except TimeoutError:
            return False
        finally:
            self._waiting -= 1

    def _refuse(self) -> web.Response:
        self._refused += 1
        now = time.monotonic()
        if now - self._refused_logged_at >= REFUSED_LOG_INTERVAL_S:
            limits = self.limits
            log.warning(
                "refused %d /metrics scrape(s) with 503 since the last report: %d responses in "
                "flight and %d waiting (at most %gs) is the limit",
                self._refused,
                limits.max_in_flight,
                limits.max_waiting,
                limits.wait_timeout,
            )
            self._refused, self._refused_logged_at = 0, now
        limit = self.limits.max_in_flight
        return web.Response(
            status=503,
            text=f"too many concurrent scrapes of /metrics (limit {limit}); retry later\n",
            headers={"Retry-After": str(self.limits.retry_after)},
        )

    async def _send(self, request: web.Request, body: bytes) -> web.StreamResponse:
        response = web.StreamResponse(headers={"X-Format": "0.0.4"})
        response.content_type = "text/plain"
        response.charset = "utf-8"
        response.content_length = len(body)
        chunk = self.limits.chunk_bytes
        view = memoryview(body)
        try:
            async with asyncio.timeout(self.limits.write_timeout):
                await response.prepare(request)
                if request.method != "HEAD":
                    for start in range(0, len(view), chunk):
                        await response.write(view[start : start + chunk])
                await response.write_eof()
        except TimeoutError:
            log.warning(
                "cut off a /metrics response to %s: not read within %gs",
                request.remote,
                self.limits.write_timeout,
            )
            if request.transport is not None:
                request.transport.abort()
        except ConnectionError:
            pass  # the scraper went away; nothing to tell it
        return response
