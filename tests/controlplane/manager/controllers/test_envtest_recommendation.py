"""envtest tier: the recommendation controller in a ``koord-manager`` process on a real kube-apiserver.

``koord-manager --controllers=*,recommendation`` (the documented defaults: 24h half-life,
3 samples, p95 CPU and p99 memory plus 15 %) runs against an apiserver with the CRDs. There
is no kubelet or kube-controller-manager: the test creates a Deployment, its ReplicaSet and
two pods owned by it, and plays the koordlet by writing the node's NodeMetric status (both
pods' usage) with ``updateTime``\\ s it chooses, so the histograms' decay is hand-computable:

* a report per sample time; after the first (2 samples) the condition is
  ``NotEnoughSamples``, after the second the recommendation is the usage's bucket plus the
  margin;
* usage goes up: the recommendation follows at once (the new samples are far more than 5 %
  of the weight); usage goes back down: the recommendation stays up until the high samples
  have decayed below 5 % (CPU) and 1 % (memory) of the weight, CPU first;
* the manager is restarted between two reports: the new process continues from the
  checkpoint ConfigMap (a fresh start could not recommend from one report);
* the Deployment is deleted: ``TargetNotFound``, the last recommendation kept.

A second test runs the manager as the chart's ``koord-manager`` ServiceAccount, bound to the
roles the chart renders with ``manager.recommendation.enabled=true``: the controller
recommends and checkpoints with those grants alone, and nothing it asks for is forbidden.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import NotFoundError
from koordinator.kube.timeutil import format_time, parse_time
from tests.charts.test_chart import by_kind, container_args, objects
from tests.controlplane.manager.controllers.objects import node, node_metric, pod, pod_metric
from tests.controlplane.manager.controllers.test_envtest_slo_controller import (
    Replica,
    create_webhook_configurations,
    create_with_status,
    prepared,
    wait_for,
)
from tests.envtest import Envtest, own_envtest
from testsupport.envtest.certs import client_certificate

NAMESPACE = "recommend"
NODE = "node-r"
PODS = ("web-a", "web-b")
T0 = parse_time("2026-01-01T00:00:00Z")
HOUR = 3600.0
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def envtest_recommendation(envtest_bin: Path) -> Iterator[Envtest]:
    """A control plane of this module's own (``*`` runs every controller, on every node)."""
    with own_envtest(envtest_bin) as plane:
        yield plane


def manager(envtest: Envtest, workdir: Path, name: str, kubeconfig: Path | None = None) -> Replica:
    """``koord-manager --controllers=*,recommendation`` in a process of its own, checkpointing
    every new sample (the test reads the checkpoint to know a report was taken)."""
    return Replica(
        envtest,
        workdir,
        name,
        kubeconfig,
        ("--controllers=*,recommendation", "--recommendation-checkpoint-interval=0s"),
    )


def owner(obj: Obj) -> list[Obj]:
    meta = obj["metadata"]
    return [
        {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


async def create_workload(client: ApiClient) -> None:
    """Deployment ``web`` -> ReplicaSet ``web-7d9f`` -> pods web-a and web-b on NODE, as the
    kube-controller-manager would leave them."""
    labels = {"app": "web"}
    container = {
        "name": "app",
        "image": "registry.example/web:1",
        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
    }
    template = {"metadata": {"labels": labels}, "spec": {"containers": [container]}}
    deployment = await client.create(
        res.DEPLOYMENTS,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": NAMESPACE},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": template},
        },
    )
    hashed = {**labels, "pod-template-hash": "7d9f"}
    replica_set = await client.create(
        res.REPLICA_SETS,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": "web-7d9f",
                "namespace": NAMESPACE,
                "labels": hashed,
                "ownerReferences": owner(deployment),
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": hashed},
                "template": {**template, "metadata": {"labels": hashed}},
            },
        },
    )
    for name in PODS:
        body = pod(name, "500m", "256Mi", node_name=NODE, namespace=NAMESPACE)
        body["metadata"]["labels"] = dict(hashed)
        body["metadata"]["ownerReferences"] = owner(replica_set)
        body["spec"]["containers"] = [container]
        await create_with_status(client, res.PODS, body)


async def create_cluster(client: ApiClient) -> Obj:
    """The webhook configurations, NODE, the workload and the Recommendation (returned)."""
    await create_webhook_configurations(client)
    await client.ensure_namespace(NAMESPACE)
    await create_with_status(client, res.NODES, node(NODE))
    await create_workload(client)
    created: Obj = await client.create(res.RECOMMENDATIONS, recommendation())
    return created


def recommendation() -> Obj:
    return {
        "apiVersion": "analysis.koordinator.sh/v1alpha1",
        "kind": "Recommendation",
        "metadata": {"name": "web", "namespace": NAMESPACE},
        "spec": {
            "target": {
                "type": "workload",
                "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            }
        },
    }


async def report(client: ApiClient, hours: float, cpu: str, memory: str) -> str:
    """The koordlet's NodeMetric report at T0 + ``hours``: every pod used ``cpu``/``memory``."""
    update_time = format_time(T0 + hours * HOUR)
    metric = node_metric(
        NODE,
        update_time=update_time,
        pods=[pod_metric(name, cpu, memory, namespace=NAMESPACE) for name in PODS],
    )
    try:
        current = await client.get(res.NODE_METRICS, NODE)
    except NotFoundError:
        await create_with_status(client, res.NODE_METRICS, metric)
        return update_time
    current["status"] = metric["status"]
    await client.replace_status(res.NODE_METRICS, current)
    return update_time


async def checkpoint(client: ApiClient) -> Obj | None:
    """The checkpoint ConfigMap's JSON, None while there is none."""
    try:
        found = await client.get(res.CONFIG_MAPS, "web-recommendation", NAMESPACE)
    except NotFoundError:
        return None
    data: Obj = json.loads(found["data"]["checkpoint"])
    return data


async def sampled(client: ApiClient, update_time: str) -> None:
    """Until the controller has taken the report of ``update_time`` (its checkpoint says so)."""

    async def taken() -> bool:
        data = await checkpoint(client)
        return data is not None and data["sampled"] == {NODE: update_time}

    await wait_for(taken)


async def status(client: ApiClient) -> Obj:
    found: Obj = (await client.get(res.RECOMMENDATIONS, "web", NAMESPACE)).get("status") or {}
    return found


def ready(found: Obj) -> Obj:
    return next((c for c in found.get("conditions") or () if c.get("type") == "RecommendationReady"), {})


def recommended(found: Obj) -> list[Obj]:
    return list((found.get("podStatus") or {}).get("containerStatuses") or ())


def app(cpu: str, memory: str) -> list[Obj]:
    return [{"containerName": "app", "resources": {"cpu": cpu, "memory": memory}}]


async def becomes(client: ApiClient, expected: list[Obj]) -> Obj:
    """Until the status recommends ``expected`` with ``Recommended``; that status."""
    last: Obj = {}

    async def reached() -> bool:
        nonlocal last
        last = await status(client)
        return recommended(last) == expected and ready(last).get("reason") == "Recommended"

    try:
        await wait_for(reached)
    except TimeoutError:
        raise AssertionError(f"expected {expected}, the status is {last}") from None
    return last


# Bucket ends (the controller's documented rule: buckets growing 5 %, CPU from 10 milli-cores,
# memory from 10 MB; the recommendation is the end of the percentile's bucket x 1.15, CPU
# rounded up to milli-cores, memory to MiB):
#   200m:  bucket 14 ends at 0.01 x (1.05^15 - 1) / 0.05 = 0.215786 cores; x 1.15 = 0.248154 -> 249m
#   1:     bucket 36 ends at 0.01 x (1.05^37 - 1) / 0.05 = 1.016279;       x 1.15 = 1.168721 -> 1169m
#   100Mi: bucket 8 ends at 1e7 x (1.05^9 - 1) / 0.05 = 110265640.6 B;    x 1.15 = 120.93 MiB -> 121Mi
#   400Mi: bucket 23 ends at 1e7 x (1.05^24 - 1) / 0.05 = 445019995.0 B;  x 1.15 = 488.06 MiB -> 489Mi
LOW = app("249m", "121Mi")
HIGH = app("1169m", "489Mi")
HIGH_CPU_DECAYED = app("249m", "489Mi")


async def test_a_deployments_recommendation_tracks_its_pods_usage(envtest_recommendation, tmp_path):
    client = await prepared(envtest_recommendation)
    managers: list[Replica] = []
    try:
        created = await create_cluster(client)

        # a sample's weight doubles every 24 h of sample time: w(h) = 2^(h/24), two samples per report
        first = await report(client, 0, "200m", "100Mi")
        managers.append(manager(envtest_recommendation, tmp_path, "first"))
        await sampled(client, first)

        async def not_enough() -> bool:
            return ready(await status(client)).get("reason") == "NotEnoughSamples"

        await wait_for(not_enough)  # 2 samples of 3
        assert recommended(await status(client)) == []

        await sampled(client, await report(client, 1, "200m", "100Mi"))
        found = await becomes(client, LOW)
        assert ready(found)["status"] == "True"
        assert ready(found)["message"] == "recommended from 2 pods"
        assert found["updateTime"]

        # usage up: the low samples weigh 2 x (1 + 1.029) = 4.06, the new ones 2 x 1.059 = 2.12,
        # 34 % of the weight, past both the 5 % above p95 and the 1 % above p99
        await sampled(client, await report(client, 2, "1", "400Mi"))
        await becomes(client, HIGH)

        # usage down again: the high samples are still 2.12 of 8.36 (25 %): nothing moves
        fourth = await report(client, 3, "200m", "100Mi")
        await sampled(client, fourth)
        assert recommended(await status(client)) == HIGH

        # the checkpoint holds 8 samples per histogram, owned by the Recommendation
        data = await checkpoint(client)
        assert data is not None
        histograms = data["containers"]["app"]
        assert (histograms["cpu"]["samples"], histograms["memory"]["samples"]) == (8, 8)
        config_map = await client.get(res.CONFIG_MAPS, "web-recommendation", NAMESPACE)
        owners = config_map["metadata"]["ownerReferences"]
        assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [
            ("Recommendation", "web", created["metadata"]["uid"])
        ]

        # a new manager process continues from the checkpoint
        managers.pop().stop()
        managers.append(manager(envtest_recommendation, tmp_path, "second"))

        # 5 days later each new sample weighs 2^5 = 32: the high ones are 2.12 of 72.4 (2.9 %),
        # under the 5 % above p95 but over the 1 % above p99 -- CPU comes down, memory not yet
        # (a manager starting afresh would have 2 samples and recommend nothing)
        await sampled(client, await report(client, 120, "200m", "100Mi"))
        await becomes(client, HIGH_CPU_DECAYED)

        # 7 days: new samples weigh 128 each, the high ones are 2.12 of 328 (0.65 %): memory follows
        await sampled(client, await report(client, 168, "200m", "100Mi"))
        await becomes(client, LOW)
        data = await checkpoint(client)
        assert data is not None
        assert data["containers"]["app"]["cpu"]["samples"] == 12

        # the Deployment is deleted (its pods stay: no garbage collector runs here); the next
        # report brings the Recommendation back: the condition says why, the last
        # recommendation stays, and no pod is sampled for a target that is gone
        await client.delete(res.DEPLOYMENTS, "web", NAMESPACE)
        await report(client, 169, "4", "4Gi")

        async def target_gone() -> bool:
            return ready(await status(client)).get("reason") == "TargetNotFound"

        await wait_for(target_gone)
        found = await status(client)
        assert ready(found)["status"] == "False"
        assert ready(found)["message"] == f"Deployment {NAMESPACE}/web not found"
        assert recommended(found) == LOW
        data = await checkpoint(client)
        assert data is not None
        assert data["containers"]["app"]["cpu"]["samples"] == 12
    except BaseException:
        for replica in managers:
            sys.stderr.write(f"--- {replica.log.name} ---\n{replica.output()}\n")
        raise
    finally:
        for replica in managers:
            replica.stop()
        await client.close()


# ---- under the chart's RBAC ---------------------------------------------------------------------

SERVICE_ACCOUNT = "system:serviceaccount:koordinator-system:koord-manager"
_RBAC = {
    "ClusterRole": res.CLUSTER_ROLES,
    "ClusterRoleBinding": res.CLUSTER_ROLE_BINDINGS,
    "Role": res.ROLES,
    "RoleBinding": res.ROLE_BINDINGS,
}


def service_account_kubeconfig(envtest: Envtest, workdir: Path) -> Path:
    """A kubeconfig whose client certificate names koord-manager's ServiceAccount (RBAC
    matches a ServiceAccount subject by that user name)."""
    cert, key = client_certificate(
        envtest.plane.creds, SERVICE_ACCOUNT, "system:serviceaccounts", workdir / "koord-manager"
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "envtest",
                "cluster": {"server": envtest.url, "certificate-authority": str(envtest.ca_file)},
            }
        ],
        "users": [
            {"name": "koord-manager", "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "koord-manager"}}],
        "current-context": "envtest",
    }
    path = workdir / "koord-manager.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_the_charts_grants_are_all_the_recommendation_controller_needs(envtest_faults, helm, tmp_path):
    docs = objects(helm, "manager.recommendation.enabled=true")
    assert "--controllers=*,recommendation" in container_args(docs)["koord-manager"]
    client = await prepared(envtest_faults)
    running: Replica | None = None
    try:
        for kind, resource in _RBAC.items():
            for name, doc in by_kind(docs, kind).items():
                if name.startswith("koord-manager"):
                    await client.apply(resource, doc, field_manager="chart", force=True)
        await create_cluster(client)
        first = await report(client, 0, "200m", "100Mi")
        running = manager(
            envtest_faults, tmp_path, "chart", service_account_kubeconfig(envtest_faults, tmp_path)
        )
        await sampled(client, first)
        await sampled(client, await report(client, 1, "200m", "100Mi"))
        await becomes(client, LOW)
        await client.delete(res.DEPLOYMENTS, "web", NAMESPACE)
        await report(client, 2, "200m", "100Mi")

        async def target_gone() -> bool:
            return ready(await status(client)).get("reason") == "TargetNotFound"

        await wait_for(target_gone)
        assert "forbidden" not in running.output(everything=True).lower(), running.output()
    except BaseException:
        if running is not None:
            sys.stderr.write(f"--- {running.log.name} ---\n{running.output()}\n")
        raise
    finally:
        if running is not None:
            running.stop()
        await client.close()
