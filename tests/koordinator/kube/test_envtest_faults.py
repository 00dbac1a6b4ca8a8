"""Fault injection on a real control plane: the apiserver is killed and restarted under a watching
informer while another apiserver on the same etcd keeps writing. The informer must end up with
exactly the cluster's state, having raised no duplicated and no missing event."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from koordinator.kube import resources as res
from koordinator.kube.informer import InformerFactory
from koordinator.kube.retry import RetryPolicy
from tests.envtest import Envtest, create_namespace
from tests.koordinator.kube.builders import config_map
from tests.koordinator.kube.recorder import Recorder, key

NS = "faults"


async def eventually(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(EVENTUALLY_S):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


EVENTUALLY_S = 60.0


async def test_informer_recovers_from_an_apiserver_restart(envtest_faults: Envtest):
    env = envtest_faults
    other = await asyncio.to_thread(env.start_extra_apiserver)
    writer = env.client(server=other.url)
    watcher = env.client(retry=RetryPolicy(attempts=3, base_delay=0.05, max_delay=0.2))
    factory = InformerFactory(
        watcher,
        freeze_after_sync=False,
        page_size=7,
        backoff=RetryPolicy(attempts=1_000_000, base_delay=0.1, max_delay=0.5),
    )
    try:
        await create_namespace(writer, NS)
        for i in range(20):
            await writer.create(res.CONFIG_MAPS, config_map(f"c{i}", NS, {"v": "0"}))
        informer = factory.informer(res.CONFIG_MAPS, namespace=NS)
        recorder = Recorder()
        recorder.attach(informer)
        factory.start()
        async with asyncio.timeout(30):
            await factory.wait_for_sync()
        assert len(recorder.live) == 20

        # writes racing with the kill
        for i in range(5):
            await writer.patch(res.CONFIG_MAPS, f"c{i}", {"data": {"v": "1"}}, NS)
        env.kill_apiserver()
        marker = len(recorder.events)

        # while the watched apiserver is down
        for i in range(5, 10):
            await writer.patch(res.CONFIG_MAPS, f"c{i}", {"data": {"v": "down"}}, NS)
        for i in range(10, 13):
            await writer.delete(res.CONFIG_MAPS, f"c{i}", NS)
        for i in range(3):
            await writer.create(res.CONFIG_MAPS, config_map(f"new{i}", NS))
        relists = informer.relists
        await asyncio.to_thread(env.restart_apiserver)

        # and after it came back
        await writer.patch(res.CONFIG_MAPS, "c15", {"data": {"v": "after"}}, NS)
        await writer.delete(res.CONFIG_MAPS, "c16", NS)

        listing = await writer.list(res.CONFIG_MAPS, NS)
        truth = {key(o): o["metadata"]["resourceVersion"] for o in listing["items"]}
        await eventually(lambda: recorder.live == truth)
        assert recorder.violations == []
        assert informer.relists > relists, (
            "the restarted apiserver's cache cannot serve the old resourceVersion"
        )
        after = recorder.events[marker:]
        changed = {f"{NS}/c{i}" for i in (*range(5, 10), 15)}
        assert {k for kind, k, _ in after if kind == "update"} >= changed
        assert {k for kind, k, _ in after if kind in ("delete", "tombstone")} == {
            f"{NS}/c{i}" for i in (10, 11, 12, 16)
        }
        assert {k for kind, k, _ in after if kind == "add"} == {f"{NS}/new{i}" for i in range(3)}
    finally:
        await factory.stop()
        await watcher.close()
        await writer.close()
