"""Pipelined pagination: the continue token read from a page's header, pages kept in order."""

from __future__ import annotations

import asyncio

import pytest

from koordinator.kube import resources as res
from koordinator.kube.paging import PAGES_AHEAD, continue_from_head
from tests.koordinator.kube.builders import config_map, widget
from tests.koordinator.kube.conftest import WIDGETS, Backend
from testsupport.fake import FakeApiServer, Fault


@pytest.mark.parametrize(
    ("head", "result"),
    [
        pytest.param(
            b'{"kind":"PodList","metadata":{"resourceVersion":"5","continue":"abc"},"items":[',
            (True, "abc"),
            id="token",
        ),
        pytest.param(
            b'{"kind":"PodList","metadata":{"resourceVersion":"5"},"items":[', (True, ""), id="last-page"
        ),
        pytest.param(
            b'{"kind":"PodList","metadata":{"resourceVersion":"5","cont', (False, None), id="incomplete"
        ),
        pytest.param(b"x" * (64 * 1024 + 1), (True, None), id="no-header-in-sight"),
        # custom resources: keys sorted, the list metadata (and its token) after the items
        pytest.param(
            b'{"apiVersion":"slo.koordinator.sh/v1alpha1","items":[{"metadata":{"name":"a"}',
            (True, None),
            id="custom-resource-items-first",
        ),
    ],
)
def test_continue_from_head(head, result):
    assert continue_from_head(head) == result


@pytest.mark.parametrize(
    "prefetch", [pytest.param(True, id="pipelined"), pytest.param(False, id="sequential")]
)
async def test_pages_arrive_complete_and_in_order(fake_server: FakeApiServer, prefetch):
    for i in range(23):
        fake_server.create(res.CONFIG_MAPS, config_map(f"c{i:02d}", "ns"))
    fake_server.record_requests = True
    async with fake_server.client() as client:
        pages = [p async for p in client.list_pages(res.CONFIG_MAPS, "ns", page_size=5, prefetch=prefetch)]
    names = [i["metadata"]["name"] for p in pages for i in p["items"]]
    assert names == [f"c{i:02d}" for i in range(23)]
    assert len({p["metadata"]["resourceVersion"] for p in pages}) == 1
    assert len([r for r in fake_server.requests if r.path.endswith("/configmaps")]) == 5


async def test_pages_are_requested_ahead_of_the_caller_up_to_a_bound(fake_server: FakeApiServer):
    """While the caller is on a page, the next PAGES_AHEAD are requested (and no more)."""
    for i in range(40):
        fake_server.create(res.CONFIG_MAPS, config_map(f"c{i:02d}", "ns"))
    fake_server.record_requests = True

    def requested() -> int:
        return len([r for r in fake_server.requests if r.path.endswith("/configmaps")])

    async with fake_server.client() as client:
        listing = client.list_pages(res.CONFIG_MAPS, "ns", page_size=5)
        first = await anext(listing)
        await asyncio.sleep(0.2)  # the caller is busy with its page; the requests go ahead
        assert requested() == 1 + PAGES_AHEAD
        rest = [page async for page in listing]
    assert [i["metadata"]["name"] for p in (first, *rest) for i in p["items"]] == [
        f"c{i:02d}" for i in range(40)
    ]
    assert requested() == 8


async def test_a_failing_later_page_stops_the_listing(fake_server: FakeApiServer):
    for i in range(12):
        fake_server.create(res.CONFIG_MAPS, config_map(f"c{i:02d}", "ns"))
    from koordinator.kube.errors import BadRequestError
    from koordinator.kube.retry import RetryPolicy

    fake_server.inject(
        Fault(status=400, reason="BadRequest", path="/configmaps$", query="continue=", times=1)
    )
    async with fake_server.client(retry=RetryPolicy(attempts=1)) as client:
        with pytest.raises(BadRequestError):
            await client.list_all(res.CONFIG_MAPS, "ns", page_size=5)


@pytest.mark.parametrize(
    "prefetch", [pytest.param(True, id="pipelined"), pytest.param(False, id="sequential")]
)
async def test_custom_resource_pages_all_arrive(backend: Backend, prefetch):
    """Custom resource lists carry their continue token after the items; every page still comes."""
    for i in range(12):
        await backend.client.create(WIDGETS, widget(f"w{i:02d}", backend.namespace, size=i))
    pages = [
        p async for p in backend.client.list_pages(WIDGETS, backend.namespace, page_size=5, prefetch=prefetch)
    ]
    names = [i["metadata"]["name"] for p in pages for i in p["items"]]
    assert names == [f"w{i:02d}" for i in range(12)]
    assert [len(p["items"]) for p in pages] == [5, 5, 2]
