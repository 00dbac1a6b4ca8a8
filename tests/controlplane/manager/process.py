"""A koord-manager process for tests: launched against an apiserver URL on loopback, with its own
kubeconfig, health port and certificate directory, and waited on through its log and probes."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import aiohttp

from tests.fakes.kubeconfig import write_kubeconfig
from testsupport.envtest.controlplane import free_port

__all__ = ["STOP_BOUND_S", "Process", "free_port", "launch"]

ROOT = Path(__file__).resolve().parents[3]
#: how long a stop may take before the test calls it hung (the manager's own bound is 10 s)
STOP_BOUND_S = 30.0


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

    async def webhook_port(self) -> int:
        """The port the webhook server listens on, from its "listening on HOST:PORT (TLS)" line."""
        await self.until_logged("(TLS)")
        found = re.search(r"listening on \S+:(\d+) \(TLS\)", self.stderr)
        assert found, self.stderr
        return int(found.group(1))

    async def exit_code(self, bound: float = STOP_BOUND_S) -> int:
        async with asyncio.timeout(bound):
            return await self.proc.wait()

    async def kill(self) -> None:
        """SIGKILL, unless it has exited already."""
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def launch(directory: Path, server: str, *flags: str, token: str = "") -> Process:
    """``python -m controlplane.manager`` with its files in the existing ``directory`` (kubeconfig with
    ``token`` when given, ``stderr.log``, ``certs/``), metrics on a free port, its health
    server on another one, and the webhook server on a free port of 127.0.0.1's host name."""
    log = directory / "stderr.log"
    health = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "KUBECONFIG"))}
    env.update(
        {"WEBHOOK_PORT": "0", "WEBHOOK_HOST": "127.0.0.1", "WEBHOOK_CERT_DIR": str(directory / "certs")}
    )
    with log.open("w") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "controlplane.manager",
            "--kubeconfig",
            str(write_kubeconfig(directory / "kubeconfig", server, token=token)),
            "--metrics-addr=127.0.0.1:0",
            f"--health-probe-addr=127.0.0.1:{health}",
            *flags,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
            env=env,
            cwd=ROOT,
        )
    return Process(proc, log, health)
