"""The NodeResourceTopology reports the kubelet's running configuration (/configz, asked
of a fake kubelet through the production client): the CPU manager policy, its options and
reserved CPUs, the topology policy, and the static policy's allocations; the last good
configuration survives a kubelet that stops answering; before any answer the checkpoint's
policy stands; ``--disable-query-kubelet-config`` neither asks nor reports the kubelet."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from koordinator.api.extension.numa import ANNOTATION_RESOURCE_STATUS
from koordinator.api.extension.topology import (
    ANNOTATION_CPU_SHARED_POOLS,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_POD_CPU_ALLOCS,
)
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordlet.statesinformer.kubelet import KubeletClient, KubeletEndpoint
from koordlet.statesinformer.nrt import KubeletCPUState, NodeTopologyReporter
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system.topology import NodeCPUInfo, read_cpu_basic_info, read_cpu_topology
from tests.fakes.pods import make_pod
from testsupport.fake import FakeApiServer

CRD = Path(__file__).resolve().parents[3] / "crds" / "topology.node.k8s.io_noderesourcetopologies.yaml"
STATIC = {
    "cpuManagerPolicy": "static",
    "cpuManagerPolicyOptions": {"full-pcpus-only": "true"},
    "reservedSystemCPUs": "0",
    "topologyManagerPolicy": "single-numa-node",
    "topologyManagerScope": "pod",
}


class FakeKubelet:
    """``/configz`` answering ``config``, or ``status`` when it is not 200; every request
    is recorded."""

    def __init__(self) -> None:
        self.config: dict[str, Any] = dict(STATIC)
        self.status = 200
        self.requests: list[str] = []
        self.url = ""

    async def configz(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        if self.status != 200:
            return web.Response(status=self.status, text="kubelet restarting")
        return web.json_response({"kubeletconfig": self.config})


@pytest.fixture
async def kubelet() -> AsyncIterator[FakeKubelet]:
    fake = FakeKubelet()
    app = web.Application()
    app.router.add_get("/configz", fake.configz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    yield fake
    await runner.cleanup()


@pytest.fixture
async def configz(kubelet: FakeKubelet) -> AsyncIterator[KubeletClient]:
    """The production kubelet client, talking to the fake kubelet."""
    client = KubeletClient(KubeletEndpoint(kubelet.url))
    yield client
    await client.close()


@pytest.fixture
def cpu_info(fake_host_v1) -> NodeCPUInfo:
    # 2 sockets x 2 cores x 2 threads: node 0 = cpus 0,1,4,5; node 1 = cpus 2,3,6,7
    fake_host_v1.set_cpu_topology(sockets=2, cores_per_socket=2, threads_per_core=2)
    topology = read_cpu_topology(fake_host_v1.paths)
    return NodeCPUInfo(topology, read_cpu_basic_info(fake_host_v1.paths, topology), "7ff")


class _States:
    node_name = "node-1"

    def __init__(self, pods: list[PodMeta]) -> None:
        self.pods = pods

    def get_node(self) -> Mapping[str, Any] | None:
        return {"metadata": {"name": "node-1", "uid": "node-uid"}}

    def get_all_pods(self) -> list[PodMeta]:
        return list(self.pods)


@pytest.fixture
def pods(fake_host_v1) -> list[PodMeta]:
    """A kube-Guaranteed pod the kubelet pinned to CPU 3, and an LSR pod with a cpuset."""
    builders = [
        make_pod("pinned").kube_qos("Guaranteed"),
        make_pod("lsr").qos("LSR").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"2"}'),
    ]
    metas = [pod_meta(b.build(), fake_host_v1.layout) for b in builders]
    return [m for m in metas if m is not None]


def _reporter(
    configz: KubeletClient,
    client: ApiClient | None,
    cpu_info: NodeCPUInfo,
    pods: list[PodMeta],
    *,
    query: bool = True,
) -> NodeTopologyReporter:
    """A reporter asking the fake kubelet; the checkpoint (static) pins the first pod to CPU 3."""
    checkpoint = KubeletCPUState("static", assignments={pods[0].uid: frozenset({3})})
    return NodeTopologyReporter(
        _States(pods),
        lambda: cpu_info,
        list,
        lambda: checkpoint,
        client=client,
        report=client is not None,
        kubelet_config=configz.get_configz,
        query_kubelet_config=query,
    )


def _annotation(nrt: Mapping[str, Any], key: str) -> Any:
    """An annotation of an NRT read from the apiserver, or of the reporter's desired NRT."""
    return orjson.loads((nrt.get("metadata") or nrt)["annotations"][key])


async def test_the_nrt_reports_the_kubelets_configuration(kubelet, configz, cpu_info, pods):
    async with FakeApiServer() as server, server.client() as client:
        server.register_crd(CRD)
        reporter = _reporter(configz, client, cpu_info, pods)
        assert await reporter.sync()
        nrt = server.get(res.NODE_RESOURCE_TOPOLOGIES, "node-1")
    assert kubelet.requests == ["/configz"]
    assert _annotation(nrt, ANNOTATION_KUBELET_CPU_MANAGER_POLICY) == {
        "policy": "static",
        "options": {"full-pcpus-only": "true"},
        "reservedCPUs": "0",
    }
    assert nrt["topologyPolicies"] == ["SingleNUMANodePodLevel"]
    assert _annotation(nrt, ANNOTATION_POD_CPU_ALLOCS) == [
        {
            "namespace": "default",
            "name": "pinned",
            "uid": pods[0].uid,
            "cpuset": "3",
            "managedByKubelet": True,
        }
    ]
    # the pools lose the pinned CPU and the LSR cpuset, not the kubelet's reserved CPU 0
    # (upstream keeps it for Burstable pods)
    pools = _annotation(nrt, ANNOTATION_CPU_SHARED_POOLS)
    assert pools == [{"socket": 0, "node": 0, "cpuset": "0-1,4-5"}, {"socket": 1, "node": 1, "cpuset": "6-7"}]
    assert reporter.cpu_manager_policy() == "static"


async def test_the_static_reserved_cpus_of_kube_and_system_reserved(kubelet, configz, cpu_info, pods):
    kubelet.config = {
        "cpuManagerPolicy": "static",
        "kubeReserved": {"cpu": "1"},
        "systemReserved": {"cpu": "1"},
    }
    reporter = _reporter(configz, None, cpu_info, pods)
    assert await reporter.sync()
    assert reporter.current is not None
    # two CPUs picked as the kubelet picks them: the threads of the first core
    policy = _annotation(reporter.current, ANNOTATION_KUBELET_CPU_MANAGER_POLICY)
    assert policy == {"policy": "static", "reservedCPUs": "0,4"}
    assert reporter.current["topologyPolicies"] == ["None"]


async def test_a_kubelet_that_stops_answering_leaves_the_last_configuration(
    kubelet, configz, cpu_info, pods, caplog
):
    reporter = _reporter(configz, None, cpu_info, pods)
    assert await reporter.sync()
    reported = reporter.current
    kubelet.status = 503
    with caplog.at_level(logging.WARNING, logger="koordlet.statesinformer.nrt"):
        for _ in range(3):
            assert await reporter.sync()
    assert len(kubelet.requests) == 4  # asked on every sync
    assert reporter.current == reported
    warnings = [r for r in caplog.records if r.name == "koordlet.statesinformer.nrt"]
    assert len(warnings) == 1  # once per outage
    assert "the last configuration read" in warnings[0].getMessage()
    # it answers again, now with the none policy: no allocations, no reserved CPUs
    kubelet.status = 200
    kubelet.config = {"cpuManagerPolicy": "none", "topologyManagerPolicy": "none"}
    assert await reporter.sync()
    assert reporter.current is not None
    assert _annotation(reporter.current, ANNOTATION_KUBELET_CPU_MANAGER_POLICY) == {"policy": "none"}
    assert _annotation(reporter.current, ANNOTATION_POD_CPU_ALLOCS) == []
    assert reporter.cpu_manager_policy() == "none"


async def test_before_the_kubelet_answers_the_checkpoint_policy_stands(kubelet, configz, cpu_info, pods):
    kubelet.status = 500
    reporter = _reporter(configz, None, cpu_info, pods)
    assert reporter.cpu_manager_policy() == "static"  # before the first sync too
    assert await reporter.sync()
    assert reporter.current is not None
    assert _annotation(reporter.current, ANNOTATION_KUBELET_CPU_MANAGER_POLICY) == {"policy": "static"}
    assert [a["name"] for a in _annotation(reporter.current, ANNOTATION_POD_CPU_ALLOCS)] == ["pinned"]
    assert reporter.current["topologyPolicies"] == ["None"]


async def test_disabled_query_neither_asks_nor_reports_the_kubelet(kubelet, configz, cpu_info, pods):
    async with FakeApiServer() as server, server.client() as client:
        server.register_crd(CRD)
        reporter = _reporter(configz, client, cpu_info, pods, query=False)
        assert reporter.cpu_manager_policy() == ""
        assert await reporter.sync()
        nrt = server.get(res.NODE_RESOURCE_TOPOLOGIES, "node-1")
    assert kubelet.requests == []
    assert _annotation(nrt, ANNOTATION_KUBELET_CPU_MANAGER_POLICY) == {}
    assert _annotation(nrt, ANNOTATION_POD_CPU_ALLOCS) == []
    assert nrt["topologyPolicies"] == ["None"]
    # the CPU the kubelet pinned stays in the pools: the scheduler may take it over
    pools = _annotation(nrt, ANNOTATION_CPU_SHARED_POOLS)
    assert pools == [
        {"socket": 0, "node": 0, "cpuset": "0-1,4-5"},
        {"socket": 1, "node": 1, "cpuset": "3,6-7"},
    ]
    assert reporter.cpu_manager_policy() == ""


async def test_reserved_cpus_the_kubelet_could_not_reserve_are_left_out(
    kubelet, configz, cpu_info, pods, caplog
):
    """As upstream: logged (here once while it lasts), the policy still reported."""
    kubelet.config = {"cpuManagerPolicy": "static"}  # neither reservedSystemCPUs nor a reserved CPU
    reporter = _reporter(configz, None, cpu_info, pods)
    with caplog.at_level(logging.ERROR, logger="koordlet.statesinformer.nrt"):
        for _ in range(3):
            assert await reporter.sync()
    assert reporter.current is not None
    assert _annotation(reporter.current, ANNOTATION_KUBELET_CPU_MANAGER_POLICY) == {"policy": "static"}
    assert [a["name"] for a in _annotation(reporter.current, ANNOTATION_POD_CPU_ALLOCS)] == ["pinned"]
    errors = [r.getMessage() for r in caplog.records if r.name == "koordlet.statesinformer.nrt"]
    assert len(errors) == 1
    assert "unable to determine reserved CPU resources" in errors[0]
