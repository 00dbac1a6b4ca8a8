"""The koord-manager process: it stops cleanly on a signal in every phase, and start-up failures
(a port in use, its namespace missing) are told in one line, not a traceback."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from koordinator.kube import resources as res
from koordinator.kube.fake import FakeApiServer
from tests.controlplane.manager.test_manager_server import fake, seed
from tests.fakes.kubeconfig import write_kubeconfig

__all__ = ["fake"]

ROOT = Path(__file__).resolve().parents[3]
#: how long a stop may take before the test calls it hung (the manager's own bound is 10 s)
STOP_BOUND_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Process:
    def __init__(self, proc: asyncio.subprocess.Process, log: Path, health: int) -> None:
        self.proc = proc
        self.log = log
        self.health = health

    @property
    def stderr(self) -> str:
        return self.log.read_text()

    async def until_logged(self, text: str, within: float = 60.0) -> None:
        async with asyncio.timeout(within):
            while text not in self.stderr:
                assert self.proc.returncode is None, self.stderr
                await asyncio.sleep(0.05)

    async def until_ready(self, within: float = 60.0) -> None:
        async with asyncio.timeout(within), aiohttp.ClientSession() as session:
            while True:
                try:
                    async with session.get(f"http://127.0.0.1:{self.health}/readyz") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientConnectionError:
                    pass
                assert self.proc.returncode is None, self.stderr
                await asyncio.sleep(0.1)

    async def exit_code(self, bound: float = STOP_BOUND_S) -> int:
        async with asyncio.timeout(bound):
            return await self.proc.wait()


async def launch(tmp_path: Path, server: str, *flags: str) -> Process:
    log = tmp_path / "stderr.log"
    health = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "KUBECONFIG"))}
    env.update(
        {"WEBHOOK_PORT": "0", "WEBHOOK_HOST": "127.0.0.1", "WEBHOOK_CERT_DIR": str(tmp_path / "certs")}
    )
    with log.open("w") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "controlplane.manager",
            "--kubeconfig",
            str(write_kubeconfig(tmp_path / "kubeconfig", server)),
            "--metrics-addr=127.0.0.1:0",
            f"--health-probe-addr=127.0.0.1:{health}",
            *flags,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
            env=env,
            cwd=ROOT,
        )
    return Process(proc, log, health)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_while_the_caches_cannot_sync_stops_the_manager(tmp_path, signum):
    """An apiserver out of reach keeps the caches from syncing; a signal ends the wait at once."""
    process = await launch(tmp_path, f"http://127.0.0.1:{free_port()}")
    try:
        await process.until_logged("cannot connect")
        process.proc.send_signal(signum)
        assert await process.exit_code() == 0, process.stderr
    finally:
        if process.proc.returncode is None:
            process.proc.kill()
            await process.proc.wait()
    assert "stop requested while starting" in process.stderr
    assert "Traceback" not in process.stderr


async def test_a_signal_while_leading_stops_cleanly_and_releases_the_lease(tmp_path, fake: FakeApiServer):
    async with fake.client() as client:
        await seed(client)
    process = await launch(tmp_path, fake.url, "--leader-election-namespace=koordinator-system")
    try:
        await process.until_ready()
        await process.until_logged("is the leader")
        process.proc.send_signal(signal.SIGTERM)
        assert await process.exit_code() == 0, process.stderr
    finally:
        if process.proc.returncode is None:
            process.proc.kill()
            await process.proc.wait()
    lease = fake.get(res.LEASES, "koordinator-manager", "koordinator-system")
    assert lease["spec"].get("holderIdentity", "") == ""
    assert "Traceback" not in process.stderr


async def test_a_port_in_use_is_one_line(tmp_path, fake: FakeApiServer):
    async with fake.client() as client:
        await seed(client)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = await launch(tmp_path, fake.url, f"--metrics-addr=127.0.0.1:{port}")
        assert await process.exit_code() == 1
    errors = [line for line in process.stderr.splitlines() if line.startswith("E")]
    assert len(errors) == 1, process.stderr
    assert errors[0].endswith(
        f"cannot listen on 127.0.0.1:{port}: address already in use (set --metrics-addr)"
    )
    assert "Traceback" not in process.stderr


async def test_a_missing_namespace_is_one_line(tmp_path, fake: FakeApiServer):
    process = await launch(tmp_path, fake.url)
    assert await process.exit_code() == 1
    errors = [line for line in process.stderr.splitlines() if line.startswith("E")]
    assert len(errors) == 1, process.stderr
    assert 'namespaces "koordinator-system" not found' in errors[0]
    assert "--webhook-namespace/POD_NAMESPACE" in errors[0]
    assert "Traceback" not in process.stderr
