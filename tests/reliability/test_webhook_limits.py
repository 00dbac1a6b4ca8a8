"""koord-manager's webhook server under request floods and slow clients (real sockets, loopback).

* A real koord-manager process against the fake apiserver takes 50 concurrent ~12.6 MB
  bodies (above the 7 MiB limit, refused from their Content-Length, unread); another
  takes 50 concurrent ~7 MB reviews of many small fields (under the limit, admitted
  through the in-flight byte budget, decoded off the event loop): every connection gets
  an AdmissionReview, the process's peak RSS (VmHWM) grows by a bounded amount, and
  ``/healthz`` on the health port keeps answering throughout (the event loop is not
  stalled). The figures are printed (``-s``).
* Slow clients, against the server function with short timeouts: a client that sends
  its headers one byte at a time is dropped at the header deadline, one that never
  finishes the TLS handshake at the same deadline, a kept-alive connection without a
  next request at the idle timeout -- while a client that pauses between requests for
  longer than the header deadline (but less than the idle timeout) is served.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import ssl
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from controlplane.manager.certs import ServingTLS, generate_bundle
from controlplane.manager.server import webhook_app
from controlplane.reactor.serving import SiteSpec, start_site
from tests.controlplane.manager.builders import Admission, make_pod, review
from tests.controlplane.manager.process import Process, launch
from tests.controlplane.manager.test_manager_server import fake, seed
from tests.reliability.procstatus import peak_rss_mib
from testsupport.fake import FakeApiServer

__all__ = ["fake"]

MB = 1_000_000
MIB = 1024 * 1024
FLOOD = 50
OVERSIZED_BYTES = 12_600_000
UNDER_LIMIT_BYTES = 7_000_000
#: Peak RSS growth allowed over a flood (measured on 2 loaded cores: +556 MB for the
#: oversized flood and +330..400 MB for the under-limit one without the limits; +50 MB
#: and +150..175 MB with them).
RSS_GROWTH_BOUND_MB = 250
#: Longest /healthz answer allowed on the health port during a flood (measured: 0.3 s and
#: 0.8..1.0 s without the limits; 0.1 s and 0.1..0.16 s with them). A sanity bound: the
#: flood's own client (this process, encrypting every byte) caps how hard it presses.
HEALTH_BOUND_S = 2.0
WRITE_SLICE = 256 * 1024


def unverified_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@dataclass
class Reply:
    status_line: bytes = b""
    headers: bytes = b""
    review: dict[str, Any] | None = None
    error: str = ""


def parse_reply(raw: bytes) -> Reply:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return Reply(error=f"no complete answer ({len(raw)} bytes)")
    status_line, _, headers = head.partition(b"\r\n")
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return Reply(status_line, headers, error=f"answer is not JSON: {exc}")
    return Reply(status_line, headers, answer)


async def post_raw(port: int, path: str, body: bytes, *, timeout_s: float = 120.0) -> Reply:
    """POST ``body`` over TLS with its Content-Length; the answer is read while the body is sent.

    The server may answer before the body is sent and close the connection: the writes
    then fail and the answer already received is kept.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=unverified_tls())
    received = bytearray()

    async def read_all() -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            while chunk := await reader.read(65536):
                received.extend(chunk)

    reading = asyncio.create_task(read_all())
    try:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            writer.write(head)
            view = memoryview(body)
            for start in range(0, len(body), WRITE_SLICE):
                if reading.done():
                    break
                writer.write(view[start : start + WRITE_SLICE])
                await writer.drain()
        await asyncio.wait_for(asyncio.shield(reading), timeout_s)
    finally:
        reading.cancel()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return parse_reply(bytes(received))


class HealthPoller:
    """GETs ``/healthz`` on the health port every 50 ms from a thread of its own (so the flood's
    own event loop does not delay it) and keeps every answer's latency."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                connection.request("GET", "/healthz")
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    self.failures.append(f"status {response.status}")
            except OSError as exc:
                self.failures.append(repr(exc))
            finally:
                connection.close()
            self.latencies.append(time.monotonic() - started)
            self._stop.wait(0.05)

    @property
    def slowest(self) -> float:
        return max(self.latencies, default=0.0)


def under_limit_review(size: int) -> bytes:
    """A pod review of about ``size`` bytes: many small annotations, as a real object's many
    small fields (the costly kind to decode)."""
    pod = make_pod().build()
    annotations = pod["metadata"].setdefault("annotations", {})
    count = size // 66
    annotations.update({f"example.com/annotation-{index:07d}": "v" * 30 for index in range(count)})
    return orjson.dumps(review(pod))


@pytest.fixture
async def manager(tmp_path: Path, fake: FakeApiServer) -> AsyncIterator[tuple[Process, int]]:
    async with fake.client() as client:
        await seed(client)
    process = await launch(tmp_path, fake.url, "--webhook-bind-address=127.0.0.1")
    try:
        await process.until_ready()
        yield process, await process.webhook_port()
    finally:
        await process.kill()


async def flood(process: Process, port: int, body: bytes) -> tuple[list[Reply], float, HealthPoller]:
    """``FLOOD`` concurrent POSTs of ``body``; the replies, the peak RSS growth (MB), the health poller.

    The growth is the process's VmHWM (peak resident set) after the flood less its VmHWM
    before it (start-up included).
    """
    pid = process.proc.pid
    before = peak_rss_mib(pid) * MIB / MB
    with HealthPoller(process.health) as poller:
        await asyncio.sleep(0.2)
        outcomes = await asyncio.gather(
            *(post_raw(port, "/validate-pod", body) for _ in range(FLOOD)), return_exceptions=True
        )
    replies = [outcome for outcome in outcomes if isinstance(outcome, Reply)]
    errors = [repr(outcome) for outcome in outcomes if not isinstance(outcome, Reply)]
    assert not errors, (errors[:3], process.proc.returncode, process.stderr[-3000:])
    return replies, peak_rss_mib(pid) * MIB / MB - before, poller


def review_code(reply: Reply) -> int:
    assert reply.review is not None, reply.error
    assert reply.status_line == b"HTTP/1.1 200 OK", reply.status_line
    assert reply.review["kind"] == "AdmissionReview"
    code = reply.review["response"]["status"]["code"]
    assert isinstance(code, int)
    return code


async def test_a_flood_of_oversized_bodies_is_refused_unread(manager):
    process, port = manager
    replies, growth, poller = await flood(process, port, b"x" * OVERSIZED_BYTES)
    print(
        f"\noversized flood: {FLOOD} x {OVERSIZED_BYTES / MB:.1f} MB: peak RSS +{growth:.0f} MB, "
        f"slowest /healthz {poller.slowest:.2f}s over {len(poller.latencies)} probes"
    )
    for reply in replies:
        assert review_code(reply) == 400
        assert "too large" in reply.review["response"]["status"]["message"]  # type: ignore[index]
        assert b"Connection: close" in reply.headers
    assert growth < RSS_GROWTH_BOUND_MB
    assert not poller.failures
    assert poller.slowest < HEALTH_BOUND_S
    assert process.proc.returncode is None
    # and the server still answers a normal review
    ok = await post_raw(port, "/validate-pod", orjson.dumps(review(make_pod().build())))
    assert review_code(ok) == 200


async def test_a_flood_of_bodies_under_the_limit_is_admitted_through_the_budget(manager):
    process, port = manager
    body = under_limit_review(UNDER_LIMIT_BYTES)
    replies, growth, poller = await flood(process, port, body)
    codes = [review_code(reply) for reply in replies]
    print(
        f"\nunder-limit flood: {FLOOD} x {len(body) / MB:.1f} MB: peak RSS +{growth:.0f} MB, "
        f"slowest /healthz {poller.slowest:.2f}s over {len(poller.latencies)} probes, "
        f"answers by status code {dict(sorted((c, codes.count(c)) for c in set(codes)))}"
    )
    # answered by the webhook (the pod has no QoS class: allowed) or told to retry
    assert set(codes) <= {200, 429}
    assert codes.count(200) >= 10
    assert growth < RSS_GROWTH_BOUND_MB
    assert not poller.failures
    assert poller.slowest < HEALTH_BOUND_S
    assert process.proc.returncode is None


# ---- slow clients, against the server function with short timeouts ------------------------------------

HEADER_S = 1.0
IDLE_S = 3.0


@pytest.fixture
async def short_timeouts(tmp_path: Path) -> AsyncIterator[SiteSpec]:
    bundle = generate_bundle("localhost")
    (tmp_path / "cert.pem").write_bytes(bundle.cert)
    (tmp_path / "key.pem").write_bytes(bundle.key)
    tls = ServingTLS()
    tls.load(tmp_path / "cert.pem", tmp_path / "key.pem", bundle)

    async def ready() -> str:
        return ""

    app = webhook_app(Admission([]).dispatcher, ready)
    site = await start_site(app, "127.0.0.1", 0, tls.context, header_timeout=HEADER_S, idle_timeout=IDLE_S)
    try:
        yield site
    finally:
        await site.stop()


async def closed_after(reader: asyncio.StreamReader, within: float) -> float:
    """Seconds until the server closes the connection (read returns EOF or fails)."""
    started = time.monotonic()
    async with asyncio.timeout(within):
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            while await reader.read(65536):
                pass
    return time.monotonic() - started


async def test_a_client_sending_its_headers_byte_by_byte_is_dropped_at_the_header_deadline(short_timeouts):
    reader, writer = await asyncio.open_connection("127.0.0.1", short_timeouts.port, ssl=unverified_tls())
    head = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 1000
    started = time.monotonic()

    async def trickle() -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            for byte in head:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.1)

    sending = asyncio.create_task(trickle())
    try:
        await closed_after(reader, within=30)
    finally:
        sending.cancel()
        writer.close()
    held = time.monotonic() - started
    assert held < HEADER_S + 5, held  # held for as long as it trickles (100 s) without the deadline
    assert not sending.done() or sending.cancelled()


async def test_a_client_that_never_finishes_the_handshake_is_dropped(short_timeouts):
    reader, writer = await asyncio.open_connection("127.0.0.1", short_timeouts.port)
    try:
        writer.write(b"\x16\x03\x01")  # the start of a ClientHello, and nothing more
        held = await closed_after(reader, within=30)
    finally:
        writer.close()
    assert held < HEADER_S + 5, held


async def test_an_idle_kept_alive_connection_is_closed_and_a_slow_but_steady_client_is_served(
    short_timeouts,
):
    reader, writer = await asyncio.open_connection("127.0.0.1", short_timeouts.port, ssl=unverified_tls())
    try:
        for _ in range(3):
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            await writer.drain()
            answer = await asyncio.wait_for(reader.readuntil(b"ok"), 10)
            assert answer.startswith(b"HTTP/1.1 200 OK")
            # longer than the header deadline, shorter than the idle timeout: still open
            await asyncio.sleep(HEADER_S * 1.6)
        started = time.monotonic()
        idle = await closed_after(reader, within=30) + HEADER_S * 1.6
    finally:
        writer.close()
    assert IDLE_S - 0.5 < idle < IDLE_S + 5, (idle, time.monotonic() - started)
