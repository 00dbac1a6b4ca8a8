"""ttrpc over NRI's multiplexer: calls both ways, statuses, framing split and broken."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from koordlet.runtimehooks.nri.ttrpc import (
    MUX_HEADER,
    PLUGIN_CONN,
    RUNTIME_CONN,
    UNIMPLEMENTED,
    UNKNOWN,
    Handler,
    Session,
    TtrpcError,
    encode_request,
)


async def _pair(
    plugin_handlers: dict[tuple[str, str], Handler], runtime_handlers: dict[tuple[str, str], Handler]
) -> tuple[Session, Session, list[asyncio.Task[None]]]:
    left, right = socket.socketpair()
    a = Session(*await asyncio.open_unix_connection(sock=left), plugin_handlers)
    b = Session(
        *await asyncio.open_unix_connection(sock=right),
        runtime_handlers,
        serve_conn=RUNTIME_CONN,
        call_conn=PLUGIN_CONN,
    )
    tasks = [asyncio.create_task(a.run()), asyncio.create_task(b.run())]
    return a, b, tasks


async def test_calls_both_ways_with_statuses():
    async def echo(payload: bytes) -> bytes:
        return payload[::-1]

    async def boom(_payload: bytes) -> bytes:
        raise RuntimeError("hook failed")

    plugin, runtime, tasks = await _pair(
        {("svc", "Echo"): echo, ("svc", "Boom"): boom}, {("rt", "Echo"): echo}
    )
    assert await runtime.call("svc", "Echo", b"abc", 1) == b"cba"
    assert await plugin.call("rt", "Echo", b"xyz", 1) == b"zyx"
    with pytest.raises(TtrpcError) as err:
        await runtime.call("svc", "Boom", b"", 1)
    assert (err.value.code, err.value.message) == (UNKNOWN, "hook failed")
    with pytest.raises(TtrpcError) as err:
        await runtime.call("svc", "Nope", b"", 1)
    assert err.value.code == UNIMPLEMENTED
    # many calls at once: each answer reaches its own caller
    answers = await asyncio.gather(*(runtime.call("svc", "Echo", str(i).encode(), 1) for i in range(50)))
    assert answers == [str(i).encode()[::-1] for i in range(50)]
    await plugin.close()
    await asyncio.gather(*tasks)
    with pytest.raises(TtrpcError, match="closed"):
        await runtime.call("svc", "Echo", b"", 1)


async def test_a_message_split_across_frames_is_reassembled():
    seen = []

    async def record(payload: bytes) -> bytes:
        seen.append(payload)
        return b""

    left, right = socket.socketpair()
    plugin = Session(*await asyncio.open_unix_connection(sock=left), {("s", "M"): record})
    task = asyncio.create_task(plugin.run())
    body = encode_request("s", "M", b"p" * 1000)
    message = struct.pack(">IIBB", len(body), 1, 1, 0) + body
    raw = b"".join(
        MUX_HEADER.pack(PLUGIN_CONN, len(part)) + part
        for part in (message[:7], message[7:600], message[600:])
    )
    right.sendall(raw)
    reply = b""
    while len(reply) < MUX_HEADER.size + 10:
        reply += await asyncio.to_thread(right.recv, 4096)
    assert seen == [b"p" * 1000]
    conn, _ = MUX_HEADER.unpack_from(reply)
    assert conn == PLUGIN_CONN
    _length, stream, kind, _ = struct.unpack_from(">IIBB", reply, MUX_HEADER.size)
    assert (stream, kind) == (1, 2)
    right.close()
    await task
    assert plugin.closed.is_set()


async def test_a_request_on_an_even_stream_closes_the_trunk():
    left, right = socket.socketpair()
    plugin = Session(*await asyncio.open_unix_connection(sock=left), {})
    task = asyncio.create_task(plugin.run())
    body = encode_request("s", "M", b"")
    right.sendall(
        MUX_HEADER.pack(PLUGIN_CONN, 10 + len(body)) + struct.pack(">IIBB", len(body), 2, 1, 0) + body
    )
    await asyncio.wait_for(task, 5)
    assert plugin.closed.is_set()
    right.close()


async def test_a_call_without_answer_times_out():
    left, right = socket.socketpair()
    plugin = Session(*await asyncio.open_unix_connection(sock=left), {})
    task = asyncio.create_task(plugin.run())
    with pytest.raises(TtrpcError, match=r"no answer within 0\.05s"):
        await plugin.call("rt", "RegisterPlugin", b"", 0.05)
    right.close()
    await task
