"""``/metrics`` under concurrent scrapers (koordlet.scrape): one rendering shared and
byte-identical to :func:`render`, reused for the share window, at most ``max_in_flight``
responses written at once with a bounded wait, 503 and ``Retry-After`` beyond it, a
failed rendering not kept, a reader that stops reading cut off, HEAD without a body."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from koordlet.metrics import KoordletMetrics, render, render_async
from koordlet.scrape import MetricsEndpoint, ScrapeLimits, SharedRendering
from tests.polling import eventually

NODE = "node-1"


@contextlib.asynccontextmanager
async def serving(endpoint: MetricsEndpoint) -> AsyncIterator[str]:
    """``endpoint`` as /metrics on a loopback port: its base URL."""
    app = web.Application()
    app.router.add_get("/metrics", endpoint.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


class HeldRendering:
    """A rendering of ``body`` that finishes only once released."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.released = asyncio.Event()

    async def __call__(self) -> bytes:
        await self.released.wait()
        return self.body


async def scrape(session: aiohttp.ClientSession, url: str) -> tuple[int, str | None, bytes]:
    async with session.get(f"{url}/metrics") as response:
        return response.status, response.headers.get("Retry-After"), await response.read()


def node_registry(pods: int) -> CollectorRegistry:
    registry = CollectorRegistry()
    metrics = KoordletMetrics(registry, NODE)
    metrics.node_used_cpu_cores.labels(NODE).set(1.5)
    for pod in range(pods):
        for resource in ("cpu", "mem", "io"):
            labels = (NODE, f"uid-{pod}", f"pod-{pod}", "default", resource, "10", "some", "1")
            metrics.pod_psi.labels(*labels).set(pod / 7)
    return registry


async def test_concurrent_scrapes_share_one_rendering_identical_to_render():
    registry = node_registry(300)
    renderings: list[int] = []

    async def counted() -> bytes:
        renderings.append(1)
        await asyncio.sleep(0.05)  # still rendering when the other scrapes arrive
        return await render_async(registry)

    endpoint = MetricsEndpoint(counted, ScrapeLimits(max_in_flight=32))
    async with serving(endpoint) as url, aiohttp.ClientSession() as session:
        answers = await asyncio.gather(*(scrape(session, url) for _ in range(20)))
        async with session.get(f"{url}/metrics") as response:
            assert response.content_type == "text/plain"
            assert response.charset == "utf-8"
            assert response.headers["X-Format"] == "0.0.4"
    expected = render(registry)
    assert len(expected) > ScrapeLimits().chunk_bytes  # written in several chunks
    assert [status for status, _, _ in answers] == [200] * 20
    assert all(body == expected for _, _, body in answers)
    assert len(renderings) == 1


async def test_a_body_is_reused_for_the_share_window_then_rendered_again():
    now = [100.0]
    bodies = iter([b"first\n", b"second\n"])

    async def render_next() -> bytes:
        return next(bodies)

    shared = SharedRendering(render_next, share_window=1.0, clock=lambda: now[0])
    assert await shared.body() == b"first\n"
    now[0] += 0.9
    assert await shared.body() == b"first\n"
    now[0] += 0.2
    assert await shared.body() == b"second\n"


async def test_beyond_the_bound_scrapes_wait_then_get_503_with_retry_after():
    held = HeldRendering(b"koordlet_start_time 1\n")
    limits = ScrapeLimits(max_in_flight=2, max_waiting=1, wait_timeout=30.0, retry_after=3)
    endpoint = MetricsEndpoint(held, limits)
    async with serving(endpoint) as url, aiohttp.ClientSession() as session:
        writing = [asyncio.create_task(scrape(session, url)) for _ in range(2)]
        await eventually(endpoint._slots.locked)
        waiting = asyncio.create_task(scrape(session, url))
        await eventually(lambda: endpoint._waiting == 1)
        refused = await asyncio.gather(scrape(session, url), scrape(session, url))
        assert [(status, retry) for status, retry, _ in refused] == [(503, "3"), (503, "3")]
        assert not any(task.done() for task in [*writing, waiting])
        held.released.set()
        served = await asyncio.gather(*writing, waiting)
    assert [(status, body) for status, _, body in served] == [(200, held.body)] * 3


async def test_a_scrape_that_waits_too_long_for_a_slot_gets_503():
    held = HeldRendering(b"koordlet_start_time 1\n")
    endpoint = MetricsEndpoint(held, ScrapeLimits(max_in_flight=1, max_waiting=4, wait_timeout=0.1))
    async with serving(endpoint) as url, aiohttp.ClientSession() as session:
        writing = asyncio.create_task(scrape(session, url))
        await eventually(endpoint._slots.locked)
        status, retry, _ = await scrape(session, url)
        assert (status, retry) == (503, "1")
        held.released.set()
        assert (await writing)[0] == 200


async def test_a_failed_rendering_answers_500_and_is_not_kept():
    calls: list[int] = []

    async def fails_once() -> bytes:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a collector's refresher broke")
        return b"koordlet_start_time 1\n"

    endpoint = MetricsEndpoint(fails_once, ScrapeLimits(share_window=60.0))
    async with serving(endpoint) as url, aiohttp.ClientSession() as session:
        assert (await scrape(session, url))[0] == 500
        assert (await scrape(session, url))[::2] == (200, b"koordlet_start_time 1\n")


async def test_a_reader_that_stops_reading_is_cut_off_and_frees_its_slot():
    body = b"x" * (48 << 20)  # more than the loopback socket buffers hold

    async def rendered() -> bytes:
        return body

    endpoint = MetricsEndpoint(rendered, ScrapeLimits(max_in_flight=1, write_timeout=0.5, wait_timeout=30.0))
    async with serving(endpoint) as url, aiohttp.ClientSession() as session:
        port = int(url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: koordlet\r\n\r\n")
        await eventually(endpoint._slots.locked)
        status, _, served = await scrape(session, url)  # waits for the stuck one's slot
        assert (status, len(served)) == (200, len(body))
        received = 0
        async with asyncio.timeout(30):
            while chunk := await reader.read(1 << 20):
                received += len(chunk)
        assert received < len(body)  # the connection was closed before the body was sent
        writer.close()


async def test_head_gets_the_headers_only():
    registry = node_registry(3)
    endpoint = MetricsEndpoint(lambda: render_async(registry))
    async with (
        serving(endpoint) as url,
        aiohttp.ClientSession() as session,
        session.head(f"{url}/metrics") as response,
    ):
        assert response.status == 200
        assert int(response.headers["Content-Length"]) == len(render(registry))
        assert await response.read() == b""
