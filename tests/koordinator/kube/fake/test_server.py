"""The fake's HTTP surface beyond the contract suite: routing, dry runs, collections, watch-list."""

from __future__ import annotations

import asyncio

import pytest

from koordinator.kube import resources as res
from koordinator.kube.errors import InternalError, NotFoundError
from tests.koordinator.kube.builders import config_map, pod
from testsupport.fake import FakeApiServer


async def test_unknown_paths_are_not_found(fake_server: FakeApiServer, fake_client):
    for path in ("/apis/nope.example.com/v1", "/api/v1/widgets", "/api/v1/namespaces/ns/pods/p/exec"):
        with pytest.raises(NotFoundError):
            await fake_client.request("GET", path)


async def test_dry_run_changes_nothing(fake_server: FakeApiServer, fake_client):
    fake_server.create(res.CONFIG_MAPS, config_map("c", "ns", {"a": "1"}))
    rv = fake_server.state.rv
    dry = await fake_client.create(res.CONFIG_MAPS, config_map("d", "ns"), dry_run=True)
    assert dry["metadata"]["name"] == "d"
    await fake_client.delete(res.CONFIG_MAPS, "c", "ns", dry_run=True)
    assert fake_server.state.rv == rv
    assert [o["metadata"]["name"] for o in fake_server.list_objects(res.CONFIG_MAPS, "ns")] == ["c"]


async def test_delete_collection_by_label(fake_server: FakeApiServer, fake_client):
    fake_server.create(res.CONFIG_MAPS, config_map("a", "ns", labels={"drop": "yes"}))
    fake_server.create(res.CONFIG_MAPS, config_map("b", "ns"))
    await fake_client.delete_collection(res.CONFIG_MAPS, "ns", label_selector="drop=yes")
    assert [o["metadata"]["name"] for o in fake_server.list_objects(res.CONFIG_MAPS, "ns")] == ["b"]


async def test_watch_list_sends_initial_events_then_the_end_bookmark(fake_server: FakeApiServer, fake_client):
    fake_server.create(res.CONFIG_MAPS, config_map("a", "ns"))
    async with await fake_client.watch(
        res.CONFIG_MAPS, "ns", send_initial_events=True, timeout_seconds=5
    ) as stream:
        events = []
        async with asyncio.timeout(5):
            async for event in stream:
                events.append(event)
                if event.type == "BOOKMARK":
                    break
    assert [e.type for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1].object["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_two_budgets_for_one_pod_is_an_internal_error(fake_server: FakeApiServer, fake_client):
    fake_server.create(res.PODS, pod("p", "ns", labels={"app": "a"}, node="n1"))
    current = fake_server.get(res.PODS, "p", "ns")
    current["status"]["phase"] = "Running"
    fake_server.update(res.PODS, current, subresource="status")
    for name in ("one", "two"):
        fake_server.create(
            res.POD_DISRUPTION_BUDGETS,
            {"metadata": {"name": name, "namespace": "ns"}, "spec": {"maxUnavailable": 1, "selector": {}}},
        )
    with pytest.raises(InternalError, match="more than one PodDisruptionBudget"):
        await fake_client.evict("ns", "p")


async def test_history_limit_makes_old_versions_gone():
    async with FakeApiServer(history_limit=3) as fake:
        first = fake.create(res.CONFIG_MAPS, config_map("a", "ns"))
        for i in range(5):
            fake.create(res.CONFIG_MAPS, config_map(f"b{i}", "ns"))
        async with fake.client() as client:
            from koordinator.kube.errors import GoneError

            stream = await client.watch(
                res.CONFIG_MAPS, "ns", resource_version=first["metadata"]["resourceVersion"]
            )
            async with stream:
                with pytest.raises(GoneError):
                    await stream.__anext__()
