"""The koord-scheduler process against the fake apiserver: the secure port (health,
readiness, kube-scheduler's metric names), and two replicas under leader election, where
only the leader schedules and the other takes over when it goes."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
from typing import Any

import aiohttp

from controlplane.scheduler.config import parse
from controlplane.scheduler.process import ProcessOptions, SchedulerProcess
from koordinator.kube import resources as res
from tests.controlplane.scheduler.test_scheduler import node, node_of, pod
from tests.polling import eventually
from testsupport.fake import FakeApiServer


def fast_lease(identity: str) -> ProcessOptions:
    return ProcessOptions(
        secure_port=0, identity=identity, lease_duration_s=2.0, renew_deadline_s=1.5, retry_period_s=0.3
    )


def leads(process: SchedulerProcess) -> bool:
    return process.elector is not None and process.elector.is_leader()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def get(url: str) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the self-signed certificate of the secure port
    async with aiohttp.ClientSession() as session, session.get(url, ssl=context) as response:
        return response.status, await response.text()


async def test_secure_port_serves_health_readiness_and_scheduler_metrics():
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("n1"))
        fake.create(res.PODS, pod("p", "1"))
        port = free_port()
        async with fake.client() as client:
            options = ProcessOptions(leader_elect=False, bind_address="127.0.0.1", secure_port=port)
            process = SchedulerProcess(client, parse(None), options)
            task = asyncio.create_task(process.run())
            try:
                await eventually(lambda: node_of(fake, "p") == "n1")
                base = f"https://127.0.0.1:{port}"
                assert await get(f"{base}/healthz") == (200, "ok")
                assert await get(f"{base}/readyz") == (200, "ok")
                status, text = await get(f"{base}/metrics")
                assert status == 200
                assert (
                    'scheduler_schedule_attempts_total{profile="koord-scheduler",result="scheduled"} 1.0'
                    in text
                )
                assert 'scheduler_pending_pods{queue="active"}' in text  # refreshed every second
                assert "scheduler_framework_extension_point_duration_seconds_bucket" in text
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await process.stop()


async def test_only_the_leader_schedules_and_a_standby_takes_over():
    async with FakeApiServer() as fake:
        fake.create(res.NAMESPACES, {"metadata": {"name": "koordinator-system"}})
        fake.create(res.NODES, node("n1", cpu="64"))
        clients = [fake.client(), fake.client()]
        processes = [
            SchedulerProcess(c, parse(None), fast_lease(f"replica-{i}")) for i, c in enumerate(clients)
        ]
        tasks = [asyncio.create_task(p.run()) for p in processes]
        try:
            await eventually(lambda: any(leads(p) for p in processes))
            leader = next(i for i, p in enumerate(processes) if leads(p))
            for i in range(5):
                fake.create(res.PODS, pod(f"a{i}", "1"))
            await eventually(lambda: all(node_of(fake, f"a{i}") for i in range(5)))
            assert processes[leader].scheduler.bound == 5
            assert processes[1 - leader].scheduler.bound == 0  # the standby never binds
            # the leader goes away (its pod is killed): the standby takes the lease and schedules
            tasks[leader].cancel()
            await asyncio.gather(tasks[leader], return_exceptions=True)
            await processes[leader].stop()
            for i in range(5):
                fake.create(res.PODS, pod(f"b{i}", "1"))
            await eventually(lambda: all(node_of(fake, f"b{i}") for i in range(5)), within=15)
            assert processes[1 - leader].scheduler.bound == 5
            assert processes[1 - leader].scheduler.bind_failures == 0
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for process, client in zip(processes, clients, strict=True):
                await process.stop()
                await client.close()


def test_bad_flags_and_config_exit_2(tmp_path: Any):
    bad = tmp_path / "config.yaml"
    bad.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "percentageOfNodesToScore: 200\n"
    )
    for args in (["--config", str(bad)], ["--leader-elect-lease-duration", "soon"], ["--tls-cert-file", "x"]):
        done = subprocess.run(
            [sys.executable, "-m", "controlplane.scheduler", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 or "usage:" in done.stderr, done.stderr
