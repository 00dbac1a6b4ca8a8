"""The agent end to end: standalone on a fake host in-process; standalone on this machine
(host tier, scraped like Prometheus would); the command line's one-line errors."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time

import aiohttp
import pytest

from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordlet.__main__ import main
from koordlet.agent import Agent, AgentConfig
from koordlet.metricsadvisor.framework import CollectorConfig
from tests.fakes.host import FakeHost
from tests.polling import eventually


def _metric(text: str, name: str) -> float | None:
    match = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


async def _scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as response:
        return response.status, await response.text()


async def test_standalone_agent_on_a_fake_host(tmp_path):
    host = FakeHost(tmp_path, "v1", features=("psi",))
    host.set_cpu_topology(sockets=1, cores_per_socket=2, threads_per_core=1)
    host.set_meminfo(MemTotal=8_000_000, MemFree=2_000_000, MemAvailable=5_000_000)
    host.set_proc_stat([100, 0, 100, 1000, 0, 0, 0, 0], {0: [50, 0, 50, 500, 0, 0, 0, 0]})
    uid = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    pod = host.add_pod("Burstable", uid, ["containerd://" + "f" * 64])
    config = AgentConfig(
        node_name="fake-node",
        paths=host.paths,
        gates=FeatureGates(KOORDLET_FEATURES, {"PSICollector": True}),
        host="127.0.0.1",
        port=0,
        standalone=True,
        collectors=CollectorConfig(collect_res_used_interval=1.0),
    )
    agent = Agent(config)
    stop = asyncio.Event()
    run = asyncio.create_task(agent.run(stop))
    await eventually(lambda: agent.ready, within=20)
    async with asyncio.timeout(20):
        host.set_proc_stat([300, 0, 100, 1200, 0, 0, 0, 0], {0: [150, 0, 50, 600, 0, 0, 0, 0]})
        host.set_cpu_usage(pod, 5_000_000_000)
        status, _ = await _scrape(agent.port, "/healthz")
        assert status == 200
        while True:
            _, text = await _scrape(agent.port)
            if (_metric(text, "koordlet_node_used_cpu_cores") or 0) > 0:
                break
            await asyncio.sleep(0.2)
    assert _metric(text, "koordlet_node_used_memory_bytes") == 3_000_000 * 1024
    assert _metric(text, "koordlet_cpuset_share_pool_cpu_cores") == 2  # the NRT reporter's pools
    # the PSI collector's last round, exported when scraped
    assert 'koordlet_pod_psi{cpu_full_supported="true",node="fake-node",' in text
    assert f'pod_uid="{uid}",psi_degree="full",psi_precision="avg300",psi_resource_type="io"}} 0' in text
    assert agent.states is not None
    assert [p.uid for p in agent.states.get_all_pods()] == [uid]
    assert agent.nrt is not None
    assert agent.nrt.current is not None
    stop.set()
    await asyncio.wait_for(run, 10)
    assert not agent.ready


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.host
def test_standalone_agent_on_this_machine_serves_real_usage():
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "koordlet", "--standalone", "--addr", f"127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        cpu = memory = None
        while time.monotonic() < deadline:
            try:
                _status, text = asyncio.run(_scrape(port))
            except aiohttp.ClientError:
                time.sleep(0.3)
                continue
            cpu = _metric(text, "koordlet_node_used_cpu_cores")
            memory = _metric(text, "koordlet_node_used_memory_bytes")
            if cpu and memory:
                break
            time.sleep(0.3)
        assert (cpu or 0) > 0, "no node CPU usage scraped"
        assert (memory or 0) > 0, "no node memory usage scraped"
        assert asyncio.run(_scrape(port, "/healthz"))[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output.decode()


def test_cluster_mode_requires_node_name(monkeypatch, capsys):
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "NODE_NAME is required" in err[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["--kubelet-sync-interval=ten"],
        ["--enable-node-metric-report=maybe"],
        ["--addr=nowhere"],
        ["--tsdb-max-bytes=1.2.3"],
    ],
)
def test_bad_flag_values_exit_2_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
