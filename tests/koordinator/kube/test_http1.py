"""The small HTTP/1.1 client against a raw socket server that answers each request with
scripted bytes: body framings (length, chunked with extensions and trailers, read to the
close), interim replies, keep-alive and its end, and the failures it must report."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from koordinator.kube.http1 import ConnectError, ExchangeError, Http1Pool
from tests.polling import eventually

Script = Callable[[bytes], list[bytes]]


class RawServer:
    """Answers each request (read up to its blank line and Content-Length body) with the
    pieces the script returns, then closes when a piece is ``b"<close>"``."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + (await reader.readexactly(length) if length else b"")
                self.requests.append(request)
                for piece in self.script(request):
                    if piece == b"<close>":
                        writer.close()
                        return
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


def ok(body: bytes, *extra: bytes) -> list[bytes]:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return [head + b"".join(extra) + b"\r\n" + body]


async def test_a_length_framed_reply_and_keep_alive_reuse_one_connection():
    server = RawServer(lambda request: ok(b'{"n":1}'))
    async with server as url:
        pool = Http1Pool(url, None)
        for _ in range(3):
            reply = await pool.request(
                "POST", "/api/v1/x?a=b", {"Content-Type": "application/json"}, b"{}", 5
            )
            assert reply.status == 200
            assert reply.body == b'{"n":1}'
            assert reply.headers["content-type"] == "application/json"
        await pool.close()
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /api/v1/x?a=b HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Content-Length: 2\r\n\r\n{}" in first


async def test_chunked_bodies_with_extensions_and_trailers_in_split_reads():
    pieces = [
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"4;ext=1\r\nab",
        b"cd\r\n",
        b"3\r\nefg\r\n0\r\nX-Trailer: t\r\n",
        b"\r\n",
    ]
    server = RawServer(lambda request: pieces)
    async with server as url:
        pool = Http1Pool(url, None)
        reply = await pool.request("GET", "/a", {}, None, 5)
        assert (reply.status, reply.body) == (201, b"abcdefg")
        again = await pool.request("GET", "/b", {}, None, 5)
        assert again.body == b"abcdefg"
        await pool.close()
    assert server.connections == 1


async def test_an_interim_reply_is_skipped_and_a_204_has_no_body():
    server = RawServer(lambda request: [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 204 No Content\r\n\r\n"])
    async with server as url:
        pool = Http1Pool(url, None)
        reply = await pool.request("DELETE", "/a", {}, None, 5)
        assert (reply.status, reply.body) == (204, b"")
        await pool.close()


async def test_a_reply_without_length_is_read_to_the_close_and_the_connection_not_reused():
    server = RawServer(lambda request: [b"HTTP/1.1 200 OK\r\n\r\nto the end", b"<close>"])
    async with server as url:
        pool = Http1Pool(url, None)
        assert (await pool.request("GET", "/a", {}, None, 5)).body == b"to the end"
        assert (await pool.request("GET", "/a", {}, None, 5)).body == b"to the end"
        await pool.close()
    assert server.connections == 2


async def test_connection_close_ends_keep_alive_and_an_idle_connection_closed_by_the_server_is_replaced():
    calls = 0

    def script(request: bytes) -> list[bytes]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return ok(b"1", b"Connection: close\r\n")
        return [*ok(b"2"), b"<close>"]  # answers, then drops the idle connection

    server = RawServer(script)
    async with server as url:
        pool = Http1Pool(url, None)
        assert (await pool.request("GET", "/a", {}, None, 5)).body == b"1"
        assert (await pool.request("GET", "/a", {}, None, 5)).body == b"2"
        # the server's close reaches the idle connection
        await eventually(lambda: all(conn.closed for conn in pool._idle))
        assert (await pool.request("GET", "/a", {}, None, 5)).body == b"2"
        await pool.close()
    assert server.connections == 3


@pytest.mark.parametrize(
    ("pieces", "message"),
    [
        pytest.param([b"SSH-2.0-OpenSSH\r\n\r\n"], "not an HTTP/1.1 reply", id="not-http"),
        pytest.param([b"HTTP/1.1 200 OK\r\nbroken\r\n\r\n"], "malformed header line", id="bad-header"),
        pytest.param(
            [b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"], "bad Content-Length", id="bad-length"
        ),
        pytest.param(
            [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"], "bad chunk size", id="bad-chunk"
        ),
        pytest.param(
            [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", b"<close>"], "connection lost", id="cut"
        ),
        pytest.param([b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000], "reply head too large", id="huge-head"),
    ],
)
async def test_broken_replies_are_exchange_errors(pieces, message):
    server = RawServer(lambda request: pieces)
    async with server as url:
        pool = Http1Pool(url, None)
        with pytest.raises(ExchangeError, match=message):
            await pool.request("GET", "/a", {}, None, 5)
        await pool.close()


async def test_a_silent_server_times_out_and_a_closed_port_cannot_connect():
    server = RawServer(lambda request: [])
    async with server as url:
        pool = Http1Pool(url, None)
        with pytest.raises(ExchangeError, match=r"no reply within 0\.05s"):
            await pool.request("GET", "/a", {}, None, 0.05)
        await pool.close()
    listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()
    with pytest.raises(ConnectError, match="cannot connect"):
        await Http1Pool(f"http://127.0.0.1:{port}", None).request("GET", "/a", {}, None, 5)


def test_the_host_header_and_path_prefix_follow_the_server_url():
    pool = Http1Pool("https://[::1]:6443/prefix/", None)
    assert pool.host_header == "[::1]:6443"
    assert pool.prefix == "/prefix"
    assert Http1Pool("https://api.example:443", None).host_header == "api.example"
    with pytest.raises(ValueError, match="not an http"):
        Http1Pool("unix:///run/api.sock", None)
