"""Host tier: the reconciler applies BatchResource and GroupIdentity (cpu.idle on this
mainline kernel) to real cgroup v1 directories made for fake pods under a test-owned
parent; everything is removed afterwards by the fixture."""

from __future__ import annotations

import pytest

from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY
from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.executor import ResourceUpdateExecutor
from koordlet.runtimehooks.framework import HookManager
from koordlet.runtimehooks.protocol import NodeFacts
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.runtimehooks.registry import hooks
from koordlet.statesinformer.podmeta import pod_meta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.layout import CgroupDriver, KubepodsLayout
from koordlet.system.paths import HostPaths
from tests.fakes.pods import make_pod

pytestmark = pytest.mark.host

CID = "containerd://" + "a" * 64


def test_batch_resources_and_idle_on_real_cgroups(host_cgroup_parent):
    bases = [host_cgroup_parent(s) for s in ("cpu", "memory")]
    parent = bases[0].name
    layout = KubepodsLayout(CgroupDriver.CGROUPFS, f"{parent}/kubepods")
    cgroups = CgroupFS(HostPaths.host(), 1, layout=layout)
    if not cgroups.supported("cpu.idle")[0]:
        pytest.skip("this kernel has no cpu.idle")
    pod = (
        make_pod("batch")
        .qos("BE")
        .kube_qos("BestEffort")
        .container(
            "main", cid=CID, requests={BATCH_CPU: "500"}, limits={BATCH_CPU: "1500", BATCH_MEMORY: "256Mi"}
        )
        .build()
    )
    ls = make_pod("web").qos("LS").kube_qos("Burstable").build()
    metas = [m for m in (pod_meta(pod, layout), pod_meta(ls, layout)) if m is not None]
    for base in bases:
        for rel in (
            "kubepods",
            "kubepods/besteffort",
            "kubepods/burstable",
            f"kubepods/besteffort/pod{metas[0].uid}",
            f"kubepods/besteffort/pod{metas[0].uid}/{'a' * 64}",
            f"kubepods/burstable/pod{metas[1].uid}",
        ):
            (base / rel).mkdir()
    spec = NodeSLOSpec.from_dict({"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}}})
    node = NodeFacts(cgroups, {"metadata": {}}, merge_node_slo_spec(spec), FeatureGates(KOORDLET_FEATURES))
    reconciler = Reconciler(
        HookManager(hooks()), lambda: node, lambda: metas, ResourceUpdateExecutor(cgroups)
    )
    reconciler.reconcile()
    be, container = metas[0].cgroup_dir, metas[0].containers[0].cgroup_dir
    for rel in (be, container):
        assert cgroups.read("cpu.cfs_quota_us", rel) == 150000
        assert cgroups.read("memory.limit_in_bytes", rel) == 256 << 20
    assert cgroups.read("cpu.shares", container) == 512
    # the idle pod cgroup has the kernel's minimal weight (shares 3) and refuses shares
    assert cgroups.read("cpu.idle", be) == 1
    assert cgroups.read("cpu.shares", be) == 3
    # never the besteffort cgroup: the kubelet must be able to write its shares
    assert cgroups.read("cpu.idle", layout.qos_dir(KubeQOSClass.BEST_EFFORT)) == 0
    assert cgroups.read("cpu.idle", metas[1].cgroup_dir) == 0
    assert cgroups.read("cpu.idle", layout.qos_dir(KubeQOSClass.BURSTABLE)) == 0
    # a second pass changes nothing: the executor's cache and read-before-write
    audit = len(reconciler.executor.audit)
    reconciler.reconcile()
    assert len(reconciler.executor.audit) == audit
