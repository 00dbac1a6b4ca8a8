"""The koordlet on a real node: a host process beside a real kubelet, containerd and runc.

One koordlet runs for the module, on the node's network with the admin client
certificate (which it also shows the kubelet's x509 authentication on 10250). The pods are
busybox pods bound to the node; everything asserted is what the kubelet, the kernel's
cgroup files or the apiserver hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import NotFoundError
from tests.node.cgroupwrites import CgroupWrites
from tests.node.koordletenv import (
    BURN,
    QOS,
    SLEEP,
    cgroup_path,
    container_id,
    create_pod,
    first_lines,
    hooked_pods,
    koordlet_argv,
    pinned_pod,
    read,
    setup_koordlet_objects,
    until,
)
from tests.nodetier import busybox_pod, wait_running
from testsupport.nodetier import Node


@pytest.fixture(scope="module")
def koordlet(node_cluster: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A koordlet process on the node; yields its log."""
    asyncio.run(setup_koordlet_objects(node_cluster))
    log = tmp_path_factory.mktemp("koordlet") / "koordlet.log"
    assert node_cluster.spec is not None
    argv = koordlet_argv(
        node_cluster,
        "--collect-res-used-interval", "1s",
        "--cpu-suppress-interval-seconds", "1",
        "--feature-gates", "BEMemoryEvict=true",
        # cached values are not rewritten during the module (the NRI test counts writes)
        "--resource-force-update-seconds", "3600",
    )  # fmt: skip
    proc = node_cluster.popen(
        argv, log, env={"NODE_NAME": "koord-node", "agent_mode": "hostMode", "PATH": "/usr/bin:/bin"}
    )
    try:
        yield log
    finally:
        proc.kill()
        proc.wait()


async def test_nodemetric_shows_real_pods_and_real_usage(
    node_cluster: Node, node_client: ApiClient, koordlet: Path, pods: list[str]
) -> None:
    cpu_mem = {"cpu": "500m", "memory": "64Mi"}
    await create_pod(node_client, pods, busybox_pod("gu", SLEEP, requests=cpu_mem, limits=cpu_mem))
    await create_pod(
        node_client, pods, busybox_pod("bu", BURN, requests={"cpu": "100m"}, limits={"cpu": "400m"})
    )
    await create_pod(node_client, pods, busybox_pod("be", SLEEP))
    running = {p["metadata"]["name"]: p for p in await wait_running(node_client, "default", pods)}
    assert {n: p["status"]["qosClass"] for n, p in running.items()} == {
        "gu": "Guaranteed",
        "bu": "Burstable",
        "be": "BestEffort",
    }

    async def metrics() -> dict[str, Any] | None:
        try:
            status = (await node_client.get(res.NODE_METRICS, "koord-node")).get("status") or {}
        except NotFoundError:
            return None
        by_name = {m["name"]: m for m in status.get("podsMetric") or []}
        if not {"gu", "bu", "be"} <= set(by_name):
            return None
        cpu = Quantity.parse(by_name["bu"]["podUsage"]["resources"]["cpu"]).milli_value()
        return by_name if cpu >= 250 else None

    by_name = await until(metrics, 60, "the burning pod's usage in NodeMetric", koordlet)
    burner = Quantity.parse(by_name["bu"]["podUsage"]["resources"]["cpu"]).milli_value()
    assert burner <= 450, burner  # its CFS quota caps it at 400m
    for name in ("gu", "be"):
        assert Quantity.parse(by_name[name]["podUsage"]["resources"]["cpu"]).milli_value() < 100
    # the pod cgroups the koordlet read are the kubelet's, under the node's cgroup root
    for name, qos_dir in (("gu", ""), ("bu", "burstable"), ("be", "besteffort")):
        uid = running[name]["metadata"]["uid"]
        assert cgroup_path(node_cluster, "cpuacct", qos_dir, f"pod{uid}").is_dir()


async def test_runtime_hooks_reconcile_real_containers(
    node_cluster: Node, node_client: ApiClient, koordlet: Path, pods: list[str]
) -> None:
    batch = {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}
    await create_pod(
        node_client,
        pods,
        busybox_pod("batch", SLEEP, requests=batch, limits=batch, labels={QOS: "BE"}),
    )
    await create_pod(node_client, pods, pinned_pod("lsr", SLEEP))
    running = {p["metadata"]["name"]: p for p in await wait_running(node_client, "default", pods)}
    batch_pod, lsr_pod = running["batch"], running["lsr"]
    assert batch_pod["status"]["qosClass"] == "BestEffort"
    be_dir = ("besteffort", f"pod{batch_pod['metadata']['uid']}")
    be_container = container_id(batch_pod)
    lsr_container = container_id(lsr_pod)
    lsr_cpuset = cgroup_path(node_cluster, "cpuset", f"pod{lsr_pod['metadata']['uid']}", lsr_container)

    def applied() -> dict[str, str] | None:
        values = {
            "pod cfs quota": read(cgroup_path(node_cluster, "cpu", *be_dir, "cpu.cfs_quota_us")),
            "container cfs quota": read(
                cgroup_path(node_cluster, "cpu", *be_dir, be_container, "cpu.cfs_quota_us")
            ),
            "container memory limit": read(
                cgroup_path(node_cluster, "memory", *be_dir, be_container, "memory.limit_in_bytes")
            ),
            "pod cpu.idle": read(cgroup_path(node_cluster, "cpu", *be_dir, "cpu.idle")),
            "lsr cpuset": read(lsr_cpuset / "cpuset.cpus"),
        }
        return values if values["lsr cpuset"] == "1" and values["pod cpu.idle"] == "1" else None

    values = await until(applied, 30, "the hooks' cgroup values", koordlet)
    assert values == {
        "pod cfs quota": "50000",  # 500 milli batch-cpu at the 100 ms period
        "container cfs quota": "50000",
        "container memory limit": str(256 << 20),
        "pod cpu.idle": "1",
        "lsr cpuset": "1",
    }


async def _patch_be_threshold(client: ApiClient, **fields: Any) -> None:
    """Set (or, with None, drop) fields of the NodeSLO's resourceUsedThresholdWithBE."""
    slo = await client.get(res.NODE_SLOS, "koord-node")
    thresholds = slo["spec"]["resourceUsedThresholdWithBE"]
    thresholds.update(fields)
    for name in [n for n, v in fields.items() if v is None]:
        del thresholds[name]
    await client.replace(res.NODE_SLOS, slo)


async def test_a_busy_ls_pod_shrinks_the_be_tier_quota(
    node_cluster: Node, node_client: ApiClient, koordlet: Path, pods: list[str]
) -> None:
    be_quota = cgroup_path(node_cluster, "cpu", "besteffort", "cpu.cfs_quota_us")
    await _patch_be_threshold(node_client, cpuSuppressPolicy="cfsQuota", cpuSuppressThresholdPercent=100)
    try:
        # a quiet node: the BE tier may use what the host does not (2 cores less system use),
        # well over half a core once the earlier tests' pods are gone
        before = int(
            await until(
                lambda: int(read(be_quota)) >= 60_000 and read(be_quota),
                60,
                "a BE quota over 60000",
                koordlet,
            )
        )
        await create_pod(
            node_client,
            pods,
            busybox_pod("ls-busy", BURN, requests={"cpu": "100m"}, limits={"cpu": "1"}, labels={QOS: "LS"}),
        )
        await wait_running(node_client, "default", pods)
        # the LS pod's core comes out of the BE tier's budget
        after = await until(
            lambda: 0 < int(read(be_quota)) <= before - 40_000 and int(read(be_quota)),
            30,
            f"the BE quota to shrink from {before}",
            koordlet,
        )
        assert after <= before - 40_000
    finally:
        await _patch_be_threshold(node_client, cpuSuppressPolicy="cpuset", cpuSuppressThresholdPercent=65)


def _meminfo() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0]) * 1024
    return fields


async def test_a_be_pod_over_the_memory_threshold_is_evicted(
    node_cluster: Node, node_client: ApiClient, koordlet: Path, pods: list[str]
) -> None:
    meminfo = _meminfo()
    used_percent = 100 * (meminfo["MemTotal"] - meminfo["MemAvailable"]) / meminfo["MemTotal"]
    hog = int(meminfo["MemTotal"] * 0.06)  # 6% of the machine, twice the headroom left
    threshold = int(used_percent) + 3
    await create_pod(
        node_client, pods, busybox_pod("ls-steady", SLEEP, requests={"cpu": "50m"}, labels={QOS: "LS"})
    )
    # busybox tail keeps a line without newlines whole in memory
    await create_pod(
        node_client, pods, busybox_pod("be-hog", f"head -c {hog} /dev/zero | tail", labels={QOS: "BE"})
    )
    [_, hog_pod] = await wait_running(node_client, "default", pods)
    await _patch_be_threshold(
        node_client, memoryEvictThresholdPercent=threshold, memoryEvictLowerPercent=threshold - 2
    )
    try:

        async def hog_gone() -> bool:
            try:
                current = await node_client.get(res.PODS, "be-hog", "default")
            except NotFoundError:
                return True
            return bool(current["metadata"]["uid"] != hog_pod["metadata"]["uid"])

        await until(hog_gone, 60, f"the BE pod evicted (threshold {threshold}%)", koordlet)
        events = (await node_client.list(res.EVENTS, "default"))["items"]
        evicted = [
            e for e in events if e["reason"] == "EvictPodSuccess" and e["involvedObject"]["name"] == "be-hog"
        ]
        assert evicted, [e["reason"] for e in events]
        assert "memory" in evicted[0]["message"].lower()
        # the LS pod stays
        ls_pod = await node_client.get(res.PODS, "ls-steady", "default")
        assert ls_pod["status"]["phase"] == "Running"
    finally:
        await _patch_be_threshold(node_client, memoryEvictThresholdPercent=None, memoryEvictLowerPercent=None)


# --- NRI: the hooks applied while containerd creates the container ------------------------

NRI_REGISTERED = "NRI plug-in 00-koordlet_nri registered"


def _registrations(log: Path) -> int:
    return log.read_text(errors="replace").count(NRI_REGISTERED) if log.exists() else 0


def _synchronized_since_registration(log: Path) -> bool:
    return "NRI: synchronized with" in log.read_text(errors="replace").rsplit(NRI_REGISTERED, 1)[-1]


async def _nri_ready(client: ApiClient, pods: list[str], koordlet: Path) -> None:
    """The NRI plug-in registered. The koordlet starts its hooks once the kubelet lists a
    pod (an empty list reads as a kubelet restart), as its own DaemonSet pod would be."""
    await create_pod(client, pods, busybox_pod("nri-anchor", SLEEP))
    await wait_running(client, "default", pods)
    await until(lambda: _registrations(koordlet) >= 1, 30, "the NRI plug-in registered", koordlet)


async def test_nri_containers_start_with_their_hook_values(
    node_cluster: Node, node_client: ApiClient, koordlet: Path, pods: list[str]
) -> None:
    await _nri_ready(node_client, pods, koordlet)
    running = await hooked_pods(node_client, pods)
    # quota, shares, memory limit, cpuset, read by the container's first command: the
    # kubelet's values (-1, 2, unlimited) were never there
    batch = await until(
        lambda: first_lines(node_cluster, running["hooked-batch"], 3), 30, "its output", koordlet
    )
    assert batch == ["50000", "512", str(256 << 20)]
    lsr = await until(lambda: first_lines(node_cluster, running["hooked-lsr"], 4), 30, "its output", koordlet)
    assert (lsr[0], lsr[3]) == ("-1", "1")  # pinned, its quota lifted
    batch_uid = running["hooked-batch"]["metadata"]["uid"]
    assert read(cgroup_path(node_cluster, "cpu", "besteffort", f"pod{batch_uid}", "cpu.idle")) == "1"


async def test_nri_reconnects_after_a_containerd_restart_and_reapplies_nothing(
    node_cluster: Node, node_client: ApiClient, koordlet: Path, pods: list[str]
) -> None:
    await _nri_ready(node_client, pods, koordlet)
    running = await hooked_pods(node_client, pods)
    batch, lsr = running["hooked-batch"], running["hooked-lsr"]
    be_dir = ("besteffort", f"pod{batch['metadata']['uid']}")
    lsr_dir = (f"pod{lsr['metadata']['uid']}", container_id(lsr))
    watched = [
        cgroup_path(node_cluster, "cpu", *be_dir, "cpu.idle"),
        cgroup_path(node_cluster, "cpu", *be_dir, "cpu.cfs_quota_us"),
        cgroup_path(node_cluster, "cpu", *be_dir, container_id(batch), "cpu.cfs_quota_us"),
        cgroup_path(node_cluster, "memory", *be_dir, container_id(batch), "memory.limit_in_bytes"),
        cgroup_path(node_cluster, "cpuset", *lsr_dir, "cpuset.cpus"),
        cgroup_path(node_cluster, "cpu", *lsr_dir, "cpu.cfs_quota_us"),
    ]
    await asyncio.sleep(3)  # the reconciler has seen both pods (it finds nothing to change)
    writes = CgroupWrites(watched)
    try:
        before = _registrations(koordlet)
        await asyncio.to_thread(node_cluster.restart_containerd)
        await until(
            lambda: _registrations(koordlet) > before, 60, "the NRI plug-in registered again", koordlet
        )
        await until(
            lambda: _synchronized_since_registration(koordlet), 30, "the runtime's Synchronize", koordlet
        )
        await asyncio.sleep(3)  # a few reconciles
        assert writes.count() == 0, writes.seen
        # the counter does see a write: the same value written again
        watched[0].write_text(read(watched[0]))
        assert writes.count() == 1
    finally:
        writes.close()
    # the kubelet goes on with the restarted runtime: the pods stay running
    await wait_running(node_client, "default", pods)
