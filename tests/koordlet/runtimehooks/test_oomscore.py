"""OOMScoreAdj plans: /proc/<pid>/oom_score_adj of the container's processes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from koordlet.executor import FileUpdate, ResourceUpdateExecutor
from koordlet.metrics import KoordletMetrics
from koordlet.runtimehooks.framework import HookManager
from koordlet.runtimehooks.hooks.oomscore import OOMScoreAdj
from koordlet.runtimehooks.protocol import ContainerContext
from koordlet.runtimehooks.reconciler import Reconciler
from tests.fakes.pods import make_pod
from tests.koordlet.runtimehooks.conftest import facts, meta

CID = "containerd://" + "d" * 64


def _plan(host, annotations: dict[str, str]) -> list[FileUpdate]:
    builder = make_pod("p").kube_qos("Burstable").container("main", cid=CID)
    for key, value in annotations.items():
        builder.annotation(key, value)
    m = meta(host, builder.build())
    rel = host.make_cgroup(m.containers[0].cgroup_dir)
    procs = host.cgroups.directory("cpu", rel) / "cgroup.procs"
    procs.write_text("101\n102\n103\n")
    host.write("proc/101/oom_score_adj", "0\n")
    host.write("proc/102/oom_score_adj", "500\n")  # already right
    ctx = ContainerContext(m, m.containers[0], facts(host, gates={"OOMScoreAdj": True}))
    OOMScoreAdj().container(ctx)
    return [u for u in ctx.response.extra if isinstance(u, FileUpdate)]


def test_pod_value_for_every_process_that_needs_it(fake_host):
    updates = _plan(fake_host, {"koordinator.sh/oom-score-adj": "500"})
    # 102 already has it, 103 has exited (no /proc entry)
    assert [(u.path.parent.name, u.value) for u in updates] == [("101", "500")]
    assert (updates[0].low, updates[0].high) == (-1000, 1000)


def test_container_spec_wins(fake_host):
    updates = _plan(
        fake_host,
        {"koordinator.sh/oom-score-adj": "500", "koordinator.sh/oom-score-adj-spec": '{"main": -999}'},
    )
    assert [u.value for u in updates] == ["-999", "-999"]


def test_invalid_values_are_ignored(fake_host):
    assert _plan(fake_host, {"koordinator.sh/oom-score-adj": "5000"}) == []
    assert _plan(fake_host, {"koordinator.sh/oom-score-adj-spec": "[1]"}) == []
    assert _plan(fake_host, {}) == []


def test_empty_annotations_are_unset(fake_host):
    assert _plan(fake_host, {"koordinator.sh/oom-score-adj": ""}) == []
    updates = _plan(
        fake_host, {"koordinator.sh/oom-score-adj-spec": "", "koordinator.sh/oom-score-adj": "-999"}
    )
    assert [u.value for u in updates] == ["-999", "-999"]


def test_a_reused_pid_gets_the_value_again(fake_host):
    """/proc/<pid> writes are not cached: a new process with the PID of one the koordlet
    wrote a moment ago gets the value on the next pass, not a minute later."""
    builder = make_pod("p").kube_qos("Burstable").container("main", cid=CID)
    pod = meta(fake_host, builder.annotation("koordinator.sh/oom-score-adj", "-500").build())
    rel = fake_host.make_cgroup(pod.containers[0].cgroup_dir)
    (fake_host.cgroups.directory("cpu", rel) / "cgroup.procs").write_text("101\n")
    fake_host.write("proc/101/oom_score_adj", "0\n")
    node = facts(fake_host, gates={"OOMScoreAdj": True})
    executor = ResourceUpdateExecutor(node.cgroups, clock=lambda: 0.0)  # time stands still
    reconciler = Reconciler(HookManager([OOMScoreAdj()]), lambda: node, lambda: [pod], executor)
    reconciler.reconcile()
    assert fake_host.read("proc/101/oom_score_adj").strip() == "-500"
    fake_host.write("proc/101/oom_score_adj", "0\n")  # 101 exited; a new process got its PID
    reconciler.reconcile()
    assert fake_host.read("proc/101/oom_score_adj").strip() == "-500"


def test_gate_off_by_default(fake_host_v1):
    assert not OOMScoreAdj().enabled(facts(fake_host_v1))[0]


def test_reconciles_record_the_value_until_the_container_goes(fake_host):
    builder = make_pod("p").kube_qos("Burstable").container("main", cid=CID)
    builder.annotation("koordinator.sh/oom-score-adj", "-500")
    pod = meta(fake_host, builder.build())
    rel = fake_host.make_cgroup(pod.containers[0].cgroup_dir)
    (fake_host.cgroups.directory("cpu", rel) / "cgroup.procs").write_text("101\n")
    fake_host.write("proc/101/oom_score_adj", "0\n")
    registry = CollectorRegistry()
    hook = OOMScoreAdj(KoordletMetrics(registry, "node-1"))
    node = facts(fake_host, gates={"OOMScoreAdj": True})
    pods = [pod]
    reconciler = Reconciler(
        HookManager([hook]), lambda: node, lambda: pods, ResourceUpdateExecutor(node.cgroups)
    )
    labels = {"node": "node-1", "pod_name": "p", "pod_namespace": "default", "pod_uid": pod.uid}
    labels["container_name"] = "main"

    def recorded() -> float | None:
        return registry.get_sample_value("koordlet_container_oom_score_adj", labels)

    reconciler.reconcile()
    assert fake_host.read("proc/101/oom_score_adj").strip() == "-500"
    assert recorded() == -500
    reconciler.reconcile()  # already right: still recorded
    assert recorded() == -500
    pods.clear()  # the pod went away
    reconciler.reconcile()
    assert recorded() is None
    pods.append(pod)
    reconciler.reconcile()
    assert recorded() == -500
    node = facts(fake_host)  # the gate switched off: the value is no longer kept
    reconciler.reconcile()
    assert recorded() is None


def test_no_process_no_gauge(fake_host):
    registry = CollectorRegistry()
    builder = make_pod("p").kube_qos("Burstable").container("main", cid=CID)
    pod = meta(fake_host, builder.annotation("koordinator.sh/oom-score-adj", "100").build())
    fake_host.make_cgroup(pod.containers[0].cgroup_dir)  # no processes
    ctx = ContainerContext(pod, pod.containers[0], facts(fake_host, gates={"OOMScoreAdj": True}))
    OOMScoreAdj(KoordletMetrics(registry, "node-1")).container(ctx)
    assert ctx.response.extra == []
    families = {f.name: f for f in registry.collect()}
    assert families["koordlet_container_oom_score_adj"].samples == []
