"""Host tier: CPUSuppress on real cgroup v1 hierarchies under a test-owned parent.

The kubepods layout is rooted in the test's own cgroup (``<parent>/kubepods``), so the
strategy and the executor act on real kernel files without touching anything else.
"""

from __future__ import annotations

import os

import pytest
from prometheus_client import CollectorRegistry

from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.executor import ResourceUpdateExecutor
from koordlet.metriccache import MetricCache, kinds
from koordlet.metrics import KoordletMetrics
from koordlet.qosmanager.framework import CgroupView, HostFacts, MetricsView, NodeView, QoSManager, Snapshot
from koordlet.qosmanager.strategies.cpu_suppress import CPUSuppress
from koordlet.statesinformer.podmeta import pod_meta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.layout import CgroupDriver, KubepodsLayout
from koordlet.system.paths import HostPaths
from koordlet.system.topology import NodeCPUInfo, read_cpu_basic_info, read_cpu_topology
from tests.fakes.pods import make_pod

pytestmark = pytest.mark.host

LS_UID, BE_UID = "ls-pod", "be-pod"


@pytest.fixture
def layout(host_cgroup_parent) -> KubepodsLayout:
    cpu = host_cgroup_parent("cpu")
    cpuset = host_cgroup_parent("cpuset")
    cgroups = CgroupFS(HostPaths.host(), 1)
    parent = cpu.name
    cgroups.write("cpuset.cpus", parent, str(cgroups.read("cpuset.cpus")))
    cgroups.write("cpuset.mems", parent, str(cgroups.read("cpuset.mems")))
    layout = KubepodsLayout(CgroupDriver.CGROUPFS, f"{parent}/kubepods")
    be = layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    for rel in (layout.root, be, f"{be}/pod{BE_UID}", f"{be}/pod{BE_UID}/container"):
        for base in (cpu.parent, cpuset.parent):
            (base / rel).mkdir()
        cgroups.write("cpuset.cpus", rel, str(cgroups.read("cpuset.cpus", parent)))
        cgroups.write("cpuset.mems", rel, str(cgroups.read("cpuset.mems", parent)))
    return layout


def _snapshot(layout: KubepodsLayout, policy: str, node_used: float, ls_used: float, now: float) -> Snapshot:
    paths = HostPaths.host()
    cgroups = CgroupFS(paths, 1)
    cache = MetricCache()
    cache.append(
        [
            kinds.NODE_CPU_USAGE.sample(node_used, now),
            kinds.POD_CPU_USAGE.sample(ls_used, now, pod_uid=LS_UID),
            kinds.POD_CPU_USAGE.sample(0.3, now, pod_uid=BE_UID),
        ]
    )
    topology = read_cpu_topology(paths)
    spec = NodeSLOSpec.from_dict(
        {
            "resourceUsedThresholdWithBE": {
                "enable": True,
                "cpuSuppressThresholdPercent": 65,
                "cpuSuppressPolicy": policy,
            }
        }
    )
    ls = make_pod("ls").qos("LS").kube_qos("Burstable").build()
    ls["metadata"]["uid"] = LS_UID
    ls_meta = pod_meta(ls, layout)
    assert ls_meta is not None
    return Snapshot(
        now=now,
        node=NodeView.decode({"status": {"capacity": {"cpu": "2"}, "allocatable": {"cpu": "2"}}}),
        node_slo=merge_node_slo_spec(spec),
        # the LS pod only: the BE pod's usage has no PodMeta (counted as non-BE, as upstream)
        pods=[ls_meta],
        metrics=MetricsView(cache),
        host=HostFacts(1, layout, NodeCPUInfo(topology, read_cpu_basic_info(paths, topology), "")),
        cgroups=CgroupView(cgroups),
        gates=FeatureGates(KOORDLET_FEATURES),
    )


def _no_snapshot() -> Snapshot:
    raise AssertionError("the test plans by itself")


def _manager() -> QoSManager:
    """A runner used only to apply plans (the executor's writes, the gauges)."""
    cgroups = CgroupFS(HostPaths.host(), 1)
    metrics = KoordletMetrics(CollectorRegistry(), "n")
    return QoSManager([], _no_snapshot, ResourceUpdateExecutor(cgroups), None, metrics)


def test_quota_shrinks_when_ls_usage_rises_and_comes_back_when_it_falls(layout):
    cgroups = CgroupFS(HostPaths.host(), 1)
    be = layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    manager = _manager()
    strategy = CPUSuppress()
    # LS pods use 1.2 of 2 cores: 1300m - 1200m - 200m system < 0 -> the 2000us floor
    manager.apply(strategy.plan(_snapshot(layout, "cfsQuota", 1.8, 1.2, 1000)))
    assert cgroups.read("cpu.cfs_quota_us", be) == 2000
    assert cgroups.read("cpuset.cpus", be) == str(cgroups.read("cpuset.cpus"))  # the full set
    # LS usage falls to 0.2: suppress = 1300 - 500 (both pods: without a PodMeta the BE one
    # counts as non-BE, as upstream) - 99 (the system's 0.6 - 0.5 = 0.0999... core, in whole
    # milli-cores as upstream's quantities) = 701m -> 70100us, reached in steps of 10 % of
    # the node (20000us) per round
    seen = []
    for round_ in range(8):
        manager.apply(strategy.plan(_snapshot(layout, "cfsQuota", 0.6, 0.2, 1001 + round_)))
        seen.append(cgroups.read("cpu.cfs_quota_us", be))
    assert seen[:5] == [22000, 42000, 62000, 70100, 70100]
    assert seen[-1] == 70100
    # suppression switched off: unlimited again
    snapshot = _snapshot(layout, "cfsQuota", 0.6, 0.2, 2000)
    off = Snapshot(
        **{
            **snapshot.__dict__,
            "node_slo": merge_node_slo_spec(
                NodeSLOSpec.from_dict({"resourceUsedThresholdWithBE": {"enable": False}})
            ),
        }
    )
    manager.apply(strategy.plan(off))
    assert cgroups.read("cpu.cfs_quota_us", be) == -1


def test_cpuset_policy_writes_the_be_tree_in_kernel_order(layout):
    cgroups = CgroupFS(HostPaths.host(), 1)
    be = layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    container = f"{be}/pod{BE_UID}/container"
    cgroups.write("cpu.cfs_quota_us", be, 50000)
    manager = _manager()
    plan = CPUSuppress().plan(_snapshot(layout, "cpuset", 1.8, 1.2, 1000))
    manager.apply(plan)
    cpus = os.sched_getaffinity(0)
    expected = str(cgroups.read("cpuset.cpus"))  # two CPUs at least: on a small host, all of them
    if len(cpus) > 2:
        expected = plan.leveled[0][0][0].value  # type: ignore[assignment]
    for rel in (be, f"{be}/pod{BE_UID}", container):
        assert cgroups.read("cpuset.cpus", rel) == expected
    assert cgroups.read("cpu.cfs_quota_us", be) == -1  # the other mechanism is released
