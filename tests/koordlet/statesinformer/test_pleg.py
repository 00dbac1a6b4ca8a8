"""PLEG: a new pod cgroup asks the pods informer for an early resync; QoS directories that
did not exist when the koordlet started are watched from the next resync on."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

from koordinator.api.kubeqos import KubeQOSClass
from koordlet.statesinformer.pleg import PodLifecycleEvents
from koordlet.statesinformer.pods import PodsInformer
from koordlet.system.cgroup.layout import CgroupDriver, KubepodsLayout
from tests.fakes.host import FakeHost
from tests.polling import eventually

UID = "0c2f9a1e-8b7d-4c55-9a3e-1f2b3c4d5e6f"


async def test_a_qos_directory_created_later_is_watched_after_a_resync(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    besteffort = host.cgroup_dir("cpu", host.layout.qos_dir(KubeQOSClass.BEST_EFFORT))
    shutil.rmtree(besteffort)  # the kubelet has not created it yet
    added: list[str] = []
    pleg = PodLifecycleEvents(host.cgroups, added.append)
    assert pleg.start()
    try:
        besteffort.mkdir()
        pleg.refresh()  # what every pods resync does
        host.add_pod(KubeQOSClass.BEST_EFFORT, UID)
        await eventually(lambda: added == [UID])
    finally:
        pleg.stop()


class _Pods:
    def __init__(self) -> None:
        self.calls = 0

    async def get_pods(self) -> list[dict[str, Any]]:
        self.calls += 1
        return []


async def test_every_resync_calls_on_resync() -> None:
    source, resyncs = _Pods(), []
    informer = PodsInformer(
        source,
        KubepodsLayout.default(CgroupDriver.SYSTEMD),
        interval=3600,
        on_resync=lambda: resyncs.append(source.calls),
    )
    task = asyncio.create_task(informer.run())
    await eventually(lambda: resyncs == [1])  # after the first sync, though it kept nothing
    informer.trigger("test")
    await eventually(lambda: resyncs == [1, 2])
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
