"""NodeResourceTopology content: share pools, CPU topology and basic info annotations, zones."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from koordinator.api.cpuset import format_cpuset, parse_cpuset
from koordinator.api.extension.node import ANNOTATION_NODE_RESERVATION
from koordinator.api.extension.numa import ANNOTATION_RESOURCE_STATUS
from koordinator.api.extension.topology import (
    ANNOTATION_BE_CPU_SHARED_POOLS,
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_SHARED_POOLS,
    ANNOTATION_CPU_TOPOLOGY,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
    ANNOTATION_POD_CPU_ALLOCS,
)
from koordinator.kube import resources as res
from koordlet.metrics import KoordletMetrics
from koordlet.statesinformer.nrt import (
    KubeletCPUState,
    NodeTopologyReporter,
    read_cpu_manager_state,
    topology_annotations,
    zones,
)
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system.topology import NodeCPUInfo, NUMANodeInfo, read_cpu_basic_info, read_cpu_topology
from tests.fakes.host import FakeHost
from tests.fakes.pods import PodBuilder, make_pod
from testsupport.fake import FakeApiServer

ROOT = Path(__file__).resolve().parents[3]
RESERVATION = ANNOTATION_NODE_RESERVATION
SYSTEM_QOS = ANNOTATION_NODE_SYSTEM_QOS_RESOURCE


@pytest.fixture
def cpu_info(fake_host_v1) -> NodeCPUInfo:
    # 2 sockets x 2 cores x 2 threads: node 0 = cpus 0,1,4,5; node 1 = cpus 2,3,6,7
    fake_host_v1.set_cpu_topology(sockets=2, cores_per_socket=2, threads_per_core=2)
    topology = read_cpu_topology(fake_host_v1.paths)
    return NodeCPUInfo(topology, read_cpu_basic_info(fake_host_v1.paths, topology), "7ff")


def _pods(host: FakeHost, *builders: PodBuilder) -> list[PodMeta]:
    metas = [pod_meta(b.build(), host.layout) for b in builders]
    return [m for m in metas if m is not None]


def test_share_pools_remove_pinned_and_reserved_cpus(fake_host_v1, cpu_info):
    lse = make_pod("lse").qos("LSE").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"0-1"}')
    lsr = make_pod("lsr").qos("LSR").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"2"}')
    static = make_pod("static").kube_qos("Guaranteed")
    ls = make_pod("ls").qos("LS")
    pods = _pods(fake_host_v1, lse, lsr, static, ls)
    kubelet = KubeletCPUState(
        "static", assignments={pods[2].uid: frozenset({3}), pods[3].uid: frozenset({6})}
    )
    node = {"node.koordinator.sh/reservation": '{"reservedCPUs":"7"}'}
    annotations = topology_annotations(cpu_info, pods, node, kubelet)
    ls_pools = orjson.loads(annotations[ANNOTATION_CPU_SHARED_POOLS])
    be_pools = orjson.loads(annotations[ANNOTATION_BE_CPU_SHARED_POOLS])
    # LS: minus LSE/LSR cpusets 0-2, kubelet-pinned 3 (not the LS pod's 6), reserved 7
    assert ls_pools == [{"socket": 0, "node": 0, "cpuset": "4-5"}, {"socket": 1, "node": 1, "cpuset": "6"}]
    # BE: only LSE cpusets are removed
    assert be_pools == [{"socket": 0, "node": 0, "cpuset": "4-5"}, {"socket": 1, "node": 1, "cpuset": "2,6"}]
    # the kubelet's allocations of the pods it manages: not the LS pod's (upstream's
    # calGuaranteedCpu leaves out LS/BE pods and pods with a resource-status cpuset)
    allocs = orjson.loads(annotations[ANNOTATION_POD_CPU_ALLOCS])
    assert allocs == [
        {
            "namespace": "default",
            "name": "static",
            "uid": pods[2].uid,
            "cpuset": "3",
            "managedByKubelet": True,
        }
    ]


class _States:
    node_name = "node-1"

    def __init__(self, pods: list[PodMeta], node: Mapping[str, Any]) -> None:
        self.pods = pods
        self.node = node

    def get_node(self) -> Mapping[str, Any] | None:
        return self.node

    def get_all_pods(self) -> list[PodMeta]:
        return list(self.pods)


async def test_sync_sets_the_share_pool_gauges(fake_host_v1, cpu_info):
    lse = make_pod("lse").qos("LSE").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"0-1"}')
    lsr = make_pod("lsr").qos("LSR").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"2"}')
    node = {"metadata": {"annotations": {"node.koordinator.sh/reservation": '{"reservedCPUs":"7"}'}}}
    states = _States(_pods(fake_host_v1, lse, lsr), node)
    registry = CollectorRegistry()
    reporter = NodeTopologyReporter(
        states,
        lambda: cpu_info,
        list,
        KubeletCPUState,
        client=None,
        report=False,
        metrics=KoordletMetrics(registry, "node-1"),
    )
    assert await reporter.sync()

    def cores(name: str) -> float | None:
        return registry.get_sample_value(f"koordlet_cpuset_{name}_cpu_cores", {"node": "node-1"})

    # 8 CPUs: LS pool minus the LSE/LSR cpusets 0-2 and reserved 7; BE pool minus LSE 0-1 and 7
    assert (cores("share_pool"), cores("be_share_pool")) == (4.0, 5.0)
    states.pods = []  # the pinned pods went away
    assert await reporter.sync()
    assert (cores("share_pool"), cores("be_share_pool")) == (7.0, 7.0)


def test_topology_and_basic_info(fake_host_v1, cpu_info):
    annotations = topology_annotations(cpu_info, [], {}, KubeletCPUState())
    detail = orjson.loads(annotations[ANNOTATION_CPU_TOPOLOGY])["detail"]
    assert [d["id"] for d in detail] == list(range(8))
    assert detail[4] == {"id": 4, "core": 0, "socket": 0, "node": 0}
    basic = orjson.loads(annotations[ANNOTATION_CPU_BASIC_INFO])
    assert basic == {
        "cpuModel": "Fake CPU @ 2.50GHz",
        "hyperThreadEnabled": True,
        "turboEnabled": False,
        "catL3CbmMask": "7ff",
        "vendorID": "GenuineIntel",
    }


def test_malformed_node_annotation_does_not_break_the_report(fake_host_v1, cpu_info):
    annotations = topology_annotations(
        cpu_info, [], {"node.koordinator.sh/reservation": "{broken"}, KubeletCPUState()
    )
    pools = orjson.loads(annotations[ANNOTATION_CPU_SHARED_POOLS])
    assert sum(len(p["cpuset"]) for p in pools) > 0


def test_zones(cpu_info):
    out = zones(cpu_info, [NUMANodeInfo(0, 8 << 30, 1 << 30)])
    assert [z["name"] for z in out] == ["node-0", "node-1"]
    assert out[0]["resources"][0] == {"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"}
    assert out[0]["resources"][1]["capacity"] == str(8 << 30)
    assert len(out[1]["resources"]) == 1


CPU_MANAGER_STATES = {
    # what the kubelet writes with --cpu-manager-policy=static before any pod holds
    # exclusive CPUs: the node is static although no CPU is assigned yet
    "static-no-entries": (
        '{"policyName":"static","defaultCpuSet":"0-7","checksum":1}',
        KubeletCPUState("static"),
    ),
    "static-with-entries": (
        '{"policyName":"static","defaultCpuSet":"0-1","entries":{"u1":{"c":"2-3","d":"5"}},"checksum":2}',
        KubeletCPUState("static", assignments={"u1": frozenset({2, 3, 5})}),
    ),
    "none": ('{"policyName":"none","defaultCpuSet":"","checksum":3}', KubeletCPUState("none")),
    "no-policy-name": ('{"defaultCpuSet":"0-7"}', KubeletCPUState("none")),
    "malformed-entry": (
        '{"policyName":"static","entries":{"u1":{"c":"x-"},"u2":["2"],"u3":{"c":"4"}}}',
        KubeletCPUState("static", assignments={"u1": frozenset(), "u3": frozenset({4})}),
    ),
    "corrupt": ("garbage", KubeletCPUState("none")),
    "not-an-object": ('["static"]', KubeletCPUState("none")),
}


@pytest.mark.parametrize(("content", "expected"), CPU_MANAGER_STATES.values(), ids=list(CPU_MANAGER_STATES))
def test_cpu_manager_state(tmp_path, content, expected):
    path = tmp_path / "cpu_manager_state"
    path.write_text(content)
    assert read_cpu_manager_state(path) == expected


def test_a_missing_cpu_manager_state_is_the_none_policy(tmp_path):
    assert read_cpu_manager_state(tmp_path / "missing") == KubeletCPUState("none")


@pytest.mark.parametrize("name", ["static-no-entries", "none"])
def test_the_reported_cpu_manager_policy_is_the_checkpoints(tmp_path, cpu_info, name):
    path = tmp_path / "cpu_manager_state"
    path.write_text(CPU_MANAGER_STATES[name][0])
    annotations = topology_annotations(cpu_info, [], {}, read_cpu_manager_state(path))
    # upstream's KubeletCPUManagerPolicy leaves empty options and reserved CPUs out
    policy = orjson.loads(annotations[ANNOTATION_KUBELET_CPU_MANAGER_POLICY])
    assert policy == {"policy": name.split("-")[0]}
    assert orjson.loads(annotations[ANNOTATION_POD_CPU_ALLOCS]) == []


MALFORMED_NODE_ANNOTATIONS = {
    # each annotation is read on its own: one malformed, the other's CPUs still leave the pools
    "malformed-reservation": (
        {RESERVATION: "{broken", SYSTEM_QOS: '{"cpuset":"6-7"}'},
        [{"socket": 0, "node": 0, "cpuset": "0-1,4-5"}, {"socket": 1, "node": 1, "cpuset": "2-3"}],
    ),
    "reservation-with-a-number": (
        {RESERVATION: '{"reservedCPUs": 5}', SYSTEM_QOS: '{"cpuset":"6-7"}'},
        [{"socket": 0, "node": 0, "cpuset": "0-1,4-5"}, {"socket": 1, "node": 1, "cpuset": "2-3"}],
    ),
    "malformed-system-qos": (
        {RESERVATION: '{"reservedCPUs":"0"}', SYSTEM_QOS: "{broken"},
        [{"socket": 0, "node": 0, "cpuset": "1,4-5"}, {"socket": 1, "node": 1, "cpuset": "2-3,6-7"}],
    ),
}


@pytest.mark.parametrize(
    ("node", "pools"), MALFORMED_NODE_ANNOTATIONS.values(), ids=list(MALFORMED_NODE_ANNOTATIONS)
)
def test_node_annotations_are_read_independently_for_the_share_pools(cpu_info, node, pools):
    annotations = topology_annotations(cpu_info, [], node, KubeletCPUState())
    assert orjson.loads(annotations[ANNOTATION_CPU_SHARED_POOLS]) == pools
    assert orjson.loads(annotations[ANNOTATION_BE_CPU_SHARED_POOLS]) == pools


async def test_the_report_keeps_the_zone_resources_koord_manager_wrote(fake_host_v1, cpu_info):
    """koord-manager writes NUMA-level batch-cpu/batch-memory into the zones; the koordlet's
    report updates its own cpu/memory entries and drops zones it no longer has, but keeps
    those entries (upstream's MergeZoneList), and does not rewrite an unchanged object."""
    batch = [
        {"name": name, "capacity": value, "allocatable": value, "available": value}
        for name, value in (("kubernetes.io/batch-cpu", "2500"), ("kubernetes.io/batch-memory", "1Gi"))
    ]
    async with FakeApiServer() as server, server.client() as client:
        server.register_crd(ROOT / "crds" / "topology.node.k8s.io_noderesourcetopologies.yaml")
        server.create(
            res.NODE_RESOURCE_TOPOLOGIES,
            {
                "metadata": {"name": "node-1"},
                "topologyPolicies": ["None"],
                "zones": [
                    {
                        "name": "node-0",
                        "type": "Node",
                        "resources": [
                            *batch,
                            {"name": "cpu", "capacity": "1", "allocatable": "1", "available": "1"},
                        ],
                    },
                    {"name": "node-9", "type": "Node", "resources": batch},
                ],
            },
        )
        reporter = NodeTopologyReporter(
            _States([], {}),
            lambda: cpu_info,
            lambda: [NUMANodeInfo(0, 8 << 30, 1 << 30)],
            KubeletCPUState,
            client=client,
            report=True,
        )
        assert await reporter.sync()
        written = server.get(res.NODE_RESOURCE_TOPOLOGIES, "node-1")
        by_zone = {z["name"]: {r["name"]: r["capacity"] for r in z["resources"]} for z in written["zones"]}
        assert set(by_zone) == {z["name"] for z in zones(cpu_info, [NUMANodeInfo(0, 8 << 30, 1 << 30)])}
        assert by_zone["node-0"]["kubernetes.io/batch-cpu"] == "2500"
        assert by_zone["node-0"]["kubernetes.io/batch-memory"] == "1Gi"
        assert by_zone["node-0"]["cpu"] != "1"
        names = [r["name"] for r in written["zones"][0]["resources"]]
        assert names == sorted(names)
        version = written["metadata"]["resourceVersion"]
        await reporter.sync()
        assert server.get(res.NODE_RESOURCE_TOPOLOGIES, "node-1")["metadata"]["resourceVersion"] == version


def _pool(annotations: Mapping[str, str], key: str = ANNOTATION_CPU_SHARED_POOLS) -> str:
    """The CPUs of a share-pools annotation, as one list."""
    return format_cpuset(
        cpu for pool in orjson.loads(annotations[key]) for cpu in parse_cpuset(pool["cpuset"])
    )


def test_pod_cpu_allocs_are_the_kubelets_static_assignments(fake_host_v1, cpu_info):
    """Every checkpoint entry but those of pods the koordlet manages (labelled LS or BE,
    or with a resource-status cpuset); a pod the koordlet does not know is listed by UID."""
    guaranteed = make_pod("guaranteed").kube_qos("Guaranteed")
    be = make_pod("be").qos("BE")
    lsr = make_pod("lsr").qos("LSR").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"2"}')
    pods = _pods(fake_host_v1, guaranteed, be, lsr)
    assignments = {
        pods[0].uid: frozenset({3}),
        pods[1].uid: frozenset({4}),
        pods[2].uid: frozenset({2}),
        "gone-pod": frozenset({6, 7}),
        "no-cpus": frozenset(),
    }
    annotations = topology_annotations(cpu_info, pods, {}, KubeletCPUState("static", assignments=assignments))
    expected = [
        {
            "namespace": "default",
            "name": "guaranteed",
            "uid": pods[0].uid,
            "cpuset": "3",
            "managedByKubelet": True,
        },
        {"uid": "gone-pod", "cpuset": "6-7", "managedByKubelet": True},
    ]
    # in UID order, as upstream sorts them
    assert orjson.loads(annotations[ANNOTATION_POD_CPU_ALLOCS]) == sorted(
        expected, key=lambda a: str(a["uid"])
    )
    # the pools lose the listed CPUs (and the LSR pod's cpuset), not the BE pod's
    assert _pool(annotations) == "0-1,4-5"


def test_no_pod_cpu_allocs_outside_the_static_policy(fake_host_v1, cpu_info):
    pods = _pods(fake_host_v1, make_pod("guaranteed").kube_qos("Guaranteed"))
    kubelet = KubeletCPUState("none", assignments={pods[0].uid: frozenset({3})})
    annotations = topology_annotations(cpu_info, pods, {}, kubelet)
    assert orjson.loads(annotations[ANNOTATION_POD_CPU_ALLOCS]) == []
    assert _pool(annotations) == "0-7"


NODE_RESERVATIONS = {
    # (node annotations, NRT reservation, NRT system-qos-resource, LS pool)
    "none": ({}, {}, None, "0-7"),
    "explicit CPUs, canonical": (
        {RESERVATION: '{"reservedCPUs":"7,6"}'},
        {"reservedCPUs": "6-7"},
        None,
        "0-5",
    ),
    # upstream's GetReservedCPUs/getNodeReserved: that many CPUs by topology, a whole core first
    "by count": (
        {RESERVATION: '{"resources":{"cpu":"2"}}'},
        {"resources": {"cpu": "2"}, "reservedCPUs": "0,4"},
        None,
        "1-3,5-7",
    ),
    "by count, rounded up": (
        {RESERVATION: '{"resources":{"cpu":"1500m"}}'},
        {"resources": {"cpu": "1500m"}, "reservedCPUs": "0,4"},
        None,
        "1-3,5-7",
    ),
    "explicit CPUs win over the count": (
        {RESERVATION: '{"resources":{"cpu":"4"},"reservedCPUs":"3"}'},
        {"resources": {"cpu": "4"}, "reservedCPUs": "3"},
        None,
        "0-2,4-7",
    ),
    "more than the node": (
        {RESERVATION: '{"resources":{"cpu":"9"}}'},
        {"resources": {"cpu": "9"}},
        None,
        "0-7",
    ),
    "malformed": ({RESERVATION: "{broken"}, {}, None, "0-7"),
    "system QoS": ({SYSTEM_QOS: '{"cpuset":"6-7"}'}, {}, {"cpuset": "6-7"}, "0-5"),
    "system QoS, not exclusive": (
        {SYSTEM_QOS: '{"cpuset":"6-7","cpusetExclusive":false}'},
        {},
        {"cpuset": "6-7", "cpusetExclusive": False},
        "0-7",
    ),
    "system QoS, malformed": ({SYSTEM_QOS: "[1]"}, {}, None, "0-7"),
}


@pytest.mark.parametrize(
    ("node", "reservation", "system_qos", "pool"), NODE_RESERVATIONS.values(), ids=list(NODE_RESERVATIONS)
)
def test_node_reservation_and_system_qos_go_onto_the_nrt(cpu_info, node, reservation, system_qos, pool):
    """Upstream's managed annotation keys include both: the scheduler reads them from the NRT."""
    annotations = topology_annotations(cpu_info, [], node, KubeletCPUState())
    assert orjson.loads(annotations[RESERVATION]) == reservation
    assert orjson.loads(annotations[SYSTEM_QOS]) == system_qos
    assert _pool(annotations) == pool


async def test_per_cpu_share_pool_series_follow_the_pools(fake_host_v1, cpu_info):
    lse = make_pod("lse").qos("LSE").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"0-1"}')
    lsr = make_pod("lsr").qos("LSR").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"2"}')
    node = {"metadata": {"annotations": {RESERVATION: '{"reservedCPUs":"7"}'}}}
    states = _States(_pods(fake_host_v1, lse, lsr), node)
    registry = CollectorRegistry()
    reporter = NodeTopologyReporter(
        states,
        lambda: cpu_info,
        list,
        KubeletCPUState,
        client=None,
        report=False,
        metrics=KoordletMetrics(registry, "node-1"),
        per_cpu_metrics=True,
    )

    def series(name: str) -> str:
        """The CPUs with a series (each of value 1), as a CPU list."""
        samples = [s for m in registry.collect() if m.name == f"koordlet_cpuset_{name}" for s in m.samples]
        assert all(s.labels["node"] == "node-1" and s.value == 1 for s in samples)
        return format_cpuset(int(s.labels["cpu"]) for s in samples)

    assert await reporter.sync()
    assert series("share_pool_info") == "3-6"
    assert series("be_share_pool_info") == "2-6"
    states.pods = _pods(fake_host_v1, lse)  # the LSR pod went away: CPU 2 joins the LS pool
    states.node = {"metadata": {"annotations": {RESERVATION: '{"reservedCPUs":"6-7"}'}}}
    assert await reporter.sync()
    assert series("share_pool_info") == "2-5"
    assert series("be_share_pool_info") == "2-5"


async def test_no_per_cpu_share_pool_series_without_the_gate(cpu_info):
    registry = CollectorRegistry()
    reporter = NodeTopologyReporter(
        _States([], {}),
        lambda: cpu_info,
        list,
        KubeletCPUState,
        client=None,
        report=False,
        metrics=KoordletMetrics(registry, "node-1"),
    )
    assert await reporter.sync()
    names = {s.name for m in registry.collect() for s in m.samples}
    assert "koordlet_cpuset_share_pool_cpu_cores" in names
    assert not names & {"koordlet_cpuset_share_pool_info", "koordlet_cpuset_be_share_pool_info"}
