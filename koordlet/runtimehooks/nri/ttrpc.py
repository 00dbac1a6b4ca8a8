"""NRI's transport: ttrpc over the NRI socket's connection multiplexer, on asyncio.

The NRI socket carries one trunk split into logical connections
(``github.com/containerd/nri`` ``pkg/net/multiplex``): frames of ``[u32 BE conn id][u32 BE
length]`` and a payload, at most 10 + 4 MiB each; a connection's payloads form a byte stream.
Connection 1 carries the plug-in's service (the runtime calls, the plug-in answers) and
connection 2 the runtime's (the plug-in calls ``RegisterPlugin``). On each runs ttrpc
(``github.com/containerd/ttrpc``): messages of a 10-byte header ``[u32 BE length][u32 BE
stream id][u8 type][u8 flags]`` and a protobuf body — a ``Request{service 1, method 2,
payload 3, timeout_nano 4}`` (type 1) answered on the same stream by a ``Response{status 1
{code 1, message 2}, payload 2}`` (type 2). A client numbers its streams 1, 3, 5 ...

:class:`Session` is one such trunk: it serves a table of handlers on one connection and calls
the peer on the other, so the same class is the koordlet's plug-in side and, in the test
suite, the runtime side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping

from koordinator import protowire as pw
from koordinator.protowire import ProtoError, Writer

log = logging.getLogger(__name__)

PLUGIN_CONN, RUNTIME_CONN = 1, 2
MUX_HEADER = struct.Struct(">II")
MESSAGE_HEADER = struct.Struct(">IIBB")
REQUEST, RESPONSE = 1, 2
MAX_MESSAGE = 4 << 20
MAX_FRAME = MESSAGE_HEADER.size + MAX_MESSAGE
#: gRPC status codes ttrpc reuses
OK, UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, UNAVAILABLE = 0, 2, 4, 12, 14

#: a method: the request's protobuf payload in, the answer's out
Handler = Callable[[bytes], Awaitable[bytes]]


class TtrpcError(Exception):
    """A call answered with a non-OK status, or one that could not be made."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"ttrpc status {code}: {message}")
        self.code = code
        self.message = message


class ProtocolError(Exception):
    """The peer broke the multiplexer's or ttrpc's framing; the trunk is closed."""


def encode_request(service: str, method: str, payload: bytes, timeout_ns: int = 0) -> bytes:
    return bytes(Writer().string(1, service).string(2, method).blob(3, payload).varint(4, timeout_ns))


def encode_response(payload: bytes, code: int = OK, message: str = "") -> bytes:
    out = Writer()
    if code != OK:
        out.message(1, Writer().varint(1, code).string(2, message), always=True)
    return bytes(out.blob(2, payload))


class Session:
    """One trunk: serves ``handlers`` (``(service, method)`` → handler) on ``serve_conn`` and
    calls the peer on ``call_conn``. :meth:`run` reads until the peer closes."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handlers: Mapping[tuple[str, str], Handler],
        *,
        serve_conn: int = PLUGIN_CONN,
        call_conn: int = RUNTIME_CONN,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.handlers = handlers
        self.serve_conn = serve_conn
        self.call_conn = call_conn
        self._buffers: dict[int, bytearray] = {serve_conn: bytearray(), call_conn: bytearray()}
        self._calls: dict[int, asyncio.Future[bytes]] = {}
        self._next_stream = 1
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = asyncio.Event()

    # --- writing --------------------------------------------------------------------------

    def _send(self, conn: int, stream: int, kind: int, body: bytes) -> None:
        if len(body) > MAX_MESSAGE:
            raise TtrpcError(UNKNOWN, f"message of {len(body)} bytes exceeds ttrpc's {MAX_MESSAGE}")
        data = MESSAGE_HEADER.pack(len(body), stream, kind, 0) + body
        frames = bytearray()
        for start in range(0, len(data), MAX_FRAME):
            chunk = data[start : start + MAX_FRAME]
            frames += MUX_HEADER.pack(conn, len(chunk)) + chunk
        self.writer.write(bytes(frames))

    async def call(self, service: str, method: str, payload: bytes, limit_s: float) -> bytes:
        """Call the peer; the answer's payload, or TtrpcError (its status, a timeout, a close)."""
        if self.closed.is_set():
            raise TtrpcError(UNAVAILABLE, "connection closed")
        stream = self._next_stream
        self._next_stream += 2
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._calls[stream] = future
        try:
            self._send(
                self.call_conn, stream, REQUEST, encode_request(service, method, payload, int(limit_s * 1e9))
            )
            await self.writer.drain()
            async with asyncio.timeout(limit_s):
                return await future
        except TimeoutError:
            raise TtrpcError(DEADLINE_EXCEEDED, f"{method}: no answer within {limit_s:g}s") from None
        except (ConnectionError, OSError) as exc:
            raise TtrpcError(UNAVAILABLE, f"{method}: {exc}") from exc
        finally:
            self._calls.pop(stream, None)

    # --- reading --------------------------------------------------------------------------

    async def run(self) -> None:
        """Read frames until the peer closes or breaks the protocol; then fail pending calls."""
        try:
            while True:
                try:
                    head = await self.reader.readexactly(MUX_HEADER.size)
                except asyncio.IncompleteReadError:
                    return
                conn, size = MUX_HEADER.unpack(head)
                if size > MAX_FRAME:
                    raise ProtocolError(f"mux frame of {size} bytes")
                payload = await self.reader.readexactly(size)
                buffer = self._buffers.get(conn)
                if buffer is None:
                    log.debug("NRI: %d bytes for unknown mux connection %d dropped", size, conn)
                    continue
                buffer += payload
                self._messages(conn, buffer)
        except (ProtocolError, ProtoError) as exc:
            log.warning("NRI connection closed: %s", exc)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            log.info("NRI connection lost: %s", exc)
        finally:
            self.abort()

    def _messages(self, conn: int, buffer: bytearray) -> None:
        while len(buffer) >= MESSAGE_HEADER.size:
            length, stream, kind, _flags = MESSAGE_HEADER.unpack_from(buffer)
            if length > MAX_MESSAGE:
                raise ProtocolError(f"ttrpc message of {length} bytes")
            end = MESSAGE_HEADER.size + length
            if len(buffer) < end:
                return
            body = bytes(buffer[MESSAGE_HEADER.size : end])
            del buffer[:end]
            if conn == self.serve_conn and kind == REQUEST:
                if stream % 2 != 1:
                    raise ProtocolError(f"request on even stream {stream}")
                task = asyncio.create_task(self._serve(stream, body))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            elif conn == self.call_conn and kind == RESPONSE:
                self._answer(stream, body)
            else:
                log.debug("NRI: ttrpc message type %d on connection %d ignored", kind, conn)

    def _answer(self, stream: int, body: bytes) -> None:
        future = self._calls.get(stream)
        if future is None or future.done():
            return  # the call timed out meanwhile
        msg = pw.fields(body)
        status = pw.message(msg, 1) or {}
        code = pw.int64(status, 1)
        if code != OK:
            future.set_exception(TtrpcError(code, pw.string(status, 2)))
        else:
            payload = pw.first(msg, 2)
            future.set_result(payload if isinstance(payload, bytes) else b"")

    async def _serve(self, stream: int, body: bytes) -> None:
        try:
            request = pw.fields(body)
            service, method = pw.string(request, 1), pw.string(request, 2)
            payload = pw.first(request, 3)
            handler = self.handlers.get((service, method))
            if handler is None:
                answer = encode_response(b"", UNIMPLEMENTED, f"{service}/{method} is not served")
            else:
                answer = encode_response(await handler(payload if isinstance(payload, bytes) else b""))
        except ProtoError as exc:
            answer = encode_response(b"", UNKNOWN, f"malformed request: {exc}")
        except Exception as exc:  # the handler failed: the runtime gets the reason
            log.warning("NRI request failed: %s", exc)
            answer = encode_response(b"", UNKNOWN, str(exc))
        if self.closed.is_set():
            return
        with contextlib.suppress(ConnectionError, OSError):
            self._send(self.serve_conn, stream, RESPONSE, answer)
            await self.writer.drain()

    def abort(self) -> None:
        """Close the trunk now: pending calls fail, the reader ends."""
        self.closed.set()
        for future in self._calls.values():
            if not future.done():
                future.set_exception(TtrpcError(UNAVAILABLE, "connection closed"))
        self.writer.close()

    async def close(self) -> None:
        """Close the trunk and wait for the handlers in flight."""
        self.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
