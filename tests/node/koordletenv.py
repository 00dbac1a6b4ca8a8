"""What the node-tier koordlet tests share: cgroup paths under the node's root, the
koordlet's cluster objects, polling with the koordlet's log on failure, and pods that print
their cgroup values as they start (NRI and the runtime proxy both must set them before)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import AlreadyExistsError
from tests.envtest import apply_crds
from tests.koordlet.clusterenv import KOORDLET_CRDS
from tests.nodetier import busybox_pod, node_config, publish_batch_resources, wait_running
from testsupport.nodetier import Node

CGROUP = Path("/sys/fs/cgroup")
BURN = "while :; do :; done"
SLEEP = "exec sleep 3600"
QOS = "koordinator.sh/qosClass"


def cgroup_path(node: Node, subsystem: str, *parts: str) -> Path:
    return CGROUP.joinpath(subsystem, node.cgroup_root.strip("/"), "kubepods", *(p for p in parts if p))


def read(path: Path) -> str:
    return path.read_text().strip()


#: what the koordlet tests expect of the node's NodeSLO: BE suppression by cpuset at 65%, and
#: the BE class's CPU QoS with SCHED_IDLE
NODE_SLO_SPEC = {
    "resourceUsedThresholdWithBE": {
        "enable": True,
        "cpuSuppressThresholdPercent": 65,
        "cpuSuppressPolicy": "cpuset",
    },
    "resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True, "groupIdentity": -1, "schedIdle": 1}}},
}


async def setup_koordlet_objects(node: Node) -> None:
    """The CRDs, the NodeSLO (its spec set again: a koord-manager of another module may have
    rewritten it) and NodeMetric the koordlet reads, and batch resources on the node."""
    async with ApiClient(node_config(node)) as client:
        await apply_crds(client, KOORDLET_CRDS)
        slo = {
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeSLO",
            "metadata": {"name": "koord-node"},
            "spec": NODE_SLO_SPEC,
        }
        try:
            await client.create(res.NODE_SLOS, slo)
        except AlreadyExistsError:
            current = await client.get(res.NODE_SLOS, "koord-node")
            current["spec"] = NODE_SLO_SPEC
            await client.replace(res.NODE_SLOS, current)
        metric = {
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeMetric",
            "metadata": {"name": "koord-node"},
            "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 2, "aggregateDurationSeconds": 10}},
        }
        with contextlib.suppress(AlreadyExistsError):
            await client.create(res.NODE_METRICS, metric)
        await publish_batch_resources(client)


async def create_pod(client: ApiClient, names: list[str], pod: dict[str, Any]) -> None:
    names.append(pod["metadata"]["name"])
    await client.create(res.PODS, pod)


def log_tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


async def until(check: Any, within: float, what: str, log: Path) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + within
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.5)
    tail = await asyncio.to_thread(log_tail, log)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})\n--- koordlet log tail ---\n{tail}")


def container_id(pod: dict[str, Any]) -> str:
    [status] = pod["status"]["containerStatuses"]
    return str(status["containerID"]).split("://", 1)[1]


#: what a container sees of its own cgroups as it starts, then it sleeps
SHOW_CGROUPS = (
    "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.shares "
    "/sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpuset/cpuset.cpus; exec sleep 3600"
)


def first_lines(node: Node, pod: dict[str, Any], count: int) -> list[str] | None:
    """The first lines the pod's container wrote (the kubelet's CRI log file), once it wrote them."""
    meta = pod["metadata"]
    assert node.spec is not None
    log = node.spec.dir / "pod-logs" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / "main" / "0.log"
    if not log.exists():
        return None
    # "<time> stdout F <text>" per line
    lines = [line.split(" ", 3)[3] for line in log.read_text().splitlines() if line.count(" ") >= 3]
    return lines[:count] if len(lines) >= count else None


def pinned_pod(name: str, script: str) -> dict[str, Any]:
    """A pinned LSR pod: a whole CPU, cpuset ``1`` in the scheduler's resource-status."""
    whole_cpu = {"cpu": "1", "memory": "64Mi"}
    return busybox_pod(
        name,
        script,
        requests=whole_cpu,
        limits=whole_cpu,
        labels={QOS: "LSR"},
        annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset": "1"}'},
    )


def koordlet_argv(node: Node, *extra: str) -> list[str]:
    """A koordlet on the node with 1 s runtime-hook reconciles."""
    return node.koordlet_argv("--runtime-hooks-reconcile-interval", "1s", *extra)


async def hooked_pods(client: ApiClient, pods: list[str]) -> dict[str, dict[str, Any]]:
    """A BE batch pod (its batch resources recorded by the webhook's annotation) and a pinned
    LSR pod, both printing their cgroup values as they start."""
    batch = {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}
    recorded = json.dumps({"containers": {"main": {"requests": batch, "limits": batch}}})
    await create_pod(
        client,
        pods,
        busybox_pod(
            "hooked-batch",
            SHOW_CGROUPS,
            requests=batch,
            limits=batch,
            labels={QOS: "BE"},
            annotations={"node.koordinator.sh/extended-resource-spec": recorded},
        ),
    )
    await create_pod(client, pods, pinned_pod("hooked-lsr", SHOW_CGROUPS))
    return {p["metadata"]["name"]: p for p in await wait_running(client, "default", pods)}
