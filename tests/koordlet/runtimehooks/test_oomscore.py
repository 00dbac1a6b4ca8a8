"""OOMScoreAdj plans: /proc/<pid>/oom_score_adj of the container's processes."""

from __future__ import annotations

from koordlet.executor import FileUpdate
from koordlet.runtimehooks.hooks.oomscore import OOMScoreAdj
from koordlet.runtimehooks.protocol import ContainerContext
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


def test_gate_off_by_default(fake_host_v1):
    assert not OOMScoreAdj().enabled(facts(fake_host_v1))[0]
