"""The slo-controller against the fake apiserver, on a fake clock, for the controller tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from controlplane.manager.controllers.metrics import SLOControllerMetrics
from controlplane.manager.controllers.running import ControllerSet, ControllerSettings
from controlplane.reactor import ReactorMetrics
from koordinator.api.features import CONTROL_PLANE_FEATURES, FeatureGates
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.timeutil import parse_time
from tests.controlplane.manager.controllers.objects import CONFIG_NAMESPACE
from tests.polling import eventually
from testsupport.fake import FakeApiServer, FakeClock

ROOT = Path(__file__).resolve().parents[4]
Obj = dict[str, Any]

_WITH_STATUS = {"Node": res.NODES, "NodeMetric": res.NODE_METRICS, "Pod": res.PODS}
_RESOURCES = {
    **_WITH_STATUS,
    "ConfigMap": res.CONFIG_MAPS,
    "Device": res.DEVICES,
    "NodeSLO": res.NODE_SLOS,
    "ElasticQuota": res.ELASTIC_QUOTAS,
    "ElasticQuotaProfile": res.ELASTIC_QUOTA_PROFILES,
}


async def started_fake() -> FakeApiServer:
    fake = await FakeApiServer().start()
    for crd in sorted((ROOT / "crds").glob("*.yaml")):
        fake.register_crd(crd)
    return fake


def seed(fake: FakeApiServer, objects: Sequence[Obj]) -> None:
    """Create each object as a client would, then write its status through the status subresource."""
    for obj in objects:
        resource = _RESOURCES[obj["kind"]]
        created = fake.create(resource, obj)
        if obj["kind"] in _WITH_STATUS and obj.get("status"):
            created["status"] = obj["status"]
            fake.update(resource, created, subresource="status")


class SLOHarness:
    """A :class:`ControllerSet` running against ``fake`` with a fake clock starting at ``now``
    (``gates``: the control-plane feature gates set; ``plugins``: ``--noderesource-plugins``'s
    choice, default all)."""

    def __init__(
        self,
        fake: FakeApiServer,
        client: ApiClient,
        now: str,
        controllers: Sequence[str],
        *,
        gates: dict[str, bool] | None = None,
        plugins: Sequence[str] | None = None,
    ) -> None:
        self.fake = fake
        self.client = client
        self.clock = FakeClock(epoch=parse_time(now))
        self.metrics = SLOControllerMetrics()
        self.reactor_metrics = ReactorMetrics(self.metrics.registry)
        self.set = ControllerSet(
            client,
            ControllerSettings(
                controllers=tuple(controllers),
                config_namespace=CONFIG_NAMESPACE,
                workers=2,
                gates=FeatureGates(CONTROL_PLANE_FEATURES, gates),
                noderesource_plugins=plugins,
            ),
            metrics=self.metrics,
            reactor_metrics=self.reactor_metrics,
            clock=self.clock,
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self.set.run())
        async with asyncio.timeout(10):
            await self.set.started.wait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def reconciles(self, controller: str) -> float:
        total = 0.0
        for result in ("success", "error", "requeue", "requeue_after"):
            value = self.reactor_metrics.registry.get_sample_value(
                "controller_runtime_reconcile_total", {"controller": controller, "result": result}
            )
            total += value or 0.0
        return total

    async def settle(self, controller: str, at_least: float = 1, within: float = 10.0) -> None:
        """Until ``controller`` finished ``at_least`` reconciles and has nothing queued or in progress."""
        queue = self.set.controllers[controller].reactor.queue
        await eventually(
            lambda: self.reconciles(controller) >= at_least and not len(queue) and not queue.processing,
            within=within,
            every=0.01,
        )


@contextlib.asynccontextmanager
async def running(
    objects: Sequence[Obj],
    now: str,
    controllers: Sequence[str] = ("noderesource",),
    *,
    gates: dict[str, bool] | None = None,
    plugins: Sequence[str] | None = None,
) -> AsyncIterator[SLOHarness]:
    fake = await started_fake()
    try:
        seed(fake, objects)
        async with fake.client() as client:
            harness = SLOHarness(fake, client, now, controllers, gates=gates, plugins=plugins)
            await harness.start()
            try:
                yield harness
            finally:
                await harness.stop()
    finally:
        await fake.stop()


@contextlib.asynccontextmanager
async def controller_set(
    client: ApiClient,
    controllers: Sequence[str],
    *,
    settings: ControllerSettings | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[ControllerSet]:
    """koord-manager's slo-controller with ``controllers`` (or ``settings``), on ``client``
    (a real apiserver's, or the fake's with its ``clock``), started, until the block ends."""
    metrics = SLOControllerMetrics()
    running_set = ControllerSet(
        client,
        settings or ControllerSettings(controllers=tuple(controllers)),
        metrics=metrics,
        reactor_metrics=ReactorMetrics(metrics.registry),
        clock=clock or SYSTEM_CLOCK,
    )
    task = asyncio.create_task(running_set.run())
    try:
        async with asyncio.timeout(60):
            await running_set.started.wait()
        yield running_set
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
