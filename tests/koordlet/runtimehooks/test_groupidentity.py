"""GroupIdentity plans: bvt on kernels with group identity, cpu.idle on mainline kernels."""

from __future__ import annotations

import pytest

from koordinator.api.kubeqos import KubeQOSClass
from koordlet.runtimehooks.hooks.groupidentity import GroupIdentity
from koordlet.runtimehooks.protocol import PodContext, QOSContext, Resources
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.runtimehooks.conftest import facts, meta

ENABLED = {
    "resourceQOSStrategy": {
        "lsrClass": {"cpuQOS": {"enable": True}},
        "lsClass": {"cpuQOS": {"enable": True}},
        "beClass": {"cpuQOS": {"enable": True}},
    }
}


@pytest.fixture(params=["v1", "v2"])
def bvt_host(request, tmp_path) -> FakeHost:
    return FakeHost(tmp_path, request.param, features={"bvt", "cpu.idle"})


@pytest.fixture(params=["v1", "v2"])
def mainline_host(request, tmp_path) -> FakeHost:
    return FakeHost(tmp_path, request.param, features={"cpu.idle"})


def _pod(host, builder, slo=ENABLED) -> Resources:
    ctx = PodContext(meta(host, builder.build()), facts(host, slo=slo))
    GroupIdentity().pod(ctx)
    return ctx.response.resources


@pytest.mark.parametrize(
    ("qos", "bvt"),
    [("LSE", 2), ("LSR", 2), ("LS", 2), ("BE", -1), ("SYSTEM", 0)],
)
def test_bvt_per_class(bvt_host, qos, bvt):
    assert _pod(bvt_host, make_pod("p").qos(qos)) == Resources(cpu_bvt=bvt)


def test_disabled_classes_get_zero(bvt_host):
    assert _pod(bvt_host, make_pod("p").qos("BE"), slo={}) == Resources(cpu_bvt=0)


def test_ls_annotation_override(bvt_host):
    builder = (
        make_pod("p").qos("LS").annotation("koordinator.sh/cpuQOS", '{"groupIdentity": 1, "enable": true}')
    )
    assert _pod(bvt_host, builder) == Resources(cpu_bvt=1)
    off = make_pod("q").qos("LS").annotation("koordinator.sh/cpuQOS", '{"enable": false}')
    assert _pod(bvt_host, off) == Resources(cpu_bvt=0)


def test_kube_qos_dirs_and_the_sysctl(bvt_host):
    bvt_host.write("proc/sys/kernel/sched_group_identity_enabled", "0\n")
    node = facts(bvt_host, slo=ENABLED)
    values = {}
    for qos in KubeQOSClass:
        ctx = QOSContext(qos, node)
        GroupIdentity().kube_qos(ctx)
        values[qos] = ctx.response.resources.cpu_bvt
        if qos is KubeQOSClass.GUARANTEED:
            [sysctl] = ctx.response.extra
            assert sysctl.describe().endswith("sched_group_identity_enabled=1")
    assert values == {KubeQOSClass.GUARANTEED: 0, KubeQOSClass.BURSTABLE: 2, KubeQOSClass.BEST_EFFORT: -1}


def test_mainline_kernels_use_cpu_idle_for_be(mainline_host):
    assert _pod(mainline_host, make_pod("be").qos("BE")) == Resources(cpu_idle=1)
    assert _pod(mainline_host, make_pod("ls").qos("LS")) == Resources(cpu_idle=0)
    node = facts(mainline_host, slo=ENABLED)
    idle = {}
    for qos in KubeQOSClass:
        ctx = QOSContext(qos, node)
        GroupIdentity().kube_qos(ctx)
        idle[qos] = ctx.response.resources.cpu_idle
    # the kube-QoS cgroups stay schedulable with shares: the kubelet writes besteffort's
    # cpu.shares when it starts, which the kernel refuses on an idle cgroup
    assert idle == {KubeQOSClass.GUARANTEED: 0, KubeQOSClass.BURSTABLE: 0, KubeQOSClass.BEST_EFFORT: 0}
    # BE class disabled: nothing idles
    assert _pod(mainline_host, make_pod("be").qos("BE"), slo={}) == Resources(cpu_idle=0)


def test_enabled(tmp_path):
    bare = FakeHost(tmp_path, "v1")
    ok, why = GroupIdentity().enabled(facts(bare))
    assert not ok
    assert "cpu.idle" in why
    core_sched = {"resourceQOSStrategy": {"policies": {"cpuPolicy": "coreSched"}}}
    idle_host = FakeHost(tmp_path / "b", "v1", features={"cpu.idle"})
    assert GroupIdentity().enabled(facts(idle_host))[0]
    assert not GroupIdentity().enabled(facts(idle_host, slo=core_sched))[0]
    assert not GroupIdentity().enabled(facts(idle_host, gates={"GroupIdentity": False}))[0]
