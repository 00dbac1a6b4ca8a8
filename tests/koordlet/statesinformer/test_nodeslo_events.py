"""The koordlet tells, on its Node, what it did with the NodeSLO: a refused NodeSLO (the
last good spec kept) and a deleted one (the defaults back in force) each leave a Warning
Event naming what happened, written to the strict fake apiserver."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer import InformerFactory
from koordlet.statesinformer.informer import StatesInformer
from koordlet.system.cgroup.cgroupfs import CgroupFS
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.statesinformer.test_states_informer import NODE, Pods, suppress_percent
from tests.polling import eventually
from testsupport.fake import FakeApiServer

CRDS = Path(__file__).resolve().parents[3] / "crds"


def unvalidated_nodeslo_crd() -> dict[str, Any]:
    """The NodeSLO CRD with its schema reduced to "any object": what a cluster with an
    old or hand-edited CRD stores, so an invalid spec reaches the koordlet."""
    crd: dict[str, Any] = yaml.safe_load((CRDS / "slo.koordinator.sh_nodeslos.yaml").read_text())
    anything = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    for version in crd["spec"]["versions"]:
        version["schema"] = {"openAPIV3Schema": anything}
    return crd


def nodeslo_spec(threshold: int) -> dict[str, Any]:
    return {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": threshold}}


async def synced_states(host: FakeHost, client: ApiClient) -> StatesInformer:
    """The koordlet's states informer for ``NODE``, recording its Events, once synced."""
    states = StatesInformer(
        NODE,
        CgroupFS.detect(host.paths),
        Pods([make_pod("web").build()]),
        factory=InformerFactory(client, freeze_after_sync=False),
        enable_pleg=False,
        recorder=EventRecorder(client, "koordlet", NODE),
    )
    await states.start()
    async with asyncio.timeout(10):
        await states.wait_synced()
    return states


def node_events(fake: FakeApiServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in fake.list_objects(res.EVENTS, "default") if e["reason"] == reason]


async def test_refused_and_deleted_nodeslo_leave_warning_events_on_the_node(fake_host_v1: FakeHost):
    async with FakeApiServer() as fake:
        fake.register_crd(unvalidated_nodeslo_crd())
        fake.register_crd(CRDS / "slo.koordinator.sh_nodemetrics.yaml")
        node = fake.create(res.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        good = fake.create(
            res.NODE_SLOS,
            {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": NODE}},
        )
        good = fake.update(res.NODE_SLOS, {**good, "spec": nodeslo_spec(50)})
        async with fake.client() as client:
            states = await synced_states(fake_host_v1, client)
            assert suppress_percent(states) == 50
            good_version = good["metadata"]["resourceVersion"]

            bad = fake.update(res.NODE_SLOS, {**good, "spec": nodeslo_spec(140)})
            await eventually(lambda: node_events(fake, "NodeSLORefused"))
            assert suppress_percent(states) == 50  # the last good spec stays
            [refused] = node_events(fake, "NodeSLORefused")
            assert refused["type"] == "Warning"
            reference = refused["involvedObject"]
            assert (reference["kind"], reference["name"]) == ("Node", NODE)
            assert reference["uid"] == node["metadata"]["uid"]
            assert refused["source"] == {"component": "koordlet", "host": NODE}
            assert refused["message"] == (
                f"NodeSLO {NODE} at resourceVersion {bad['metadata']['resourceVersion']} refused, "
                f"keeping the last good spec (NodeSLO {NODE} at resourceVersion {good_version}): "
                "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent: Invalid value: 140: "
                "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent in body should be less "
                "than or equal to 100"
            )

            fake.delete(res.NODE_SLOS, NODE)
            await eventually(lambda: node_events(fake, "NodeSLODeleted"))
            assert suppress_percent(states) == 65  # upstream's default
            [deleted] = node_events(fake, "NodeSLODeleted")
            assert deleted["type"] == "Warning"
            assert deleted["involvedObject"]["kind"] == "Node"
            assert deleted["involvedObject"]["name"] == NODE
            assert deleted["message"] == (
                f"NodeSLO {NODE} was deleted: the koordlet reverted to the default NodeSLO spec "
                f"(the spec of NodeSLO {NODE} at resourceVersion {good_version} was in force until now)"
            )
            await states.stop()


async def test_a_refusal_before_any_good_nodeslo_says_the_defaults_stay(fake_host_v1: FakeHost):
    async with FakeApiServer() as fake:
        fake.register_crd(unvalidated_nodeslo_crd())
        fake.register_crd(CRDS / "slo.koordinator.sh_nodemetrics.yaml")
        async with fake.client() as client:
            states = await synced_states(fake_host_v1, client)
            broken = {"resourceUsedThresholdWithBE": {"enable": "yes"}}
            fake.create(
                res.NODE_SLOS,
                {
                    "apiVersion": "slo.koordinator.sh/v1alpha1",
                    "kind": "NodeSLO",
                    "metadata": {"name": NODE},
                    "spec": broken,
                },
            )
            await eventually(lambda: node_events(fake, "NodeSLORefused"))
            [refused] = node_events(fake, "NodeSLORefused")
            # no Node object yet: referenced as the kubelet references its node
            assert refused["involvedObject"]["uid"] == NODE
            assert "keeping the default spec (no valid NodeSLO seen yet)" in refused["message"]
            assert "spec.resourceUsedThresholdWithBE.enable" in refused["message"]
            assert suppress_percent(states) == 65
            fake.delete(res.NODE_SLOS, NODE)  # nothing was in force: nothing reverts
            await asyncio.sleep(0.3)
            assert node_events(fake, "NodeSLODeleted") == []
            await states.stop()
