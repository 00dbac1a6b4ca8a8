"""koord-manager's HTTP servers: the TLS webhook server, health probes and Prometheus metrics.

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
  values; :func:`start_site`).
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
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from controlplane.manager.webhooks.dispatch import (
    MAX_REQUEST_BYTES,
    AdmissionDispatcher,
    body_too_large,
    oversized_body,
)
from controlplane.manager.webhooks.review import encode_review, errored
from koordinator.heap import freeze_startup_heap

__all__ = [
    "BODY_TIMEOUT_S",
    "IDLE_TIMEOUT_S",
    "READ_HEADER_TIMEOUT_S",
    "Readiness",
    "SiteSpec",
    "WebhookLimits",
    "health_app",
    "metrics_app",
    "settle_after_start",
    "start_site",
    "webhook_app",
]

log = logging.getLogger(__name__)

#: Returns ``""`` when ready, else the reasons it is not.
Readiness = Callable[[], Awaitable[str]]

#: controller-runtime's webhook, health and metrics servers (``httpserver.New``): the TLS
#: handshake, and each request's headers, within 32 s ...
READ_HEADER_TIMEOUT_S = 32.0
#: ... and a kept-alive connection closed after 90 s without a request.
IDLE_TIMEOUT_S = 90.0
#: An admitted webhook request's body within 30 s (Go's server sets no such bound; ours
#: frees the in-flight budget a slow sender holds).
BODY_TIMEOUT_S = 30.0
#: After answering a request without reading its body (refused), what the client still
#: sends is discarded for up to this long before the connection closes, so the client
#: reads the answer rather than a reset (Go's server waits 0.5 s).
LINGER_S = 2.0


def settle_after_start() -> None:
    """koord-manager's process tuning once its start-up heap is built: frozen, with rarer full
    collections (:func:`koordinator.heap.freeze_startup_heap`)."""
    freeze_startup_heap(rarer_full_collections=True)


async def _ok(_: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


def _readiness_handler(readiness: Readiness) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(_: web.Request) -> web.StreamResponse:
        problem = await readiness()
        if problem:
            return web.Response(status=500, text=f"not ready: {problem}\n")
        return web.Response(text="ok")

    return handle


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
    app.router.add_get("/healthz", _ok)
    app.router.add_get("/readyz", _readiness_handler(readiness))
    if debug_quota is not None:
        quota_dump = debug_quota

        async def elastic_quota(_: web.Request) -> web.StreamResponse:
            return web.Response(text=json.dumps(quota_dump()), content_type="application/json")

        app.router.add_get("/elasticQuota", elastic_quota)
    return app


def health_app(readiness: Readiness) -> web.Application:
    app = web.Application()
    app.router.add_get("/healthz", _ok)
    app.router.add_get("/readyz", _readiness_handler(readiness))
    return app


def metrics_app(
    registry: CollectorRegistry, render: Callable[[CollectorRegistry], bytes] = generate_latest
) -> web.Application:
    """``render`` writes the text format (default: the Python client's)."""
    app = web.Application()

    async def metrics(_: web.Request) -> web.StreamResponse:
        return web.Response(body=render(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def empty(_: web.Request) -> web.StreamResponse:
        return web.Response(body=b"", headers={"Content-Type": CONTENT_TYPE_LATEST})

    for path in ("/metrics", "/internal-metrics", "/all-metrics"):
        app.router.add_get(path, metrics)
    app.router.add_get("/external-metrics", empty)
    return app


class _Connection(RequestHandler):
    """aiohttp's connection handler, with a deadline for each request's headers.

    The deadline (``header_timeout``) runs from the connection's start for its first
    request, and from the first byte of each later one (a kept-alive connection waits
    for that byte up to the idle timeout, aiohttp's ``keepalive_timeout``); it ends when
    the request's headers are complete. Past it the connection is closed, as Go's
    ``ReadHeaderTimeout`` does. Bytes of a body still arriving (read by its handler, or
    discarded after an answer that did not read it) start no deadline. A request whose
    headers come in one segment with its first byte (every request of a well-behaved
    client) arms no timer.

    It reads three attributes of aiohttp's handler (3.14): ``_request_count`` (requests
    whose headers were parsed), ``_messages`` (parsed, not yet handled) and
    ``_request_in_progress``; tests/controlplane/manager/test_webhook_server_limits.py
    and tests/reliability/test_webhook_limits.py fail if an upgrade changes them.
    """

    __slots__ = ("_header_timeout", "_header_timer", "_last_body")

    def __init__(self, manager: web.Server, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None
        #: the body of the request whose headers came last: bytes before its end are its own
        self._last_body: StreamReader | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._header_timer = self._loop.call_later(self._header_timeout, self._overdue)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._last_body = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        parsed = self._request_count
        super().data_received(data)
        if self._request_count != parsed:  # a request's headers are complete
            self._last_body = self._messages[-1][1] if self._messages else None
            if self._header_timer is not None:
                self._disarm()
        elif (
            self._header_timer is None
            and data
            and not self._messages
            and (self._last_body is None or self._last_body.is_eof())
        ):
            # the first bytes of the next request
            self._header_timer = self._loop.call_later(self._header_timeout, self._overdue)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _overdue(self) -> None:
        self._header_timer = None
        if self.transport is None:
            return
        if self._request_in_progress:  # the next request's first bytes came while this one runs
            self._header_timer = self._loop.call_later(self._header_timeout, self._overdue)
            return
        log.debug(
            "closing the connection from %s: no request headers within %gs",
            self.peername,
            self._header_timeout,
        )
        self.force_close()


class _Site(web.BaseSite):
    """A TCP site whose connections are :class:`_Connection` handlers, with a TLS handshake deadline."""

    __slots__ = ("_connection", "_handshake_timeout", "_host", "_port")

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        connection: Callable[[], _Connection],
        handshake_timeout: float,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=1024)
        self._host = host
        self._port = port
        self._connection = connection
        self._handshake_timeout = handshake_timeout

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host or '0.0.0.0'}:{self._port}"

    async def start(self) -> None:
        await super().start()
        tls: dict[str, Any] = {}
        if self._ssl_context is not None:
            tls = {"ssl": self._ssl_context, "ssl_handshake_timeout": self._handshake_timeout}
        loop = asyncio.get_running_loop()

        async def listen(port: int) -> asyncio.Server:
            return await loop.create_server(
                self._connection, self._host or None, port, backlog=self._backlog, reuse_address=True, **tls
            )

        server = await listen(self._port)
        ports = [sock.getsockname()[1] for sock in server.sockets]
        if self._port == 0 and len(set(ports)) > 1:
            # on every address, each family picked a free port of its own: one port for all
            server.close()
            await server.wait_closed()
            server = await listen(ports[0])
        self._server = server


class SiteSpec:
    """A started aiohttp site: its runner and the port it really listens on."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self.runner = runner
        self.host = host
        self.port = port

    async def stop(self) -> None:
        """Stop listening, let in-flight requests finish (up to the runner's shutdown timeout)."""
        await self.runner.cleanup()


async def start_site(
    app: web.Application,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
    *,
    shutdown_timeout: float = 10.0,
    header_timeout: float = READ_HEADER_TIMEOUT_S,
    idle_timeout: float = IDLE_TIMEOUT_S,
) -> SiteSpec:
    """Listen on ``host:port`` (port 0 picks a free one; ``host`` ``""`` means every address).

    ``header_timeout`` bounds the TLS handshake and each request's headers,
    ``idle_timeout`` a kept-alive connection waiting for its next request (see
    :class:`_Connection`).
    """
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    server = runner.server
    assert server is not None  # set up above
    loop = asyncio.get_running_loop()

    def connection() -> _Connection:
        return _Connection(
            server,
            loop=loop,
            header_timeout=header_timeout,
            keepalive_timeout=idle_timeout,
            access_log=None,
            lingering_time=LINGER_S,
            auto_decompress=False,
        )

    site = _Site(runner, host, port, ssl_context, connection, header_timeout)
    await site.start()
    addresses = runner.addresses
    bound = int(addresses[0][1]) if addresses else port
    log.info("listening on %s:%d%s", host or "*", bound, " (TLS)" if ssl_context else "")
    return SiteSpec(runner, host, bound)
