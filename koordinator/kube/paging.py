"""Paginated LIST with the next requests sent early.

For built-in kinds the apiserver writes a list's ``metadata`` (and so its ``continue``
token) before its ``items``. :func:`pages` reads each page as a stream and requests the
next page as soon as the token has arrived, whether or not the caller has got to the
page yet, keeping up to :data:`PAGES_AHEAD` pages requested beyond the one the caller is
on. The apiserver encodes (and compresses) pages N+1 and N+2, one request each, while the
client decodes page N: encoding a page costs it about as much as decoding costs the
client, so with one page ahead the two took turns more than they overlapped.

Custom resources are encoded from a map, keys sorted: ``apiVersion``, ``items``, ``kind``,
``metadata`` -- the token comes *after* the items. A head whose ``items`` come before any
list ``metadata`` therefore says nothing about the next page (it is not the last page just
because no token precedes the items). Whenever the token is not known early (that order, a
proxy that reorders, an unusually large header), the next page is requested once the
current one is decoded, as plain pagination would.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from koordinator.kube.errors import ApiConnectionError, KubeError
from koordinator.kube.managedfields import strip_managed_fields

if TYPE_CHECKING:
    from koordinator.kube.client import ApiClient

Obj = dict[str, Any]
_ITEMS = b'"items":'
_METADATA = b'"metadata":'
_CONTINUE = re.compile(rb'"continue":"([^"\\]*)"')
_HEAD_LIMIT = 64 * 1024
#: Pages requested beyond the one the caller is on (each streams in as bytes; only the
#: caller's page is decoded).
PAGES_AHEAD = 2
#: The token of the page that follows: a token, "" for none (last page), None for unknown.
Announcement = str | None


def continue_from_head(head: bytes) -> tuple[bool, Announcement]:
    """Whether the header of a list is complete in ``head``, and the continue token it holds.

    The token is ``""`` (last page) only when the list's ``metadata`` precedes its ``items``;
    items first (custom resources) leave it unknown (``None``).
    """
    end = head.find(_ITEMS)
    if end < 0:
        return (len(head) > _HEAD_LIMIT, None)
    start = head.find(_METADATA, 0, end)
    if start < 0:
        return (True, None)
    match = _CONTINUE.search(head, start, end)
    return (True, match.group(1).decode() if match else "")


async def fetch_page(
    client: ApiClient, path: str, params: Mapping[str, str], announce: asyncio.Future[Announcement]
) -> bytes:
    """One page's JSON; ``announce`` gets the next page's token as soon as it has streamed in."""
    try:
        response = await client.open_stream(path, params, read_timeout=client.timeout)
        chunks: list[bytes] = []
        head = b""
        try:
            async for chunk in response.content.iter_any():
                chunks.append(chunk)
                if not announce.done():
                    head += chunk
                    complete, token = continue_from_head(head)
                    if complete:
                        announce.set_result(token)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ApiConnectionError(f"GET {path}: reading the list: {exc!r}") from exc
        finally:
            response.release()
    finally:
        if not announce.done():
            announce.set_result(None)
    return b"".join(chunks)


def decode_page(path: str, data: bytes, strip: bool = False) -> Obj:
    """A page's JSON decoded (``strip``: without the managedFields of built-in objects)."""
    try:
        page = orjson.loads(strip_managed_fields(data) if strip else data)
    except orjson.JSONDecodeError as exc:
        raise ApiConnectionError(f"GET {path}: list reply is not JSON") from exc
    if not isinstance(page, dict):
        raise ApiConnectionError(f"GET {path}: list reply is not a JSON object")
    return page


async def pages(
    client: ApiClient,
    path: str,
    first: Mapping[str, str],
    rest: Mapping[str, str],
    prefetch: bool,
    strip: bool = False,
) -> AsyncIterator[Obj]:
    """Every page of a LIST, in order (``first``: the first request's parameters).

    A page is decoded only when the caller asks for it, once it has let go of the one
    before (a decoded page is several times its JSON): at most one decoded page is alive,
    while the next one streams in as bytes.
    """
    loop = asyncio.get_running_loop()
    #: the pages requested and not yet handed to the caller, in order
    queue: collections.deque[tuple[asyncio.Task[bytes], asyncio.Future[Announcement]]] = collections.deque()
    #: a token announced while PAGES_AHEAD pages were already waiting
    held: list[str] = []
    closed = False

    def start(params: Mapping[str, str]) -> None:
        announce: asyncio.Future[Announcement] = loop.create_future()
        queue.append((asyncio.ensure_future(fetch_page(client, path, params, announce)), announce))
        if prefetch:
            announce.add_done_callback(announced)

    def announced(announce: asyncio.Future[Announcement]) -> None:
        token = None if closed or announce.cancelled() else announce.result()
        if token:
            if len(queue) < PAGES_AHEAD:
                follow(token)
            else:
                held.append(token)

    def follow(token: str) -> None:
        start({**rest, "continue": token})

    start(first)
    try:
        while queue:
            task, announce = queue.popleft()
            if held and len(queue) < PAGES_AHEAD:
                follow(held.pop())
            early = await announce if prefetch else None
            page = decode_page(path, await task, strip)
            del task  # and its bytes
            token = (page.get("metadata") or {}).get("continue") or ""
            if token and not early:
                # not requested early: the decoded page decides, whatever its head suggested
                # (and the apiserver prepares it while the caller goes through this one)
                follow(token)
            yield page
            del page
            await asyncio.sleep(0)
    finally:
        closed = True
        for task, _ in queue:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, KubeError):
                await task
