"""Leader fencing and lease loss with real koord-manager processes on one fake apiserver (loopback).

* A leader paused (SIGSTOP) past its lease while another replica takes over makes no write
  once it resumes (SIGCONT): before each write it checks the time since its last renewal
  on its own clock, and finding the lease lapsed it steps down instead of writing.
* An apiserver out of reach for longer than the renew deadline costs the leader its lease,
  not its process: the webhooks, ``/healthz`` and ``/readyz`` keep answering throughout,
  and once the apiserver is back the replica contends again, leads again and its
  controllers write again.

Each manager authenticates with its own bearer token, so the apiserver below can tell
whose writes it received.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from koordinator.kube import resources as res
from koordinator.kube.timeutil import format_time
from tests.controlplane.manager import process as manager_process
from tests.controlplane.manager.builders import make_pod, review
from tests.controlplane.manager.controllers.golden import base_metrics
from tests.controlplane.manager.controllers.harness import seed as seed_objects
from tests.controlplane.manager.controllers.objects import CONFIG_NAME, CONFIG_NAMESPACE, node, node_metric
from tests.controlplane.manager.process import Process
from tests.controlplane.manager.test_manager_server import seed as seed_webhook_objects
from testsupport.fake import FakeApiServer
from testsupport.fake.server import Fault

ROOT = Path(__file__).resolve().parents[2]
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
NODES = 6
#: scaled-down leader election: 4 s lease, 3 s renew deadline, 0.5 s retry period
ELECTION = (
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=500ms",
)
LEASE_S = 4.0
JSON = {"Content-Type": "application/json"}
#: writes every replica makes whatever the election says (webhook certificates), and the lease itself
NOT_CONTROLLER_WRITES = ("/leases", "/secrets", "webhookconfigurations")


@dataclass(frozen=True)
class Write:
    who: str
    method: str
    path: str
    status: int
    at: float

    @property
    def by_controllers(self) -> bool:
        return not any(part in self.path for part in NOT_CONTROLLER_WRITES)

    @property
    def succeeded(self) -> bool:
        return 200 <= self.status < 300


class AttributingApiServer(FakeApiServer):
    """The fake apiserver, recording every write with the bearer token it came with."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[Write] = []

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        response = await super()._handle(request)
        if request.method in WRITES:
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            self.writes.append(Write(token, request.method, request.path, response.status, time.monotonic()))
        return response

    def controller_writes(self, who: str, *, after: float = 0.0) -> list[Write]:
        return [w for w in self.writes if w.who == who and w.by_controllers and w.at >= after]


@pytest.fixture
async def fake() -> AsyncIterator[AttributingApiServer]:
    server = AttributingApiServer()
    await server.start()
    try:
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            server.register_crd(crd)
        async with server.client() as client:
            await seed_webhook_objects(client)
        now = format_time(time.time())
        seed_objects(
            server,
            [
                *(node(f"node-{i}") for i in range(NODES)),
                *(node_metric(f"node-{i}", pods=base_metrics(), update_time=now) for i in range(NODES)),
            ],
        )
        set_reclaim_threshold(server, 60)
        yield server
    finally:
        await server.stop()


def set_reclaim_threshold(fake: FakeApiServer, percent: int) -> None:
    """Write the colocation config with ``cpuReclaimThresholdPercent``: every node's batch-cpu follows."""
    data = {"colocation-config": json.dumps({"enable": True, "cpuReclaimThresholdPercent": percent})}
    try:
        config = fake.get(res.CONFIG_MAPS, CONFIG_NAME, CONFIG_NAMESPACE)
    except Exception:
        fake.create(
            res.CONFIG_MAPS,
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_NAME}, "data": data},
            CONFIG_NAMESPACE,
        )
        return
    fake.update(res.CONFIG_MAPS, {**config, "data": data})


def batch_cpu(fake: FakeApiServer) -> set[str | None]:
    """The batch-cpu every node holds now (one value once the leader has caught up)."""
    return {
        fake.get(res.NODES, f"node-{i}")["status"]["allocatable"].get("kubernetes.io/batch-cpu")
        for i in range(NODES)
    }


async def launch(tmp_path: Path, server: str, token: str) -> Process:
    """``koord-manager`` with its own kubeconfig token, health port and certificate directory."""
    directory = tmp_path / token
    directory.mkdir()
    return await manager_process.launch(
        directory, server, "--webhook-bind-address=127.0.0.1", *ELECTION, token=token
    )


def logged_at(process: Process, text: str, *, after: float) -> float:
    """Epoch seconds of the first line logged at or after ``after`` (epoch) that contains ``text``."""
    year = datetime.datetime.now().year
    for line in process.stderr.splitlines():
        found = re.match(r"[IWEF](\d{4} \d\d:\d\d:\d\d\.\d{6}) ", line)
        if found is None or text not in line:
            continue
        at = datetime.datetime.strptime(f"{year}{found.group(1)}", "%Y%m%d %H:%M:%S.%f").timestamp()
        if at >= after - 0.001:
            return at
    raise AssertionError(f"{text!r} not logged after {after}:\n{process.stderr}")


async def ended(*processes: Process) -> None:
    for process in processes:
        if process.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.proc.send_signal(signal.SIGCONT)
                process.proc.kill()
            await process.proc.wait()


async def _until(predicate: Callable[[], object]) -> None:
    while not predicate():  # noqa: ASYNC110 - the state lives in another process
        await asyncio.sleep(0.05)


async def churn(fake: FakeApiServer, seconds: float) -> None:
    """Flip the reclaim threshold every 0.3 s: whoever leads has every node to rewrite each time."""
    deadline = time.monotonic() + seconds
    flip = 0
    while time.monotonic() < deadline:
        flip += 1
        set_reclaim_threshold(fake, 40 if flip % 2 else 80)
        await asyncio.sleep(0.3)


async def test_a_paused_leader_makes_no_write_after_it_resumes(tmp_path, fake: AttributingApiServer):
    old = await launch(tmp_path, fake.url, "replica-a")
    new: Process | None = None
    try:
        await old.until_logged("is the leader")
        await old.until_ready()
        await asyncio.wait_for(_until(lambda: len(batch_cpu(fake)) == 1 and None not in batch_cpu(fake)), 60)
        new = await launch(tmp_path, fake.url, "replica-b")
        await new.until_ready()
        await new.until_logged("the leader is")

        old.proc.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        set_reclaim_threshold(fake, 30)  # the new leader has every node to rewrite
        await asyncio.wait_for(_until(lambda: bool(fake.controller_writes("replica-b"))), 60)
        # the other replica waited for the lease to expire (renewed at most a retry period before SIGSTOP)
        assert time.monotonic() - stopped_at > LEASE_S - 1.0
        assert fake.get(res.LEASES, "koordinator-manager", CONFIG_NAMESPACE)["spec"]["holderIdentity"]

        old.proc.send_signal(signal.SIGCONT)
        resumed_at, resumed_wall = time.monotonic(), time.time()
        await churn(fake, 4.0)  # both replicas see work to do: only the lease holder may do it
        await asyncio.sleep(1.0)

        after = fake.controller_writes("replica-a", after=resumed_at)
        succeeded = [w for w in after if w.succeeded]
        print(f"old leader's controller writes after resuming: {len(after)} sent, {len(succeeded)} applied")
        # a write whose check passed the instant before SIGSTOP is sent on SIGCONT; its
        # resourceVersion precondition makes the apiserver refuse it (409)
        assert succeeded == [], [f"{w.method} {w.path} {w.status}" for w in succeeded]
        assert fake.controller_writes("replica-b", after=resumed_at), "the new leader kept writing"
        assert old.proc.returncode is None, old.stderr
        await old.until_logged("stopped leading")
        led_on = logged_at(old, "stopped leading", after=resumed_wall) - resumed_wall
        print(f"old leader stopped leading {led_on:.2f}s after resuming")
        assert led_on < 1.0, "it steps down on resuming, not a renew deadline later"
        assert "Traceback" not in old.stderr
    finally:
        await ended(old, *([new] if new is not None else []))


async def test_an_apiserver_outage_keeps_the_webhooks_serving_and_the_replica_leads_again(
    tmp_path, fake: AttributingApiServer
):
    process = await launch(tmp_path, fake.url, "replica-a")
    try:
        await process.until_logged("is the leader")
        await process.until_ready()
        await asyncio.wait_for(_until(lambda: None not in batch_cpu(fake)), 60)
        port = await process.webhook_port()
        body = json.dumps(review(make_pod("outage").namespace("web").build())).encode()
        answers: list[tuple[str, int | str]] = []

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:

            async def probe() -> None:
                webhook = {"data": body, "ssl": False, "headers": JSON}
                for name, url, kwargs in (
                    ("healthz", f"http://127.0.0.1:{process.health}/healthz", {}),
                    ("readyz", f"http://127.0.0.1:{process.health}/readyz", {}),
                    ("webhook", f"https://127.0.0.1:{port}/validate-pod", webhook),
                ):
                    method = "POST" if name == "webhook" else "GET"
                    try:
                        async with session.request(method, url, **kwargs) as response:  # type: ignore[arg-type]
                            answer: int | str = response.status
                            if name == "webhook" and answer == 200:
                                verdict = (await response.json())["response"]
                                answer = 200 if verdict["allowed"] else f"refused: {verdict}"
                            answers.append((name, answer))
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        answers.append((name, repr(exc)))

            await probe()
            assert answers == [("healthz", 200), ("readyz", 200), ("webhook", 200)], answers
            answers.clear()
            # no new connection is accepted, and every request on an open one is cut off
            outage = fake.inject(Fault(status=0, times=sys.maxsize))
            await fake.stop_listening()
            down_at = time.monotonic()
            while time.monotonic() - down_at < 2.5 * LEASE_S:
                await probe()
                await asyncio.sleep(0.25)
            assert process.proc.returncode is None, process.stderr
            await process.until_logged("stopped leading")
            failed = [(name, answer) for name, answer in answers if answer != 200]
            print(f"probe answers during the outage: {len(answers)}, not 200: {len(failed)}")
            assert failed == [], failed

            outage.hits = outage.times
            await fake.start_listening()
            back_at = time.monotonic()
            set_reclaim_threshold(fake, 30)
            await asyncio.wait_for(
                _until(lambda: bool(fake.controller_writes("replica-a", after=back_at))), 60
            )
            await probe()
            assert [a for a in answers[-3:] if a[1] != 200] == []
        lease = fake.get(res.LEASES, "koordinator-manager", CONFIG_NAMESPACE)
        assert lease["spec"]["holderIdentity"], "the replica holds the lease again"
        assert process.proc.returncode is None, process.stderr
        assert "Traceback" not in process.stderr
    finally:
        await ended(process)
