"""CPUNormalization: LS and QoS-less pods' CFS quota divided by the node's ratio, as the
reconciler writes it into the pods' cgroups."""

from __future__ import annotations

from typing import Any

import pytest

from koordinator.api.extension.numa import ANNOTATION_RESOURCE_STATUS
from koordlet.executor import ResourceUpdateExecutor
from koordlet.runtimehooks.framework import HookManager
from koordlet.runtimehooks.hooks.cpunormalization import CPUNormalization, normalized, pod_limit_milli
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts, PodContext
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.runtimehooks.registry import hooks
from koordlet.statesinformer.podmeta import PodMeta
from tests.fakes.host import FakeHost
from tests.fakes.pods import PodBuilder, make_pod
from tests.koordlet.runtimehooks.conftest import facts, meta

RATIO = "node.koordinator.sh/cpu-normalization-ratio"
#: CPUBurst (on by default) owns LS quotas; these tests turn it off unless they check it
GATES = {"CPUNormalization": True, "CPUBurst": False}
CIDS = ["containerd://" + c * 64 for c in "abc"]


def _node(ratio: str | None) -> dict[str, Any]:
    return {"metadata": {"name": "node-1", "annotations": {} if ratio is None else {RATIO: ratio}}}


def _ls(name: str = "web", qos: str | None = "LS") -> PodBuilder:
    builder = make_pod(name).kube_qos("Burstable")
    return builder.qos(qos) if qos else builder


def _quotas(host: FakeHost, pod: PodMeta, node: NodeFacts, hook: CPUNormalization | None = None) -> list[Any]:
    """The quota the hook asks for the pod, then for each of its containers."""
    hook = hook or CPUNormalization()
    pod_ctx = PodContext(pod, node)
    hook.pod(pod_ctx)
    out = [pod_ctx.response.resources.cfs_quota]
    for container in pod.containers:
        ctx = ContainerContext(pod, container, node)
        hook.container(ctx)
        out.append(ctx.response.resources.cfs_quota)
    return out


@pytest.mark.parametrize(
    ("quota", "ratio", "expected"),
    [(100000, 1.5, 66667), (100000, 2.0, 50000), (100000, 1.0, 100000), (3, 0.5, 3)],
)
def test_normalized_divides_and_rounds_up_only_above_one(quota, ratio, expected):
    assert normalized(quota, ratio) == expected


def test_ls_pod_and_containers_get_the_quota_of_their_limits_divided(any_host):
    pod = meta(
        any_host,
        _ls()
        .container("a", cid=CIDS[0], limits={"cpu": "1"})
        .container("b", cid=CIDS[1], limits={"cpu": "500m"})
        .build(),
    )
    node = facts(any_host, node=_node("1.5"), gates=GATES)
    # pod: ceil(150000 / 1.5); containers: ceil(100000 / 1.5), ceil(50000 / 1.5)
    assert _quotas(any_host, pod, node) == [100000, 66667, 33334]


def test_a_ratio_of_one_or_less_gives_the_limits_quota_back(any_host):
    pod = meta(any_host, _ls().container("a", cid=CIDS[0], limits={"cpu": "2"}).build())
    for ratio in ("1", "0.8"):
        node = facts(any_host, node=_node(ratio), gates=GATES)
        assert _quotas(any_host, pod, node) == [200000, 200000]


def test_minus_one_leaves_quotas_alone(any_host):
    pod = meta(any_host, _ls().container("a", cid=CIDS[0], limits={"cpu": "2"}).build())
    assert _quotas(any_host, pod, facts(any_host, node=_node("-1"), gates=GATES)) == [None, None]


def test_no_ratio_is_upstreams_one_the_limits_quota(any_host):
    # our slo-controller removes the annotation where upstream's writes 1.00
    pod = meta(any_host, _ls().container("a", cid=CIDS[0], limits={"cpu": "2"}).build())
    assert _quotas(any_host, pod, facts(any_host, node=_node(None), gates=GATES)) == [200000, 200000]


def test_a_container_without_a_cpu_limit_leaves_the_pod_unlimited(any_host):
    # upstream sums the limits that exist and writes 100000 / 2 on the pod cgroup, which
    # the kubelet left unlimited; here the pod keeps no quota, the limited container its own
    pod = meta(
        any_host,
        _ls().container("a", cid=CIDS[0], limits={"cpu": "1"}).container("b", cid=CIDS[1]).build(),
    )
    assert _quotas(any_host, pod, facts(any_host, node=_node("2"), gates=GATES)) == [None, 50000, None]


def test_only_pods_that_share_cpus(any_host):
    node = facts(any_host, node=_node("2"), gates=GATES)
    for qos in ("LSR", "LSE", "BE", "SYSTEM"):
        pod = meta(any_host, _ls(qos.lower(), qos).container("a", cid=CIDS[0], limits={"cpu": "1"}).build())
        assert _quotas(any_host, pod, node) == [None, None], qos
    plain = _ls("plain", None).container("a", cid=CIDS[0], limits={"cpu": "1"})
    assert _quotas(any_host, meta(any_host, plain.build()), node) == [50000, 50000]
    pinned = plain.annotation(ANNOTATION_RESOURCE_STATUS, '{"cpuset": "0-1"}').build()
    assert _quotas(any_host, meta(any_host, pinned), node) == [None, None]


def test_cpu_burst_owns_the_quota_while_its_gate_is_on(any_host):
    pod = meta(any_host, _ls().container("a", cid=CIDS[0], limits={"cpu": "1"}).build())
    node = facts(any_host, node=_node("2"), gates={"CPUNormalization": True})  # CPUBurst on by default
    assert _quotas(any_host, pod, node) == [None, None]


def test_a_malformed_ratio_is_warned_about_once(any_host, caplog):
    pod = meta(any_host, _ls().container("a", cid=CIDS[0], limits={"cpu": "1"}).build())
    hook = CPUNormalization()
    _quotas(any_host, pod, facts(any_host, node=_node("2"), gates=GATES), hook)
    for _ in range(3):  # a reconcile each: pod and container contexts
        _quotas(any_host, pod, facts(any_host, node=_node("fast"), gates=GATES), hook)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "keeping the ratio 2.0" in warnings[0]


def test_a_malformed_ratio_keeps_the_last_good_one(any_host):
    pod = meta(any_host, _ls().container("a", cid=CIDS[0], limits={"cpu": "1"}).build())
    hook = CPUNormalization()
    assert _quotas(any_host, pod, facts(any_host, node=_node("2"), gates=GATES), hook) == [50000, 50000]
    for bad in ("fast", "0", "-3"):
        node = facts(any_host, node=_node(bad), gates=GATES)
        assert _quotas(any_host, pod, node, hook) == [50000, 50000], bad
    # a fresh agent with a malformed ratio has nothing to keep: normalization stays off
    assert _quotas(any_host, pod, facts(any_host, node=_node("fast"), gates=GATES)) == [None, None]


def test_pod_limit_follows_the_kubelets_pod_cgroup():
    def pod(**spec: Any) -> dict[str, Any]:
        return {"spec": spec}

    def c(cpu: str | None, **extra: str) -> dict[str, Any]:
        return {"name": "x", "resources": {"limits": {"cpu": cpu}} if cpu else {}, **extra}

    assert pod_limit_milli(pod(containers=[c("1"), c("250m")])) == 1250
    assert pod_limit_milli(pod(containers=[c("1")], initContainers=[c("3")])) == 3000  # the largest init
    sidecar = c("500m", restartPolicy="Always")
    assert pod_limit_milli(pod(containers=[c("1")], initContainers=[sidecar, c("1")])) == 1500
    # an init container runs beside the sidecars started before it
    assert pod_limit_milli(pod(containers=[c("1")], initContainers=[sidecar, c("2")])) == 2500
    assert pod_limit_milli(pod(containers=[c("1")], initContainers=[c("2"), sidecar])) == 2000
    assert pod_limit_milli(pod(containers=[c("1")], overhead={"cpu": "100m"})) == 1100
    assert pod_limit_milli(pod(containers=[c("1")], initContainers=[c(None)])) is None
    assert pod_limit_milli(pod(containers=[])) is None


def test_the_reconciler_writes_the_normalized_quota(any_host):
    pod = meta(any_host, _ls().container("a", cid=CIDS[0], limits={"cpu": "1"}).build())
    any_host.add_pod("Burstable", pod.uid, [CIDS[0]])
    node = {"current": facts(any_host, node=_node("2"), gates=GATES)}
    reconciler = Reconciler(
        HookManager(hooks()),
        lambda: node["current"],
        lambda: [pod],
        ResourceUpdateExecutor(node["current"].cgroups),
    )
    reconciler.reconcile()
    container = pod.containers[0].cgroup_dir
    assert [any_host.get("cpu.cfs_quota_us", rel) for rel in (pod.cgroup_dir, container)] == [50000, 50000]
    # normalization turned off (the annotation removed): the quota of the limits comes back
    node["current"] = facts(any_host, node=_node(None), gates=GATES)
    reconciler.reconcile()
    assert [any_host.get("cpu.cfs_quota_us", rel) for rel in (pod.cgroup_dir, container)] == [100000, 100000]
