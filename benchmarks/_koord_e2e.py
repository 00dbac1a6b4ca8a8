"""S2's workload and its end-to-end half (used by ``benchmarks/scheduler_koord.py``).

The object builders make S2's workload for both halves: the fake apiserver of the in-process
figure builds it from them, and :func:`run_e2e` creates the same objects through a real
kube-apiserver and etcd (``hack/envtest.sh``), reusing ``benchmarks/scheduler_e2e.py``'s
machinery: a fresh control plane per run, the scheduler as a process of its own, a watch
timing each binding, the processes' CPU from ``/proc``.

Each run of Koordinator's profile gets a control plane with the NodeMetric, ElasticQuota,
PodGroup, Device and NodeResourceTopology CRDs applied (Established before anything is
created) and the ``koordinator-system`` namespace; ``python -m controlplane.scheduler
--config`` runs a copy of
``controlplane/scheduler/profiles/koord-scheduler.yaml`` whose ``clientConnection`` names
the envtest kubeconfig with QPS and burst 5000 and whose ``leaderElection`` is off (and
``--leader-elect=false --secure-port=0``). Beside it, on a control plane of its own, S1's
end-to-end workload with koord-scheduler's default profile (``scheduler_e2e.run_once``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks import scheduler_e2e as e2e
from controlplane.scheduler.profiles import KOORDINATOR
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.timeutil import format_time
from testsupport.envtest import ControlPlane

GANG_SIZE = 10
TEAMS = ("team-a", "team-b", "team-c")
QUOTA = "quota.scheduling.koordinator.sh"
GANG = "gang.scheduling.koordinator.sh"
SYSTEM_NAMESPACE = "koordinator-system"
CRDS = tuple(
    e2e.ROOT / "crds" / name
    for name in (
        "slo.koordinator.sh_nodemetrics.yaml",
        "scheduling.sigs.k8s.io_elasticquotas.yaml",
        "scheduling.sigs.k8s.io_podgroups.yaml",
        "scheduling.koordinator.sh_devices.yaml",
        "scheduling.koordinator.sh_reservations.yaml",
        "topology.node.k8s.io_noderesourcetopologies.yaml",
    )
)
ESTABLISH_TIMEOUT_S = 60.0


# --- the workload (both halves) --------------------------------------------------------------


def node(i: int) -> dict[str, Any]:
    """S1's node, named as its NodeMetric."""
    return e2e.make_node(i, f"node-{i}")


def node_metric(i: int) -> dict[str, Any]:
    """The NodeMetric of ``node(i)`` as created (its status is written after)."""
    return {
        "apiVersion": res.NODE_METRICS.api_version,
        "kind": "NodeMetric",
        "metadata": {"name": f"node-{i}"},
    }


def node_metric_status(i: int, now: str) -> dict[str, Any]:
    """Fresh at ``now``; the node's CPU usage between 10% and 50% of its 4 CPUs."""
    usage = {"cpu": f"{400 + (i * 37) % 1600}m", "memory": f"{4 + i % 8}Gi"}
    return {"updateTime": now, "nodeMetric": {"nodeUsage": {"resources": usage}}, "podsMetric": []}


def quotas(nodes: int, namespace: str) -> list[dict[str, Any]]:
    """The ``org`` parent quota, then one per team under it (parents first)."""

    def quota(name: str, parent: str, cpu: int) -> dict[str, Any]:
        labels = {f"{QUOTA}/is-parent": "false" if parent else "true"}
        if parent:
            labels[f"{QUOTA}/parent"] = parent
        return {
            "apiVersion": res.ELASTIC_QUOTAS.api_version,
            "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "min": {"cpu": str(cpu), "memory": "0"},
                "max": {"cpu": "100000", "memory": "1000Ti"},
            },
        }

    return [quota("org", "", 4 * nodes), *(quota(t, "org", 4 * nodes // len(TEAMS)) for t in TEAMS)]


# --- the mixed workload: S2 with NUMA, GPU-share and reservation-owner pods at 10% each ------

#: the mixed workload's pods i with i % 10 in these are (NUMA, GPU-share, reservation owner)
NUMA_SLOT, GPU_SLOT, OWNER_SLOT = 1, 2, 3
GPU_RESOURCES = {
    "koordinator.sh/gpu-core": "100",
    "koordinator.sh/gpu-memory-ratio": "100",
    "koordinator.sh/gpu-memory": "80Gi",
}


def mixed_node(i: int) -> dict[str, Any]:
    """S2's node with one 80 GiB GPU (as the slo-controller publishes it)."""
    obj = node(i)
    for key in ("capacity", "allocatable"):
        obj["status"][key] = {**obj["status"][key], **GPU_RESOURCES}
    return obj


def mixed_topology(i: int) -> dict[str, Any]:
    """The koordlet's NodeResourceTopology of a 4-CPU node: 1 socket, 1 NUMA node, 4 cores."""
    detail = [{"id": cpu, "core": cpu, "socket": 0, "node": 0} for cpu in range(4)]
    return {
        "apiVersion": res.NODE_RESOURCE_TOPOLOGIES.api_version,
        "kind": "NodeResourceTopology",
        "metadata": {
            "name": f"node-{i}",
            "annotations": {"node.koordinator.sh/cpu-topology": json.dumps({"detail": detail})},
        },
        "topologyPolicies": ["None"],
        "zones": [
            {
                "name": "node-0",
                "type": "Node",
                "resources": [
                    {"name": n, "capacity": v, "allocatable": v, "available": v}
                    for n, v in (("cpu", "4"), ("memory", "32Gi"))
                ],
            }
        ],
    }


def mixed_device(i: int) -> dict[str, Any]:
    """The koordlet's Device of the node: one healthy 80 GiB GPU."""
    gpu = {
        "type": "gpu",
        "id": f"GPU-{i}",
        "minor": 0,
        "health": True,
        "resources": GPU_RESOURCES,
        "topology": {"socketID": 0, "nodeID": 0, "pcieID": "pci0"},
    }
    return {
        "apiVersion": res.DEVICES.api_version,
        "kind": "Device",
        "metadata": {"name": f"node-{i}"},
        "spec": {"devices": [gpu]},
    }


def mixed_reservation(i: int, namespace: str) -> dict[str, Any]:
    """The Reservation pod ``i`` (an owner slot) lands in: 100m / 500 Mi, owned by its name
    (its status, :func:`mixed_reservation_status`, is written after)."""
    container = {"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}
    return {
        "apiVersion": res.RESERVATIONS.api_version,
        "kind": "Reservation",
        "metadata": {"name": f"reserve-{i}"},
        "spec": {
            "template": {
                "metadata": {"namespace": namespace},
                "spec": {"schedulerName": e2e.KOORD, "containers": [container]},
            },
            "owners": [{"object": {"name": f"pod-{i}", "namespace": namespace}}],
            "ttl": "1h",
        },
    }


def mixed_reservation_status(i: int, nodes: int, now: str) -> dict[str, Any]:
    """Placed ahead of its owner, as reservations are meant to be: Available on a node."""
    return {
        "phase": "Available",
        "nodeName": f"node-{i % nodes}",
        "allocatable": {"cpu": "100m", "memory": "500Mi"},
        "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "Scheduled", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": now},
        ],
    }


def mixed_pod(i: int, namespace: str) -> dict[str, Any]:
    """S2's pod, or in one slot of ten each: an LSR pod binding a whole CPU, a pod sharing a
    quarter of a GPU, a reservation's owner."""
    obj = pod(i, namespace)
    container = obj["spec"]["containers"][0]
    if i % 10 == NUMA_SLOT:
        obj["metadata"]["labels"] |= {
            "koordinator.sh/qosClass": "LSR",
            "koordinator.sh/priority-class": "koord-prod",
        }
        container["resources"]["requests"] = {"cpu": "1", "memory": "500Mi"}
    elif i % 10 == GPU_SLOT:
        share = {"koordinator.sh/gpu-core": "25", "koordinator.sh/gpu-memory-ratio": "25"}
        container["resources"] = {
            "requests": {**container["resources"]["requests"], **share},
            "limits": share,
        }
    return obj


def pod(i: int, namespace: str) -> dict[str, Any]:
    """100m / 500 Mi, a team's quota round-robin; one block of GANG_SIZE pods in ten is a gang."""
    meta: dict[str, Any] = {
        "name": f"pod-{i}",
        "namespace": namespace,
        "labels": {f"{QUOTA}/name": TEAMS[i % len(TEAMS)]},
    }
    if (i // GANG_SIZE) % 10 == 0:
        meta["annotations"] = {
            f"{GANG}/name": f"gang-{i // GANG_SIZE}",
            f"{GANG}/min-available": str(GANG_SIZE),
        }
    container = {"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"schedulerName": e2e.KOORD, "containers": [container]},
    }


# --- on the envtest apiserver ----------------------------------------------------------------


async def install_crds(client: ApiClient, paths: Sequence[Path] = CRDS) -> None:
    """Create the CRDs and wait until each is Established."""
    names = []
    for path in paths:
        crd = yaml.safe_load(path.read_text())
        await client.create(res.CUSTOM_RESOURCE_DEFINITIONS, crd)
        names.append(str(crd["metadata"]["name"]))
    async with asyncio.timeout(ESTABLISH_TIMEOUT_S):
        for name in names:
            while True:
                crd = await client.get(res.CUSTOM_RESOURCE_DEFINITIONS, name)
                conditions = (crd.get("status") or {}).get("conditions") or ()
                if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                    break
                await asyncio.sleep(0.1)


async def _populate(client: ApiClient, nodes: int, pods: int) -> float:
    """S2's objects through the API (CRDs and namespaces first, untimed): seconds to create them."""
    await install_crds(client)
    await client.ensure_namespace(SYSTEM_NAMESPACE)
    await client.ensure_namespace(e2e.NAMESPACE)
    limit = asyncio.Semaphore(e2e.CREATE_CONCURRENCY)
    now = format_time(time.time())

    async def add_node(i: int) -> None:
        async with limit:
            await client.create(res.NODES, node(i))
            metric = await client.create(res.NODE_METRICS, node_metric(i))
            metric["status"] = node_metric_status(i, now)
            await client.replace_status(res.NODE_METRICS, metric)

    start = time.perf_counter()
    await asyncio.gather(*(add_node(i) for i in range(nodes)))
    for quota in quotas(nodes, e2e.NAMESPACE):  # parents first
        await client.create(res.ELASTIC_QUOTAS, quota)
    await e2e.create_all(client, res.PODS, (pod(i, e2e.NAMESPACE) for i in range(pods)))
    created_s = time.perf_counter() - start
    await e2e.check_untainted(client)
    return created_s


def _config(plane: ControlPlane) -> Path:
    """Koordinator's profile, its clientConnection pointed at the envtest, leader election off."""
    config = yaml.safe_load(KOORDINATOR.read_text())
    config["clientConnection"] = {
        "kubeconfig": str(plane.kubeconfig),
        "qps": e2e.CLIENT_QPS,
        "burst": e2e.CLIENT_QPS,
    }
    config["leaderElection"] = {**config.get("leaderElection", {}), "leaderElect": False}
    path = plane.workdir / "koord-scheduler-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _run_koord(envtest: Path, nodes: int, pods: int, timeout_s: float) -> e2e.RunFigures:
    with ControlPlane(envtest, apiserver_args=e2e.APISERVER_ARGS) as plane:
        argv = e2e.koord_argv(plane, _config(plane))
        populate = functools.partial(_populate, nodes=nodes, pods=pods)
        return asyncio.run(e2e.measure(plane, e2e.KOORD, argv, nodes, pods, timeout_s, populate))


@dataclass
class E2E:
    """The end-to-end figures for scheduler_koord's Result (empty, with ``skipped``, without envtest)."""

    results: dict[str, float] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    params: dict[str, object] = field(default_factory=dict)
    headline: str = ""
    skipped: str | None = None


def run_e2e(quick: bool) -> E2E:
    """Koordinator's profile on S2's workload and the default profile on S1's, each on fresh
    envtest control planes, alternating (3 runs each, medians; 1 run of 100 nodes and 200
    pods in quick mode)."""
    nodes, pods, repeats = (100, 200, 1) if quick else (1000, 5000, 3)
    timeout_s = 120.0 if quick else 900.0
    try:
        envtest = e2e.envtest_binaries()
    except e2e.SkipError as err:
        return E2E(headline=f"end to end skipped: {err}", skipped=str(err))
    koord: list[e2e.RunFigures] = []
    basic: list[e2e.RunFigures] = []
    for i in range(repeats):
        order = ("koord", "basic") if i % 2 == 0 else ("basic", "koord")
        for which in order:
            if which == "koord":
                koord.append(_run_koord(envtest, nodes, pods, timeout_s))
            else:
                basic.append(e2e.run_once(envtest, e2e.KOORD, None, nodes, pods, timeout_s))
    ours, theirs = e2e.summary(koord), e2e.summary(basic)
    results = {
        "e2e_pods_per_s": round(ours["pods_per_s"], 1),
        "e2e_start_to_bound_s": round(ours["start_to_bound_s"], 2),
        "e2e_cpu_per_pod_ms": round(ours["cpu_per_pod_ms"], 3),
        "e2e_rss_mib": round(ours["rss_mib"], 1),
        "e2e_apiserver_cpu_s": round(ours["apiserver_cpu_s"], 2),
        "e2e_etcd_cpu_s": round(ours["etcd_cpu_s"], 2),
        "e2e_scheduled_events_count": ours["events"],
        "e2e_basic_pods_per_s": round(theirs["pods_per_s"], 1),
        "e2e_basic_cpu_per_pod_ms": round(theirs["cpu_per_pod_ms"], 3),
        "e2e_basic_rss_mib": round(theirs["rss_mib"], 1),
        "e2e_basic_apiserver_cpu_s": round(theirs["apiserver_cpu_s"], 2),
    }
    ratios = {
        "e2e_vs_basic_ratio": round(ours["pods_per_s"] / theirs["pods_per_s"], 3),
        "e2e_cpu_per_pod_vs_basic_ratio": round(ours["cpu_per_pod_ms"] / theirs["cpu_per_pod_ms"], 3),
    }
    params: dict[str, object] = {
        "e2e_nodes": nodes,
        "e2e_pods": pods,
        "e2e_runs": repeats,
        "e2e_api": "envtest kube-apiserver v1.34.4 + etcd v3.6.4, fresh per run, TaintNodesByCondition off",
        "e2e_scheduler": f"python -m controlplane.scheduler --config (Koordinator's profile), "
        f"client QPS/burst {e2e.CLIENT_QPS}, leader election off",
        "e2e_basic": "S1's SchedulingBasic workload (scheduler_e2e), koord-scheduler's default profile",
        "e2e_throughput": "(pods - 1) / (last binding seen - first binding seen), median of runs",
        "e2e_cores": os.cpu_count() or 0,
        "e2e_koord_runs": e2e.run_params(koord),
        "e2e_basic_runs": e2e.run_params(basic),
    }
    headline = (
        f"end to end ({nodes} nodes, {pods} pods, envtest): {ours['pods_per_s']:.0f} pods/s "
        f"({ours['cpu_per_pod_ms']:.2f} ms CPU/pod, {ours['rss_mib']:.0f} MiB), "
        f"SchedulingBasic {theirs['pods_per_s']:.0f} pods/s, "
        f"e2e_vs_basic_ratio {ratios['e2e_vs_basic_ratio']:.2f}"
    )
    return E2E(results, ratios, params, headline)
