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
from pathlib import Path

import aiohttp
import orjson
import pytest

from koordinator.api.extension.topology import ANNOTATION_KUBELET_CPU_MANAGER_POLICY
from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordlet.__main__ import agent_config, build_parser, host_root_argv, main
from koordlet.agent import Agent, AgentConfig
from koordlet.metricsadvisor.framework import CollectorConfig
from koordlet.qosmanager.registry import strategies
from koordlet.qosmanager.strategies.resctrl import ResctrlReconcile
from koordlet.system.paths import HostPaths
from koordlet.system.resctrl import Resctrl
from tests.fakes.host import FakeHost
from tests.fakes.kubeconfig import write_kubeconfig
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
    # the kubelet's static CPU policy before any pod holds exclusive CPUs: no entries yet
    host.write(
        "var/lib/kubelet/cpu_manager_state", '{"policyName":"static","defaultCpuSet":"0-1","checksum":1}'
    )
    config = AgentConfig(
        node_name="fake-node",
        paths=host.paths,
        gates=FeatureGates(KOORDLET_FEATURES, {"PSICollector": True}),
        host="127.0.0.1",
        port=0,
        standalone=True,
        collectors=CollectorConfig(collect_res_used_interval=1.0),
        metric_data_dir=tmp_path / "metric-data",
    )
    agent = Agent(config)
    assert agent.cache.location == str(tmp_path / "metric-data")
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
    # the policy is the checkpoint's policyName, for the NRT, the strategies and the hooks
    reported = orjson.loads(agent.nrt.current["annotations"][ANNOTATION_KUBELET_CPU_MANAGER_POLICY])
    assert reported["policy"] == "static"
    assert agent.snapshot().host.kubelet_cpu_policy == "static"
    assert agent.node_facts().kubelet_cpu_policy == "static"
    stop.set()
    await asyncio.wait_for(run, 10)
    assert not agent.ready
    assert list((tmp_path / "metric-data").iterdir()) == []  # a stopped agent leaves no segments


async def test_the_agent_alone_lets_resctrl_reconcile_mount_resctrl(tmp_path):
    """The registry's strategy never mounts (``koordlet plan`` builds it too); the agent's
    is given the real mount. The strategies are stopped before their first round."""
    host = FakeHost(tmp_path, "v1")
    config = AgentConfig(
        node_name="fake-node", paths=host.paths, gates=FeatureGates(KOORDLET_FEATURES, {}), port=0
    )
    agent = Agent(config)
    agent._start_qos()
    assert agent.qos is not None
    await agent.qos.stop()
    resctrl = [s for s in agent.qos.strategies if isinstance(s, ResctrlReconcile)]
    assert [s.mount for s in resctrl] == [Resctrl.mount]
    assert [s.mount for s in strategies() if isinstance(s, ResctrlReconcile)] == [None]


def test_tsdb_path_defaults_to_upstreams_and_empty_means_memory(tmp_path):
    roots = host_root_argv(HostPaths.rooted(tmp_path))
    default = agent_config(build_parser().parse_args(roots), {"NODE_NAME": "n"})
    assert default.metric_data_dir == Path("/metric-data/")
    given = agent_config(build_parser().parse_args([*roots, "--tsdb-path", "/var/lib/x"]), {"NODE_NAME": "n"})
    assert given.metric_data_dir == Path("/var/lib/x")
    empty = agent_config(build_parser().parse_args([*roots, "--tsdb-path="]), {"NODE_NAME": "n"})
    assert empty.metric_data_dir is None


@pytest.mark.parametrize(
    ("flag", "disabled"),
    [([], False), (["--disable-query-kubelet-config"], True)],
    ids=["default", "disabled"],
)
def test_disable_query_kubelet_config_flag(tmp_path, flag, disabled):
    roots = host_root_argv(HostPaths.rooted(tmp_path))
    config = agent_config(build_parser().parse_args([*roots, *flag]), {"NODE_NAME": "n"})
    assert config.disable_query_kubelet_config is disabled


@pytest.mark.parametrize(("flag", "seconds"), [([], 0.25), (["--qos-pressure-probe-interval=0"], 0.0)])
def test_pressure_probe_interval_flag(tmp_path, flag, seconds):
    roots = host_root_argv(HostPaths.rooted(tmp_path))
    config = agent_config(build_parser().parse_args([*roots, *flag]), {"NODE_NAME": "n"})
    assert config.collectors.pressure_probe_interval == seconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.host
def test_standalone_agent_on_this_machine_serves_real_usage(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    argv = [sys.executable, "-m", "koordlet", "--standalone", "--addr", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(
        [*argv, "--tsdb-path", str(tmp_path / "metric-data")],
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
        ["--qos-pressure-probe-interval=1ms"],
    ],
)
def test_bad_flag_values_exit_2_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def _roots(host: FakeHost) -> list[str]:
    return [
        f"--cgroup-root-dir={host.paths.cgroup_root}",
        f"--proc-root-dir={host.paths.proc_root}",
        f"--sys-root-dir={host.paths.sys_root}",
        f"--tsdb-path={host.root / 'metric-data'}",
    ]


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "KUBERNETES_SERVICE_HOST")}


def _koordlet(
    host: FakeHost, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``koordlet`` as a user starts it, on a fake host; stops it if it ever starts."""
    roots, base = _roots(host), _environment()
    return subprocess.run(
        [sys.executable, "-m", "koordlet", *roots, *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("E")]


def test_a_port_in_use_is_one_line_naming_the_address_and_the_flag(tmp_path):
    host = FakeHost(tmp_path, "v1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _koordlet(host, "--standalone", f"--addr=127.0.0.1:{port}")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = _error_lines(done.stderr)
    assert line.endswith(
        f"cannot listen on 127.0.0.1:{port} for /metrics and /healthz: address already in use "
        "(choose another with --addr)"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "kubeconfig {path}: no such file (--kubeconfig names it)", id="missing-file"),
        pytest.param(
            "clusters: [\n  {name: a\n",
            "kubeconfig {path} is not valid YAML: line 3, column 1: expected ',' or '}}', "
            "but got '<stream end>'",
            id="malformed-yaml",
        ),
        pytest.param("- a\n- b\n", "kubeconfig {path} is not a kubeconfig", id="not-a-mapping"),
        pytest.param(
            "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n",
            "kubeconfig {path} has no current-context",
            id="no-current-context",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Config\ncurrent-context: gone\nclusters: []\nusers: []\ncontexts: []\n",
            "cannot load cluster credentials: cannot load kubeconfig {path}: Invalid kube-config file. "
            "Expected object with name gone in {path}/contexts list",
            id="unknown-context",
        ),
    ],
)
def test_a_bad_kubeconfig_is_one_line(tmp_path, content, message):
    host = FakeHost(tmp_path / "host", "v1")
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    done = _koordlet(host, f"--kubeconfig={path}", "--addr=127.0.0.1:0", env={"NODE_NAME": "node-1"})
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = _error_lines(done.stderr)
    assert message.format(path=path) in line


def _node_host(root) -> FakeHost:
    host = FakeHost(root, "v1")
    host.set_cpu_topology(sockets=1, cores_per_socket=2, threads_per_core=1)
    host.set_meminfo(MemTotal=8_000_000, MemFree=2_000_000, MemAvailable=5_000_000)
    host.set_proc_stat([100, 0, 100, 1000, 0, 0, 0, 0], {0: [50, 0, 50, 500, 0, 0, 0, 0]})
    return host


def _launch(
    host: FakeHost, log_path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    roots, base = _roots(host), _environment()
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "koordlet", *roots, *args], env={**base, **(env or {})}, stderr=log
        )


def _until_logged(proc: subprocess.Popen[bytes], log_path, text: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while text not in log_path.read_text():
        assert proc.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_waiting_for_an_unreachable_apiserver_stops_the_agent(tmp_path, signum):
    host = _node_host(tmp_path / "host")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{_free_port()}")
    log_path = tmp_path / "stderr.log"
    proc = _launch(
        host,
        log_path,
        f"--kubeconfig={kubeconfig}",
        "--addr=127.0.0.1:0",
        f"--kubelet-read-only-port={_free_port()}",
        env={"NODE_NAME": "node-1"},
    )
    try:
        _until_logged(proc, log_path, "waiting for the states informer to sync")
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log_path.read_text()


def test_a_signal_while_running_stops_the_agent(tmp_path):
    host = _node_host(tmp_path / "host")
    log_path = tmp_path / "stderr.log"
    proc = _launch(host, log_path, "--standalone", "--addr=127.0.0.1:0")
    try:
        _until_logged(proc, log_path, "koordlet is running")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "SIGTERM received: stopping" in log_path.read_text()
