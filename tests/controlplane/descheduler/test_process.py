"""The koord-descheduler process against the fake apiserver: health, readiness and
upstream's metric names on one plain-HTTP port, and two replicas under leader election on
the Lease ``koordinator-system/koord-descheduler``, where only the leader makes
PodMigrationJobs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from controlplane.descheduler.config import parse
from controlplane.descheduler.process import DeschedulerProcess, ProcessOptions
from koordinator.kube import resources as res
from koordinator.kube.timeutil import format_time
from tests.controlplane.descheduler.builders import node, pod
from tests.polling import eventually
from testsupport.envtest.controlplane import free_port
from testsupport.fake import FakeApiServer


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


def node_metric(name: str, cpu: str, pods: dict[str, str], update_time: str) -> dict[str, Any]:
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": name},
        "status": {
            "updateTime": update_time,
            "nodeMetric": {
                "nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}},
                "systemUsage": {"resources": {"cpu": "1", "memory": "1Gi"}},
            },
            "podsMetric": [
                {"namespace": "default", "name": p, "podUsage": {"resources": {"cpu": c, "memory": "512Mi"}}}
                for p, c in pods.items()
            ],
        },
    }


def config(port: int) -> Any:
    return parse(
        {
            "deschedulingInterval": "200ms",
            "healthzBindAddress": f"127.0.0.1:{port}",
            "metricsBindAddress": f"127.0.0.1:{port}",
            "profiles": [
                {
                    "name": "koord-descheduler",
                    "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
                    "pluginConfig": [
                        {
                            "name": "LowNodeLoad",
                            "args": {
                                "lowThresholds": {"cpu": 45, "memory": 55},
                                "highThresholds": {"cpu": 75, "memory": 80},
                                "anomalyCondition": {"consecutiveAbnormalities": 1},
                            },
                        },
                        {
                            "name": "MigrationController",
                            "args": {
                                "defaultJobMode": "EvictDirectly",
                                "defaultDeleteOptions": {"gracePeriodSeconds": 0},
                            },
                        },
                    ],
                }
            ],
        }
    )


CRDS = Path(__file__).resolve().parents[3] / "crds"


def seed(fake: FakeApiServer, update_time: str) -> None:
    for crd in (
        "slo.koordinator.sh_nodemetrics.yaml",
        "scheduling.koordinator.sh_podmigrationjobs.yaml",
        "scheduling.koordinator.sh_reservations.yaml",
    ):
        fake.register_crd(CRDS / crd)
    fake.create(res.NAMESPACES, {"metadata": {"name": "koordinator-system"}})
    for name in ("hot", "cool", "mid"):
        fake.create(res.NODES, node(name, "10", "10Gi"))
    fake.create(
        res.REPLICA_SETS,
        {"metadata": {"name": "rs", "namespace": "default", "uid": "rs"}, "spec": {"replicas": 2}},
    )
    for name in ("be-1", "be-2"):
        body = pod(name, node="hot", owner=("ReplicaSet", "rs", "rs"))
        body["spec"]["schedulerName"] = "koord-scheduler"
        status = body.pop("status")
        created = fake.create(res.PODS, body)
        fake.update(res.PODS, {**created, "status": status}, "status")
    for metric in (
        node_metric("hot", "8", {"be-1": "4", "be-2": "3"}, update_time),
        node_metric("cool", "1", {}, update_time),
        node_metric("mid", "5", {}, update_time),
    ):
        status = metric.pop("status")
        created = fake.create(res.NODE_METRICS, metric)
        fake.update(res.NODE_METRICS, {**created, "status": status}, "status")


def fast_lease(identity: str) -> ProcessOptions:
    return ProcessOptions(identity=identity, lease_duration_s=2.0, renew_deadline_s=1.5, retry_period_s=0.3)


def jobs(fake: FakeApiServer) -> list[dict[str, Any]]:
    return fake.list_objects(res.POD_MIGRATION_JOBS)


async def test_health_metrics_and_only_the_leader_migrates() -> None:
    async with FakeApiServer() as fake:
        seed(fake, format_time(time.time()))
        port = free_port()
        async with fake.client() as client_a, fake.client() as client_b:
            leader = DeschedulerProcess(client_a, config(port), fast_lease("a"))
            standby = DeschedulerProcess(client_b, config(free_port()), fast_lease("b"))
            first = asyncio.create_task(leader.run())
            await eventually(lambda: leader.elector is not None and leader.elector.is_leader())
            second = asyncio.create_task(standby.run())
            try:
                assert await get(f"http://127.0.0.1:{port}/healthz") == (200, "ok")
                await eventually(lambda: len(jobs(fake)) == 1, within=15)
                (job,) = jobs(fake)
                # the 500m overage: be-2 (3 cores) matches it better than be-1 (4)
                assert job["spec"]["podRef"]["name"] == "be-2"
                assert job["metadata"]["annotations"]["koordinator.sh/evict-trigger"] == "LowNodeLoad"
                await eventually(
                    lambda: jobs(fake)[0].get("status", {}).get("phase") == "Succeeded", within=15
                )
                status, text = await get(f"http://127.0.0.1:{port}/metrics")
                assert status == 200
                assert 'leader_election_master_status{name="koord-descheduler"} 1.0' in text
                assert (
                    'descheduler_pods_evicted_total{namespace="default",node="hot",result="success",'
                    'strategy="LowNodeLoad"} 1.0' in text
                )
                assert await get(f"http://127.0.0.1:{port}/readyz") == (200, "ok")
                assert standby.elector is not None
                assert not standby.elector.is_leader()
                lease_obj = fake.get(res.LEASES, "koord-descheduler", "koordinator-system")
                assert lease_obj["spec"]["holderIdentity"] == "a"
            finally:
                for task in (first, second):
                    task.cancel()
                await asyncio.gather(first, second, return_exceptions=True)
                await leader.stop()
                await standby.stop()
