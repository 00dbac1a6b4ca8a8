"""A flood of concurrent ``/metrics`` scrapes against a real koordlet process.

``koordlet --standalone`` runs as a child process with every host root flag pointed at a
fake node (100 pods of 3 containers, cgroup v1 with PSI, the PSICollector gate on, so
``/metrics`` carries about 7200 per-pod and per-container series, 2.2 MB). 200 scrapes
are sent at once over loopback while ``/healthz`` is polled. Measured on a 2-core VM:
before the scrapes shared a rendering, the agent's peak RSS went from 70 MB to 660 MB
(300 pods: 100 MB to 2 GB) and ``/healthz`` stalled up to 1.1 s (300 pods: 2.3 s);
with the shared, chunked, bounded endpoint the peak stays at 70 MB (300 pods: 103 MB)
and ``/healthz`` answers within 0.3 s.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from koordlet.__main__ import host_root_argv
from tests.fakes.host import FakeHost
from tests.reliability.procstatus import peak_rss_mib
from testsupport.envtest.controlplane import free_port

PODS = 100
SCRAPES = 200
#: how much the agent's peak RSS may grow during the flood (before the fix: about 590 MiB)
RSS_GROWTH_BOUND_MIB = 100
#: the longest /healthz may take to answer during the flood (generous: the machine is shared)
HEALTHZ_BOUND_S = 2.0
ROOT = Path(__file__).resolve().parents[2]


def _fake_node(root: Path, pods: int) -> FakeHost:
    host = FakeHost(root, "v1", features=("psi",))
    host.set_cpu_topology(sockets=1, cores_per_socket=4, threads_per_core=1)
    host.set_meminfo(MemTotal=8_000_000, MemFree=2_000_000, MemAvailable=5_000_000)
    per_cpu = {cpu: [50, 0, 50, 500, 0, 0, 0, 0] for cpu in range(4)}
    host.set_proc_stat([100, 0, 100, 1000, 0, 0, 0, 0], per_cpu)
    for i in range(pods):
        uid = f"{i:08x}-1d2c-4e5f-8a9b-{i:012x}"
        host.add_pod("Burstable", uid, [f"containerd://{i:056x}{c:08x}" for c in range(3)])
    return host


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``koordlet --standalone`` on the fake node, once ``/healthz`` says ok: (port, process)."""
    paths = _fake_node(tmp_path / "node", PODS).paths
    port = free_port()
    command = [sys.executable, "-m", "koordlet", "--standalone", "--addr", f"127.0.0.1:{port}"]
    command += ["--feature-gates", "PSICollector=true", "--psi-collector-interval", "1s"]
    command += [*host_root_argv(paths), "--tsdb-path", str(tmp_path / "metric-data")]
    log = (tmp_path / "koordlet.log").open("wb")
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        asyncio.run(_until_healthy(port, proc))
        yield port, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
    assert proc.returncode == 0, (tmp_path / "koordlet.log").read_text()[-3000:]


async def _until_healthy(port: int, proc: subprocess.Popen[bytes]) -> None:
    async with asyncio.timeout(90), aiohttp.ClientSession() as session:
        while True:
            assert proc.poll() is None, "the koordlet exited before it was ready"
            try:
                async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.3)


async def _flood(port: int) -> tuple[bytes, list[tuple[int, str | None, int]], float]:
    """One scrape alone (the reference body), then ``SCRAPES`` at once while /healthz is
    polled: the reference, (status, Retry-After, body length) of each, the slowest /healthz."""
    base = f"http://127.0.0.1:{port}"
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async with session.get(f"{base}/metrics") as response:
            assert response.status == 200
            reference = await response.read()
        slowest = 0.0
        flooding = True

        async def health() -> None:
            nonlocal slowest
            while flooding:
                started = time.monotonic()
                async with session.get(f"{base}/healthz") as response:
                    assert response.status == 200
                    await response.read()
                slowest = max(slowest, time.monotonic() - started)
                await asyncio.sleep(0.05)

        async def scrape() -> tuple[int, str | None, int]:
            async with session.get(f"{base}/metrics") as response:
                body = await response.read()
                return response.status, response.headers.get("Retry-After"), len(body)

        polling = asyncio.create_task(health())
        await asyncio.sleep(0.1)
        answers = await asyncio.gather(*(scrape() for _ in range(SCRAPES)))
        flooding = False
        await polling
    return reference, answers, slowest


def test_a_scrape_flood_leaves_memory_flat_and_healthz_answering(agent):
    port, proc = agent
    time.sleep(1.5)  # a PSI round: every per-pod series is in the registry
    before = peak_rss_mib(proc.pid)
    reference, answers, slowest_healthz = asyncio.run(_flood(port))
    peak = peak_rss_mib(proc.pid)
    assert reference.count(b"\nkoordlet_container_psi{") == PODS * 3 * 18  # every container's PSI series
    served = [length for status, _, length in answers if status == 200]
    refused = [retry for status, retry, _ in answers if status == 503]
    assert len(served) + len(refused) == SCRAPES, sorted({status for status, _, _ in answers})
    assert served, "no scrape was served"
    # a complete body each (a later rendering may differ in a value, never by much in size)
    assert all(abs(length - len(reference)) < len(reference) // 100 for length in served)
    assert all(retry is not None for retry in refused), "a 503 without Retry-After"
    assert peak - before <= RSS_GROWTH_BOUND_MIB, (
        f"peak RSS grew from {before:.0f} MiB to {peak:.0f} MiB under {SCRAPES} concurrent scrapes"
    )
    assert slowest_healthz <= HEALTHZ_BOUND_S, f"/healthz took {slowest_healthz:.2f}s during the flood"
