"""The NodeResourceTopology reporter asks the apiserver only when it has something to write
(or to repair): an unchanged sync makes no request, a change one GET and one write, a
conflict one more round, and a periodic resync reads the object back and repairs drift.
Requests are counted in the fake apiserver's request log."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from koordinator.api.extension.numa import ANNOTATION_RESOURCE_STATUS
from koordinator.api.extension.topology import ANNOTATION_CPU_SHARED_POOLS
from koordinator.kube import resources as res
from koordlet.statesinformer.nrt import RESYNC_SECONDS, KubeletCPUState, NodeTopologyReporter
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system.topology import NodeCPUInfo, NUMANodeInfo, read_cpu_basic_info, read_cpu_topology
from tests.fakes.pods import make_pod
from testsupport.fake import FakeApiServer, Fault

CRD = Path(__file__).resolve().parents[3] / "crds" / "topology.node.k8s.io_noderesourcetopologies.yaml"


@pytest.fixture
def cpu_info(fake_host_v1) -> NodeCPUInfo:
    fake_host_v1.set_cpu_topology(sockets=1, cores_per_socket=2, threads_per_core=2)
    topology = read_cpu_topology(fake_host_v1.paths)
    return NodeCPUInfo(topology, read_cpu_basic_info(fake_host_v1.paths, topology), "7ff")


class _States:
    node_name = "node-1"

    def __init__(self) -> None:
        self.pods: list[PodMeta] = []

    def get_node(self) -> Mapping[str, Any] | None:
        return {"metadata": {"name": "node-1", "uid": "node-uid"}}

    def get_all_pods(self) -> list[PodMeta]:
        return list(self.pods)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _nrt_requests(server: FakeApiServer) -> Counter[str]:
    """The NRT requests since the last call, by method."""
    seen = Counter(r.method for r in server.requests if "noderesourcetopologies" in r.path)
    server.requests.clear()
    return seen


async def test_unchanged_syncs_make_no_request(fake_host_v1, cpu_info):
    states, clock = _States(), _Clock()
    async with FakeApiServer() as server, server.client() as client:
        server.register_crd(CRD)
        server.record_requests = True
        reporter = NodeTopologyReporter(
            states,
            lambda: cpu_info,
            lambda: [NUMANodeInfo(0, 8 << 30, 1 << 30)],
            KubeletCPUState,
            client=client,
            report=True,
            clock=clock,
        )
        for _ in range(20):  # a minute at the default interval, nothing changes
            assert await reporter.sync()
            clock.now += 3
        assert _nrt_requests(server) == {"GET": 1, "POST": 1}  # created once

        # a pod gets a cpuset: the pools change, one GET and one update
        pod = make_pod("lsr").qos("LSR").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"1"}')
        meta = pod_meta(pod.build(), fake_host_v1.layout)
        assert meta is not None
        states.pods = [meta]
        for _ in range(5):
            assert await reporter.sync()
            clock.now += 3
        assert _nrt_requests(server) == {"GET": 1, "PUT": 1}
        nrt = server.get(res.NODE_RESOURCE_TOPOLOGIES, "node-1")
        assert '"cpuset":"0,2-3"' in nrt["metadata"]["annotations"][ANNOTATION_CPU_SHARED_POOLS]

        # the resync reads it back: nothing to repair, no write
        clock.now += RESYNC_SECONDS
        assert await reporter.sync()
        assert _nrt_requests(server) == {"GET": 1}

        # someone deleted it: the next resync recreates it, no sooner
        server.delete(res.NODE_RESOURCE_TOPOLOGIES, "node-1")
        assert await reporter.sync()
        assert _nrt_requests(server) == {}
        clock.now += RESYNC_SECONDS
        assert await reporter.sync()
        assert _nrt_requests(server) == {"GET": 1, "POST": 1}
        nrt = server.get(res.NODE_RESOURCE_TOPOLOGIES, "node-1")
        assert '"cpuset":"0,2-3"' in nrt["metadata"]["annotations"][ANNOTATION_CPU_SHARED_POOLS]


async def test_a_conflict_is_retried_and_a_failure_retried_next_sync(fake_host_v1, cpu_info):
    states, clock = _States(), _Clock()
    async with FakeApiServer() as server, server.client() as client:
        server.register_crd(CRD)
        reporter = NodeTopologyReporter(
            states, lambda: cpu_info, list, KubeletCPUState, client=client, report=True, clock=clock
        )
        assert await reporter.sync()
        server.record_requests = True
        meta = pod_meta(
            make_pod("lsr").qos("LSR").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"1"}').build(),
            fake_host_v1.layout,
        )
        assert meta is not None
        states.pods = [meta]
        # another writer got in between: the update is refused once, read again, written
        server.inject(Fault(status=409, method="PUT", path="noderesourcetopologies", reason="Conflict"))
        assert await reporter.sync()
        assert _nrt_requests(server) == {"GET": 2, "PUT": 2}
        assert (
            '"cpuset":"0,2-3"'
            in server.get(res.NODE_RESOURCE_TOPOLOGIES, "node-1")["metadata"]["annotations"][
                ANNOTATION_CPU_SHARED_POOLS
            ]
        )

        # an update that fails is tried again on the next sync, not after the resync period
        states.pods = []
        server.inject(Fault(status=409, method="PUT", path="noderesourcetopologies", times=3))
        assert await reporter.sync()
        assert _nrt_requests(server) == {"GET": 3, "PUT": 3}
        assert await reporter.sync()
        assert _nrt_requests(server) == {"GET": 1, "PUT": 1}
        assert (
            '"cpuset":"0-3"'
            in server.get(res.NODE_RESOURCE_TOPOLOGIES, "node-1")["metadata"]["annotations"][
                ANNOTATION_CPU_SHARED_POOLS
            ]
        )
