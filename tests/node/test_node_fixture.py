"""The node fixture itself: a second node runs beside the session's, a node whose PID 1 is
killed leaves only empty cgroups and its scratch directory, which :func:`sweep` removes, and
kube-proxy's rules live in the node's network namespace, not the host's.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from tests.nodetier import busybox_pod, node_config, wait_running
from testsupport.nodetier import Node, sweep
from testsupport.nodetier.isolation import busy, hierarchies

KUBELET_SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")


def _sysctls() -> dict[str, str]:
    return {name: (Path("/proc/sys") / name).read_text() for name in KUBELET_SYSCTLS}


async def _run_a_pod(second: Node, first: Node) -> tuple[dict[str, Any], list[str]]:
    """A pod running on ``second``; the pod names ``first`` has."""
    async with ApiClient(node_config(second)) as client:
        await client.create(res.PODS, busybox_pod("crash", "exec sleep 3600", node_name="koord-node-2"))
        [pod] = await wait_running(client, "default", ["crash"])
    async with ApiClient(node_config(first)) as client:
        names = [p["metadata"]["name"] for p in (await client.list(res.PODS, "default"))["items"]]
    return pod, names


def test_a_second_node_runs_beside_the_first_and_a_crash_is_swept(node_cluster: Node) -> None:
    sysctls = _sysctls()
    second = Node("koord-node-2").start()
    try:
        assert second.cgroup_root != node_cluster.cgroup_root
        pod, first_pods = asyncio.run(_run_a_pod(second, node_cluster))
        pod_dir = f"{second.cgroup_root.strip('/')}/kubepods/besteffort/pod{pod['metadata']['uid']}"
        assert all((h / pod_dir).is_dir() for h in hierarchies() if h.name in ("cpu", "memory"))
        assert "crash" not in first_pods  # each node is a cluster of its own
        pid1 = second.pid
        second.crash()
        assert not Path(f"/proc/{pid1}").exists()
    except BaseException:
        second.stop()
        raise
    workdir, root = second.workdir, second.cgroup_root
    # the pid namespace took every process of the node along; empty cgroups remain
    assert any((h / root.strip("/")).is_dir() for h in hierarchies())
    assert not busy(root)
    swept = sweep()
    assert root.removeprefix("/koord-node-") in swept
    assert not any((h / root.strip("/")).exists() for h in hierarchies())
    assert not workdir.exists()
    # the session's node is untouched, and the host's sysctls never changed
    assert (hierarchies()[0] / node_cluster.cgroup_root.strip("/")).is_dir()
    assert _sysctls() == sysctls


def test_kube_proxy_programs_the_kubernetes_service(node_cluster: Node) -> None:
    """kube-proxy (nftables mode) runs in the node's network namespace only."""
    if shutil.which("nft") is None:
        pytest.skip("no nft: the node runs without kube-proxy")
    argv = ["nsenter", f"--net={node_cluster.netns}", "nft", "list", "table", "ip", "kube-proxy"]
    deadline = time.monotonic() + 30
    while True:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if "10.96.0.1" in done.stdout or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "10.96.0.1" in done.stdout, done.stderr
    host = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False)
    assert "kube-proxy" not in host.stdout
