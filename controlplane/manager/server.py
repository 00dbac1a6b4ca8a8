"""koord-manager's webhook server (its health and metrics servers are the control plane's
shared ones, :mod:`controlplane.reactor.serving`).

* Webhook server (HTTPS, ``--webhook-port``, default 9876): ``POST`` on each enabled
  webhook path, answered by the :class:`AdmissionDispatcher` (always an AdmissionReview;
  malformed bodies get an error review with status code 400), ``GET /healthz``,
  ``GET /readyz``, and ``GET /elasticQuota`` (the quota tree as JSON, when the quota
  validating webhook is on). Limits (:class:`WebhookLimits`, docs/manager.md "Limits"):
  a body declared above 7 MiB is answered with an error review from its
  ``Content-Length``, unread (never a bare 413); admitted requests share a budget of body
  bytes in flight and a cap on their number (past them: an error review with status code
  429); a body must arrive within 30 s of its first read.
* On every server: the TLS handshake and each request's headers within 32 s, a
  kept-alive connection closed after 90 s without a request (controller-runtime's
  values; :func:`controlplane.reactor.serving.start_site`).
* Health server (HTTP, ``--health-probe-addr``, default ``:8000``): ``/healthz``
  (liveness: the event loop answers) and ``/readyz`` (informers synced, and the webhook
  server presents a certificate that verifies against the current CA).
* Metrics server (HTTP, ``--metrics-addr``, default ``:8080``): the manager's registry in
  the Prometheus text format at ``/metrics``, and under upstream's extra paths
  ``/internal-metrics`` and ``/all-metrics`` (``/external-metrics`` is empty: there is no
  external registry).

:func:`settle_after_start` is the process tuning koord-manager applies once its start-up
heap is built (imports, wiring, synced informer caches), before the webhook server listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.streams import StreamReader

from controlplane.manager.webhooks.dispatch import (
    MAX_REQUEST_BYTES,
    AdmissionDispatcher,
    body_too_large,
    oversized_body,
)
from controlplane.manager.webhooks.review import encode_review, errored
from controlplane.reactor.serving import Readiness, ok, readiness_handler
from koordinator.heap import freeze_startup_heap

__all__ = ["BODY_TIMEOUT_S", "WebhookLimits", "settle_after_start", "webhook_app"]

log = logging.getLogger(__name__)

#: An admitted webhook request's body within 30 s (Go's server sets no such bound; ours
#: frees the in-flight budget a slow sender holds).
BODY_TIMEOUT_S = 30.0


def settle_after_start() -> None:
    """koord-manager's process tuning once its start-up heap is built: frozen, with rarer full
    collections (:func:`koordinator.heap.freeze_startup_heap`)."""
    freeze_startup_heap(rarer_full_collections=True)


@dataclass(frozen=True, slots=True)
class WebhookLimits:
    """What the webhook server admits at once, and how long it waits for a request's body.

    Every admission request first takes its ``Content-Length`` from a budget of body
    bytes in flight (a body without one -- chunked -- takes ``max_body_bytes``), before
    any of its body is read, and gives it back once it is answered. While the budget is
    spent, requests wait in arrival order with their bodies unread (TCP holds the
    senders back); one that waits ``queue_timeout_s`` is answered with status code 429.
    At most ``max_requests`` are admitted or waiting; the next is answered with 429 at
    once. A body above ``max_body_bytes`` is refused from its ``Content-Length``, unread.
    """

    #: Largest request body (controller-runtime's 7 MiB).
    max_body_bytes: int = MAX_REQUEST_BYTES
    #: Body bytes of all admitted requests together.
    in_flight_bytes: int = 4 * MAX_REQUEST_BYTES
    #: Requests admitted or waiting for the budget.
    max_requests: int = 128
    #: Longest wait for the budget before the 429 answer.
    queue_timeout_s: float = 10.0
    #: Longest time to receive an admitted request's body, from its first read.
    body_timeout_s: float = BODY_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.in_flight_bytes < self.max_body_bytes:
            raise ValueError("in_flight_bytes must hold at least one body of max_body_bytes")
        if self.max_requests < 1:
            raise ValueError("max_requests must be at least 1")


class _InFlight:
    """The budget of body bytes and the count of admission requests in flight.

    A request that fits while nobody waits takes its share without waiting (every
    request, as long as the server is not flooded); the others queue in arrival order.
    """

    __slots__ = ("_queue", "free", "requests")

    def __init__(self, budget: int) -> None:
        self.free = budget
        self.requests = 0
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()

    def take_now(self, size: int) -> bool:
        if size <= self.free and not self._queue:
            self.free -= size
            return True
        return False

    async def take(self, size: int, wait_s: float) -> bool:
        """Wait in line for ``size`` bytes; ``False`` after ``wait_s`` seconds without them."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._queue.append(entry)
        try:
            async with asyncio.timeout(wait_s):
                await waiter
        except BaseException as exc:  # the wait ended (TimeoutError) or was cancelled
            if waiter.done() and not waiter.cancelled():
                self.give(size)  # granted just as the wait ended
            else:
                waiter.cancel()
                with contextlib.suppress(ValueError):
                    self._queue.remove(entry)
                self._grant()  # it may have held up the line
            if isinstance(exc, TimeoutError):
                return False
            raise
        return True

    def give(self, size: int) -> None:
        self.free += size
        if self._queue:
            self._grant()

    def _grant(self) -> None:
        queue = self._queue
        while queue:
            size, waiter = queue[0]
            if waiter.done():
                queue.popleft()
            elif size <= self.free:
                queue.popleft()
                self.free -= size
                waiter.set_result(None)
            else:
                return


class _RefusedError(Exception):
    """A request answered with an error review before (or instead of) its handler."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _refusal(code: int, message: str) -> web.Response:
    """An error AdmissionReview (HTTP 200, ``status.code`` ``code``) that closes the connection."""
    answer = encode_review("admission.k8s.io/v1", "", errored(code, message))
    response = web.Response(body=answer, content_type="application/json")
    response.force_close()
    return response


async def _read_exactly(content: StreamReader, length: int) -> bytearray:
    """A body of known length, read into one buffer of that size as it arrives."""
    body = bytearray(length)
    view = memoryview(body)
    filled = 0
    while filled < length:
        chunk = await content.readany()
        if not chunk:
            raise _RefusedError(400, f"request body ended after {filled} of {length} bytes")
        view[filled : filled + len(chunk)] = chunk
        filled += len(chunk)
    return body


async def _body(request: web.Request, length: int | None, timeout_s: float) -> bytes | bytearray:
    """The request body, within ``timeout_s``; one that has arrived whole is taken without waiting.

    The apiserver's bodies arrive whole in the segments the headers came in, almost
    always: no timer, no copy beyond the one out of the buffer.
    """
    content = request.content
    if content.is_eof():
        body = content.read_nowait(-1)
        too_large = oversized_body(len(body), request.client_max_size)
        if too_large is not None:
            raise _RefusedError(400, too_large)
        return body
    try:
        async with asyncio.timeout(timeout_s):
            if length is not None:
                return await _read_exactly(content, length)
            return await request.read()
    except TimeoutError:
        raise _RefusedError(408, f"request body not received within {timeout_s:g}s") from None
    except web.HTTPRequestEntityTooLarge:
        raise _RefusedError(400, body_too_large(request.client_max_size)) from None
    except web.RequestPayloadError as exc:
        raise _RefusedError(400, f"couldn't read the request body: {exc}") from None
    except ConnectionError:  # the client left: nobody reads the answer, nothing to log
        raise _RefusedError(400, "connection lost while reading the request body") from None


def webhook_app(
    dispatcher: AdmissionDispatcher,
    readiness: Readiness,
    debug_quota: Callable[[], dict[str, Any]] | None = None,
    *,
    limits: WebhookLimits = WebhookLimits(),
) -> web.Application:
    # Bodies are read here, not by aiohttp: client_max_size bounds what request.read()
    # takes for a body without Content-Length.
    app = web.Application(client_max_size=limits.max_body_bytes)
    in_flight = _InFlight(limits.in_flight_bytes)
    busy = f"too many requests in flight (limit {limits.max_requests}); retry later"
    queued_out = (
        f"request not admitted within {limits.queue_timeout_s:g}s: "
        f"{limits.in_flight_bytes} bytes of request bodies already in flight; retry later"
    )

    def admission(path: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            length = request.content_length
            too_large = oversized_body(length, limits.max_body_bytes)
            if too_large is not None:
                return _refusal(400, too_large)
            if in_flight.requests >= limits.max_requests:
                return _refusal(429, busy)
            size = limits.max_body_bytes if length is None else length
            in_flight.requests += 1
            try:
                if not in_flight.take_now(size) and not await in_flight.take(size, limits.queue_timeout_s):
                    return _refusal(429, queued_out)
                try:
                    body = await _body(request, length, limits.body_timeout_s)
                    answer = await dispatcher.review(path, body, request.headers.get("Content-Type"))
                finally:
                    in_flight.give(size)
            except _RefusedError as refused:
                return _refusal(refused.code, str(refused))
            finally:
                in_flight.requests -= 1
            return web.Response(body=answer, content_type="application/json")

        return handle

    for path in dispatcher.paths:
        app.router.add_post(path, admission(path))
    app.router.add_get("/healthz", ok)
    app.router.add_get("/readyz", readiness_handler(readiness))
    if debug_quota is not None:
        quota_dump = debug_quota

        async def elastic_quota(_: web.Request) -> web.StreamResponse:
            return web.Response(text=json.dumps(quota_dump()), content_type="application/json")

        app.router.add_get("/elasticQuota", elastic_quota)
    return app
