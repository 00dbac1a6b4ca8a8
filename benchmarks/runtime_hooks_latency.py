"""What each runtime hook transport adds to pod and container creation, on a real node.

The node tier's kubelet + containerd + runc + CNI node (``testsupport.nodetier``; skipped,
with the reason in ``params``, where its binaries or root are missing). A CRI client in this
process creates BE batch pods the way the kubelet does (a sandbox with the pod's labels and
annotations under its kubepods cgroup, then one busybox container with the kubelet's
resources, then its start) and times each CRI call, three ways:

* ``direct``: containerd alone, no koordlet (the baseline);
* ``nri``: the koordlet's NRI plug-in registered with containerd (its hooks run inside
  containerd's RunPodSandbox and CreateContainer);
* ``proxy``: through koord-runtime-proxy, whose hook server is the koordlet (NRI off).

The kubelet is stopped while the calls are timed (it would take the client's pods for
orphans); the koordlet was started while it ran, since its hooks wait for the kubelet's
first pod list. Figures: ``<mode>_<call>_p50_ms`` / ``_p99_ms`` for ``run_pod_sandbox``,
``create_container`` and ``start_container``, and ``<mode>_create_added_p50_ms`` /
``_p99_ms``: the whole creation (the three calls) against ``direct``'s;
``<mode>_batch_quota_pods_count``: the pods whose container runs with the hooks' batch CFS
quota (all of them with a transport, none directly).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from benchmarks._koord_e2e import install_crds
from benchmarks.harness import Result
from koordinator import protowire as pw
from koordinator.cli import run_loop
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.config import ClusterConfig
from koordinator.protowire import Writer
from testsupport.envtest import provision_binaries
from testsupport.nodetier import BUSYBOX_IMAGE, Node, provision_node_binaries
from testsupport.nodetier.spec import NodeSpec

NAME = "runtime_hooks_latency"
CRDS = Path(__file__).resolve().parents[1] / "crds"
KOORDLET_CRDS = [
    CRDS / "slo.koordinator.sh_nodeslos.yaml",
    CRDS / "slo.koordinator.sh_nodemetrics.yaml",
    CRDS / "topology.node.k8s.io_noderesourcetopologies.yaml",
]
RUNTIME = "/runtime.v1.RuntimeService"
CALLS = ("run_pod_sandbox", "create_container", "start_container")
BATCH = {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}
READY_TIMEOUT_S = 120.0


def _spec(node: Node) -> NodeSpec:
    assert node.spec is not None, "the node is not started"
    return node.spec


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


class CriClient:
    """The kubelet's CRI calls for one BE batch pod, timed."""

    def __init__(self, socket: Path, node: Node, image: str) -> None:
        self.channel = grpc.aio.insecure_channel(f"unix://{socket}")
        self.node = node
        self.image = image

    async def _call(self, method: str, request: bytes) -> bytes:
        call: Any = self.channel.unary_unary(f"{RUNTIME}/{method}")
        answer: bytes = await call(request, timeout=60)
        return answer

    def _sandbox_config(self, name: str, uid: str, parent: str) -> Writer:
        log_dir = _spec(self.node).dir / "pod-logs" / f"bench_{name}_{uid}"
        log_dir.mkdir(parents=True, exist_ok=True)
        recorded = json.dumps({"containers": {"main": {"requests": BATCH, "limits": BATCH}}})
        labels = {
            "io.kubernetes.pod.name": name,
            "io.kubernetes.pod.namespace": "bench",
            "io.kubernetes.pod.uid": uid,
            "koordinator.sh/qosClass": "BE",
        }
        for controller in ("cpu", "cpuacct", "memory"):  # what the kubelet makes before the sandbox
            Path("/sys/fs/cgroup", controller, parent.strip("/")).mkdir(parents=True, exist_ok=True)
        meta = Writer().string(1, name).string(2, uid).string(3, "bench")
        linux = Writer().string(1, parent).message(2, Writer(), always=True)
        return (
            Writer()
            .message(1, meta)
            .string(2, name)
            .string(3, str(log_dir))
            .string_map(6, labels)
            .string_map(7, {"node.koordinator.sh/extended-resource-spec": recorded})
            .message(8, linux)
        )

    async def create(self) -> tuple[str, dict[str, float], bool]:
        """One pod: its sandbox id, the seconds each call took, and whether its container
        runs with the batch CFS quota (50000 µs: the hooks' value, not the kubelet's -1)."""
        uid = str(uuid.uuid4())
        name = f"bench-{uid[:8]}"
        parent = f"{self.node.cgroup_root}/kubepods/besteffort/pod{uid}"
        config = self._sandbox_config(name, uid, parent)
        took: dict[str, float] = {}
        started = time.perf_counter()
        answer = await self._call("RunPodSandbox", bytes(Writer().message(1, config).string(2, "")))
        took["run_pod_sandbox"] = time.perf_counter() - started
        sandbox = _id(answer)
        resources = Writer().varint(1, 100000).varint(2, -1).varint(3, 2).varint(5, 1000)
        container = (
            Writer()
            .message(1, Writer().string(1, "main"))
            .message(2, Writer().string(1, self.image))
            .strings(3, ["/bin/sh", "-c", "exec sleep 3600"])
            .string(11, "main.log")
            .message(15, Writer().message(1, resources).message(2, Writer(), always=True))
        )
        request = bytes(Writer().string(1, sandbox).message(2, container).message(3, config))
        started = time.perf_counter()
        container_id = _id(await self._call("CreateContainer", request))
        took["create_container"] = time.perf_counter() - started
        started = time.perf_counter()
        await self._call("StartContainer", bytes(Writer().string(1, container_id)))
        took["start_container"] = time.perf_counter() - started
        return sandbox, took, _batch_quota(parent, container_id)

    async def remove(self, sandbox: str) -> None:
        request = bytes(Writer().string(1, sandbox))
        with contextlib.suppress(Exception):
            await self._call("StopPodSandbox", request)
            await self._call("RemovePodSandbox", request)

    async def close(self) -> None:
        await self.channel.close()


def _batch_quota(parent: str, container_id: str) -> bool:
    quota = Path("/sys/fs/cgroup/cpu", parent.strip("/"), container_id, "cpu.cfs_quota_us")
    return quota.read_text().strip() == "50000"


def _id(answer: bytes) -> str:
    return pw.string(pw.fields(answer), 1)


async def _measure(socket: Path, node: Node, image: str, pods: int) -> dict[str, list[float]]:
    client = CriClient(socket, node, image)
    times: dict[str, list[float]] = {call: [] for call in (*CALLS, "create", "hooked")}
    sandboxes = []
    try:
        for _ in range(pods):
            sandbox, took, hooked = await client.create()
            sandboxes.append(sandbox)
            times["hooked"].append(float(hooked))
            for call, seconds in took.items():
                times[call].append(seconds * 1000)
            times["create"].append(sum(took.values()) * 1000)
    finally:
        for sandbox in sandboxes:
            await client.remove(sandbox)
        await client.close()
    return times


async def _setup(config: ClusterConfig) -> None:
    async with ApiClient(config) as client:
        await install_crds(client, KOORDLET_CRDS)
        await client.create(
            res.NODE_SLOS,
            {
                "apiVersion": "slo.koordinator.sh/v1alpha1",
                "kind": "NodeSLO",
                "metadata": {"name": "koord-bench"},
                "spec": {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True, "schedIdle": 1}}}},
            },
        )
        anchor = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "anchor", "namespace": "default"},
            "spec": {
                "nodeName": "koord-bench",
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "main",
                        "image": BUSYBOX_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"],
                    }
                ],
            },
        }
        await client.create(res.PODS, anchor)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while (await client.get(res.PODS, "anchor", "default")).get("status", {}).get("phase") != "Running":
            if time.monotonic() > deadline:
                raise RuntimeError("the anchor pod did not run")
            await asyncio.sleep(0.2)


def _wait_log(path: Path, text: str, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while text not in (path.read_text(errors="replace") if path.exists() else ""):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready; log tail: {path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)


@contextlib.contextmanager
def _process(
    node: Node, argv: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    proc = node.popen(argv, log, env=env)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _run_modes(node: Node, pods: int, work: Path) -> dict[str, dict[str, list[float]]]:
    spec = _spec(node)
    config = ClusterConfig(
        server=node.url,
        ca_file=str(node.kubeconfig.parent / "pki" / "ca.crt"),
        client_cert_file=str(node.kubeconfig.parent / "pki" / "admin.crt"),
        client_key_file=str(node.kubeconfig.parent / "pki" / "admin.key"),
    )
    run_loop(_setup(config))
    image = BUSYBOX_IMAGE
    env = {"NODE_NAME": "koord-bench", "agent_mode": "hostMode", "PATH": "/usr/bin:/bin"}
    modes: dict[str, dict[str, list[float]]] = {}
    node.stop_kubelet()
    modes["direct"] = run_loop(_measure(spec.containerd_socket, node, image, pods))
    # NRI: the koordlet registered with containerd
    node.use_runtime_endpoint(None)
    log = work / "koordlet-nri.log"
    with _process(node, node.koordlet_argv("--runtime-hooks-addr="), log, env):
        _wait_log(log, "NRI plug-in 00-koordlet_nri registered", "the NRI plug-in")
        _wait_log(log, "runtime hook BatchResource enabled", "the koordlet's hooks")
        node.stop_kubelet()
        modes["nri"] = run_loop(_measure(spec.containerd_socket, node, image, pods))
    # the proxy in front of containerd, the koordlet its hook server
    node.use_runtime_endpoint(None)
    hooks = spec.dir / "bench-hooks"
    hooks.mkdir(exist_ok=True)
    proxy_socket = spec.dir / "bench-proxy" / "runtimeproxy.sock"
    proxy_argv = [
        sys.executable, "-m", "koordlet.runtimeproxy",
        "--koord-runtimeproxy-endpoint", str(proxy_socket),
        "--remote-runtime-service-endpoint", str(spec.containerd_socket),
        "--remote-image-service-endpoint", str(spec.containerd_socket),
        "--hook-server-config-dir", str(hooks / "config"),
    ]  # fmt: skip
    koordlet_argv = node.koordlet_argv(
        "--enable-nri-runtime-hook=false",
        "--runtime-hooks-addr",
        str(hooks / "koordlet.sock"),
        "--runtime-hooks-host-endpoint",
        str(hooks / "koordlet.sock"),
        "--runtime-hooks-config-path",
        str(hooks / "config"),
    )
    proxy_log, log = work / "proxy.log", work / "koordlet-proxy.log"
    with _process(node, proxy_argv, proxy_log), _process(node, koordlet_argv, log, env):
        _wait_log(proxy_log, "serving CRI", "koord-runtime-proxy")
        _wait_log(log, "runtime hook server on", "the koordlet's hook server")
        node.stop_kubelet()
        modes["proxy"] = run_loop(_measure(proxy_socket, node, image, pods))
    node.use_runtime_endpoint(None)
    return modes


def run(quick: bool) -> Result:
    pods = 20 if quick else 100
    params: dict[str, object] = {
        "pods": pods,
        "pod": "BE, batch-cpu 500 / batch-memory 256Mi (extended-resource-spec annotation), one container",
        "calls": "RunPodSandbox, CreateContainer, StartContainer over CRI, one pod at a time",
        "node": "node tier: containerd v2 with NRI, runc, CNI bridge (kubelet stopped while timing)",
        "cores": os.cpu_count(),
    }
    if os.geteuid() != 0:
        params["skipped"] = "the node tier needs root"
        return Result(NAME, params, headline="skipped: the node tier needs root")
    try:
        node_bin, envtest_bin = provision_node_binaries(), provision_binaries()
    except RuntimeError as exc:  # NodeTierError, ControlPlaneError
        params["skipped"] = f"node tier unavailable: {exc}"
        return Result(NAME, params, headline=f"skipped: {exc}")
    with tempfile.TemporaryDirectory(prefix="koord-hooks-bench-") as work:
        node = Node("koord-bench", node_bin=node_bin, envtest_bin=envtest_bin).start()
        try:
            modes = _run_modes(node, pods, Path(work))
        finally:
            node.stop()
    results: dict[str, float] = {}
    ratios: dict[str, float] = {}
    for mode, times in modes.items():
        for call in CALLS:
            results[f"{mode}_{call}_p50_ms"] = round(_percentile(times[call], 0.5), 2)
            results[f"{mode}_{call}_p99_ms"] = round(_percentile(times[call], 0.99), 2)
        results[f"{mode}_create_p50_ms"] = round(_percentile(times["create"], 0.5), 2)
        results[f"{mode}_create_p99_ms"] = round(_percentile(times["create"], 0.99), 2)
        results[f"{mode}_batch_quota_pods_count"] = sum(times["hooked"])
    for mode in ("nri", "proxy"):
        for q in ("p50", "p99"):
            added = results[f"{mode}_create_{q}_ms"] - results[f"direct_create_{q}_ms"]
            results[f"{mode}_create_added_{q}_ms"] = round(added, 2)
        ratios[f"{mode}_create_p50_vs_direct_ratio"] = round(
            results[f"{mode}_create_p50_ms"] / results["direct_create_p50_ms"], 3
        )
    headline = "; ".join(
        f"{m}: create p50 {results[f'{m}_create_p50_ms']:.1f} ms, p99 {results[f'{m}_create_p99_ms']:.1f} ms"
        for m in modes
    )
    return Result(NAME, params, results, ratios, headline)
