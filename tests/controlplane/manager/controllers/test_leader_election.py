"""Two koord-manager replicas on one (fake) apiserver: only the lease holder runs the controllers.

Both serve webhooks; the leader writes NodeMetrics, NodeSLOs and node resources; a
graceful stop releases the lease and the other replica takes over without writing anything
the first one already wrote. Losing the lease to someone else stops the controllers, not
the process: the replica contends again and, once it wins, runs them afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.manager.controllers.running import DEFAULT_CONTROLLERS
from controlplane.manager.manager import Manager
from controlplane.manager.options import ManagerOptions
from koordinator.kube import resources as res
from koordinator.kube.timeutil import format_time
from tests.controlplane.manager.controllers.golden import base_metrics, base_pods
from tests.controlplane.manager.controllers.harness import seed, started_fake
from tests.controlplane.manager.controllers.objects import config_map, node, node_metric
from tests.polling import eventually
from testsupport.fake import FakeApiServer

LEASE = "koordinator-manager"
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def options(tmp_path: Path, identity: str, **overrides: Any) -> ManagerOptions:
    settings: dict[str, Any] = {
        "webhook_port": 0,
        "webhook_bind_host": "127.0.0.1",
        "webhook_host": "127.0.0.1",
        "webhook_cert_dir": tmp_path / identity,
        "metrics_addr": None,
        "health_probe_addr": None,
        "controllers": DEFAULT_CONTROLLERS,
        "leader_election_identity": identity,
        "lease_duration_s": 2.0,
        "renew_deadline_s": 1.5,
        "retry_period_s": 0.2,
    }
    settings.update(overrides)
    return ManagerOptions(**settings)


@contextlib.asynccontextmanager
async def cluster() -> AsyncIterator[FakeApiServer]:
    fake = await started_fake()
    try:
        seed(
            fake,
            [
                node("node-1"),
                *base_pods(),
                node_metric(pods=base_metrics(), update_time=format_time(time.time())),
                config_map({"enable": True}),
            ],
        )
        yield fake
    finally:
        await fake.stop()


async def start(fake: FakeApiServer, tmp_path: Path, identity: str, **overrides: Any) -> Manager:
    manager = Manager(options(tmp_path, identity, **overrides), fake.client())
    await manager.start()
    return manager


async def stop(manager: Manager) -> None:
    await manager.stop()
    await manager.client.close()


def is_leader(manager: Manager) -> bool:
    return manager.metrics.registry.get_sample_value("koordinator_manager_is_leader") == 1.0


def holder(fake: FakeApiServer) -> str:
    lease = fake.get(res.LEASES, LEASE, "koordinator-system")
    return str(lease["spec"].get("holderIdentity") or "")


def node_resources_written(fake: FakeApiServer) -> bool:
    return "kubernetes.io/batch-cpu" in fake.get(res.NODES, "node-1")["status"]["allocatable"]


def controller_writes(fake: FakeApiServer) -> list[str]:
    watched = ("/nodes/", "/nodemetrics", "/nodeslos")
    return [
        f"{r.method} {r.path}"
        for r in fake.requests
        if r.method in WRITES and any(part in r.path for part in watched)
    ]


async def test_only_the_leader_reconciles_and_a_graceful_stop_hands_over_without_rewrites(tmp_path):
    async with cluster() as fake:
        first = await start(fake, tmp_path, "replica-a")
        second: Manager | None = None
        try:
            await eventually(lambda: is_leader(first), within=10)
            await eventually(lambda: node_resources_written(fake), within=10)
            await eventually(lambda: len(fake.list_objects(res.NODE_SLOS)) == 1, within=10)
            await eventually(lambda: len(fake.list_objects(res.NODE_METRICS)) == 1, within=10)
            second = await start(fake, tmp_path, "replica-b")
            await asyncio.sleep(1.0)  # several retry periods: the follower must stay a follower
            assert not is_leader(second)
            assert second.controllers is not None
            assert not second.controllers.started.is_set(), "a follower keeps no controller caches"
            assert holder(fake) == "replica-a"

            fake.record_requests = True
            await stop(first)
            assert holder(fake) in ("", "replica-b"), "a graceful stop releases the lease"
            await eventually(lambda: is_leader(second), within=10)
            await eventually(lambda: second.controllers is not None and second.controllers.started.is_set())
            queues = [c.reactor.queue for c in second.controllers.controllers.values()]
            await eventually(lambda: all(not len(q) and not q.processing for q in queues), within=10)
            await asyncio.sleep(0.2)
            reconciled = second.metrics.registry.get_sample_value(
                "controller_runtime_reconcile_total",
                {"controller": "noderesource", "result": "requeue_after"},
            )
            assert reconciled is not None
            assert reconciled >= 1, "the new leader did reconcile the node"
            assert controller_writes(fake) == [], "the new leader found everything already written"
            lease = fake.get(res.LEASES, LEASE, "koordinator-system")
            assert lease["spec"]["holderIdentity"] == "replica-b"
            assert lease["spec"]["leaseTransitions"] >= 1
        finally:
            if second is not None:
                await stop(second)
            with contextlib.suppress(Exception):
                await stop(first)


async def test_losing_the_lease_stops_the_controllers_and_the_replica_leads_again(tmp_path):
    async with cluster() as fake:
        manager = await start(fake, tmp_path, "replica-a")
        try:
            await eventually(lambda: is_leader(manager), within=10)
            await eventually(lambda: len(fake.list_objects(res.NODE_SLOS)) == 1, within=10)
            lease = fake.get(res.LEASES, LEASE, "koordinator-system")
            lease["spec"]["holderIdentity"] = "intruder"
            lease["spec"]["leaseDurationSeconds"] = 3  # the intruder never renews it
            fake.update(res.LEASES, lease)
            await eventually(lambda: not is_leader(manager), within=10)
            controllers = manager.controllers
            assert controllers is not None
            await eventually(lambda: not controllers.started.is_set(), within=10)
            with pytest.raises(TimeoutError):  # nothing ended: the manager keeps running
                async with asyncio.timeout(0.3):
                    await manager.wait()

            fake.record_requests = True
            fake.delete(res.NODE_SLOS, "node-1")
            await eventually(lambda: holder(fake) == "replica-a", within=15)
            await eventually(lambda: is_leader(manager), within=10)
            await eventually(lambda: len(fake.list_objects(res.NODE_SLOS)) == 1, within=10)
            writes = controller_writes(fake)
            assert writes[0] == "POST /apis/slo.koordinator.sh/v1alpha1/nodeslos", writes
            lease = fake.get(res.LEASES, LEASE, "koordinator-system")
            assert lease["spec"]["leaseTransitions"] == 1, "taken over from the intruder"
        finally:
            await stop(manager)


async def test_without_leader_election_the_controllers_run_at_once(tmp_path):
    async with cluster() as fake:
        manager = await start(fake, tmp_path, "solo", leader_election=False)
        try:
            await eventually(lambda: node_resources_written(fake), within=10)
            assert is_leader(manager)
            assert not fake.list_objects(res.LEASES, "koordinator-system")
        finally:
            await stop(manager)


async def test_a_manager_without_controllers_takes_no_lease(tmp_path):
    async with cluster() as fake:
        manager = await start(fake, tmp_path, "webhooks-only", controllers=())
        try:
            await asyncio.sleep(0.5)
            assert manager.elector is None
            assert not fake.list_objects(res.LEASES, "koordinator-system")
            assert not node_resources_written(fake)
        finally:
            await stop(manager)
