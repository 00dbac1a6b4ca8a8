"""Informer behaviour on the fake apiserver: relists without duplicates, tombstones, bookmarks,
resync, transforms, indexers, late consumers, garbage-collector handling and sharing."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import pytest

from koordinator.kube import resources as res
from koordinator.kube.informer import (
    Consumer,
    InformerFactory,
    Tombstone,
    index_by_namespace,
    index_by_node_name,
    index_by_owner,
)
from tests.koordinator.kube.builders import config_map, pod
from tests.koordinator.kube.recorder import Recorder, key
from testsupport.fake import FakeApiServer, FakeClock


async def eventually(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(EVENTUALLY_S):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


EVENTUALLY_S = 10.0


@pytest.fixture
async def factory(fake_server: FakeApiServer):
    client = fake_server.client()
    made = InformerFactory(client, page_size=3, freeze_after_sync=False)
    yield made
    await made.stop()
    await client.close()


def seed(fake: FakeApiServer, namespace: str, count: int) -> None:
    for i in range(count):
        fake.create(res.CONFIG_MAPS, config_map(f"c{i}", namespace, {"i": str(i)}))


async def test_initial_list_in_pages_then_watch(fake_server: FakeApiServer, factory: InformerFactory):
    seed(fake_server, "ns", 7)
    informer = factory.informer(res.CONFIG_MAPS, namespace="ns")
    recorder = Recorder()
    consumer = recorder.attach(informer, indexers={"namespace": index_by_namespace})
    factory.start()
    async with asyncio.timeout(5):
        await factory.wait_for_sync()
    assert sorted(consumer.store.keys()) == sorted(f"ns/c{i}" for i in range(7))
    assert [e[0] for e in recorder.events] == ["add"] * 7
    fake_server.create(res.CONFIG_MAPS, config_map("late", "ns"))
    fake_server.state.patch(
        fake_server.rtype(res.CONFIG_MAPS),
        "ns",
        "c1",
        "application/merge-patch+json",
        {"data": {"i": "x"}},
        manager="t",
    )
    fake_server.delete(res.CONFIG_MAPS, "c2", "ns")
    await eventually(lambda: len(recorder.events) == 10)
    assert recorder.events[7:] == [
        ("add", "ns/late", recorder.events[7][2]),
        ("update", "ns/c1", recorder.events[8][2]),
        ("delete", "ns/c2", ""),
    ]
    assert consumer.store.get("ns/c1")["data"] == {"i": "x"}
    assert len(consumer.store.by_index("namespace", "ns")) == 7
    assert recorder.violations == []


async def test_relist_after_gone_has_no_duplicates_and_tombstones_deletions(
    fake_server: FakeApiServer, factory: InformerFactory
):
    seed(fake_server, "ns", 5)
    informer = factory.informer(res.CONFIG_MAPS, namespace="ns")
    recorder = Recorder()
    recorder.attach(informer)
    factory.start()
    async with asyncio.timeout(5):
        await factory.wait_for_sync()
    await fake_server.stop_listening()
    # while the informer cannot reach the server: one change, one deletion, one creation
    fake_server.state.patch(
        fake_server.rtype(res.CONFIG_MAPS),
        "ns",
        "c0",
        "application/merge-patch+json",
        {"data": {"i": "changed"}},
        manager="t",
    )
    fake_server.delete(res.CONFIG_MAPS, "c1", "ns")
    fake_server.create(res.CONFIG_MAPS, config_map("new", "ns"))
    await fake_server.restart(compact=True)  # history gone: the informer's resourceVersion is now too old
    relists = informer.relists
    await fake_server.start_listening()
    await eventually(lambda: informer.relists > relists and len(recorder.events) == 8)
    assert sorted(recorder.events[5:]) == sorted(
        [
            ("update", "ns/c0", recorder.live["ns/c0"]),
            ("tombstone", "ns/c1", ""),
            ("add", "ns/new", recorder.live["ns/new"]),
        ]
    )
    assert recorder.violations == []
    truth = {
        key(o): o["metadata"]["resourceVersion"] for o in fake_server.list_objects(res.CONFIG_MAPS, "ns")
    }
    assert recorder.live == truth


async def test_reconnect_resumes_without_relisting(fake_server: FakeApiServer, factory: InformerFactory):
    seed(fake_server, "ns", 2)
    informer = factory.informer(res.CONFIG_MAPS, namespace="ns")
    recorder = Recorder()
    recorder.attach(informer)
    factory.start()
    async with asyncio.timeout(5):
        await factory.wait_for_sync()
    await fake_server.restart(compact=False)  # watches end, history kept
    fake_server.create(res.CONFIG_MAPS, config_map("after", "ns"))
    await eventually(lambda: len(recorder.events) == 3)
    assert informer.relists == 1
    assert recorder.violations == []


async def test_tombstone_carries_the_last_known_record(fake_server: FakeApiServer, factory: InformerFactory):
    seed(fake_server, "ns", 1)
    informer = factory.informer(res.CONFIG_MAPS, namespace="ns")
    deleted: list[object] = []
    informer.add_consumer(lambda o: o["data"]["i"], on_delete=deleted.append)
    factory.start()
    async with asyncio.timeout(5):
        await factory.wait_for_sync()
    await fake_server.stop_listening()
    fake_server.delete(res.CONFIG_MAPS, "c0", "ns")
    await fake_server.restart(compact=True)
    await fake_server.start_listening()
    await eventually(lambda: bool(deleted))
    assert deleted == [Tombstone("ns/c0", "0")]


async def test_bookmarks_advance_the_resource_version(factory: InformerFactory):
    fake = FakeApiServer(bookmark_interval=0.05)
    await fake.start()
    try:
        client = fake.client()
        informer = InformerFactory(client, freeze_after_sync=False).informer(
            res.CONFIG_MAPS, namespace="quiet"
        )
        fake.create(res.NAMESPACES, {"metadata": {"name": "quiet"}})
        informer.add_consumer()
        informer.start()
        async with asyncio.timeout(5):
            await informer.wait_synced()
        start = int(informer.resource_version)
        written = fake.create(res.CONFIG_MAPS, config_map("elsewhere", "busy"))
        await eventually(
            lambda: int(informer.resource_version) >= int(written["metadata"]["resourceVersion"])
        )
        assert int(informer.resource_version) > start
        await informer.stop()
        await client.close()
    finally:
        await fake.stop()


async def test_periodic_resync_redelivers_the_cache(fake_server: FakeApiServer):
    seed(fake_server, "ns", 3)
    clock = FakeClock()
    client = fake_server.client()
    factory = InformerFactory(client, clock=clock, freeze_after_sync=False)
    informer = factory.informer(res.CONFIG_MAPS, namespace="ns")
    recorder = Recorder()
    recorder.attach(informer, resync_period=30.0)
    factory.start()
    try:
        async with asyncio.timeout(5):
            await factory.wait_for_sync()
        await clock.step(1)
        assert recorder.resyncs == 3
        assert clock.monotonic() == 30.0
        await clock.step(1)
        assert recorder.resyncs == 6
        assert recorder.violations == []
    finally:
        await factory.stop()
        await client.close()


async def test_transform_and_custom_indexers(fake_server: FakeApiServer, factory: InformerFactory):
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}
    fake_server.create(res.PODS, pod("a", "ns", node="n1"))
    with_owner = pod("b", "ns", node="n1")
    with_owner["metadata"]["ownerReferences"] = [owner]
    fake_server.create(res.PODS, with_owner)
    fake_server.create(res.PODS, pod("c", "other", node="n2"))

    def compact(obj):
        return (obj["metadata"]["namespace"], obj["metadata"]["name"], obj["spec"].get("nodeName", ""))

    informer = factory.informer(res.PODS)
    records = informer.add_consumer(compact, indexers={"node": lambda r: [r[2]] if r[2] else []})
    raw = informer.add_consumer(
        indexers={"node": index_by_node_name, "owner": index_by_owner, "namespace": index_by_namespace}
    )
    factory.start()
    async with asyncio.timeout(5):
        await factory.wait_for_sync()
    assert records.store.by_index("node", "n1") == [("ns", "a", "n1"), ("ns", "b", "n1")]
    assert records.store.index_values("node") == ["n1", "n2"]
    assert [p["metadata"]["name"] for p in raw.store.by_index("owner", "rs-uid")] == ["b"]
    assert [p["metadata"]["name"] for p in raw.store.by_index("namespace", "other")] == ["c"]
    assert factory.informer(res.PODS) is informer, "one informer per collection"
    assert factory.informer(res.PODS, namespace="ns") is not informer


async def test_refresh_builds_a_changed_objects_record_from_the_stored_one(
    fake_server: FakeApiServer, factory: InformerFactory
):
    fake_server.create(res.CONFIG_MAPS, config_map("c", "ns", {"i": "1"}))
    seen: list[tuple[str, Any]] = []

    def transform(obj):
        seen.append(("transform", obj["data"]["i"]))
        return (obj["data"]["i"], 1)

    def refresh(obj, previous):
        seen.append(("refresh", previous))
        return (obj["data"]["i"], previous[1] + 1)

    consumer = factory.informer(res.CONFIG_MAPS).add_consumer(transform, refresh=refresh)
    factory.start()
    async with asyncio.timeout(5):
        await factory.wait_for_sync()
    changed = fake_server.get(res.CONFIG_MAPS, "c", "ns")
    changed["data"] = {"i": "2"}
    fake_server.update(res.CONFIG_MAPS, changed)
    await eventually(lambda: consumer.store.get("ns/c") == ("2", 2))
    assert seen == [("transform", "1"), ("refresh", ("1", 1))]


async def test_late_consumer_is_filled_without_duplicating_for_others(
    fake_server: FakeApiServer, factory: InformerFactory
):
    seed(fake_server, "ns", 4)
    informer = factory.informer(res.CONFIG_MAPS, namespace="ns")
    first = Recorder()
    first.attach(informer)
    factory.start()
    async with asyncio.timeout(5):
        await factory.wait_for_sync()
    second = Recorder()
    late = second.attach(informer)
    await asyncio.wait_for(late.synced.wait(), 5)
    assert len(second.events) == 4
    assert len(first.events) == 4
    assert first.violations == second.violations == []


async def test_a_failing_handler_does_not_stop_the_informer(
    fake_server: FakeApiServer, factory: InformerFactory
):
    informer = factory.informer(res.CONFIG_MAPS, namespace="ns")
    seen: list[str] = []

    def explode(obj):
        seen.append(obj["metadata"]["name"])
        raise RuntimeError("handler bug")

    informer.add_consumer(on_add=explode)
    factory.start()
    async with asyncio.timeout(5):
        await factory.wait_for_sync()
    fake_server.create(res.CONFIG_MAPS, config_map("one", "ns"))
    fake_server.create(res.CONFIG_MAPS, config_map("two", "ns"))
    await eventually(lambda: seen == ["one", "two"])
    assert informer.running


async def test_gc_is_paused_during_the_list_and_frozen_after_sync(fake_server: FakeApiServer):
    seed(fake_server, "ns", 3)
    client = fake_server.client()
    factory = InformerFactory(client, freeze_after_sync=True)
    informer = factory.informer(res.CONFIG_MAPS, namespace="ns")
    states: list[bool] = []

    def note_gc(obj: dict[str, Any]) -> dict[str, Any]:
        states.append(gc.isenabled())
        return obj

    informer.add_consumer(note_gc)
    assert gc.isenabled()
    gc.unfreeze()
    try:
        factory.start()
        async with asyncio.timeout(5):
            await factory.wait_for_sync()
        assert states == [False, False, False]
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        await factory.stop()
        await client.close()


async def test_label_and_field_selected_informers(fake_server: FakeApiServer, factory: InformerFactory):
    fake_server.create(res.PODS, pod("a", "ns", labels={"app": "x"}, node="n1"))
    fake_server.create(res.PODS, pod("b", "ns", labels={"app": "y"}, node="n1"))
    fake_server.create(res.PODS, pod("c", "ns", labels={"app": "x"}, node="n2"))
    on_n1: Consumer[dict[str, Any]] = factory.informer(
        res.PODS, field_selector="spec.nodeName=n1", label_selector="app=x"
    ).add_consumer()
    factory.start()
    async with asyncio.timeout(5):
        await factory.wait_for_sync()
    assert on_n1.store.keys() == ["ns/a"]


async def test_a_late_consumer_counts_as_synced_only_once_filled(
    fake_server: FakeApiServer, factory: InformerFactory
):
    seed(fake_server, "ns", 7)
    informer = factory.informer(res.CONFIG_MAPS, namespace="ns")
    Recorder().attach(informer)
    factory.start()
    async with asyncio.timeout(5):
        await factory.wait_for_sync()
    late = Recorder()
    consumer = late.attach(informer)
    assert not informer.has_synced, "a consumer that holds nothing yet is not synced"
    async with asyncio.timeout(5):
        await factory.wait_for_sync()
    assert len(consumer.store.keys()) == 7
    assert informer.has_synced


async def test_the_sync_barrier_covers_informers_created_while_waiting(fake_server: FakeApiServer):
    seed(fake_server, "ns", 5)
    fake_server.create(res.PODS, pod("p0", "ns"))
    client = fake_server.client()
    made = InformerFactory(client, page_size=2, freeze_after_sync=False)
    try:
        first: Consumer[Any] = made.informer(res.CONFIG_MAPS, namespace="ns").add_consumer(name="first")
        made.start()
        later: list[Consumer[Any]] = []

        def add_pods_informer(_obj: Any) -> None:
            if not later:  # a handler that wires another cache, as a controller may
                later.append(made.informer(res.PODS, namespace="ns").add_consumer(name="later"))

        first_informer = made.informer(res.CONFIG_MAPS, namespace="ns")
        first_informer.add_consumer(name="wiring", on_add=add_pods_informer)
        async with asyncio.timeout(5):
            await made.wait_for_sync()
        assert len(first.store.keys()) == 5
        assert later
        assert later[0].store.keys() == ["ns/p0"]
    finally:
        await made.stop()
        await client.close()
