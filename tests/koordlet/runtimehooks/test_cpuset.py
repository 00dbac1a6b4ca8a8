"""CPUSetAllocator plans: pinned, NUMA-bound, SYSTEM, LS, BE and static-policy pods."""

from __future__ import annotations

import json

import pytest

from koordinator.api.extension.numa import ANNOTATION_RESOURCE_STATUS
from koordinator.api.extension.topology import ANNOTATION_BE_CPU_SHARED_POOLS, ANNOTATION_CPU_SHARED_POOLS
from koordlet.executor import ResourceUpdateExecutor
from koordlet.runtimehooks.framework import HookManager
from koordlet.runtimehooks.hooks.cpuset import CPUSetAllocator
from koordlet.runtimehooks.protocol import ContainerContext, PodContext, Resources
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.runtimehooks.registry import hooks
from tests.fakes.pods import PodBuilder, make_pod
from tests.koordlet.runtimehooks.conftest import facts, meta

POOLS = {
    ANNOTATION_CPU_SHARED_POOLS: json.dumps(
        [{"socket": 0, "node": 0, "cpuset": "2-3"}, {"socket": 1, "node": 1, "cpuset": "6-7"}]
    ),
    ANNOTATION_BE_CPU_SHARED_POOLS: json.dumps(
        [{"socket": 0, "node": 0, "cpuset": "0-3"}, {"socket": 1, "node": 1, "cpuset": "4-7"}]
    ),
}


def _container(host, builder: PodBuilder, **kw) -> Resources:
    pod = builder.container("main", cid="containerd://" + "c" * 64).build()
    m = meta(host, pod)
    ctx = ContainerContext(m, m.containers[0], facts(host, topology=POOLS, **kw))
    CPUSetAllocator().container(ctx)
    return ctx.response.resources


@pytest.mark.parametrize(
    ("builder", "kwargs", "expected"),
    [
        pytest.param(
            make_pod("lsr").qos("LSR").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"4-5"}'),
            {},
            Resources(cpuset="4-5", cfs_quota=-1),
            id="pinned-lsr",
        ),
        pytest.param(
            make_pod("numa")
            .qos("LS")
            .annotation(
                ANNOTATION_RESOURCE_STATUS, '{"numaNodeResources":[{"node":1,"resources":{"cpu":"2"}}]}'
            ),
            {},
            Resources(cpuset="6-7"),
            id="numa-bound-ls",
        ),
        pytest.param(
            make_pod("be-numa")
            .qos("BE")
            .annotation(
                ANNOTATION_RESOURCE_STATUS,
                '{"numaNodeResources":[{"node":0,"resources":{"kubernetes.io/batch-cpu":"2000"}}]}',
            ),
            {"gates": {"BECPUManager": True}},
            Resources(cpuset="0-3"),
            id="numa-bound-be-with-becpumanager",
        ),
        pytest.param(
            make_pod("be-numa")
            .qos("BE")
            .kube_qos("BestEffort")
            .annotation(
                ANNOTATION_RESOURCE_STATUS,
                '{"numaNodeResources":[{"node":0,"resources":{"kubernetes.io/batch-cpu":"2000"}}]}',
            ),
            {},
            Resources(),  # not the LS pools of node 0: CPUSuppress owns the besteffort cpusets
            id="numa-bound-be-without-becpumanager-left",
        ),
        pytest.param(
            make_pod("numa-unlabeled")
            .kube_qos("Burstable")
            .annotation(
                ANNOTATION_RESOURCE_STATUS, '{"numaNodeResources":[{"node":1,"resources":{"cpu":"2"}}]}'
            ),
            {"static": True},
            Resources(cpuset="6-7"),
            id="numa-bound-without-qos-label",
        ),
        pytest.param(make_pod("ls").qos("LS"), {}, Resources(cpuset="2-3,6-7"), id="ls-share-pools"),
        pytest.param(
            make_pod("be").qos("BE").kube_qos("BestEffort"), {}, Resources(), id="kube-besteffort-left"
        ),
        pytest.param(
            make_pod("g").kube_qos("Guaranteed"), {"static": True}, Resources(), id="kubelet-static-left"
        ),
        pytest.param(
            make_pod("g").kube_qos("Guaranteed"), {}, Resources(cpuset="2-3,6-7"), id="others-share-pools"
        ),
        # no koordinator.sh/qosClass label: not LS here (upstream reads the label as it is)
        pytest.param(
            make_pod("b").kube_qos("Burstable"), {"static": True}, Resources(), id="burstable-static-left"
        ),
        pytest.param(
            make_pod("b").kube_qos("Burstable"), {}, Resources(cpuset="2-3,6-7"), id="burstable-share-pools"
        ),
        pytest.param(
            make_pod("ls").qos("LS").kube_qos("Burstable"),
            {"static": True},
            Resources(cpuset="2-3,6-7"),
            id="ls-label-static-share-pools",
        ),
    ],
)
def test_container_cpusets(any_host, builder, kwargs, expected):
    kw = {}
    if kwargs.get("static"):
        kw["kubelet_cpu_policy"] = "static"
    if "gates" in kwargs:
        kw["gates"] = kwargs["gates"]
    assert _container(any_host, builder, **kw) == expected


@pytest.mark.parametrize(
    ("gate", "expected"), [(False, "1"), (True, "0-3")], ids=["suppressed", "becpumanager"]
)
def test_reconciler_keeps_the_suppressed_cpuset_of_numa_bound_be_pods(any_host, gate, expected):
    """CPUSuppress writes the besteffort containers' cpusets; without BECPUManager the
    reconciler leaves them (it used to put the LS pools back every pass)."""
    cid = "containerd://" + "c" * 64
    pod = (
        make_pod("be-numa")
        .qos("BE")
        .kube_qos("BestEffort")
        .annotation(
            ANNOTATION_RESOURCE_STATUS,
            '{"numaNodeResources":[{"node":0,"resources":{"kubernetes.io/batch-cpu":"2000"}}]}',
        )
        .container("main", cid=cid)
        .build()
    )
    m = meta(any_host, pod)
    any_host.add_pod("BestEffort", m.uid, [cid])
    container = m.containers[0].cgroup_dir
    any_host.set("cpuset.cpus", container, "1")  # CPUSuppress's cpuset
    node = facts(any_host, topology=POOLS, gates={"BECPUManager": gate})
    executor = ResourceUpdateExecutor(node.cgroups)
    reconciler = Reconciler(HookManager(hooks()), lambda: node, lambda: [m], executor)
    reconciler.reconcile()
    reconciler.reconcile()
    # the file written (v2's fake does not derive cpuset.cpus.effective from it)
    assert node.cgroups.path("cpuset.cpus", container, for_write=True).read_text().strip() == expected


def test_disable_unset_cpu_quota_keeps_the_quota_of_pinned_pods(any_host):
    pod = make_pod("lsr").qos("LSR").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"4-5"}')
    m = meta(any_host, pod.container("main", cid="containerd://" + "c" * 64).build())
    node = facts(any_host, topology=POOLS)
    node.disable_unset_cpu_quota = True
    ctx = ContainerContext(m, m.containers[0], node)
    CPUSetAllocator().container(ctx)
    assert ctx.response.resources == Resources(cpuset="4-5")


def test_system_pods_get_the_system_qos_cpuset(any_host):
    node = {"metadata": {"annotations": {"node.koordinator.sh/system-qos-resource": '{"cpuset":"0-1"}'}}}
    assert _container(any_host, make_pod("sys").qos("SYSTEM"), node=node) == Resources(cpuset="0-1")


def test_no_share_pools_yet_leaves_the_cpuset(any_host):
    pod = make_pod("ls").qos("LS").container("main", cid="containerd://" + "c" * 64).build()
    m = meta(any_host, pod)
    ctx = ContainerContext(m, m.containers[0], facts(any_host))
    CPUSetAllocator().container(ctx)
    assert ctx.response.resources == Resources()


def test_pod_level_lifts_the_quota_of_pinned_pods(any_host):
    pinned = meta(
        any_host, make_pod("p").qos("LSE").annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset":"1"}').build()
    )
    ctx = PodContext(pinned, facts(any_host))
    CPUSetAllocator().pod(ctx)
    assert ctx.response.resources == Resources(cfs_quota=-1)
    plain = PodContext(meta(any_host, make_pod("q").qos("LS").build()), facts(any_host))
    CPUSetAllocator().pod(plain)
    assert plain.response.resources == Resources()


def test_malformed_annotations_are_ignored(any_host):
    builder = make_pod("x").qos("LS").annotation(ANNOTATION_RESOURCE_STATUS, "{broken")
    assert _container(any_host, builder) == Resources(cpuset="2-3,6-7")
