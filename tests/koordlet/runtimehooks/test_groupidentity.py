"""GroupIdentity plans: bvt on kernels with group identity, cpu.idle on mainline kernels."""

from __future__ import annotations

from typing import Any

import pytest

from koordinator.api.kubeqos import KubeQOSClass
from koordlet.executor import ResourceUpdateExecutor
from koordlet.runtimehooks.framework import HookManager
from koordlet.runtimehooks.hooks.groupidentity import GroupIdentity
from koordlet.runtimehooks.protocol import NodeFacts, PodContext, QOSContext, Resources
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.runtimehooks.registry import hooks
from koordlet.statesinformer.podmeta import PodMeta
from tests.fakes.host import FakeHost
from tests.fakes.pods import PodBuilder, make_pod
from tests.koordlet.runtimehooks.conftest import facts, meta

SYSCTL = "proc/sys/kernel/sched_group_identity_enabled"
SCHED_CORE = "proc/sys/kernel/sched_core"
CPU_QOS = "koordinator.sh/cpuQOS"

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


def _classes(lsr: bool = False, ls: bool = False, be: bool = False, **strategy: Any) -> dict[str, Any]:
    enabled = {"lsrClass": lsr, "lsClass": ls, "beClass": be}
    classes = {name: {"cpuQOS": {"enable": on}} for name, on in enabled.items()}
    return {"resourceQOSStrategy": {**classes, **strategy}}


@pytest.mark.parametrize(
    ("qos", "kube_qos", "bvt"),
    [
        ("LSE", "Guaranteed", 2),
        ("LSR", "Guaranteed", 2),
        ("LS", "Burstable", 2),
        ("BE", "BestEffort", -1),
        # SYSTEM and unlabeled pods: by their Kubernetes QoS
        ("SYSTEM", "Guaranteed", 2),
        ("SYSTEM", "Burstable", 2),
        ("SYSTEM", "BestEffort", -1),
        (None, "Guaranteed", 2),
        (None, "Burstable", 2),
        (None, "BestEffort", -1),
    ],
)
def test_bvt_per_class(bvt_host, qos, kube_qos, bvt):
    builder = make_pod("p").kube_qos(kube_qos)
    if qos is not None:
        builder.qos(qos)
    assert _pod(bvt_host, builder) == Resources(cpu_bvt=bvt)


@pytest.mark.parametrize(
    ("slo", "bvt"),
    [
        pytest.param(_classes(lsr=True, ls=True), 2, id="lsr-on"),
        pytest.param(_classes(ls=True), 2, id="lsr-off-ls-on"),
        pytest.param(
            {
                "resourceQOSStrategy": {
                    "lsrClass": {"cpuQOS": {"enable": True, "groupIdentity": 1}},
                    "lsClass": {"cpuQOS": {"enable": True}},
                }
            },
            1,
            id="lsr-value-first",
        ),
        pytest.param(_classes(be=True), 0, id="lsr-and-ls-off"),
    ],
)
def test_guaranteed_pod_without_class(bvt_host, slo, bvt):
    """upstream's kube-QoS fallback: LSR's value when LSR is enabled, else LS's, else 0."""
    assert _pod(bvt_host, make_pod("g").kube_qos("Guaranteed"), slo=slo) == Resources(cpu_bvt=bvt)


def test_disabled_classes_get_zero(bvt_host):
    assert _pod(bvt_host, make_pod("p").qos("BE"), slo={}) == Resources(cpu_bvt=0)


@pytest.mark.parametrize(
    ("qos", "annotation", "bvt"),
    [
        pytest.param("LS", '{"groupIdentity": 1, "enable": true}', 1, id="value"),
        pytest.param("LS", '{"groupIdentity": -1, "enable": true}', -1, id="down-to-be"),
        pytest.param("LS", '{"enable": true}', 2, id="enabled-keeps-the-class-value"),
        pytest.param("LS", '{"enable": false}', 0, id="disabled"),
        pytest.param("LS", '{"groupIdentity": 1}', 0, id="enable-unset"),
        pytest.param("LS", "{broken", 2, id="malformed-ignored"),
        pytest.param("BE", '{"groupIdentity": 2, "enable": true}', -1, id="only-ls-pods"),
    ],
)
def test_ls_annotation_override(bvt_host, qos, annotation, bvt):
    builder = make_pod("p").qos(qos).annotation(CPU_QOS, annotation)
    assert _pod(bvt_host, builder) == Resources(cpu_bvt=bvt)


def test_kube_qos_dirs_and_the_sysctl(bvt_host):
    bvt_host.write(SYSCTL, "0\n")
    bvt_host.write(SCHED_CORE, "1\n")
    node = facts(bvt_host, slo=ENABLED)
    values = {}
    for qos in KubeQOSClass:
        ctx = QOSContext(qos, node)
        GroupIdentity().kube_qos(ctx)
        values[qos] = ctx.response.resources.cpu_bvt
        switches = [u.describe().rsplit("/", 1)[-1] for u in ctx.response.extra]
        # core scheduling off first: the kernel has the two exclude each other
        expected = (
            ["sched_core=0", "sched_group_identity_enabled=1"] if qos is KubeQOSClass.GUARANTEED else []
        )
        assert switches == expected
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
    # another CPU policy does not disable the hook: it resets the values to 0 (below)
    assert GroupIdentity().enabled(facts(idle_host, slo=core_sched))[0]
    assert not GroupIdentity().enabled(facts(idle_host, gates={"GroupIdentity": False}))[0]


def test_mainline_kernels_idle_negative_identities(mainline_host):
    down = make_pod("ls").qos("LS").annotation(CPU_QOS, '{"groupIdentity": -1, "enable": true}')
    assert _pod(mainline_host, down) == Resources(cpu_idle=1)
    assert _pod(mainline_host, make_pod("unlabeled").kube_qos("BestEffort")) == Resources(cpu_idle=1)
    sched_idle = {
        "resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True, "groupIdentity": 0, "schedIdle": 1}}}
    }
    assert _pod(mainline_host, make_pod("be").qos("BE"), slo=sched_idle) == Resources(cpu_idle=1)
    core_sched = _classes(be=True, policies={"cpuPolicy": "coreSched"})
    assert _pod(mainline_host, make_pod("be").qos("BE"), slo=core_sched) == Resources(cpu_idle=0)


# --- the reconciler on the fake cgroup tree -----------------------------------------------

CID = "containerd://" + "e" * 64


class Node:
    """A BE pod with one container on a bvt host, reconciled by the registry's hooks."""

    def __init__(
        self, host: FakeHost, builder: PodBuilder | None = None, kube_qos: str = "BestEffort"
    ) -> None:
        self.host = host
        builder = builder or make_pod("batch").qos("BE")
        self.pod: PodMeta = meta(host, builder.kube_qos(kube_qos).container("main", cid=CID).build())
        host.add_pod(kube_qos, self.pod.uid, [CID])
        self.sandbox = host.make_cgroup(f"{self.pod.cgroup_dir}/{'f' * 64}")  # the pause container's
        self.node: NodeFacts = facts(host)
        self.reconciler = Reconciler(
            HookManager(hooks()),
            lambda: self.node,
            lambda: [self.pod],
            ResourceUpdateExecutor(self.node.cgroups),
        )

    def reconcile(self, slo: dict[str, Any] | None = None, **kw: Any) -> None:
        self.node = facts(self.host, slo=slo, **kw)
        self.reconciler.reconcile()

    def bvt(self) -> dict[str, object]:
        get = self.host.get
        return {
            "besteffort": get("cpu.bvt_warp_ns", self.host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)),
            "pod": get("cpu.bvt_warp_ns", self.pod.cgroup_dir),
            "container": get("cpu.bvt_warp_ns", self.pod.containers[0].cgroup_dir),
            "sandbox": get("cpu.bvt_warp_ns", self.sandbox),
        }


def _all(value: int) -> dict[str, object]:
    return dict.fromkeys(("besteffort", "pod", "container", "sandbox"), value)


def test_containers_follow_their_pod(bvt_host):
    bvt_host.write(SYSCTL, "1\n")
    node = Node(bvt_host)
    node.reconcile(_classes(be=True))
    assert node.bvt() == _all(-1)
    # the kernel gave a container started now the pod's value; disabling resets them all
    node.reconcile({})
    assert node.bvt() == _all(0)


def test_another_cpu_policy_resets_the_values(bvt_host):
    bvt_host.write(SYSCTL, "1\n")
    node = Node(bvt_host)
    node.reconcile(_classes(be=True))
    assert node.bvt() == _all(-1)
    node.reconcile(_classes(be=True, policies={"cpuPolicy": "coreSched"}))
    assert node.bvt() == _all(0)
    assert bvt_host.read(SYSCTL).strip() == "1"  # left as it is (upstream does not switch it off)


def test_nothing_is_written_while_disabled_and_switched_off(bvt_host):
    bvt_host.write(SYSCTL, "0\n")
    node = Node(bvt_host)
    for rel in (node.pod.cgroup_dir, node.sandbox):
        bvt_host.set("cpu.bvt_warp_ns", rel, -1)
    node.reconcile({})  # the default NodeSLO: every class's cpuQOS disabled
    assert node.bvt() == {"besteffort": 0, "pod": -1, "container": 0, "sandbox": -1}
    assert bvt_host.read(SYSCTL).strip() == "0"


def test_kernels_without_the_switch_get_zeros_while_disabled(bvt_host):
    node = Node(bvt_host)
    bvt_host.set("cpu.bvt_warp_ns", node.pod.cgroup_dir, -1)
    node.reconcile({})
    assert node.bvt() == _all(0)
    assert not (bvt_host.paths.proc_root / "sys/kernel/sched_group_identity_enabled").exists()


def test_the_switch_is_turned_on_only_for_an_enabled_class(bvt_host):
    bvt_host.write(SYSCTL, "0\n")
    bvt_host.write(SCHED_CORE, "1\n")
    node = Node(bvt_host)
    node.reconcile({})
    assert (bvt_host.read(SYSCTL).strip(), bvt_host.read(SCHED_CORE).strip()) == ("0", "1")
    node.reconcile(_classes(be=True))
    assert (bvt_host.read(SYSCTL).strip(), bvt_host.read(SCHED_CORE).strip()) == ("1", "0")
    assert node.bvt() == _all(-1)  # the cgroups got their values in the same pass


@pytest.mark.parametrize(
    ("gate", "setting", "expected"),
    [
        pytest.param(True, 0, "0", id="systemconfig-owns-it"),
        pytest.param(True, None, "1", id="systemconfig-unset"),
        pytest.param(False, 0, "1", id="systemconfig-gate-off"),
    ],
)
def test_the_systemconfig_setting_owns_the_switch(bvt_host, gate, setting, expected):
    """The SystemConfig strategy writes schedGroupIdentityEnabled when it is set; the hook then
    leaves the file to it, so the two do not write it in turn."""
    bvt_host.write(SYSCTL, "0\n")
    node = Node(bvt_host)
    system = {} if setting is None else {"schedGroupIdentityEnabled": setting}
    slo = _classes(be=True) | {"systemStrategy": system}
    node.reconcile(slo, gates={"SystemConfig": gate})
    node.reconcile(slo, gates={"SystemConfig": gate})
    assert bvt_host.read(SYSCTL).strip() == expected
    assert node.bvt() == _all(-1)  # the cgroups get the rule's values either way
