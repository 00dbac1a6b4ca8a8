"""koord-manager's HTTP servers: the TLS webhook server, health probes and Prometheus metrics.

* Webhook server (HTTPS, ``--webhook-port``, default 9876): ``POST`` on each enabled
  webhook path, answered by the :class:`AdmissionDispatcher` (always an AdmissionReview;
  malformed bodies get an error review with status code 400), ``GET /healthz``,
  ``GET /readyz``, and ``GET /elasticQuota`` (the quota tree as JSON, when the quota
  validating webhook is on). Request bodies above the dispatcher's limit are answered
  with an error review, never a bare 413.
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

import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from controlplane.manager.webhooks.dispatch import MAX_REQUEST_BYTES, AdmissionDispatcher
from controlplane.manager.webhooks.review import encode_review, errored
from koordinator.heap import freeze_startup_heap

__all__ = [
    "Readiness",
    "SiteSpec",
    "health_app",
    "metrics_app",
    "parse_address",
    "settle_after_start",
    "start_site",
    "webhook_app",
]

log = logging.getLogger(__name__)

#: Returns ``""`` when ready, else the reasons it is not.
Readiness = Callable[[], Awaitable[str]]


def settle_after_start() -> None:
    """koord-manager's process tuning once its start-up heap is built: frozen, with rarer full
    collections (:func:`koordinator.heap.freeze_startup_heap`)."""
    freeze_startup_heap(rarer_full_collections=True)


def parse_address(address: str, default_host: str = "") -> tuple[str, int]:
    """``":8080"``, ``"0.0.0.0:8080"``, ``"[::1]:8080"`` -> ``(host, port)``; port 0 picks a free port."""
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"invalid address {address!r}: expected [host]:port")
    host = host.strip("[]") or default_host
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"invalid port in {address!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"invalid port in {address!r}")
    return host, number


async def _ok(_: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


def _readiness_handler(readiness: Readiness) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(_: web.Request) -> web.StreamResponse:
        problem = await readiness()
        if problem:
            return web.Response(status=500, text=f"not ready: {problem}\n")
        return web.Response(text="ok")

    return handle


async def _body(request: web.Request) -> bytes:
    """The request body; one that has arrived whole is taken from the buffer without waiting.

    The same bytes ``request.read()`` returns, and the same refusal above the app's
    ``client_max_size``, without its copies and waits (the apiserver's bodies arrive whole
    in the segments the headers came in, almost always).
    """
    content = request.content
    if content.is_eof():
        body = content.read_nowait(-1)
        if len(body) > request.client_max_size:
            raise web.HTTPRequestEntityTooLarge(request.client_max_size, len(body))
        return body
    return await request.read()


def webhook_app(
    dispatcher: AdmissionDispatcher,
    readiness: Readiness,
    debug_quota: Callable[[], dict[str, Any]] | None = None,
) -> web.Application:
    # aiohttp refuses bodies above client_max_size with a bare 413; leave room so the
    # dispatcher sees oversized bodies up to twice its limit and answers with a review.
    app = web.Application(client_max_size=2 * MAX_REQUEST_BYTES)

    def admission(path: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                body = await _body(request)
            except web.HTTPRequestEntityTooLarge:
                answer = encode_review(
                    "admission.k8s.io/v1",
                    "",
                    errored(400, f"request entity is too large; limit is {MAX_REQUEST_BYTES} bytes"),
                )
                return web.Response(
                    body=answer, content_type="application/json", headers={"Connection": "close"}
                )
            answer = await dispatcher.review(path, body, request.headers.get("Content-Type"))
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
) -> SiteSpec:
    """Listen on ``host:port`` (port 0 picks a free one; ``host`` ``""`` means every address)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host or None, port, ssl_context=ssl_context, backlog=1024, reuse_address=True)
    await site.start()
    addresses = runner.addresses
    bound = int(addresses[0][1]) if addresses else port
    log.info("listening on %s:%d%s", host or "*", bound, " (TLS)" if ssl_context else "")
    return SiteSpec(runner, host, bound)
