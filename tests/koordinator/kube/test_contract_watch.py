"""Contract: watch streams, bookmarks, resume and 410 behave the same on the fake and a real apiserver."""

from __future__ import annotations

import asyncio

import pytest

from koordinator.kube import resources as res
from koordinator.kube.errors import GoneError
from koordinator.kube.watch import WatchEvent, WatchStream
from tests.koordinator.kube.builders import config_map, pod, widget
from tests.koordinator.kube.conftest import WIDGETS, Backend


async def collect(stream: WatchStream, count: int) -> list[WatchEvent]:
    """The next ``count`` events other than bookmarks (at most ``COLLECT_S`` seconds): the
    client allows bookmarks by default, and a real apiserver may send one at any time."""
    events: list[WatchEvent] = []
    async with asyncio.timeout(COLLECT_S):
        async for event in stream:
            if event.type == "BOOKMARK":
                continue
            events.append(event)
            if len(events) >= count:
                break
    return events


COLLECT_S = 10.0


async def current_rv(backend: Backend, resource=res.CONFIG_MAPS) -> str:
    listing = await backend.client.list(resource, backend.namespace)
    return str(listing["metadata"]["resourceVersion"])


async def test_watch_delivers_added_modified_deleted_in_order(backend: Backend):
    client, ns = backend.client, backend.namespace
    rv = await current_rv(backend)
    async with await client.watch(res.CONFIG_MAPS, ns, resource_version=rv, timeout_seconds=30) as stream:
        created = await client.create(res.CONFIG_MAPS, config_map("w", ns, {"v": "1"}))
        updated = await client.patch(res.CONFIG_MAPS, "w", {"data": {"v": "2"}}, ns)
        await client.delete(res.CONFIG_MAPS, "w", ns)
        events = await collect(stream, 3)
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[0].resource_version == created["metadata"]["resourceVersion"]
    assert events[1].object["data"] == {"v": "2"}
    assert events[1].resource_version == updated["metadata"]["resourceVersion"]
    assert int(events[2].resource_version) > int(events[1].resource_version)
    assert all(e.object["kind"] == "ConfigMap" and e.object["apiVersion"] == "v1" for e in events)


async def test_watch_without_resource_version_starts_with_current_state(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(res.CONFIG_MAPS, config_map("a", ns))
    await client.create(res.CONFIG_MAPS, config_map("b", ns))
    async with await client.watch(res.CONFIG_MAPS, ns, resource_version="0", timeout_seconds=30) as stream:
        events = await collect(stream, 2)
    assert sorted((e.type, e.object["metadata"]["name"]) for e in events) == [("ADDED", "a"), ("ADDED", "b")]


async def test_watch_resumes_from_a_resource_version(backend: Backend):
    client, ns = backend.client, backend.namespace
    first = await client.create(res.CONFIG_MAPS, config_map("one", ns))
    await client.create(res.CONFIG_MAPS, config_map("two", ns))
    await client.create(res.CONFIG_MAPS, config_map("three", ns))
    async with await client.watch(
        res.CONFIG_MAPS, ns, resource_version=first["metadata"]["resourceVersion"], timeout_seconds=30
    ) as stream:
        events = await collect(stream, 2)
    assert [e.object["metadata"]["name"] for e in events] == ["two", "three"]


async def test_bookmark_advances_past_filtered_writes(backend: Backend):
    client, ns = backend.client, backend.namespace
    other = await backend.new_namespace()
    rv = await current_rv(backend)
    async with await client.watch(
        res.CONFIG_MAPS, ns, resource_version=rv, allow_bookmarks=True, timeout_seconds=4
    ) as stream:
        elsewhere = await client.create(res.CONFIG_MAPS, config_map("elsewhere", other))
        events = [e async for e in stream]
    assert events, "the stream must carry a bookmark before it times out"
    assert {e.type for e in events} == {"BOOKMARK"}
    assert int(events[-1].resource_version) >= int(elsewhere["metadata"]["resourceVersion"])
    assert events[-1].object["kind"] == "ConfigMap"


async def test_no_bookmarks_unless_asked(backend: Backend):
    client, ns = backend.client, backend.namespace
    other = await backend.new_namespace()
    rv = await current_rv(backend)
    async with await client.watch(
        res.CONFIG_MAPS, ns, resource_version=rv, allow_bookmarks=False, timeout_seconds=3
    ) as stream:
        await client.create(res.CONFIG_MAPS, config_map("elsewhere", other))
        events = [e async for e in stream]
    assert events == []


async def test_too_old_resource_version_is_gone_and_a_relist_recovers(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(WIDGETS, widget("w", ns, size=1))
    with pytest.raises(GoneError) as info:
        async with await client.watch(WIDGETS, ns, resource_version="1", timeout_seconds=10) as stream:
            await collect(stream, 1)
    assert info.value.code == 410
    assert info.value.reason == "Expired"
    assert info.value.message.startswith("too old resource version: 1 (")
    listing = await client.list(WIDGETS, ns)
    async with await client.watch(
        WIDGETS, ns, resource_version=listing["metadata"]["resourceVersion"], timeout_seconds=30
    ) as stream:
        await client.patch(WIDGETS, "w", {"spec": {"size": 2}}, ns)
        events = await collect(stream, 1)
    assert events[0].type == "MODIFIED"
    assert events[0].object["spec"]["size"] == 2


async def test_label_selector_watch_sees_objects_enter_and_leave(backend: Backend):
    client, ns = backend.client, backend.namespace
    rv = await current_rv(backend)
    async with await client.watch(
        res.CONFIG_MAPS, ns, resource_version=rv, label_selector="team=a", timeout_seconds=30
    ) as stream:
        await client.create(res.CONFIG_MAPS, config_map("c", ns, labels={"team": "b"}))
        await client.patch(res.CONFIG_MAPS, "c", {"metadata": {"labels": {"team": "a"}}}, ns)
        await client.patch(res.CONFIG_MAPS, "c", {"data": {"x": "1"}}, ns)
        left = await client.patch(res.CONFIG_MAPS, "c", {"metadata": {"labels": {"team": "b"}}}, ns)
        events = await collect(stream, 3)
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    # leaving the selection reads as a deletion of the last matching content, at the new version
    assert events[2].object["metadata"]["labels"] == {"team": "a"}
    assert events[2].resource_version == left["metadata"]["resourceVersion"]


async def test_field_selector_watch_on_node_name(backend: Backend):
    client, ns = backend.client, backend.namespace
    rv = await current_rv(backend, res.PODS)
    async with await client.watch(
        res.PODS, ns, resource_version=rv, field_selector="spec.nodeName=node-a", timeout_seconds=30
    ) as stream:
        await client.create(res.PODS, pod("p", ns))
        await client.create(res.PODS, pod("q", ns))
        await client.bind(ns, "q", "node-b")
        await client.bind(ns, "p", "node-a")
        events = await collect(stream, 1)
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "p")]


async def test_watch_ends_at_timeout_seconds(backend: Backend):
    rv = await current_rv(backend)
    async with await backend.client.watch(
        res.CONFIG_MAPS, backend.namespace, resource_version=rv, timeout_seconds=1
    ) as stream:
        events = [e async for e in stream]
    assert events == []
