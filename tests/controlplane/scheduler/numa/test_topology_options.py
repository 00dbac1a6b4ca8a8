"""Per-node options read from the NodeResourceTopology and the Node (topology_options.go,
util.go, apis/extension): unavailable CPUs, NUMA zones, kubelet policy, amplification and the
node-level bind / NUMA / allocate-strategy policies."""

from __future__ import annotations

import json

import pytest

from controlplane.scheduler.numa.options import (
    NodePolicies,
    TopologyOptions,
    amplify,
    amplify_resource_list,
    default_numa_allocate_strategy,
    merge_topology_policy,
    new_topology_options,
    node_cpu_bind_policy,
    node_numa_topology_policy,
    node_policies,
    numa_allocate_strategy,
    with_amplification,
)
from controlplane.scheduler.numa.status import RejectionError
from koordinator.api.extension.node import (
    ANNOTATION_NODE_RESERVATION,
    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
)
from koordinator.api.extension.numa import (
    LABEL_NODE_CPU_BIND_POLICY,
    LABEL_NODE_NUMA_ALLOCATE_STRATEGY,
    LABEL_NUMA_TOPOLOGY_POLICY,
)
from koordinator.api.extension.topology import (
    ANNOTATION_CPU_TOPOLOGY,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
    ANNOTATION_POD_CPU_ALLOCS,
    KubeletCPUManagerPolicy,
)
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.numa.builders import TOPO_2S4N, make_nrt

STATIC_FULL = KubeletCPUManagerPolicy(policy="static", options={"full-pcpus-only": "true"})


def test_unavailable_cpus_are_the_union_of_four_sources() -> None:
    """kubelet-pinned pods 0-3, kubelet reserved 0-1, node reservation 6-7, exclusive system QoS
    4-5 (cpusetExclusive absent counts as exclusive): 0-7 unavailable."""
    nrt = (
        make_nrt()
        .annotate(
            ANNOTATION_POD_CPU_ALLOCS,
            [{"namespace": "d", "name": "p", "uid": "u1", "cpuset": "0-3", "managedByKubelet": True}],
        )
        .annotate(ANNOTATION_KUBELET_CPU_MANAGER_POLICY, {"policy": "static", "reservedCPUs": "0-1"})
        .annotate(ANNOTATION_NODE_RESERVATION, {"reservedCPUs": "6-7"})
        .annotate(ANNOTATION_NODE_SYSTEM_QOS_RESOURCE, {"cpuset": "4-5"})
        .build()
    )
    options = new_topology_options(nrt)
    assert options.reserved_cpus == frozenset(range(8))
    assert options.kubelet_policy is not None
    assert options.kubelet_policy.policy == "static"
    assert options.max_ref_count == 1
    assert options.problems == ()


@pytest.mark.parametrize(
    ("alloc", "unavailable"),
    [
        pytest.param(
            {"uid": "u", "cpuset": "2-3", "managedByKubelet": True}, {2, 3}, id="kubelet-managed pod counts"
        ),
        pytest.param({"uid": "u", "cpuset": "2-3"}, set(), id="not managed by the kubelet"),
        pytest.param({"cpuset": "2-3", "managedByKubelet": True}, set(), id="no uid"),
        pytest.param({"uid": "u", "cpuset": "x", "managedByKubelet": True}, set(), id="bad cpuset skipped"),
    ],
)
def test_kubelet_pinned_pods(alloc: dict[str, object], unavailable: set[int]) -> None:
    options = new_topology_options(make_nrt().annotate(ANNOTATION_POD_CPU_ALLOCS, [alloc]).build())
    assert options.reserved_cpus == frozenset(unavailable)


def test_non_exclusive_system_qos_cpus_stay_available() -> None:
    nrt = make_nrt().annotate(
        ANNOTATION_NODE_SYSTEM_QOS_RESOURCE, {"cpuset": "4-5", "cpusetExclusive": False}
    )
    assert new_topology_options(nrt.build()).reserved_cpus == frozenset()


def test_numa_zones_parsed_sorted_and_filtered() -> None:
    """Only ``type: Node`` zones named ``node-<id>``, sorted by id."""
    nrt = (
        make_nrt()
        .zone(1, cpu="8", memory="16Gi")
        .zone(0, cpu="8", memory="16Gi")
        .zone("socket-0", zone_type="Socket", cpu="16")
        .zone("numa-2", cpu="8")
        .build()
    )
    options = new_topology_options(nrt)
    assert options.numa_nodes() == [0, 1]
    assert options.numa_resources_of(1) == {"cpu": Quantity.parse("8"), "memory": Quantity.parse("16Gi")}
    assert options.numa_resources_of(7) == {}


def test_zone_cpu_is_reduced_by_unavailable_cpus_of_that_numa_node() -> None:
    """Kubelet reserved 0-1 and 9 (NUMA 0 twice, NUMA 1 once): 8 -> 6 and 8 -> 7 CPUs."""
    nrt = (
        make_nrt()
        .annotate(ANNOTATION_KUBELET_CPU_MANAGER_POLICY, {"policy": "static", "reservedCPUs": "0-1,9"})
        .zone(0, cpu="8")
        .zone(1, cpu="8")
        .build()
    )
    assert [str(z.resources["cpu"]) for z in new_topology_options(nrt).numa_node_resources] == ["6", "7"]
    plain = new_topology_options(nrt, subtract_unavailable_cpus=False)
    assert [str(z.resources["cpu"]) for z in plain.numa_node_resources] == ["8", "8"]


@pytest.mark.parametrize(
    ("policies", "want"),
    [
        pytest.param(["None"], "", id="None"),
        pytest.param(["BestEffort"], "BestEffort", id="BestEffort"),
        pytest.param(["Restricted"], "Restricted", id="Restricted"),
        pytest.param(["SingleNUMANodePodLevel"], "SingleNUMANode", id="pod-level single-numa-node"),
        pytest.param(["SingleNUMANodeContainerLevel"], "", id="container-level single-numa-node is none"),
        pytest.param(["None", "Restricted"], "Restricted", id="first known policy wins"),
    ],
)
def test_kubelet_topology_policy_from_nrt(policies: list[str], want: str) -> None:
    assert new_topology_options(make_nrt().policies(*policies).build()).numa_topology_policy == want


def test_bad_annotations_are_ignored_and_reported() -> None:
    nrt = (
        make_nrt(None)
        .annotate(ANNOTATION_CPU_TOPOLOGY, "{")
        .annotate(ANNOTATION_KUBELET_CPU_MANAGER_POLICY, "[")
        .build()
    )
    options = new_topology_options(nrt)
    assert options.cpu_topology is not None
    assert not options.cpu_topology.is_valid()
    assert options.kubelet_policy is None
    assert len(options.problems) == 2


def test_topology_comes_from_the_annotation() -> None:
    options = new_topology_options(make_nrt().build())
    assert options.cpu_topology is not None
    assert options.cpu_topology.details == TOPO_2S4N.details


def test_amplification_of_numa_zones() -> None:
    """cpu 8 x 1.5 = 12 (milli, decimal), memory 16Gi x 1.5 = 24Gi (binary), only with the ratio."""
    nrt = make_nrt().zone(0, cpu="8", memory="16Gi").build()
    ratio = {ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: json.dumps({"cpu": 1.5, "memory": 1.5})}
    options = new_topology_options(nrt, node_annotations=ratio)
    assert options.cpu_amplification_ratio() == 1.5
    assert {k: str(v) for k, v in options.numa_resources_of(0).items()} == {"cpu": "12", "memory": "24Gi"}
    assert with_amplification(options, {}) is options
    assert new_topology_options(nrt, node_annotations={}).numa_resources_of(0)["cpu"] == Quantity.parse("8")


@pytest.mark.parametrize(
    ("origin", "ratio", "want"),
    [
        pytest.param(1000, 1.5, 1500, id="scaled"),
        pytest.param(1001, 1.5, 1502, id="rounded up"),
        pytest.param(1000, 1.0, 1000, id="ratio 1 keeps"),
        pytest.param(1000, 0.5, 1000, id="ratio below 1 keeps"),
    ],
)
def test_amplify(origin: int, ratio: float, want: int) -> None:
    assert amplify(origin, ratio) == want


def test_amplify_resource_list_only_named_and_non_zero() -> None:
    got = amplify_resource_list(
        {"cpu": Quantity.parse("2"), "memory": Quantity.parse("1Gi")}, {"cpu": 2.0, "memory": 2.0}, ["cpu"]
    )
    assert {k: str(v) for k, v in got.items()} == {"cpu": "4", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("labels", "kubelet", "want"),
    [
        pytest.param({}, None, "None", id="nothing set"),
        pytest.param(
            {LABEL_NODE_CPU_BIND_POLICY: "FullPCPUsOnly"}, None, "FullPCPUsOnly", id="label FullPCPUsOnly"
        ),
        pytest.param(
            {LABEL_NODE_CPU_BIND_POLICY: "SpreadByPCPUs"}, None, "SpreadByPCPUs", id="label SpreadByPCPUs"
        ),
        pytest.param({}, STATIC_FULL, "FullPCPUsOnly", id="static kubelet with full-pcpus-only"),
        pytest.param(
            {LABEL_NODE_CPU_BIND_POLICY: "SpreadByPCPUs"}, STATIC_FULL, "FullPCPUsOnly", id="kubelet wins"
        ),
        pytest.param(
            {},
            KubeletCPUManagerPolicy(policy="none", options={"full-pcpus-only": "true"}),
            "None",
            id="none policy",
        ),
        pytest.param({LABEL_NODE_CPU_BIND_POLICY: "Whatever"}, None, "None", id="unknown label value"),
    ],
)
def test_node_cpu_bind_policy(
    labels: dict[str, str], kubelet: KubeletCPUManagerPolicy | None, want: str
) -> None:
    assert node_cpu_bind_policy(labels, kubelet) == want


@pytest.mark.parametrize(
    ("labels", "kubelet", "want"),
    [
        pytest.param({LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"}, "BestEffort", "Restricted", id="label wins"),
        pytest.param({}, "BestEffort", "BestEffort", id="kubelet's when no label"),
        pytest.param({LABEL_NUMA_TOPOLOGY_POLICY: ""}, "", "", id="none"),
    ],
)
def test_node_numa_topology_policy(labels: dict[str, str], kubelet: str, want: str) -> None:
    assert node_numa_topology_policy(labels, kubelet) == want


@pytest.mark.parametrize(
    ("node", "pod", "want"),
    [
        pytest.param("", "", "", id="neither"),
        pytest.param("Restricted", "", "Restricted", id="node only"),
        pytest.param("", "SingleNUMANode", "SingleNUMANode", id="pod only"),
        pytest.param("BestEffort", "BestEffort", "BestEffort", id="same"),
    ],
)
def test_merge_topology_policy(node: str, pod: str, want: str) -> None:
    assert merge_topology_policy(node, pod) == want


def test_merge_topology_policy_conflict_message() -> None:
    with pytest.raises(RejectionError) as err:
        merge_topology_policy("Restricted", "SingleNUMANode")
    assert err.value.code == "UnschedulableAndUnresolvable"
    assert err.value.reasons == ("node(s) NUMA Topology policy not match",)


@pytest.mark.parametrize(
    ("scoring", "labels", "want"),
    [
        pytest.param(None, {}, "LeastAllocated", id="default LeastAllocated"),
        pytest.param("MostAllocated", {}, "MostAllocated", id="from the NUMA scoring strategy"),
        pytest.param(
            "LeastAllocated",
            {LABEL_NODE_NUMA_ALLOCATE_STRATEGY: "MostAllocated"},
            "MostAllocated",
            id="label wins",
        ),
        pytest.param(
            "MostAllocated",
            {LABEL_NODE_NUMA_ALLOCATE_STRATEGY: ""},
            "MostAllocated",
            id="empty label ignored",
        ),
    ],
)
def test_numa_allocate_strategy(scoring: str | None, labels: dict[str, str], want: str) -> None:
    assert numa_allocate_strategy(labels, default_numa_allocate_strategy(scoring)) == want


def test_options_without_nrt_have_no_topology() -> None:
    assert TopologyOptions().cpu_topology is None
    assert TopologyOptions().numa_nodes() == []


def test_node_policies_from_labels_and_nrt() -> None:
    """One call resolves the three node-level policies from the Node's labels and the NRT."""
    nrt = (
        make_nrt()
        .policies("Restricted")
        .annotate(
            ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
            {"policy": "static", "options": {"full-pcpus-only": "true"}},
        )
        .build()
    )
    labels = {LABEL_NODE_NUMA_ALLOCATE_STRATEGY: "MostAllocated"}
    got = node_policies(labels, new_topology_options(nrt))
    assert got == NodePolicies("FullPCPUsOnly", "Restricted", "MostAllocated")
    assert node_policies({}, TopologyOptions()) == NodePolicies("None", "", "LeastAllocated")
