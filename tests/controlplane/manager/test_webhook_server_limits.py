"""The webhook server's limits, piece by piece, on loopback with small values.

Body size refused from the Content-Length, the in-flight request cap and byte budget
(429 error reviews), the body, header and idle timeouts, the nesting limit of decoded
reviews, large bodies decoded off the event loop, and the TLS 1.2 suites offered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from controlplane.manager.certs import ServingTLS, generate_bundle
from controlplane.manager.server import WebhookLimits, _InFlight, webhook_app
from controlplane.manager.webhooks.cluster import StaticCluster
from controlplane.manager.webhooks.context import WebhookContext
from controlplane.manager.webhooks.dispatch import OFFLOAD_BYTES, AdmissionDispatcher
from controlplane.manager.webhooks.review import (
    MAX_NESTING_DEPTH,
    AdmissionRequest,
    AdmissionResponse,
    ReviewError,
    allowed,
    decode_review,
    patched,
)
from controlplane.reactor.serving import SiteSpec, health_app, start_site
from tests.controlplane.manager.builders import Admission, make_pod, review

PATH = "/validate-pod"


async def ready() -> str:
    return ""


@pytest.fixture
def serve() -> Callable[..., contextlib.AbstractAsyncContextManager[SiteSpec]]:
    """``async with serve(limits=..., header_timeout=...) as site``: the webhook app on plain HTTP."""

    @contextlib.asynccontextmanager
    async def started(
        limits: WebhookLimits | None = None,
        *,
        dispatcher: AdmissionDispatcher | None = None,
        header_timeout: float = 32.0,
        idle_timeout: float = 90.0,
    ) -> AsyncIterator[SiteSpec]:
        app = webhook_app(dispatcher or Admission([]).dispatcher, ready, limits=limits or WebhookLimits())
        site = await start_site(app, "127.0.0.1", 0, header_timeout=header_timeout, idle_timeout=idle_timeout)
        try:
            yield site
        finally:
            await site.stop()

    return started


def head(length: int | None, path: str = PATH, *, close: bool = False) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: localhost", "Content-Type: application/json"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], Any]:
    raw = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = raw.decode().strip().split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers["content-length"]))
    return int(status_line.split()[1]), headers, orjson.loads(body)


async def connect(site: SiteSpec) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", site.port)


def review_status(answer: Any) -> dict[str, Any]:
    assert answer["kind"] == "AdmissionReview"
    status: dict[str, Any] = answer["response"]["status"]
    return status


async def closed(reader: asyncio.StreamReader, within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass


# ---- body size ----------------------------------------------------------------------------------------


async def test_a_body_declared_above_the_limit_is_refused_before_it_is_sent(serve):
    async with serve() as site:
        reader, writer = await connect(site)
        try:
            writer.write(head(100_000_000))  # the headers only: the server must not wait for the body
            status, headers, answer = await asyncio.wait_for(read_response(reader), 10)
        finally:
            writer.close()
    assert status == 200
    assert headers["connection"] == "close"
    assert review_status(answer) == {
        "metadata": {},
        "code": 400,
        "message": f"request entity is too large; limit is {7 * 1024 * 1024} bytes",
    }


async def test_a_chunked_body_past_the_limit_is_refused(serve):
    async with serve(WebhookLimits(max_body_bytes=1000, in_flight_bytes=1000)) as site:
        reader, writer = await connect(site)
        try:
            writer.write(head(None) + b"%x\r\n%s\r\n" % (1500, b"x" * 1500) + b"0\r\n\r\n")
            status, headers, answer = await asyncio.wait_for(read_response(reader), 10)
        finally:
            writer.close()
    assert (status, headers["connection"]) == (200, "close")
    assert review_status(answer)["code"] == 400
    assert "too large; limit is 1000 bytes" in review_status(answer)["message"]


# ---- in-flight requests and bytes -------------------------------------------------------------------


async def test_requests_past_the_in_flight_cap_get_429_at_once(serve):
    body = orjson.dumps(review(make_pod().build()))
    async with serve(WebhookLimits(max_requests=1)) as site:
        slow_reader, slow_writer = await connect(site)
        reader, writer = await connect(site)
        try:
            slow_writer.write(head(len(body)) + body[:10])  # admitted, its body still arriving
            await slow_writer.drain()
            await asyncio.sleep(0.2)
            writer.write(head(len(body)) + body)
            status, headers, answer = await asyncio.wait_for(read_response(reader), 10)
            assert (status, headers["connection"]) == (200, "close")
            assert review_status(answer)["code"] == 429
            assert "too many requests in flight (limit 1)" in review_status(answer)["message"]
            slow_writer.write(body[10:])  # the admitted one completes and is answered
            _, _, answer = await asyncio.wait_for(read_response(slow_reader), 10)
            assert answer["response"]["allowed"] is True
        finally:
            slow_writer.close()
            writer.close()


async def test_a_request_waiting_for_the_byte_budget_gets_429_after_the_queue_timeout(serve):
    limits = WebhookLimits(max_body_bytes=1000, in_flight_bytes=1000, queue_timeout_s=0.5)
    async with serve(limits) as site:
        _, holder = await connect(site)
        reader, writer = await connect(site)
        try:
            holder.write(head(800) + b"{")  # holds 800 of the 1000 bytes while its body arrives
            await holder.drain()
            await asyncio.sleep(0.2)
            started = time.monotonic()
            writer.write(head(500) + b"x" * 500)
            status, headers, answer = await asyncio.wait_for(read_response(reader), 10)
            waited = time.monotonic() - started
        finally:
            holder.close()
            writer.close()
    assert (status, headers["connection"]) == (200, "close")
    assert review_status(answer)["code"] == 429
    assert review_status(answer)["message"] == (
        "request not admitted within 0.5s: 1000 bytes of request bodies already in flight; retry later"
    )
    assert waited >= 0.4


async def test_a_request_waiting_for_the_byte_budget_is_answered_once_bytes_are_freed(serve):
    limits = WebhookLimits(max_body_bytes=4000, in_flight_bytes=4000, queue_timeout_s=30)
    first = orjson.dumps(review(make_pod("first").build()))
    second = orjson.dumps(review(make_pod("second").build()))
    assert len(second) + 2000 > 4000 - 2500  # the second waits for the first
    padded = first + b" " * (2500 - len(first))
    async with serve(limits) as site:
        first_reader, first_writer = await connect(site)
        reader, writer = await connect(site)
        try:
            first_writer.write(head(len(padded)) + padded[:5])
            await first_writer.drain()
            await asyncio.sleep(0.2)
            writer.write(head(len(second) + 2000) + second + b" " * 2000)  # needs more than is free
            await writer.drain()
            await asyncio.sleep(0.3)
            assert not reader.at_eof()
            first_writer.write(padded[5:])
            _, _, first_answer = await asyncio.wait_for(read_response(first_reader), 10)
            _, _, answer = await asyncio.wait_for(read_response(reader), 10)
        finally:
            first_writer.close()
            writer.close()
    assert first_answer["response"]["allowed"] is True
    assert answer["response"]["allowed"] is True


async def test_a_body_that_stops_arriving_gets_408_after_the_body_timeout(serve):
    async with serve(WebhookLimits(body_timeout_s=0.5)) as site:
        reader, writer = await connect(site)
        try:
            writer.write(head(1000) + b'{"apiVersion"')
            status, headers, answer = await asyncio.wait_for(read_response(reader), 10)
            await closed(reader)
        finally:
            writer.close()
    assert (status, headers["connection"]) == (200, "close")
    assert review_status(answer) == {
        "metadata": {},
        "code": 408,
        "message": "request body not received within 0.5s",
    }


async def test_small_reviews_on_a_kept_alive_connection_pipelined_and_spaced(serve):
    body = orjson.dumps(review(make_pod().build()))
    async with serve(header_timeout=0.5, idle_timeout=5) as site:
        reader, writer = await connect(site)
        try:
            writer.write((head(len(body)) + body) * 3)  # pipelined in one segment
            for _ in range(3):
                status, headers, answer = await asyncio.wait_for(read_response(reader), 10)
                assert (status, headers.get("connection")) == (200, None)
                assert answer["response"]["allowed"] is True
            await asyncio.sleep(1.0)  # past the header deadline, within the idle timeout
            writer.write(head(len(body)) + body)
            status, _, answer = await asyncio.wait_for(read_response(reader), 10)
            assert answer["response"]["allowed"] is True
        finally:
            writer.close()


async def test_the_in_flight_budget_is_whole_after_every_kind_of_answer(serve, caplog):
    """Refused, timed-out, answered and abandoned requests all give their bytes back; a client
    that leaves with its body half sent is no error in the log."""
    limits = WebhookLimits(max_body_bytes=2000, in_flight_bytes=2000, queue_timeout_s=1, body_timeout_s=0.3)
    body = orjson.dumps(review(make_pod().build()))
    async with serve(limits) as site:
        for request in (
            head(1500) + b"{",  # body timeout
            head(3000),  # refused from its Content-Length
            head(len(body)) + body,  # answered
        ):
            reader, writer = await connect(site)
            writer.write(request)
            await asyncio.wait_for(read_response(reader), 10)
            writer.close()
        reader, writer = await connect(site)  # abandoned with its body half sent
        writer.write(head(1900) + b"{")
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()
        await asyncio.sleep(0.2)
        reader, writer = await connect(site)
        try:
            writer.write(head(2000) + b" " * (2000 - len(body)) + body)  # needs the whole budget
            status, _, answer = await asyncio.wait_for(read_response(reader), 10)
        finally:
            writer.close()
    assert status == 200
    assert answer["response"]["allowed"] is True
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


async def test_queued_requests_are_granted_in_arrival_order():
    in_flight = _InFlight(100)
    assert in_flight.take_now(60)
    granted: list[str] = []

    async def wait(name: str, size: int) -> None:
        if await in_flight.take(size, 5):
            granted.append(name)

    big = asyncio.create_task(wait("big", 80))
    await asyncio.sleep(0)
    small = asyncio.create_task(wait("small", 10))
    await asyncio.sleep(0.05)
    assert not in_flight.take_now(10)  # fits, but others wait: in line
    assert granted == []  # the small one fits, but waits behind the big one
    in_flight.give(60)
    await asyncio.gather(big, small)
    assert granted == ["big", "small"]
    assert in_flight.free == 10
    in_flight.give(80)
    in_flight.give(10)
    assert in_flight.free == 100


async def test_a_waiter_that_leaves_does_not_hold_up_the_line():
    in_flight = _InFlight(100)
    assert in_flight.take_now(100)
    timed_out = await in_flight.take(90, 0.05)
    assert timed_out is False
    cancelled = asyncio.create_task(in_flight.take(90, 5))
    later = asyncio.create_task(in_flight.take(10, 5))
    await asyncio.sleep(0.05)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    in_flight.give(50)
    assert await later is True
    assert in_flight.free == 40


async def test_bytes_granted_as_the_wait_times_out_come_back():
    in_flight = _InFlight(100)
    assert in_flight.take_now(100)
    waiting = asyncio.create_task(in_flight.take(50, 0.1))
    await asyncio.sleep(0.09)
    # grant just before the deadline; whether the waiter sees it or times out, nothing is lost
    in_flight.give(100)
    got = await waiting
    assert in_flight.free == (50 if got else 100)


def test_limits_must_hold_one_body():
    with pytest.raises(ValueError, match="at least one body"):
        WebhookLimits(max_body_bytes=1000, in_flight_bytes=999)
    with pytest.raises(ValueError, match="max_requests"):
        WebhookLimits(max_requests=0)


# ---- header and idle timeouts -----------------------------------------------------------------------


async def test_headers_that_never_end_close_the_connection_at_the_deadline():
    site = await start_site(health_app(ready), "127.0.0.1", 0, header_timeout=0.5, idle_timeout=30)
    try:
        reader, writer = await connect(site)
        started = time.monotonic()
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
            await closed(reader)
        finally:
            writer.close()
        assert time.monotonic() - started < 5
    finally:
        await site.stop()


async def test_an_idle_connection_without_any_request_is_closed_at_the_header_deadline():
    site = await start_site(health_app(ready), "127.0.0.1", 0, header_timeout=0.5, idle_timeout=30)
    try:
        reader, writer = await connect(site)
        started = time.monotonic()
        try:
            await closed(reader)
        finally:
            writer.close()
        assert time.monotonic() - started < 5
    finally:
        await site.stop()


async def test_an_unread_body_trickling_in_does_not_count_against_the_next_requests_headers(serve):
    """A body the server answered without reading (405) is discarded as it arrives; its bytes are
    not the start of the next request, so they start no header deadline."""
    async with serve(header_timeout=0.3) as site:
        reader, writer = await connect(site)
        try:
            writer.write(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n")
            await writer.drain()
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert raw.startswith(b"HTTP/1.1 405")
            for _ in range(5):  # the body arrives over a second, past the header deadline
                writer.write(b"x" * 100)
                await writer.drain()
                await asyncio.sleep(0.2)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = await asyncio.wait_for(reader.readuntil(b"ok"), 10)
        finally:
            writer.close()
    assert b"HTTP/1.1 200 OK" in answer


async def test_the_next_requests_first_bytes_during_a_slow_answer_wait_for_that_answer(serve):
    """A deadline started by the next request's first bytes while the current one is still
    being answered does not cut that answer off; it closes the connection after it."""

    class Slow:
        async def handle(self, request: AdmissionRequest) -> AdmissionResponse:
            await asyncio.sleep(1.0)
            return allowed()

    dispatcher = AdmissionDispatcher(WebhookContext(cluster=StaticCluster([])), {"/slow": Slow()})
    body = orjson.dumps(review(make_pod().build()))
    async with serve(dispatcher=dispatcher, header_timeout=0.3, idle_timeout=30) as site:
        reader, writer = await connect(site)
        try:
            writer.write(head(len(body), "/slow") + body)
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.write(b"GET /healthz HTTP/1.1\r\n")  # and never the rest
            status, _, answer = await asyncio.wait_for(read_response(reader), 10)
            assert (status, answer["response"]["allowed"]) == (200, True)
            await closed(reader)
        finally:
            writer.close()


# ---- nesting ------------------------------------------------------------------------------------------


def nested(depth: int, kind: str) -> bytes:
    """``depth`` levels of objects or arrays as JSON text (built without recursion)."""
    if kind == "object":
        return b'{"a":' * (depth - 1) + b'{"a":1}' + b"}" * (depth - 1)
    return b"[" * depth + b"1" + b"]" * depth


def review_with(field: str, value: bytes, uid: str = "deep-uid") -> bytes:
    request = {
        "uid": uid,
        "operation": "CREATE",
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        field: "PLACEHOLDER",
    }
    body = orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": request}
    )
    return body.replace(b'"PLACEHOLDER"', value)


@pytest.mark.parametrize("kind", ["object", "array"])
def test_nesting_up_to_the_limit_decodes_and_one_more_level_is_refused(kind):
    inner = MAX_NESTING_DEPTH - 1  # "object" itself is level 1
    ok = review_with("object", b'{"spec":' + nested(inner, kind) + b"}")
    assert decode_review(ok).object is not None
    deep = review_with("object", b'{"spec":' + nested(inner + 1, kind) + b"}")
    with pytest.raises(ReviewError) as refused:
        decode_review(deep)
    assert str(refused.value) == f"object nesting exceeds {MAX_NESTING_DEPTH} levels"
    assert (refused.value.api_version, refused.value.uid) == ("admission.k8s.io/v1beta1", "deep-uid")


@pytest.mark.parametrize("field", ["object", "oldObject", "options", "userInfo"])
def test_every_request_field_is_checked(field):
    with pytest.raises(ReviewError, match="nesting exceeds"):
        decode_review(review_with(field, b'{"x":' + nested(300, "array") + b"}"))


def test_deep_brackets_inside_strings_are_not_nesting():
    text = orjson.dumps("[" * 500 + "{" * 500)
    assert decode_review(review_with("object", b'{"metadata":{"annotations":{"a":' + text + b"}}}")).object


async def test_deep_nesting_over_http_is_a_400_review(serve):
    body = review_with("object", nested(800, "object"))
    async with serve() as site:
        reader, writer = await connect(site)
        try:
            writer.write(head(len(body)) + body)
            status, _, answer = await asyncio.wait_for(read_response(reader), 10)
        finally:
            writer.close()
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1beta1"
    assert answer["response"]["uid"] == "deep-uid"
    assert review_status(answer) == {
        "metadata": {},
        "code": 400,
        "message": f"object nesting exceeds {MAX_NESTING_DEPTH} levels",
    }


async def test_admit_with_a_deep_review_is_a_400_answer():
    dispatcher = Admission([]).dispatcher
    value: Any = 1
    for _ in range(300):
        value = [value]
    answer = await dispatcher.admit(
        PATH,
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE", "object": {"spec": value}},
        },
    )
    assert answer["response"]["status"]["code"] == 400


# ---- large bodies ------------------------------------------------------------------------------------


async def test_a_large_review_gets_the_same_answer_as_a_small_one():
    admission = Admission([])
    pod = make_pod().qos("BE").build()
    small = orjson.dumps(review(pod, uid="same"))
    pod["metadata"]["annotations"] = {f"a{i}": "v" * 40 for i in range(OFFLOAD_BYTES // 40)}
    large = orjson.dumps(review(pod, uid="same"))
    assert len(large) > OFFLOAD_BYTES
    small_answer = orjson.loads(await admission.dispatcher.review(PATH, small))
    large_answer = orjson.loads(await admission.dispatcher.review(PATH, large))
    assert large_answer == small_answer
    deep = review_with("object", nested(200, "array")) + b" " * OFFLOAD_BYTES
    deep_answer = orjson.loads(await admission.dispatcher.review(PATH, deep))
    assert review_status(deep_answer)["message"] == f"object nesting exceeds {MAX_NESTING_DEPTH} levels"


async def test_an_answer_that_cannot_be_encoded_is_a_500_review():
    class Unencodable:
        async def handle(self, request: AdmissionRequest) -> AdmissionResponse:
            return patched([{"op": "add", "path": "/x", "value": object()}])

    dispatcher = AdmissionDispatcher(WebhookContext(cluster=StaticCluster([])), {"/x": Unencodable()})
    answer = orjson.loads(await dispatcher.review("/x", orjson.dumps(review(make_pod().build(), uid="u1"))))
    assert answer["response"]["uid"] == "u1"
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 500


# ---- TLS ---------------------------------------------------------------------------------------------


@pytest.fixture
async def tls_site(tmp_path: Path) -> AsyncIterator[tuple[SiteSpec, bytes]]:
    bundle = generate_bundle("localhost")
    (tmp_path / "cert.pem").write_bytes(bundle.cert)
    (tmp_path / "key.pem").write_bytes(bundle.key)
    tls = ServingTLS()
    tls.load(tmp_path / "cert.pem", tmp_path / "key.pem", bundle)
    site = await start_site(health_app(ready), "127.0.0.1", 0, tls.context)
    try:
        yield site, bundle.ca_cert
    finally:
        await site.stop()


def tls12_client(ca: bytes, ciphers: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.decode())
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(ciphers)
    return context


def handshake(port: int, context: ssl.SSLContext) -> str:
    """A blocking TLS handshake with the server; the suite agreed on (raises ``ssl.SSLError``)."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        cipher = tls.cipher()
        assert cipher is not None
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        assert tls.recv(1024).startswith(b"HTTP/1.1 200 OK")
        return cipher[0]


@pytest.mark.parametrize("cipher", ["ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384"])
async def test_tls12_cbc_suites_are_refused(tls_site, cipher):
    site, ca = tls_site
    with pytest.raises(ssl.SSLError):  # the server ends the handshake: no suite in common
        await asyncio.to_thread(handshake, site.port, tls12_client(ca, cipher))


@pytest.mark.parametrize(
    "cipher",
    ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305"],
)
async def test_tls12_aead_suites_are_accepted(tls_site, cipher):
    site, ca = tls_site
    assert await asyncio.to_thread(handshake, site.port, tls12_client(ca, cipher)) == cipher


async def test_a_tls12_client_with_its_default_suites_gets_an_aead_one(tls_site):
    site, ca = tls_site
    context = ssl.create_default_context(cadata=ca.decode())
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    name = await asyncio.to_thread(handshake, site.port, context)
    assert name.startswith("ECDHE-ECDSA-")
    assert name.endswith(("GCM-SHA256", "GCM-SHA384", "CHACHA20-POLY1305"))


# ---- addresses ------------------------------------------------------------------------------------


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 on this machine")
async def test_a_free_port_on_every_address_is_one_port_for_ipv4_and_ipv6():
    """Port 0 with no host listens on one port on every address, the port the site reports."""
    site = await start_site(health_app(ready), "", 0)
    try:
        for host in ("127.0.0.1", "::1"):
            reader, writer = await asyncio.open_connection(host, site.port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert (await reader.read()).startswith(b"HTTP/1.1 200 OK"), host
            writer.close()
    finally:
        await site.stop()
