"""A MigrationController against the fake apiserver, both on one :class:`FakeClock`.

The fake apiserver stamps ``creationTimestamp`` from the same clock the controller reads,
so a job's TTL runs on test time. The controller's requeues (3 s), back-offs and
arbitration rounds sleep on that clock too: :meth:`Cluster.until` moves it forward a little
on every poll, so they happen, while informer events are delivered in real time.

There is no kubelet and no koord-scheduler: a test plays them by writing pods and
Reservation statuses. Pods made with :func:`running_pod` have a zero termination grace
period, so an evicted pod is gone at once (as the kubelet would make it after its grace).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from controlplane.descheduler.metrics import DeschedulerMetrics
from controlplane.descheduler.migration.args import parse_args
from controlplane.descheduler.migration.controller import MigrationController
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer.factory import InformerFactory
from tests.controlplane.descheduler.builders import pod
from tests.polling import eventually
from testsupport.fake import FakeApiServer, FakeClock, StatusError

Obj = dict[str, Any]
CRDS = Path(__file__).resolve().parents[4] / "crds"
CRD_FILES = ("scheduling.koordinator.sh_podmigrationjobs.yaml", "scheduling.koordinator.sh_reservations.yaml")
_RESOURCES = {
    "Pod": res.PODS,
    "Node": res.NODES,
    "ReplicaSet": res.REPLICA_SETS,
    "PodDisruptionBudget": res.POD_DISRUPTION_BUDGETS,
    "PriorityClass": res.PRIORITY_CLASSES,
    "PodMigrationJob": res.POD_MIGRATION_JOBS,
    "Reservation": res.RESERVATIONS,
}


async def started_fake(clock: FakeClock) -> FakeApiServer:
    fake = await FakeApiServer(clock=clock).start()
    for name in CRD_FILES:
        fake.register_crd(CRDS / name)
    return fake


def seed(fake: FakeApiServer, obj: Mapping[str, Any]) -> Obj:
    """Create ``obj`` as a client would, then write its status through the status subresource;
    returns the stored object."""
    resource = _RESOURCES[str(obj["kind"])]
    created = fake.create(resource, dict(obj))
    if obj.get("status") and created.get("status") != obj["status"]:
        created["status"] = obj["status"]
        created = fake.update(resource, created, subresource="status")
    return created


def running_pod(name: str, node: str, owner: tuple[str, str, str] | None, **fields: Any) -> Obj:
    """A Running, Ready pod on ``node`` that goes at once when it is deleted or evicted."""
    p = pod(name, node=node, owner=owner, **fields)
    p["spec"]["terminationGracePeriodSeconds"] = 0
    return p


class Cluster:
    def __init__(
        self,
        fake: FakeApiServer,
        clock: FakeClock,
        client: ApiClient,
        controller: MigrationController,
        metrics: DeschedulerMetrics,
    ) -> None:
        self.fake = fake
        self.clock = clock
        self.client = client
        self.controller = controller
        self.metrics = metrics
        self._task: asyncio.Task[None] | None = None

    # ---- writing -------------------------------------------------------------------------------

    def add(self, obj: Mapping[str, Any]) -> Obj:
        return seed(self.fake, obj)

    def write_status(
        self, resource: res.Resource, name: str, status: Mapping[str, Any], namespace: str = ""
    ) -> Obj:
        current = self.fake.get(resource, name, namespace or None)
        current["status"] = {**(current.get("status") or {}), **status}
        return self.fake.update(resource, current, subresource="status")

    def start(self) -> None:
        """Run the controller (reconciles, arbitration rounds, collection)."""
        self._task = asyncio.create_task(self.controller.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.controller.stop()

    # ---- reading -------------------------------------------------------------------------------

    def jobs(self) -> list[Obj]:
        return self.fake.list_objects(res.POD_MIGRATION_JOBS)

    def job(self, name: str) -> Obj:
        return self.fake.get(res.POD_MIGRATION_JOBS, name)

    def only_job(self) -> Obj:
        jobs = self.jobs()
        assert len(jobs) == 1, [j["metadata"]["name"] for j in jobs]
        return jobs[0]

    def phase(self, name: str) -> str:
        return str((self.job(name).get("status") or {}).get("phase") or "")

    def pod(self, name: str, namespace: str = "default") -> Obj | None:
        return self._get(res.PODS, name, namespace)

    def reservation(self, name: str) -> Obj | None:
        return self._get(res.RESERVATIONS, name)

    def reservations(self) -> list[Obj]:
        return self.fake.list_objects(res.RESERVATIONS)

    def _get(self, resource: res.Resource, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self.fake.get(resource, name, namespace)
        except StatusError as err:
            if err.code == 404:
                return None
            raise

    def phases(self, name: str) -> list[str]:
        """The job's phases in the order it went through them (from the apiserver's history)."""
        seen: list[str] = []
        for event in self.fake.state.history:
            obj = event.obj
            if obj.get("kind") != "PodMigrationJob" or obj["metadata"]["name"] != name:
                continue
            phase = str((obj.get("status") or {}).get("phase") or "")
            if not seen or seen[-1] != phase:
                seen.append(phase)
        return seen

    def events(self, name: str, kind: str | None = None, namespace: str = "default") -> list[Obj]:
        return [
            e
            for e in self.fake.list_objects(res.EVENTS, namespace)
            if e["involvedObject"]["name"] == name and (kind is None or e["involvedObject"]["kind"] == kind)
        ]

    def evicted(self, result: str, strategy: str, namespace: str, node: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "descheduler_pods_evicted_total",
            {"result": result, "strategy": strategy, "namespace": namespace, "node": node},
        )
        return value or 0.0

    # ---- waiting -------------------------------------------------------------------------------

    async def until(self, predicate: Callable[[], object], within: float = 5.0, advance: float = 0.5) -> None:
        """Until ``predicate()`` holds, moving the fake clock ``advance`` seconds per poll."""

        def check() -> bool:
            if predicate():
                return True
            self.clock.advance(advance)
            return False

        await eventually(check, within=within, every=0.01)

    async def cached(self, predicate: Callable[[MigrationController], object], within: float = 5.0) -> None:
        """Until the controller's caches show ``predicate`` (the clock stands still)."""
        await eventually(lambda: predicate(self.controller), within=within, every=0.01)

    async def cached_jobs(self, count: int) -> None:
        await self.cached(lambda c: len(c.jobs.store.values()) == count)


@contextlib.asynccontextmanager
async def cluster(
    args: Mapping[str, Any] | None = None, objects: Sequence[Mapping[str, Any]] = ()
) -> AsyncIterator[Cluster]:
    """A synced MigrationController of ``args`` over a fake apiserver holding ``objects``.
    Not yet running: call :meth:`Cluster.start`."""
    clock = FakeClock()
    fake = await started_fake(clock)
    try:
        for obj in objects:
            seed(fake, obj)
        client = fake.client()
        factory = InformerFactory(client, freeze_after_sync=False)
        metrics = DeschedulerMetrics()
        controller = MigrationController(
            parse_args(args),
            client,
            factory,
            recorder=EventRecorder(client, "koord-descheduler"),
            metrics=metrics,
            clock=clock,
        )
        made = Cluster(fake, clock, client, controller, metrics)
        try:
            factory.start()
            async with asyncio.timeout(5):
                await factory.wait_for_sync()
            yield made
        finally:
            await made.stop()
            await factory.stop()
            await client.close()
    finally:
        await fake.stop()
