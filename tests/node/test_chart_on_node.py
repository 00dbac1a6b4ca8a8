"""charts/koordinator installed by the real helm on a node of its own, with the image that
hack/image.sh built from the Dockerfile imported into the node's containerd.

koord-manager, koord-scheduler and the koordlet run as pods under their own
ServiceAccounts; the apiserver calls the webhooks through their Service; the colocation
loop runs whole (the koordlet's NodeMetric, the manager's batch resources, a pod mutated into
a batch pod that koord-scheduler binds and whose cgroups carry its batch limits); an
upgrade that changes the feature gates rolls the components; an uninstall leaves nothing
behind; and the apiserver's audit log shows no refused request and every RBAC grant used
or documented in :data:`NOT_EXERCISED`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import ApiError, NotFoundError
from tests.nodetier import batch_profile, busybox_pod, node_config, wait_running
from tests.polling import eventually_awaited
from testsupport.nodetier import Node

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "koordinator"
NAMESPACE = "koordinator-system"
CGROUP = Path("/sys/fs/cgroup")
#: one replica each on one node; the colocation loop reports every 5 s
INSTALL_VALUES = ["manager.replicas=1", "scheduler.replicas=1"]


def install_values(node: Node, *extra: str) -> list[str]:
    """``--set`` arguments: the install values, and the koordlet's host directories under /etc
    moved into the node's scratch directory (the node shares the host's /etc; the kubelet
    would create them there)."""
    host = node.workdir / "host-etc"
    dirs = [
        f"koordlet.hostDirs.kubeletConfigDir={host / 'kubernetes'}",
        f"koordlet.hostDirs.koordProxyRegisterDir={host / 'runtime' / 'hookserver.d'}",
    ]
    return [arg for value in [*INSTALL_VALUES, *dirs, *extra] for arg in ("--set", value)]


def helm_cmd(helm: Path, node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(node.workdir), "KUBECONFIG": str(node.kubeconfig)}
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, check=False, env=env, timeout=400
    )


@pytest.fixture(scope="module")
def node_cluster_with_chart(helm: Path, image_archive: Path) -> Iterator[Node]:
    """A node of its own (the chart owns its CRDs) with the release installed."""
    node = Node("koord-node").start()
    try:
        node.import_image(image_archive)
        sets = install_values(node)
        done = helm_cmd(
            helm, node, "install", "koordinator", str(CHART), *sets, "--wait", "--timeout", "240s"
        )
        assert done.returncode == 0, done.stderr + pod_report(node)
        yield node
    finally:
        node.stop()


def pod_report(node: Node) -> str:
    """The release's pods and the tails of their logs, for a failure message."""
    lines = []
    for log in sorted((node.workdir / "pod-logs").glob(f"{NAMESPACE}_*/*/*.log")):
        lines.append(f"--- {log.relative_to(node.workdir)}")
        lines.extend(log.read_text(errors="replace").splitlines()[-15:])
    return "\n".join(lines)


async def _ready(client: ApiClient, kind: Any, name: str) -> bool:
    """The workload's current generation rolled out and every pod of it Ready."""
    obj = await client.get(kind, name, NAMESPACE)
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return False
    if kind is res.DAEMON_SETS:
        wanted = status.get("desiredNumberScheduled")
        return bool(wanted) and status.get("numberReady") == wanted == status.get("updatedNumberScheduled")
    wanted = obj["spec"]["replicas"]
    return bool(status.get("readyReplicas") == wanted == status.get("updatedReplicas"))


async def test_the_components_run_under_their_own_service_accounts(node_cluster_with_chart: Node) -> None:
    node = node_cluster_with_chart
    async with ApiClient(node_config(node)) as client:
        assert await _ready(client, res.DEPLOYMENTS, "koord-manager")
        assert await _ready(client, res.DEPLOYMENTS, "koord-scheduler")
        async with asyncio.timeout(60):
            while not await _ready(client, res.DAEMON_SETS, "koordlet"):  # noqa: ASYNC110 - in the apiserver
                await asyncio.sleep(0.5)
        pods = (await client.list(res.PODS, NAMESPACE))["items"]
        accounts = {p["metadata"]["labels"]["koord-app"]: p["spec"]["serviceAccountName"] for p in pods}
        assert accounts == {
            "koord-manager": "koord-manager",
            "koord-scheduler": "koord-scheduler",
            "koordlet": "koordlet",
        }
        # the manager made the node's NodeMetric and NodeSLO; the koordlet reports into it
        await client.get(res.NODE_SLOS, "koord-node")

        async def reported() -> bool:
            status = (await client.get(res.NODE_METRICS, "koord-node")).get("status") or {}
            return bool(status.get("nodeMetric"))

        await eventually_awaited(reported, within=90, every=1)
        [koordlet] = [p for p in pods if p["metadata"]["labels"]["koord-app"] == "koordlet"]
    # the koordlet's /metrics through its pod IP (hostNetwork: the node's address)
    url = f"http://{koordlet['status']['podIP']}:9316/metrics"
    scrape = node.run(
        ["python3", "-c", f"import urllib.request;print(urllib.request.urlopen({url!r}).read().decode())"]
    )
    assert scrape.returncode == 0, scrape.stderr
    assert "koordlet_start_time" in scrape.stdout or "koordlet_" in scrape.stdout


async def _enable_fast_colocation(client: ApiClient) -> None:
    """Report every 5 s, so that batch resources appear within the test."""
    config = await client.get(res.CONFIG_MAPS, "slo-controller-config", NAMESPACE)
    colocation = json.loads(config["data"]["colocation-config"])
    colocation.update({"metricReportIntervalSeconds": 5, "metricAggregateDurationSeconds": 10})
    config["data"]["colocation-config"] = json.dumps(colocation)
    await client.replace(res.CONFIG_MAPS, config)


async def test_a_profiled_pod_becomes_a_batch_pod_with_batch_cgroups(node_cluster_with_chart: Node) -> None:
    node = node_cluster_with_chart
    async with ApiClient(node_config(node)) as client:
        await _enable_fast_colocation(client)
        # the manager publishes batch resources from the koordlet's NodeMetric
        async with asyncio.timeout(120):
            while True:
                allocatable = (await client.get(res.NODES, "koord-node"))["status"]["allocatable"]
                batch = allocatable.get("kubernetes.io/batch-cpu")
                if batch and Quantity.parse(batch).value() >= 500:
                    break
                await asyncio.sleep(1)
        await client.ensure_namespace("spark", {"koordinator.sh/enable-colocation": "true"})
        profile = batch_profile("spark", "spark", schedulerName="koord-scheduler")
        await client.create(res.CLUSTER_COLOCATION_PROFILES, profile)
        cpu_mem = {"cpu": "500m", "memory": "128Mi"}
        pod = busybox_pod("executor", "exec sleep 3600", namespace="spark", requests=cpu_mem, limits=cpu_mem,
                          labels={"app": "spark"}, node_name=None)  # fmt: skip
        async with asyncio.timeout(60):
            while True:  # until the webhook answers through its Service
                try:
                    await client.create(res.PODS, pod)
                    break
                except ApiError as exc:
                    if "koordinator.sh" not in str(exc):
                        raise
                    await asyncio.sleep(1)
        [running] = await wait_running(client, "spark", ["executor"], within=90)
    resources = running["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "128Mi"}
    assert running["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
    assert running["spec"]["schedulerName"] == "koord-scheduler"  # and it bound the pod
    assert running["spec"]["nodeName"] == "koord-node"
    # the koordlet (a pod) applied the batch limits to the pod's cgroups
    pod_dir = (
        CGROUP
        / "cpu"
        / node.cgroup_root.strip("/")
        / "kubepods"
        / "besteffort"
        / f"pod{running['metadata']['uid']}"
    )
    async with asyncio.timeout(30):
        while (pod_dir / "cpu.cfs_quota_us").read_text().strip() != "50000":  # noqa: ASYNC110
            await asyncio.sleep(0.5)


async def test_an_upgrade_rolls_the_gates_and_an_uninstall_leaves_nothing(
    node_cluster_with_chart: Node, helm: Path
) -> None:
    node = node_cluster_with_chart
    gates = ["featureGates=PodValidatingWebhook=false", "koordlet.features=BEMemoryEvict=true"]
    sets = install_values(node, *gates)
    done = helm_cmd(helm, node, "upgrade", "koordinator", str(CHART), *sets, "--wait", "--timeout", "240s")
    assert done.returncode == 0, done.stderr + pod_report(node)
    async with ApiClient(node_config(node)) as client:
        # every component rolled and came back Ready (a DaemonSet of one node passes
        # helm's --wait with its pod down, so the koordlet is checked here)
        async with asyncio.timeout(120):
            while not await _ready(client, res.DAEMON_SETS, "koordlet"):  # noqa: ASYNC110 - in the apiserver
                await asyncio.sleep(0.5)
        daemonset = await client.get(res.DAEMON_SETS, "koordlet", NAMESPACE)
        assert (
            "--feature-gates=BEMemoryEvict=true"
            in daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
        )
        manager = await client.get(res.DEPLOYMENTS, "koord-manager", NAMESPACE)
        assert (
            "--feature-gates=PodValidatingWebhook=false"
            in manager["spec"]["template"]["spec"]["containers"][0]["args"]
        )
        # the gate took effect: the new manager no longer serves /validate-pod
        async with asyncio.timeout(60):
            while True:
                validating = await client.get(
                    res.VALIDATING_WEBHOOK_CONFIGURATIONS, "koordinator-validating-webhook-configuration"
                )
                if "vpod.koordinator.sh" not in {w["name"] for w in validating.get("webhooks") or []}:
                    break
                await asyncio.sleep(1)
        rendered = helm_cmd(helm, node, "get", "manifest", "koordinator")
        docs = [d for d in yaml.safe_load_all(rendered.stdout) if isinstance(d, dict)]
        # what the components asked for while installed (an uninstall deletes their roles
        # before them, so their last requests may be refused)
        assert node.spec is not None
        asked, refused = await asyncio.to_thread(used, node.spec.audit_log)
        done = helm_cmd(helm, node, "uninstall", "koordinator", "--wait", "--timeout", "120s")
        assert done.returncode == 0, done.stderr
        async with asyncio.timeout(120):
            while True:  # the namespace (and everything in it) goes
                try:
                    await client.get(res.NAMESPACES, NAMESPACE)
                except NotFoundError:
                    break
                await asyncio.sleep(1)
        left = []
        for kind in (res.CLUSTER_ROLES, res.CLUSTER_ROLE_BINDINGS, res.PRIORITY_CLASSES,
                     res.MUTATING_WEBHOOK_CONFIGURATIONS, res.VALIDATING_WEBHOOK_CONFIGURATIONS,
                     res.CUSTOM_RESOURCE_DEFINITIONS):  # fmt: skip
            for item in (await client.list(kind))["items"]:
                name = item["metadata"]["name"]
                if name.startswith("koord") or name.endswith("koordinator.sh") or "koordinator" in name:
                    left.append(f"{item.get('kind', kind.kind)} {name}")
        assert not left, left
    # every request of every component was allowed, and every grant was used or is
    # documented below with the path that needs it
    assert not refused, refused
    grants = granted(docs)
    unused = grants - asked
    assert unused <= set(NOT_EXERCISED), sorted(unused - set(NOT_EXERCISED))
    assert set(NOT_EXERCISED) <= grants, sorted(set(NOT_EXERCISED) - grants)


Grant = tuple[str, str, str, str]  # (component, apiGroup, resource, verb)

#: grants the run above does not exercise, with the path that needs each
NOT_EXERCISED: dict[Grant, str] = {
    ("koord-manager", "", "nodes", "get"): "a node read outside the informer",
    ("koord-manager", "", "nodes", "patch"): "noderesource: originExtendedAllocatable, GPU labels",
    ("koord-manager", "", "pods", "get"): "webhooks: a pod read while the informers are not synced",
    ("koord-manager", "", "pods", "patch"): "colocationprofile (gate off here): a pending pod's profile",
    ("koord-manager", "", "namespaces", "get"): "webhooks: a namespace the informer lacks",
    ("koord-manager", "scheduling.k8s.io", "priorityclasses", "get"): "webhooks: an informer miss",
    ("koord-manager", "", "events", "create"): "Warning Events on invalid slo-controller-config keys",
    ("koord-manager", "", "events", "patch"): "a repeated Event counted up",
    ("koord-manager", "", "secrets", "update"): "the webhook certificate rotated",
    ("koord-manager", "", "configmaps", "delete"): "slo-controller-config-last-good with nothing good left",
    ("koord-manager", "", "configmaps", "get"): "slo-controller-config-last-good re-read after a conflict",
    ("koord-manager", "slo.koordinator.sh", "nodemetrics", "delete"): "a Node deleted",
    ("koord-manager", "slo.koordinator.sh", "nodeslos", "delete"): "a Node deleted",
    ("koord-manager", "slo.koordinator.sh", "nodemetrics", "patch"): "the collect policy changed",
    ("koord-manager", "slo.koordinator.sh", "nodeslos", "patch"): "the strategies changed",
    ("koord-manager", "scheduling.sigs.k8s.io", "elasticquotas", "get"): "quota admission re-reads a quota",
    ("koord-manager", "scheduling.sigs.k8s.io", "elasticquotas", "create"): "quotaprofile: a profile's quota",
    ("koord-manager", "scheduling.sigs.k8s.io", "elasticquotas", "update"): "quota admission, quotaprofile",
    ("koord-manager", "quota.koordinator.sh", "elasticquotaprofiles", "patch"): "quotaprofile: the tree id",
    ("koord-scheduler", "", "pods", "patch"): "PreBind patches (Coscheduling, NUMA, devices, reservations)",
    ("koord-scheduler", "", "pods/status", "patch"): "PodScheduled=False on a pod that does not fit",
    ("koord-scheduler", "", "pods", "delete"): "preemption victims",
    ("koord-scheduler", "", "pods/eviction", "create"): "ElasticQuota's overuse revoke",
    ("koord-scheduler", "", "events", "patch"): "a repeated Event counted up",
    ("koord-scheduler", "scheduling.sigs.k8s.io", "elasticquotas", "create"): "the built-in quotas",
    ("koord-scheduler", "scheduling.sigs.k8s.io", "elasticquotas", "patch"): "quota status written back",
    ("koord-scheduler", "scheduling.sigs.k8s.io", "podgroups", "patch"): "PodGroup status written back",
    ("koord-scheduler", "scheduling.koordinator.sh", "reservations", "get"): "Reservation's Bind re-reads it",
    (
        "koord-scheduler",
        "scheduling.koordinator.sh",
        "reservations",
        "patch",
    ): "reserve pods' PreBind",
    ("koord-scheduler", "scheduling.koordinator.sh", "reservations", "delete"): "expired ones collected",
    ("koord-scheduler", "scheduling.koordinator.sh", "reservations/status", "update"): "Bind, owners, expiry",
    ("koordlet", "", "nodes/proxy", "get"): "the kubelet's SubjectAccessReview for GET /pods",
    ("koordlet", "", "pods/eviction", "create"): "memory and CPU evictions",
    ("koordlet", "", "events", "create"): "eviction and NodeSLO Events",
    ("koordlet", "", "events", "patch"): "a repeated Event counted up",
    ("koordlet", "topology.node.k8s.io", "noderesourcetopologies", "update"): "the node's topology changed",
    ("koordlet", "scheduling.koordinator.sh", "devices", "update"): "the node's devices changed",
}


def granted(docs: list[dict[str, Any]]) -> set[Grant]:
    """Every (ServiceAccount, group, resource, verb) the rendered roles grant."""
    roles = {
        (d["kind"], d["metadata"]["name"]): d.get("rules") or []
        for d in docs
        if d["kind"] in ("ClusterRole", "Role")
    }
    grants: set[Grant] = set()
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        rules = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for subject in binding["subjects"]:
            for rule in rules:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            grants.add((subject["name"], group, resource, verb))
    return grants


def used(audit_log: Path) -> tuple[set[Grant], list[str]]:
    """What each component asked the apiserver for (from the audit log), and its refusals."""
    prefix = f"system:serviceaccount:{NAMESPACE}:"
    asked: set[Grant] = set()
    refused = []
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        user, ref = event["user"]["username"], event.get("objectRef")
        if not user.startswith(prefix) or ref is None:
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        grant = (user.removeprefix(prefix), ref.get("apiGroup", ""), resource, event["verb"])
        asked.add(grant)
        if event.get("responseStatus", {}).get("code") == 403:
            refused.append(" ".join(grant))
    return asked, refused
