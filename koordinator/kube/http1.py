"""A small HTTP/1.1 client for the API client's unary requests: keep-alive connections on
``asyncio.Protocol``, pre-formatted request bytes, and a parser for what the apiserver
sends (``Content-Length`` or chunked bodies; a body read to the close when neither).

aiohttp spends about 110 us of CPU on a loopback request where this spends about 40 (the
scheduler design study, §2.3); a process that posts a Binding and an Event per pod (the
scheduler) gets most of its throughput back from it. Watches stay on aiohttp.

Failures are :class:`ConnectError` (nothing was sent: safe to retry any verb) and
:class:`ExchangeError` (the connection was lost, timed out or answered with something
that is not HTTP/1.1 after the request went out).
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

#: a response head larger than this is refused (the apiserver's are a few hundred bytes)
MAX_HEAD = 64 * 1024
_NO_BODY_STATUS = frozenset({204, 304})


class ConnectError(OSError):
    """The connection could not be opened; the request was not sent."""


class ExchangeError(OSError):
    """The request was (maybe) sent but no complete reply came back."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    #: header names in lower case (a repeated header keeps its last value)
    headers: Mapping[str, str]
    body: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Reply] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._head_only = False
        self._status = 0
        self._headers: dict[str, str] | None = None
        #: body framing once the head is read: a length, "chunked" or "close"
        self._length: int | str = 0
        self._chunks = bytearray()
        self.keep_alive = True

    # --- protocol callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's are not asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._waiter is not None and not self._waiter.done():
            try:
                self._parse()
            except ExchangeError as err:
                self._fail(err)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._headers is not None and self._length == "close":
            self._finish(bytes(self._buffer))
            return
        self._fail(ExchangeError(f"connection lost: {exc or 'closed by the server'}"))

    # --- one exchange -------------------------------------------------------------------

    def send(self, request: bytes, head_only: bool, limit_s: float) -> asyncio.Future[Reply]:
        """Write ``request``; the future fails with :class:`ExchangeError` when no whole reply
        came within ``limit_s`` (one timer handle: cheaper than a timeout context per request)."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        self._timer = loop.call_later(limit_s, self._time_out, limit_s)
        self._head_only = head_only
        self._headers = None
        self._buffer.clear()
        self.transport.write(request)
        return self._waiter

    def close(self) -> None:
        self.closed = True
        self._stop_timer()
        if self.transport is not None:
            self.transport.close()

    def _fail(self, err: ExchangeError) -> None:
        self._stop_timer()
        self.keep_alive = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(err)
        self.close()

    def _finish(self, body: bytes) -> None:
        assert self._headers is not None
        assert self._waiter is not None
        self._stop_timer()
        if self._buffer and self._length != "close":
            self.keep_alive = False  # bytes past the reply: the stream is out of step
        self._waiter.set_result(Reply(self._status, self._headers, body))

    def _time_out(self, limit_s: float) -> None:
        self._timer = None
        self._fail(ExchangeError(f"no reply within {limit_s:g}s"))

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _parse(self) -> None:
        buf = self._buffer
        while self._headers is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise ExchangeError("reply head too large")
                return
            head = bytes(buf[:end]).decode("latin-1")
            del buf[: end + 4]
            self._read_head(head)
        if isinstance(self._length, int):
            if len(buf) >= self._length:
                body = bytes(buf[: self._length])
                del buf[: self._length]
                self._finish(body)
        elif self._length == "chunked":
            self._parse_chunked()

    def _read_head(self, head: str) -> None:
        status_line, _, rest = head.partition("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ExchangeError(f"not an HTTP/1.1 reply: {status_line[:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200:
            return  # an interim reply (100 Continue): the real one follows
        headers: dict[str, str] = {}
        for line in rest.split("\r\n") if rest else ():
            name, sep, value = line.partition(":")
            if not sep:
                raise ExchangeError(f"malformed header line {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        self._status = status
        self._headers = headers
        connection = headers.get("connection", "").lower()
        self.keep_alive = parts[0] == "HTTP/1.1" and "close" not in connection
        if self._head_only or status in _NO_BODY_STATUS:
            self._length = 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._length = "chunked"
            self._chunks.clear()
        elif "content-length" in headers:
            try:
                self._length = int(headers["content-length"])
            except ValueError:
                raise ExchangeError(f"bad Content-Length {headers['content-length']!r}") from None
        else:
            self._length = "close"
            self.keep_alive = False

    def _parse_chunked(self) -> None:
        buf = self._buffer
        while True:
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                return
            size_text = bytes(buf[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ExchangeError(f"bad chunk size {size_text[:20]!r}") from None
            if size == 0:
                # the trailer section ends with an empty line
                trailer_end = buf.find(b"\r\n\r\n", line_end)
                if buf[line_end : line_end + 4] == b"\r\n\r\n":
                    trailer_end = line_end
                if trailer_end < 0:
                    return
                del buf[: trailer_end + 4]
                self._finish(bytes(self._chunks))
                return
            if len(buf) < line_end + 2 + size + 2:
                return
            start = line_end + 2
            self._chunks += buf[start : start + size]
            del buf[: start + size + 2]


class Http1Pool:
    """Keep-alive connections to one server, at most ``max_connections`` at once."""

    def __init__(
        self,
        server: str,
        ssl: ssl_module.SSLContext | None,
        *,
        server_hostname: str | None = None,
        max_connections: int = 32,
        connect_timeout: float = 30.0,
    ) -> None:
        url = urlsplit(server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {server!r}")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")
        default_port = 443 if url.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if self.port == default_port else f"{host}:{self.port}"
        self.ssl = ssl if url.scheme == "https" else None
        self.server_hostname = server_hostname if self.ssl is not None else None
        self.connect_timeout = connect_timeout
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[_Connection] = []
        self._closed = False

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                transport, conn = await loop.create_connection(
                    _Connection,
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.server_hostname or (self.host if self.ssl is not None else None),
                )
        except (OSError, TimeoutError, ssl_module.SSLError) as err:
            raise ConnectError(f"cannot connect to {self.host_header}: {err!r}") from err
        conn.transport = transport  # uvloop may call connection_made after this returns
        return conn

    def _request_bytes(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> bytes:
        lines = [f"{method} {self.prefix}{target} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + body if body else head

    async def request(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None, limit_s: float
    ) -> Reply:
        """One exchange within ``limit_s`` seconds; ``target`` is the path with its query string."""
        if self._closed:
            raise ConnectError("the connection pool is closed")
        request = self._request_bytes(method, target, headers, body)
        async with self._slots:
            conn = None
            while self._idle:
                candidate = self._idle.pop()
                if not candidate.closed:
                    conn = candidate
                    break
            if conn is None:
                conn = await self._connect()
            reusable = False
            try:
                reply = await conn.send(request, method == "HEAD", limit_s)
                reusable = conn.keep_alive and not conn.closed
                return reply
            finally:
                if reusable and not self._closed:
                    self._idle.append(conn)
                else:
                    conn.close()

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
