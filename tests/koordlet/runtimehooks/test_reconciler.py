"""The reconciler on fake hosts: hooks' plans end up in the pods' cgroup files."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY
from koordinator.api.runtimehook import FailurePolicy
from koordlet.executor import ResourceUpdateExecutor, Update
from koordlet.runtimehooks.framework import HookBase, HookError, HookManager
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts, PodContext, QOSContext, Stage
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.runtimehooks.registry import hooks
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.runtimehooks.conftest import facts, meta

CID = "containerd://" + "e" * 64


def _be_pod(host: FakeHost) -> PodMeta:
    pod = (
        make_pod("batch")
        .qos("BE")
        .kube_qos("BestEffort")
        .container(
            "main", cid=CID, requests={BATCH_CPU: "500"}, limits={BATCH_CPU: "1000", BATCH_MEMORY: "1Gi"}
        )
        .build()
    )
    m = meta(host, pod)
    host.add_pod("BestEffort", m.uid, [CID])
    return m


def test_reconcile_writes_batch_resources_and_idle(any_host):
    pod = _be_pod(any_host)
    slo = {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}}}
    node = facts(any_host, slo=slo)
    reconciler = Reconciler(
        HookManager(hooks()), lambda: node, lambda: [pod], ResourceUpdateExecutor(node.cgroups)
    )
    reconciler.reconcile()
    container = pod.containers[0].cgroup_dir
    for rel in (pod.cgroup_dir, container):
        assert any_host.get("cpu.cfs_quota_us", rel) == 100000
        assert any_host.get("memory.limit_in_bytes", rel) == 1 << 30
    assert any_host.get("cpu.shares", container) in (512, 500)  # v2 goes through cpu.weight
    # the pod cgroup is idle: the kernel refuses shares there, none are written
    assert any_host.get("cpu.idle", pod.cgroup_dir) == 1
    assert any_host.get("cpu.shares", pod.cgroup_dir) in (1024, 2597)  # the defaults
    be_dir = any_host.layout.qos_dir("BestEffort")
    assert any_host.get("cpu.idle", be_dir) == 0  # never idle: the kubelet writes its shares
    assert reconciler.runs == 1


def test_terminated_and_kata_pods_are_skipped(fake_host_v1):
    host = fake_host_v1
    done = meta(host, make_pod("done").qos("BE").phase("Succeeded").container("m", cid=CID).build())
    kata_pod = make_pod("kata").qos("BE").container("m", cid="containerd://" + "f" * 64).build()
    kata_pod["spec"]["runtimeClassName"] = "kata-qemu"
    kata = meta(host, kata_pod)
    for m in (done, kata):
        host.add_pod("BestEffort", m.uid, [c.container_id for c in m.containers])
    node = facts(host)
    executor = ResourceUpdateExecutor(node.cgroups)
    Reconciler(HookManager(hooks()), lambda: node, lambda: [done, kata], executor).reconcile()
    assert host.get("cpu.shares", done.cgroup_dir) == 1024  # untouched
    assert host.get("cpu.shares", kata.cgroup_dir) == 1024


class Boom(HookBase):
    NAME = "Aaa-Boom"

    def pod(self, ctx: PodContext) -> None:
        raise RuntimeError("boom")


class Recorder(HookBase):
    NAME = "Zzz-Recorder"

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.gc: list[Sequence[PodMeta]] = []

    def pod(self, ctx: PodContext) -> None:
        self.seen.append(ctx.pod.name)

    def container(self, ctx: ContainerContext) -> None:
        ctx.response.resources.cpu_shares = 4

    def all_pods(self, pods: Sequence[PodMeta], node: NodeFacts) -> list[Update]:
        self.gc.append(pods)
        return []


def test_ignore_policy_runs_the_next_hook(fake_host_v1):
    pod = _be_pod(fake_host_v1)
    recorder = Recorder()
    node = facts(fake_host_v1)
    manager = HookManager([recorder, Boom()])
    assert [h.NAME for h in manager.hooks] == ["Aaa-Boom", "Zzz-Recorder"]  # name order
    Reconciler(manager, lambda: node, lambda: [pod], ResourceUpdateExecutor(node.cgroups)).reconcile()
    assert recorder.seen == ["batch"]
    assert recorder.gc == [[pod]]
    assert fake_host_v1.get("cpu.shares", pod.containers[0].cgroup_dir) == 4


def test_fail_policy_stops_the_stage(fake_host_v1):
    pod = _be_pod(fake_host_v1)
    recorder = Recorder()
    manager = HookManager([recorder, Boom()], failure_policy=FailurePolicy.FAIL)
    with pytest.raises(HookError, match="Aaa-Boom"):
        manager.run_pod(PodContext(pod, facts(fake_host_v1)), Stage.PRE_RUN_POD_SANDBOX)
    assert recorder.seen == []


class FailsFirst(HookBase):
    """Fails for the pod named ``first``, at every level."""

    NAME = "Aaa-FailsFirst"

    def pod(self, ctx: PodContext) -> None:
        if ctx.pod.name == "first":
            raise RuntimeError("one pod's problem")

    def container(self, ctx: ContainerContext) -> None:
        self.pod(PodContext(ctx.pod, ctx.node))

    def kube_qos(self, ctx: QOSContext) -> None:
        raise RuntimeError("kube-QoS problem")

    def all_pods(self, pods: Sequence[PodMeta], node: NodeFacts) -> list[Update]:
        raise RuntimeError("node-wide problem")


def test_fail_policy_does_not_stop_the_reconciler(tmp_path):
    """The failure policy is the runtime's answer to a failed call: the reconciler logs a
    failure and goes on with the other hooks, pods, kube-QoS cgroups and the node level."""
    host = FakeHost(tmp_path, "v1", features={"bvt"})
    host.write("proc/sys/kernel/sched_group_identity_enabled", "0\n")
    pods = []
    for i, name in enumerate(["first", "second"]):
        cid = "containerd://" + str(i) * 64
        builder = make_pod(name).qos("BE").kube_qos("BestEffort")
        m = meta(
            host,
            builder.container(
                "main", cid=cid, requests={BATCH_CPU: "500"}, limits={BATCH_CPU: "1000"}
            ).build(),
        )
        host.add_pod("BestEffort", m.uid, [cid])
        pods.append(m)
    recorder = Recorder()
    manager = HookManager([FailsFirst(), recorder, *hooks()], failure_policy=FailurePolicy.FAIL)
    slo = {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}}}
    node = facts(host, slo=slo)
    Reconciler(manager, lambda: node, lambda: pods, ResourceUpdateExecutor(node.cgroups)).reconcile()
    for pod in pods:  # the failing pod too gets the other hooks' values
        assert host.get("cpu.cfs_quota_us", pod.cgroup_dir) == 100000
        assert host.get("cpu.shares", pod.containers[0].cgroup_dir) == 4  # Zzz-Recorder, after BatchResource
    assert recorder.seen == ["first", "second"]
    assert recorder.gc == [pods]
    assert host.read("proc/sys/kernel/sched_group_identity_enabled").strip() == "1"  # kube-QoS level ran


def test_disabled_stages_are_skipped(fake_host_v1):
    pod = _be_pod(fake_host_v1)
    recorder = Recorder()
    manager = HookManager([recorder], disabled_stages=[Stage.PRE_RUN_POD_SANDBOX])
    manager.run_pod(PodContext(pod, facts(fake_host_v1)))
    assert recorder.seen == []
    # they are hook points the runtime is not asked for: the reconciler runs every level
    node = facts(fake_host_v1)
    Reconciler(manager, lambda: node, lambda: [pod], ResourceUpdateExecutor(node.cgroups)).reconcile()
    assert recorder.seen == ["batch"]


def test_unique_names():
    with pytest.raises(ValueError, match="unique"):
        HookManager([Recorder(), Recorder()])


def test_metrics_are_recorded(fake_host_v1):
    from prometheus_client import CollectorRegistry

    from koordlet.metrics import KoordletMetrics, render

    pod = _be_pod(fake_host_v1)
    metrics = KoordletMetrics(CollectorRegistry(), "n")
    node = facts(fake_host_v1)
    manager = HookManager(hooks(), metrics)
    Reconciler(
        manager,
        lambda: node,
        lambda: [pod],
        ResourceUpdateExecutor(CgroupFS.detect(fake_host_v1.paths)),
        metrics,
    ).reconcile()
    text = render(metrics.registry).decode()
    hook = 'hook="BatchResource",node="n",stage="PreRunPodSandbox",status="succeeded"'
    assert f"koordlet_runtime_hook_invoked_duration_milliseconds_count{{{hook}}} 1" in text
    level = 'level="pod",node="n",resource_type="cgroup",status="succeeded"'
    assert f"koordlet_runtime_hook_reconciler_invoked_duration_milliseconds_count{{{level}}} 1" in text
