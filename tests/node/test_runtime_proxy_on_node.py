"""koord-runtime-proxy on a real node: the kubelet talks to it, it talks to containerd, and the
koordlet's hook server (NRI off) gives the pods their QoS values as their containers are
created. Everything asserted is what the kubelet, the kernel's cgroup files or the apiserver
hold; the module points the kubelet back at containerd when it ends."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from tests.node.koordletenv import (
    SLEEP,
    cgroup_path,
    create_pod,
    first_lines,
    hooked_pods,
    koordlet_argv,
    log_tail,
    read,
    setup_koordlet_objects,
    until,
)
from tests.nodetier import busybox_pod, delete_pods, wait_running
from testsupport.nodetier import Node


@dataclass
class ProxyNode:
    node: Node
    proxy_argv: list[str]
    proxy_log: Path
    koordlet_log: Path
    proxy: subprocess.Popen[bytes] | None = None

    def start_proxy(self) -> None:
        """Start the proxy and return once its socket accepts connections: a kubelet
        started against a socket nobody listens on yet exits at once."""
        self.proxy = self.node.popen(self.proxy_argv, self.proxy_log)
        endpoint = self.proxy_argv[self.proxy_argv.index("--koord-runtimeproxy-endpoint") + 1]
        deadline = time.monotonic() + 60
        while True:
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(endpoint)
                    return
                except OSError:
                    pass
            if self.proxy.poll() is not None or time.monotonic() > deadline:
                why = log_tail(self.proxy_log)
                raise AssertionError(f"the runtime proxy is not listening on {endpoint}:\n{why}")
            time.sleep(0.1)

    def stop_proxy(self) -> None:
        if self.proxy is not None:
            self.proxy.terminate()
            self.proxy.wait(timeout=30)
            self.proxy = None


def _node_ready(node: dict[str, Any]) -> tuple[str, str]:
    for condition in node.get("status", {}).get("conditions", []):
        if condition.get("type") == "Ready":
            return str(condition.get("status")), str(condition.get("message", ""))
    return "Unknown", ""


async def _ready(client: ApiClient, wanted: str) -> str:
    status, message = _node_ready(await client.get(res.NODES, "koord-node"))
    return (message or wanted) if status == wanted else ""


@pytest.fixture(scope="module")
def proxy_node(node_cluster: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyNode]:
    assert node_cluster.spec is not None
    work = node_cluster.spec.dir
    logs = tmp_path_factory.mktemp("runtime-proxy")
    asyncio.run(setup_koordlet_objects(node_cluster))
    (work / "koordlet-hooks").mkdir(exist_ok=True)
    endpoint = work / "koord-runtimeproxy" / "runtimeproxy.sock"
    hook_configs = work / "hookserver.d"
    setup = ProxyNode(
        node_cluster,
        [
            sys.executable, "-m", "koordlet.runtimeproxy",
            "--koord-runtimeproxy-endpoint", str(endpoint),
            "--remote-runtime-service-endpoint", str(node_cluster.spec.containerd_socket),
            "--remote-image-service-endpoint", str(node_cluster.spec.containerd_socket),
            "--hook-server-config-dir", str(hook_configs),
        ],
        logs / "proxy.log",
        logs / "koordlet.log",
    )  # fmt: skip
    setup.start_proxy()
    argv = koordlet_argv(
        node_cluster,
        "--enable-nri-runtime-hook=false",
        "--runtime-hooks-addr", str(work / "koordlet-hooks" / "koordlet.sock"),
        "--runtime-hooks-host-endpoint", str(work / "koordlet-hooks" / "koordlet.sock"),
        "--runtime-hooks-config-path", str(hook_configs),
    )  # fmt: skip
    koordlet = node_cluster.popen(
        argv, setup.koordlet_log, env={"NODE_NAME": "koord-node", "agent_mode": "hostMode"}
    )
    try:
        node_cluster.use_runtime_endpoint(endpoint)
        yield setup
    finally:
        node_cluster.use_runtime_endpoint(None)
        koordlet.kill()
        koordlet.wait()
        setup.stop_proxy()


async def _hooks_announced(proxy_node: ProxyNode, client: ApiClient, pods: list[str]) -> None:
    """The koordlet's hook server up (it starts once the kubelet lists a pod)."""
    await create_pod(client, pods, busybox_pod("proxy-anchor", SLEEP))
    await wait_running(client, "default", pods)
    await until(
        lambda: "runtime hook server on" in proxy_node.koordlet_log.read_text(errors="replace"),
        60,
        "the koordlet's runtime hook server",
        proxy_node.koordlet_log,
    )


async def test_containers_start_with_their_hook_values_through_the_proxy(
    proxy_node: ProxyNode, node_client: ApiClient, pods: list[str]
) -> None:
    await _hooks_announced(proxy_node, node_client, pods)
    running = await hooked_pods(node_client, pods)
    node = proxy_node.node
    batch = await until(
        lambda: first_lines(node, running["hooked-batch"], 3), 30, "its output", proxy_node.koordlet_log
    )
    assert batch == ["50000", "512", str(256 << 20)]
    lsr = await until(
        lambda: first_lines(node, running["hooked-lsr"], 4), 30, "its output", proxy_node.koordlet_log
    )
    assert (lsr[0], lsr[3]) == ("-1", "1")
    uid = running["hooked-batch"]["metadata"]["uid"]
    assert read(cgroup_path(node, "cpu", "besteffort", f"pod{uid}", "cpu.idle")) == "1"


async def test_a_pod_lifecycle_through_the_proxy(
    proxy_node: ProxyNode, node_client: ApiClient, pods: list[str]
) -> None:
    pod = busybox_pod("proxy-life", "echo hello from the proxy; touch /tmp/ready; exec sleep 3600")
    # the kubelet runs the probe with ExecSync through the proxy: Ready means exec works
    pod["spec"]["containers"][0]["readinessProbe"] = {
        "exec": {"command": ["cat", "/tmp/ready"]},
        "periodSeconds": 1,
    }
    await create_pod(node_client, pods, pod)
    [running] = await wait_running(node_client, "default", pods)

    async def ready() -> bool:
        current = await node_client.get(res.PODS, "proxy-life", "default")
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in current.get("status", {}).get("conditions", [])
        )

    await until(ready, 30, "the exec probe to pass", proxy_node.proxy_log)
    stream = await node_client.open_stream(res.PODS.path("default", "proxy-life", "log"), {})
    try:
        assert (await stream.read()).decode().strip() == "hello from the proxy"
    finally:
        stream.release()
    assert running["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    await delete_pods(node_client, "default", ["proxy-life"])
    pods.remove("proxy-life")


async def test_the_kubelet_sees_the_runtime_down_while_the_proxy_is_and_recovers(
    proxy_node: ProxyNode, node_client: ApiClient, pods: list[str]
) -> None:
    await until(lambda: _ready(node_client, "True"), 60, "the node Ready", proxy_node.proxy_log)
    proxy_node.stop_proxy()
    try:
        message = await until(
            lambda: _ready(node_client, "False"), 90, "the node NotReady", proxy_node.proxy_log
        )
        assert "runtime" in message.lower() or "PLEG" in message, message
    finally:
        proxy_node.start_proxy()
    await until(lambda: _ready(node_client, "True"), 90, "the node Ready again", proxy_node.proxy_log)
    # and pods run again through the restarted proxy
    await create_pod(node_client, pods, busybox_pod("after-restart", SLEEP))
    await wait_running(node_client, "default", pods, within=90)
    assert "koord-runtime-proxy serving CRI" in log_tail(proxy_node.proxy_log, 200)
