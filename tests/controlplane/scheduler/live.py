"""The scheduler running against the fake apiserver, for the tests that watch it work."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from controlplane.scheduler.config import SchedulerConfig, parse
from controlplane.scheduler.scheduler import Scheduler
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer.factory import InformerFactory
from testsupport.fake import FakeApiServer


@contextlib.asynccontextmanager
async def running(fake: FakeApiServer, config: SchedulerConfig | None = None) -> AsyncIterator[Scheduler]:
    """A scheduler of ``config`` (default: the default profile) with its informers, writing
    Events as the process does, until the block ends."""
    client = fake.client()
    factory = InformerFactory(client, freeze_after_sync=False)
    scheduler = Scheduler(
        client, config or parse(None), recorder=EventRecorder(client, "koord-scheduler"), seed=1
    )
    scheduler.attach(factory)
    factory.start()
    task = asyncio.create_task(scheduler.run())
    try:
        yield scheduler
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await factory.stop()
        await client.close()
