"""The control plane's HTTP serving: one hardened site type for every server the
koord-manager and koord-scheduler run (webhooks, health probes, metrics), and the health
and metrics applications they share.

Every site bounds the TLS handshake and each request's headers (32 s) and closes a
kept-alive connection after 90 s without a request (controller-runtime's values;
:func:`start_site`). ``/healthz`` answers while the event loop does; ``/readyz`` asks the
process's :data:`Readiness`; ``/metrics`` (and upstream's ``/internal-metrics`` and
``/all-metrics``) renders a Prometheus registry.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import logging
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = [
    "IDLE_TIMEOUT_S",
    "LINGER_S",
    "READ_HEADER_TIMEOUT_S",
    "Readiness",
    "SiteSpec",
    "health_app",
    "metrics_app",
    "ok",
    "readiness_handler",
    "self_signed_context",
    "start_site",
]

log = logging.getLogger(__name__)

#: Returns ``""`` when ready, else the reasons it is not.
Readiness = Callable[[], Awaitable[str]]

#: controller-runtime's webhook, health and metrics servers (``httpserver.New``): the TLS
#: handshake, and each request's headers, within 32 s ...
READ_HEADER_TIMEOUT_S = 32.0
#: ... and a kept-alive connection closed after 90 s without a request.
IDLE_TIMEOUT_S = 90.0
#: After answering a request without reading its body (refused), what the client still
#: sends is discarded for up to this long before the connection closes, so the client
#: reads the answer rather than a reset (Go's server waits 0.5 s).
LINGER_S = 2.0


async def ok(_: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


def readiness_handler(readiness: Readiness) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(_: web.Request) -> web.StreamResponse:
        problem = await readiness()
        if problem:
            return web.Response(status=500, text=f"not ready: {problem}\n")
        return web.Response(text="ok")

    return handle


def health_app(readiness: Readiness) -> web.Application:
    app = web.Application()
    app.router.add_get("/healthz", ok)
    app.router.add_get("/readyz", readiness_handler(readiness))
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


def self_signed_context(hosts: Sequence[str], *, days: int = 365) -> ssl.SSLContext:
    """A server TLS context with a key and self-signed certificate made in memory for
    ``hosts`` (names and IP addresses), as kube-scheduler serves its secure port when no
    ``--tls-cert-file`` is given."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{hosts[0]}@{int(now.timestamp())}")])
    alternatives: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alternatives.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alternatives.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    with tempfile.TemporaryDirectory() as directory:  # ssl loads chains from files only
        cert_path, key_path = Path(directory, "tls.crt"), Path(directory, "tls.key")
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_path, key_path)
    return context
