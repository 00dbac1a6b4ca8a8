"""The states informer against the strict fake apiserver: Node, NodeSLO (merged onto the
defaults; an invalid one refused, the last good one kept) and NodeMetric spec; callbacks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from koordinator.kube import resources as res
from koordinator.kube.informer import InformerFactory
from koordlet.metrics import KoordletMetrics
from koordlet.statesinformer.callbacks import CallbackType
from koordlet.statesinformer.informer import StatesInformer
from koordlet.statesinformer.standalone import CgroupPodsSource, describe_node, host_applications
from koordlet.system.cgroup.cgroupfs import CgroupFS
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.polling import eventually
from testsupport.fake import FakeApiServer

CRDS = Path(__file__).resolve().parents[3] / "crds"
NODE = "node-1"


class Pods:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    async def get_pods(self) -> list[dict[str, Any]]:
        return self.pods


def suppress_percent(states: StatesInformer) -> int | None:
    threshold = states.get_node_slo().resource_used_threshold_with_be
    assert threshold is not None
    return threshold.cpu_suppress_threshold_percent


def _nodeslo(threshold: int) -> dict[str, Any]:
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeSLO",
        "metadata": {"name": NODE},
        "spec": {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": threshold}},
    }


async def test_node_nodeslo_and_callbacks(fake_host_v1: FakeHost):
    async with FakeApiServer() as fake:
        for name in ("slo.koordinator.sh_nodeslos.yaml", "slo.koordinator.sh_nodemetrics.yaml"):
            fake.register_crd(CRDS / name)
        fake.create(
            res.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {"a": "1"}}}
        )
        fake.create(res.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "other"}})
        fake.create(res.NODE_SLOS, _nodeslo(50))
        async with fake.client() as client:
            states = StatesInformer(
                NODE,
                CgroupFS.detect(fake_host_v1.paths),
                Pods([make_pod("web").build()]),
                factory=InformerFactory(client, freeze_after_sync=False),
                enable_pleg=False,
            )
            seen: list[str] = []
            states.register_callback(CallbackType.NODE_SLO_SPEC, "test", lambda s: seen.append("slo"))
            await states.start()
            async with asyncio.timeout(10):
                await states.wait_synced()
            assert states.has_synced
            node = states.get_node()
            assert node is not None
            assert node["metadata"]["name"] == NODE
            slo = states.get_node_slo()
            threshold = slo.resource_used_threshold_with_be
            assert threshold is not None
            assert threshold.cpu_suppress_threshold_percent == 50
            assert threshold.memory_evict_threshold_percent == 70  # merged default
            assert not states.node_metric_exists
            current = fake.get(res.NODE_SLOS, NODE)
            fake.update(res.NODE_SLOS, {**current, "spec": _nodeslo(40)["spec"]})
            await eventually(lambda: suppress_percent(states) == 40)
            await eventually(lambda: len(seen) >= 2)
            fake.create(
                res.NODE_METRICS,
                {
                    "apiVersion": "slo.koordinator.sh/v1alpha1",
                    "kind": "NodeMetric",
                    "metadata": {"name": NODE},
                    "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 30}},
                },
            )
            await eventually(lambda: states.node_metric_exists)
            spec = states.get_node_metric_spec()
            assert spec is not None
            assert spec.metric_collect_policy is not None
            assert spec.metric_collect_policy.report_interval_seconds == 30
            await states.stop()


async def test_batch_and_mid_resources_are_recorded(fake_host_v1: FakeHost):
    batch = make_pod("batch").qos("BE").kube_qos("BestEffort")
    batch.container(
        "main",
        cid="containerd://" + "a" * 64,
        requests={"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "1Gi"},
        limits={"kubernetes.io/batch-cpu": "4000", "kubernetes.io/batch-memory": "2Gi"},
    )
    batch.container("pending", requests={"kubernetes.io/batch-cpu": "500"})  # no status yet
    mid = make_pod("mid").container(
        "app", cid="containerd://" + "b" * 64, requests={"kubernetes.io/mid-cpu": "1500"}
    )
    web = make_pod("web").container("app", cid="containerd://" + "c" * 64, requests={"cpu": "1"})
    pods = Pods([batch.build(), mid.build(), web.build()])
    registry = CollectorRegistry()
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE},
        "status": {
            "allocatable": {
                "cpu": "8",
                "kubernetes.io/batch-cpu": "6500",
                "kubernetes.io/batch-memory": "12Gi",
            }
        },
    }

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"koordlet_{name}", {"node": NODE, **labels})

    def container(resource: str, unit: str, pod: str, cid: str, name: str) -> dict[str, str]:
        owner = {"pod_uid": make_pod(pod).uid, "pod_name": pod, "pod_namespace": "default"}
        return {"resource": resource, "unit": unit, **owner, "container_id": cid, "container_name": name}

    async with FakeApiServer() as fake:
        for name in ("slo.koordinator.sh_nodeslos.yaml", "slo.koordinator.sh_nodemetrics.yaml"):
            fake.register_crd(CRDS / name)
        fake.create(res.NODES, node)
        async with fake.client() as client:
            states = StatesInformer(
                NODE,
                CgroupFS.detect(fake_host_v1.paths),
                pods,
                factory=InformerFactory(client, freeze_after_sync=False),
                metrics=KoordletMetrics(registry, NODE),
                enable_pleg=False,
            )
            await states.start()
            async with asyncio.timeout(10):
                await states.wait_synced()
            allocatable = "node_resource_allocatable"
            assert value(allocatable, resource="kubernetes.io/batch-cpu", unit="integer") == 6500
            assert value(allocatable, resource="kubernetes.io/batch-memory", unit="byte") == 12 * (1 << 30)
            assert value(allocatable, resource="kubernetes.io/mid-cpu", unit="integer") == 0  # absent
            assert value(allocatable, resource="kubernetes.io/mid-memory", unit="byte") == 0
            main = ("batch", "containerd://" + "a" * 64, "main")
            requests, limits = "container_resource_requests", "container_resource_limits"
            assert value(requests, **container("kubernetes.io/batch-cpu", "integer", *main)) == 2000
            assert value(requests, **container("kubernetes.io/batch-memory", "byte", *main)) == 1 << 30
            assert value(limits, **container("kubernetes.io/batch-cpu", "integer", *main)) == 4000
            assert value(limits, **container("kubernetes.io/batch-memory", "byte", *main)) == 2 << 30
            app = ("mid", "containerd://" + "b" * 64, "app")
            assert value(requests, **container("kubernetes.io/mid-cpu", "integer", *app)) == 1500
            families = {f.name: f for f in registry.collect()}
            # the pending container (no status) and the pod without batch or mid resources: nothing
            assert len(families["koordlet_container_resource_requests"].samples) == 3
            assert len(families["koordlet_container_resource_limits"].samples) == 2
            # the Node changes; the batch pod goes away
            current = fake.get(res.NODES, NODE)
            current["status"]["allocatable"]["kubernetes.io/batch-cpu"] = "3"
            fake.update(res.NODES, current, subresource="status")
            await eventually(
                lambda: value(allocatable, resource="kubernetes.io/batch-cpu", unit="integer") == 3
            )
            pods.pods = [mid.build(), web.build()]
            assert await states.pods.sync()
            families = {f.name: f for f in registry.collect()}
            assert [
                s.labels["pod_name"] for s in families["koordlet_container_resource_requests"].samples
            ] == ["mid"]
            assert families["koordlet_container_resource_limits"].samples == []
            await states.stop()


def test_an_invalid_nodeslo_is_refused_and_the_last_good_one_stays(fake_host_v1):
    states = StatesInformer(
        NODE, CgroupFS.detect(fake_host_v1.paths), Pods([]), standalone_node={"metadata": {"name": NODE}}
    )
    states._on_node_slo(_nodeslo(55))
    assert suppress_percent(states) == 55
    states._on_node_slo(_nodeslo(140))  # out of the CRD's 0-100 range
    assert suppress_percent(states) == 55
    broken = {"metadata": {"name": NODE}, "spec": {"resourceUsedThresholdWithBE": {"enable": "yes"}}}
    states._on_node_slo(broken)
    assert suppress_percent(states) == 55
    states._on_node_slo_deleted(None)  # deleted: back to the defaults
    assert suppress_percent(states) == 65


def test_needs_an_apiserver_or_a_standalone_node(fake_host_v1):
    with pytest.raises(ValueError, match="apiserver"):
        StatesInformer(NODE, CgroupFS.detect(fake_host_v1.paths), Pods([]))


async def test_standalone_discovers_pods_from_cgroups(tmp_path):
    host = FakeHost(tmp_path, "v2")
    uid = "11111111-2222-3333-4444-555555555555"
    host.add_pod("BestEffort", uid, ["containerd://" + "c" * 64])
    host.make_cgroup("system.slice")
    cgroups = CgroupFS.detect(host.paths)
    pods = await CgroupPodsSource(cgroups).get_pods()
    assert len(pods) == 1
    assert pods[0]["metadata"]["uid"] == uid
    assert pods[0]["status"]["qosClass"] == "BestEffort"
    assert pods[0]["status"]["containerStatuses"][0]["containerID"] == "containerd://" + "c" * 64
    states = StatesInformer(
        "me",
        cgroups,
        CgroupPodsSource(cgroups),
        standalone_node=describe_node(cgroups, "me"),
        enable_pleg=False,
    )
    await states.pods.sync()
    [meta] = states.get_all_pods()
    assert meta.containers[0].cgroup_dir == host.container_dir("BestEffort", uid, "containerd://" + "c" * 64)
    assert [a.name for a in host_applications(cgroups)] == ["system.slice"]
    assert describe_node(cgroups, "me")["status"]["capacity"]["cpu"].isdigit()
