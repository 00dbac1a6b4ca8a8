"""CPUSuppress plans, hand-computed.

The node: 8 CPUs (one socket, four cores, two threads: cpu0-3 and their siblings cpu4-7),
capacity 8 cores, threshold 65 % -> 5200m. Node usage 4 cores, an LS pod using 2 cores, a
BE pod using 1.5 cores: system = 4 - 3.5 = 0.5 core, so
suppress = 5200 - 2000 (LS) - 500 (system) = 2700m -> a cpuset of 3 CPUs or 270000us.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from koordinator.api.extension.node import ANNOTATION_NODE_RESERVATION
from koordinator.api.extension.numa import ANNOTATION_RESOURCE_STATUS
from koordinator.api.extension.topology import ANNOTATION_NODE_SYSTEM_QOS_RESOURCE
from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.executor import CgroupUpdate, ResourceUpdateExecutor
from koordlet.metriccache import Sample, kinds
from koordlet.metrics import KoordletMetrics
from koordlet.qosmanager.framework import QoSManager, Snapshot
from koordlet.qosmanager.strategies.cpu_suppress import CPUSuppress, select_cpus
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.topology import Processor, read_cpu_topology
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.qosmanager.conftest import NOW, node, snapshot

BE_CID = "containerd://" + "b" * 64
ENABLED = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65}}


@pytest.fixture
def host(fake_host: FakeHost) -> FakeHost:
    fake_host.set_cpu_topology(sockets=1, cores_per_socket=4, threads_per_core=2)
    if fake_host.version == "v1":
        fake_host.set("cpuset.cpus", "", "0-7")
    else:
        fake_host.write("cgroup/cpuset.cpus.effective", "0-7\n")
    # as on a real host, the BE tier starts with every CPU
    fake_host.set("cpuset.cpus", fake_host.layout.qos_dir(KubeQOSClass.BEST_EFFORT), "0-7")
    return fake_host


def _pods(host: FakeHost, *extra: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Sample]]:
    ls = make_pod("web").qos("LS").kube_qos("Burstable").build()
    be = make_pod("batch").qos("BE").kube_qos("BestEffort").container("main", cid=BE_CID).build()
    host.add_pod("BestEffort", be["metadata"]["uid"], [BE_CID])
    samples = [
        kinds.NODE_CPU_USAGE.sample(4.0, NOW - 0.5),
        kinds.POD_CPU_USAGE.sample(2.0, NOW - 0.5, pod_uid=ls["metadata"]["uid"]),
        kinds.POD_CPU_USAGE.sample(1.5, NOW - 0.5, pod_uid=be["metadata"]["uid"]),
    ]
    return [ls, be, *extra], samples


def _levels(host: FakeHost, cpuset: str) -> list[list[CgroupUpdate]]:
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    uid = make_pod("batch").uid
    pod = host.pod_dir("BestEffort", uid)
    container = host.container_dir("BestEffort", uid, BE_CID)
    return [
        [CgroupUpdate("cpuset.cpus", be, cpuset, "CPUSuppress")],
        [CgroupUpdate("cpuset.cpus", pod, cpuset, "CPUSuppress")],
        [CgroupUpdate("cpuset.cpus", container, cpuset, "CPUSuppress")],
    ]


def _snapshot(host: FakeHost, slo: dict[str, Any] = ENABLED, **kwargs: Any) -> Snapshot:
    pods, samples = _pods(host)
    return snapshot(
        host, pods=kwargs.pop("pods", pods), samples=kwargs.pop("samples", samples), slo=slo, **kwargs
    )


def test_cpuset_policy(host):
    plan = CPUSuppress().plan(_snapshot(host))
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    assert plan.leveled == [_levels(host, "0-1,4")]  # HT pair (0,4) first, then cpu1
    assert plan.updates == [CgroupUpdate("cpu.cfs_quota_us", be, -1, "CPUSuppress")]  # quota released
    assert ("be_suppress_cpu_cores", ("cpuset",), 3.0) in plan.gauges
    assert ("be_suppress_ls_used_cpu_cores", (), 2.0) in plan.gauges


def test_cfs_quota_policy(host):
    slo = {
        "resourceUsedThresholdWithBE": {
            **ENABLED["resourceUsedThresholdWithBE"],
            "cpuSuppressPolicy": "cfsQuota",
        }
    }
    plan = CPUSuppress().plan(_snapshot(host, slo))
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    assert plan.updates == [CgroupUpdate("cpu.cfs_quota_us", be, 270000, "CPUSuppress")]
    assert plan.leveled == [_levels(host, "0-7")]  # cpuset released to the full set
    assert ("be_suppress_cpu_cores", ("cfsQuota",), 2.7) in plan.gauges


def test_applied_plans_set_the_suppress_gauges(host):
    registry = CollectorRegistry()
    executor = ResourceUpdateExecutor(CgroupFS.detect(host.paths))
    manager = QoSManager([], lambda: _snapshot(host), executor, None, KoordletMetrics(registry, "node-1"))
    manager.apply(CPUSuppress().plan(_snapshot(host)))
    on_node = {"node": "node-1"}
    assert registry.get_sample_value("koordlet_be_suppress_cpu_cores", {**on_node, "type": "cpuset"}) == 3.0
    assert registry.get_sample_value("koordlet_be_suppress_ls_used_cpu_cores", on_node) == 2.0
    slo = {
        "resourceUsedThresholdWithBE": {
            **ENABLED["resourceUsedThresholdWithBE"],
            "cpuSuppressPolicy": "cfsQuota",
        }
    }
    manager.apply(CPUSuppress().plan(_snapshot(host, slo)))
    assert registry.get_sample_value("koordlet_be_suppress_cpu_cores", {**on_node, "type": "cfsQuota"}) == 2.7


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        pytest.param(100000, 180000, id="growth-capped-at-10pct-of-node"),
        pytest.param(269000, None, id="inside-the-1pct-deadband"),
        pytest.param(400000, 270000, id="shrinks-at-once"),
    ],
)
def test_cfs_quota_hysteresis(host, current, expected):
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    host.set("cpu.cfs_quota_us", be, current)
    slo = {
        "resourceUsedThresholdWithBE": {
            **ENABLED["resourceUsedThresholdWithBE"],
            "cpuSuppressPolicy": "cfsQuota",
        }
    }
    plan = CPUSuppress().plan(_snapshot(host, slo))
    quota = [u.value for u in plan.updates if isinstance(u, CgroupUpdate) and u.key == "cpu.cfs_quota_us"]
    assert quota == ([] if expected is None else [expected])


def test_min_percent_floor(host):
    slo = {
        "resourceUsedThresholdWithBE": {
            "enable": True,
            "cpuSuppressThresholdPercent": 30,
            "cpuSuppressMinPercent": 10,
        }
    }
    plan = CPUSuppress().plan(_snapshot(host, slo))
    # 2400 - 2000 - 500 = -100, floored at 800m -> the 2-CPU minimum: one HT pair
    assert plan.leveled == [_levels(host, "0,4")]


def test_lsr_pinned_cpus_are_shared_in_proportion(host):
    lsr = make_pod("pinned").qos("LSR").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"0-1,4-5"}').build()
    pods, samples = _pods(host, lsr)
    plan = CPUSuppress().plan(snapshot(host, pods=pods, samples=samples, slo=ENABLED))
    # n=3: 3*4/8 = 1 from the LSR CPUs (cpu0), 2 from the LS CPUs (the pair 2,6)
    assert plan.leveled == [_levels(host, "0,2,6")]


def test_growth_is_limited_per_round(host):
    host.set("cpuset.cpus", host.layout.qos_dir(KubeQOSClass.BEST_EFFORT), "0")
    plan = CPUSuppress().plan(_snapshot(host))
    # at most ceil(8 * 10%) = 1 more CPU than the current single one
    assert plan.leveled[0][0][0].value == "0,4"


def test_kubelet_static_policy_narrows_containers_only(host):
    plan = CPUSuppress().plan(_snapshot(host, kubelet_cpu_policy="static"))
    levels = plan.leveled[0]
    assert [u.value for u in levels[0] + levels[1]] == ["0-7", "0-7"]
    assert [u.value for u in levels[2]] == ["0-1,4"]


def test_node_slo_switch_off_recovers(host):
    plan = CPUSuppress().plan(_snapshot(host, slo={"resourceUsedThresholdWithBE": {"enable": False}}))
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    assert plan.updates == [CgroupUpdate("cpu.cfs_quota_us", be, -1, "CPUSuppress")]
    assert plan.leveled == [_levels(host, "0-7")]
    assert any("disabled by NodeSLO" in n for n in plan.notes)


@pytest.mark.parametrize(
    "samples",
    [
        pytest.param([], id="no-metrics"),
        pytest.param([kinds.NODE_CPU_USAGE.sample(4.0, NOW - 30)], id="stale-metrics"),
    ],
)
def test_missing_or_stale_node_usage_plans_nothing(host, samples):
    plan = CPUSuppress().plan(_snapshot(host, samples=samples))
    assert plan.empty
    assert any("no node CPU usage" in n for n in plan.notes)


def test_without_be_pods_the_be_tier_still_gets_its_cpuset(host):
    ls = make_pod("web").qos("LS").kube_qos("Burstable").build()
    samples = [
        kinds.NODE_CPU_USAGE.sample(4.0, NOW),
        kinds.POD_CPU_USAGE.sample(2.0, NOW, pod_uid=ls["metadata"]["uid"]),
    ]
    plan = CPUSuppress().plan(snapshot(host, pods=[ls], samples=samples, slo=ENABLED))
    # system = 4 - 2 = 2 cores: 5200 - 2000 - 2000 = 1200m -> 2 CPUs
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    assert plan.leveled == [[[CgroupUpdate("cpuset.cpus", be, "0,4", "CPUSuppress")], [], []]]


def test_node_reservation_counts_as_system_usage(host):
    node_obj = node(allocatable_cpu="6")  # 2 cores reserved by the kubelet
    plan = CPUSuppress().plan(_snapshot(host, node_obj=node_obj))
    # system = max(500m, 2000m reserved): 5200 - 2000 - 2000 = 1200m -> 2 CPUs
    assert plan.leveled[0][0][0].value == "0,4"


def test_gate_off():
    from koordinator.api.features import KOORDLET_FEATURES, FeatureGates

    class Stub:
        gates = FeatureGates(KOORDLET_FEATURES, {"BECPUSuppress": False})

    enabled, why = CPUSuppress().enabled(Stub())  # type: ignore[arg-type]
    assert not enabled
    assert "BECPUSuppress" in why


def test_selection_spreads_pairs_over_numa_nodes(fake_host_v1):
    fake_host_v1.set_cpu_topology(sockets=2, cores_per_socket=2, threads_per_core=2)
    topology = read_cpu_topology(fake_host_v1.paths)
    # node 0: cores 0,1 (cpus 0,4 / 1,5); node 1: cores 0,1 of socket 1 (cpus 2,6 / 3,7)
    assert sorted(select_cpus(4, topology.processors)) == [0, 2, 4, 6]
    # a pair on node 0, then the single from node 1, where the pairs stopped
    assert sorted(select_cpus(3, topology.processors)) == [0, 2, 4]
    assert sorted(select_cpus(8, topology.processors)) == list(range(8))
    assert select_cpus(9, topology.processors) == []  # fewer CPUs than asked: none (upstream)


def _numbered(*buckets: list[tuple[int, int]]) -> list[Processor]:
    """Processors from (core, cpu) lists, one list per NUMA node (node i on socket i)."""
    return [Processor(node=i, socket=i, core=core, cpu=cpu) for i, b in enumerate(buckets) for core, cpu in b]


# 2 NUMA nodes x 4 cores x 2 threads, Linux numbering (cpu i on core i % 8; its sibling i + 8):
# buckets (by node, each by core then cpu) [0,8,1,9,2,10,3,11] and [4,12,5,13,6,14,7,15]
TWO_NODES = _numbered(
    [(c, c + t * 8) for c in range(4) for t in (0, 1)], [(c, c + t * 8) for c in range(4, 8) for t in (0, 1)]
)
# buckets of 4, 3 and 2 CPUs (largest first): node 0 cores 0,1 (cpus 0,1 / 2,3);
# node 1 core 2 (cpus 4,5) and core 3 without a sibling (cpu 6); node 2 core 4 (cpus 7,8)
UNEVEN = _numbered([(0, 0), (0, 1), (1, 2), (1, 3)], [(2, 4), (2, 5), (3, 6)], [(4, 7), (4, 8)])
# no SMT, 2 nodes x 2 cores: no pair anywhere
NO_SMT = _numbered([(0, 0), (1, 1)], [(2, 2), (3, 3)])

# Upstream's calculateBESuppressCPUSetPolicy (cpusuppress/cpu_suppress.go): hyper-thread pairs
# one bucket at a time (round-robin, largest bucket first) while need > 1, then single CPUs
# round-robin from the bucket where the pair loop stopped (startIndex := i), each loop
# ending after a whole round that took nothing. Results in selection order, hand-computed.
SELECTION_CASES = {
    # pair (0,8) on node 0 stops at node 1: the single is node 1's cpu4, not node 0's cpu1
    "2-nodes-need-3": (TWO_NODES, 3, [0, 8, 4]),
    "2-nodes-need-4": (TWO_NODES, 4, [0, 8, 4, 12]),
    # pairs (0,8), (4,12) end the round: singles start again at node 0
    "2-nodes-need-5": (TWO_NODES, 5, [0, 8, 4, 12, 1]),
    # pairs (0,8), (4,12), (1,9) stop at node 1: its cpu5, so 4 + 3 CPUs per node
    "2-nodes-need-7": (TWO_NODES, 7, [0, 8, 4, 12, 1, 9, 5]),
    "uneven-need-3": (UNEVEN, 3, [0, 1, 4]),
    # pairs (0,1), (4,5) stop at the third bucket: its cpu7
    "uneven-need-5": (UNEVEN, 5, [0, 1, 4, 5, 7]),
    "uneven-need-7": (UNEVEN, 7, [0, 1, 4, 5, 7, 8, 2]),
    # pairs (0,1), (4,5), (7,8), (2,3) stop at node 1: the last CPU is its unpaired cpu6
    "uneven-need-9": (UNEVEN, 9, [0, 1, 4, 5, 7, 8, 2, 3, 6]),
    # a pair round that takes nothing stops at bucket 0: singles from there
    "no-smt-need-3": (NO_SMT, 3, [0, 2, 1]),
    "too-few-cpus": (NO_SMT, 5, []),
}


@pytest.mark.parametrize(
    ("processors", "count", "expected"), SELECTION_CASES.values(), ids=list(SELECTION_CASES)
)
def test_selection_follows_upstreams_round_robin(processors, count, expected):
    assert select_cpus(count, processors) == expected


def _reserving(cpus: str) -> dict[str, Any]:
    """The node, with ``cpus`` reserved by the node.koordinator.sh/reservation annotation."""
    return node(**{ANNOTATION_NODE_RESERVATION: f'{{"reservedCPUs": "{cpus}"}}'})


@pytest.mark.parametrize("kubelet_cpu_policy", ["none", "static"])
def test_a_pool_smaller_than_asked_gives_no_cpu_and_no_empty_cpuset(host, kubelet_cpu_policy):
    """Only cpu0 is left for BE pods but at least two are asked: upstream selects none and
    writes no cpuset (an empty cpuset.cpus would leave BE tasks nowhere to run)."""
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    container = host.container_dir("BestEffort", make_pod("batch").uid, BE_CID)
    host.set("cpuset.cpus", be, "0-7")
    host.set("cpuset.cpus", container, "2-3")
    plan = CPUSuppress().plan(
        _snapshot(host, node_obj=_reserving("1-7"), kubelet_cpu_policy=kubelet_cpu_policy)
    )
    executor = ResourceUpdateExecutor(CgroupFS.detect(host.paths))
    for batch in plan.leveled:
        executor.leveled(batch)
    assert host.get("cpuset.cpus", container) == "2-3"  # the containers keep their cpuset
    written = [u.value for batch in plan.leveled for level in batch for u in level]
    assert "" not in written
    if kubelet_cpu_policy == "none":
        assert plan.leveled == []
    else:  # the BE and pod directories keep the full set; the containers are left alone
        assert [[u.value for u in level] for level in plan.leveled[0]] == [["0"], ["0"], []]
    assert not any(g[0] == "be_suppress_cpu_cores" for g in plan.gauges)
    assert "the LS pool has 1 CPUs for BE pods, fewer than the 2 asked: none taken" in plan.notes


FULL_SET_CASES: dict[str, dict[str, Any]] = {
    "slo-switch-off": {"resourceUsedThresholdWithBE": {"enable": False}},
    "cfs-quota-policy": {
        "resourceUsedThresholdWithBE": {
            **ENABLED["resourceUsedThresholdWithBE"],
            "cpuSuppressPolicy": "cfsQuota",
        }
    },
}


@pytest.mark.parametrize("slo", list(FULL_SET_CASES.values()), ids=list(FULL_SET_CASES))
def test_the_full_cpuset_leaves_out_reserved_system_and_lse_cpus(host, slo):
    annotations = {
        ANNOTATION_NODE_RESERVATION: '{"reservedCPUs": "0"}',
        ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: '{"cpuset": "3", "cpusetExclusive": true}',
    }
    lse = make_pod("latency").qos("LSE").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"1,5"}').build()
    pods, samples = _pods(host, lse)
    plan = CPUSuppress().plan(
        snapshot(host, pods=pods, samples=samples, slo=slo, node_obj=node(**annotations))
    )
    assert plan.leveled == [_levels(host, "2,4,6-7")]


def test_a_shared_system_qos_cpuset_stays_in_the_full_set(host):
    annotations = {ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: '{"cpuset": "3", "cpusetExclusive": false}'}
    slo = FULL_SET_CASES["slo-switch-off"]
    plan = CPUSuppress().plan(_snapshot(host, slo=slo, node_obj=node(**annotations)))
    assert plan.leveled == [_levels(host, "0-7")]


MALFORMED_NODE_ANNOTATIONS = {
    # upstream reads the two annotations apart: one malformed, the other's CPUs stay out
    "malformed-reservation": (
        {ANNOTATION_NODE_RESERVATION: "{not json", ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: '{"cpuset": "3"}'},
        "0-2,4-7",
    ),
    "reservation-with-a-number": (
        {
            ANNOTATION_NODE_RESERVATION: '{"reservedCPUs": 5}',
            ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: '{"cpuset": "3"}',
        },
        "0-2,4-7",
    ),
    "malformed-system-qos": (
        {
            ANNOTATION_NODE_RESERVATION: '{"reservedCPUs": "0"}',
            ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: "{not json",
        },
        "1-7",
    ),
}


@pytest.mark.parametrize(
    ("annotations", "full"), MALFORMED_NODE_ANNOTATIONS.values(), ids=list(MALFORMED_NODE_ANNOTATIONS)
)
def test_node_annotations_are_read_independently(host, annotations, full):
    slo = FULL_SET_CASES["slo-switch-off"]
    plan = CPUSuppress().plan(_snapshot(host, slo=slo, node_obj=node(**annotations)))
    assert plan.leveled == [_levels(host, full)]
    assert len([n for n in plan.notes if n.startswith("node annotation ignored: invalid ")]) == 1


def test_a_malformed_reservation_keeps_system_qos_cpus_from_the_suppressed_set(host):
    """Suppressing, the exclusive system-QoS CPUs stay out of the BE choice even when the
    reservation is malformed: cpu0 (with its sibling cpu4) is the system's, so the HT pair
    and the single come from cores 1 and 2. The malformed annotation is noted once, though
    both the usage formula and the CPU choice read it."""
    annotations = {
        ANNOTATION_NODE_RESERVATION: "{not json",
        ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: '{"cpuset": "0,4"}',
    }
    plan = CPUSuppress().plan(_snapshot(host, node_obj=node(**annotations)))
    assert plan.leveled == [_levels(host, "1-2,5")]
    assert len([n for n in plan.notes if "node.koordinator.sh/reservation" in n]) == 1


# --- as upstream ------------------------------------------------------------------------------


def test_lsr_pool_counts_only_pods_labelled_lsr(host):
    """Upstream's LSR pool holds the CPUs of pods whose koordinator.sh/qosClass label is LSR:
    a Guaranteed pod without the label leaves its CPUs in the LS pool."""
    pinned = (
        make_pod("pinned")
        .kube_qos("Guaranteed")
        .annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"0-1,4-5"}')
        .build()
    )
    pods, samples = _pods(host, pinned)
    plan = CPUSuppress().plan(snapshot(host, pods=pods, samples=samples, slo=ENABLED))
    assert plan.leveled == [_levels(host, "0-1,4")]  # as without the pinned pod


@pytest.mark.parametrize("enable", [True, False])
def test_be_cpu_manager_leaves_the_containers_of_bound_pods_alone(host, enable):
    """With BECPUManager (checked before the NodeSLO switch, as upstream) the BE directory,
    every BE pod and the containers of pods without a resource status get the full set;
    the containers of a pod bound to a cpuset or NUMA node are left to the cpuset hook."""
    bound_cid = "containerd://" + "c" * 64
    bound = (
        make_pod("bound")
        .qos("BE")
        .kube_qos("BestEffort")
        .annotation(ANNOTATION_RESOURCE_STATUS, '{"numaNodeResources":[{"node":0}]}')
        .container("main", cid=bound_cid)
        .build()
    )
    host.add_pod("BestEffort", bound["metadata"]["uid"], [bound_cid])
    pods, samples = _pods(host, bound)
    slo = {"resourceUsedThresholdWithBE": {"enable": enable}}
    plan = CPUSuppress().plan(
        snapshot(host, pods=pods, samples=samples, slo=slo, gates={"BECPUManager": True})
    )
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    [levels] = plan.leveled
    assert [u.relative for u in levels[0]] == [be]
    assert sorted(u.relative for u in levels[1]) == sorted(
        [
            host.pod_dir("BestEffort", make_pod("batch").uid),
            host.pod_dir("BestEffort", bound["metadata"]["uid"]),
        ]
    )
    assert [u.relative for u in levels[2]] == [
        host.container_dir("BestEffort", make_pod("batch").uid, BE_CID)
    ]
    assert {u.value for level in levels for u in level} == {"0-7"}
    assert plan.updates == [CgroupUpdate("cpu.cfs_quota_us", be, -1, "CPUSuppress")]
    assert plan.notes == ["BECPUManager keeps BE pods on their share pools"]


def test_without_pods_nothing_is_planned(host):
    """Upstream skips the round when the kubelet reports no pods (nothing to protect yet)."""
    samples = [kinds.NODE_CPU_USAGE.sample(4.0, NOW - 0.5)]
    plan = CPUSuppress().plan(snapshot(host, pods=[], samples=samples, slo=ENABLED))
    assert plan.empty
    assert plan.notes == ["no pods reported by the kubelet yet"]


def test_a_zero_threshold_is_zero(host):
    slo = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 0}}
    plan = CPUSuppress().plan(_snapshot(host, slo))
    assert plan.leveled == [_levels(host, "0,4")]  # 0 - 2000 - 500 < 0: the 2-CPU minimum


def test_suppress_is_computed_in_whole_milli_cores(host):
    """Upstream truncates each term to milli-cores: 5200 - 2000 (2.0004 cores) - 199
    (system 3.7 - 3.5004 = 0.1996 core) = 3001m -> 4 CPUs (the exact 3000m would give 3)."""
    ls = make_pod("web").qos("LS").kube_qos("Burstable").build()
    be = make_pod("batch").qos("BE").kube_qos("BestEffort").container("main", cid=BE_CID).build()
    host.add_pod("BestEffort", be["metadata"]["uid"], [BE_CID])
    samples = [
        kinds.NODE_CPU_USAGE.sample(3.7, NOW - 0.5),
        kinds.POD_CPU_USAGE.sample(2.0004, NOW - 0.5, pod_uid=ls["metadata"]["uid"]),
        kinds.POD_CPU_USAGE.sample(1.5, NOW - 0.5, pod_uid=be["metadata"]["uid"]),
    ]
    plan = CPUSuppress().plan(snapshot(host, pods=[ls, be], samples=samples, slo=ENABLED))
    assert plan.leveled == [_levels(host, "0-1,4-5")]


def test_growth_from_an_empty_be_cpuset_is_limited_too(host):
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    host.set("cpuset.cpus", be, "")
    plan = CPUSuppress().plan(_snapshot(host))
    # 3 CPUs asked, at most 0 + ceil(8 * 10%) = 1 (upstream's rule, even under the minimum of 2)
    assert plan.leveled == [_levels(host, "0")]
    assert plan.notes == ["BE cpuset grows by at most 1 CPUs a round"]


def test_an_unreadable_be_cpuset_is_left_for_the_next_round(host):
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    host.cgroups.path("cpuset.cpus", be).unlink()
    plan = CPUSuppress().plan(_snapshot(host))
    assert plan.leveled == []
    assert plan.updates == [CgroupUpdate("cpu.cfs_quota_us", be, -1, "CPUSuppress")]  # still released
    assert plan.notes == ["the BE cpuset cannot be read: not changed this round"]


def test_only_host_applications_the_node_slo_names_count(host):
    """A host application's usage left in the metric cache after the NodeSLO stopped naming it
    is not counted (upstream queries only the NodeSLO's host applications)."""
    pods, samples = _pods(host)
    samples.append(kinds.HOST_APPLICATION_CPU_USAGE.sample(2.0, NOW - 0.5, host_app_name="gone"))
    plan = CPUSuppress().plan(snapshot(host, pods=pods, samples=samples, slo=ENABLED))
    assert plan.leveled == [_levels(host, "0-1,4")]  # 2700m, as without it


QUOTA = {
    "resourceUsedThresholdWithBE": {
        **ENABLED["resourceUsedThresholdWithBE"],
        "cpuSuppressPolicy": "cfsQuota",
    }
}


def test_without_the_cpu_topology_nothing_is_suppressed(host):
    """Upstream needs the node's CPU info before either policy."""
    pods, samples = _pods(host)
    plan = CPUSuppress().plan(snapshot(host, pods=pods, samples=samples, slo=QUOTA, topology=False))
    assert plan.empty
    assert plan.notes == ["CPU topology not collected yet"]


def test_switched_off_without_the_cpu_topology_only_the_quota_is_released(host):
    slo = {"resourceUsedThresholdWithBE": {"enable": False}}
    pods, samples = _pods(host)
    plan = CPUSuppress().plan(snapshot(host, pods=pods, samples=samples, slo=slo, topology=False))
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    assert plan.updates == [CgroupUpdate("cpu.cfs_quota_us", be, -1, "CPUSuppress")]
    assert plan.leveled == []
    assert "CPU topology not collected yet: the BE cpuset is not reset" in plan.notes


def test_the_full_cpuset_is_the_node_processors(host):
    """The reset writes the processors of the CPU topology, as upstream (not the root cgroup's
    cpuset)."""
    host.set("cpuset.cpus", "", "0-5")
    slo = {"resourceUsedThresholdWithBE": {"enable": False}}
    plan = CPUSuppress().plan(_snapshot(host, slo=slo))
    assert plan.leveled == [_levels(host, "0-7")]


def test_without_a_node_slo_nothing_is_planned(host):
    """No NodeSLO switch to read: upstream neither suppresses nor resets."""
    base = _snapshot(host)
    plan = CPUSuppress().plan(Snapshot(**{**base.__dict__, "node_slo": NodeSLOSpec()}))
    assert plan.empty
    assert plan.notes == ["suppress skipped: no NodeSLO spec to read the feature switch from"]


def test_quota_deadband_uses_whole_cores(host):
    """Capacity 7500m counts as 8 cores (the quantity's Value()): the deadband is 8000us, so
    a move from 230000us to 237500us (4875 - 2000 - 500 = 2375m) is skipped."""
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    host.set("cpu.cfs_quota_us", be, 230000)
    plan = CPUSuppress().plan(_snapshot(host, QUOTA, node_obj=node(cpu="7500m")))
    assert [u for u in plan.updates if isinstance(u, CgroupUpdate) and u.key == "cpu.cfs_quota_us"] == []
    assert plan.notes == ["quota change 7500us is under the 1% deadband"]


def test_an_unset_quota_is_set_however_small_the_target(host):
    """Upstream applies the 1 % deadband to an unset (-1) quota too, so a target of 6000us
    (32 %: 2560 - 2000 - 500 = 60m) on 8 cores (deadband 8000us) would leave BE pods
    unlimited; the quota is set here."""
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    host.set("cpu.cfs_quota_us", be, -1)
    slo = {
        "resourceUsedThresholdWithBE": {
            **QUOTA["resourceUsedThresholdWithBE"],
            "cpuSuppressThresholdPercent": 32,
        }
    }
    plan = CPUSuppress().plan(_snapshot(host, slo))
    assert plan.updates == [CgroupUpdate("cpu.cfs_quota_us", be, 6000, "CPUSuppress")]
