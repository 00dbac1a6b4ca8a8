"""ResctrlReconcile plans: groups, L3 masks and MB values per class (Intel and AMD), tasks of
enabled classes' pods (containers and sandbox), support and mount checks; ResctrlGroupUpdate
through the executor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from koordinator.api.extension.topology import ANNOTATION_RESCTRL
from koordlet.executor import (
    ResctrlGroupUpdate,
    ResctrlSchemataUpdate,
    ResctrlTasksUpdate,
    ResourceUpdateExecutor,
)
from koordlet.qosmanager.strategies.resctrl import ResctrlReconcile
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.registry import CPU_TASKS
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.qosmanager.strategy_env import build_snapshot

RDT_FLAGS = "fpu sse2 ht cat_l3 mba cqm_llc"
GROUPS = [ResctrlGroupUpdate(g, "ResctrlReconcile") for g in ("LSR", "LS", "BE")]


def enabled_classes(**ls: int) -> dict[str, Any]:
    return {
        "resourceQOSStrategy": {
            "lsrClass": {"resctrlQOS": {"enable": True}},
            "lsClass": {"resctrlQOS": {"enable": True, **ls}},
            "beClass": {"resctrlQOS": {"enable": True}},
        }
    }


class Node:
    """Two L3 caches (11 ways), MBA, and pods of every class with tasks in their cgroups."""

    def __init__(self, root: Path, version: str, *, vendor: str = "GenuineIntel", mba: bool = True) -> None:
        self.host = host = FakeHost(root, version)  # type: ignore[arg-type]
        host.set_cpu_topology(2, 2, 2, vendor=vendor, flags=RDT_FLAGS)
        host.add_resctrl("7ff", (0, 1), mba=mba)
        self.pods: list[dict[str, Any]] = []
        self.add("web", None, "Burstable", {"containerd://w1": "201 202"})
        self.add("db", "LSR", "Guaranteed", {"containerd://d1": "301"})
        self.add("pinned", "LSE", "Guaranteed", {"containerd://p1": "401"})
        self.add("batch", "BE", "BestEffort", {"containerd://b1": "501 502", "containerd://b2": "503"})

    def add(self, name: str, qos: str | None, kube_qos: str, containers: dict[str, str]) -> dict[str, Any]:
        builder = make_pod(name)
        if qos:
            builder.qos(qos)
        builder.kube_qos(kube_qos)
        for i, cid in enumerate(containers):
            builder.container(f"c{i}", cid=cid)
        pod = builder.build()
        self.host.add_pod(kube_qos, builder.uid, list(containers))
        for cid, tids in containers.items():
            self.tasks(self.host.container_dir(kube_qos, builder.uid, cid), tids)
        self.pods.append(pod)
        return pod

    def tasks(self, relative: str, tids: str) -> None:
        self.host.cgroups.path(CPU_TASKS, relative).write_text("".join(f"{t}\n" for t in tids.split()))

    def plan(self, slo: dict[str, Any] | None, **kwargs: Any):
        return ResctrlReconcile().plan(build_snapshot(self.host, pods=self.pods, slo=slo, **kwargs))


@pytest.fixture(params=["v1", "v2"])
def version(request):
    return request.param


def schemata(plan) -> list[tuple[str, str]]:
    return [(u.group, u.line) for u in plan.updates if isinstance(u, ResctrlSchemataUpdate)]


def tasks(plan) -> dict[str, tuple[int, ...]]:
    return {u.group: u.tids for u in plan.updates if isinstance(u, ResctrlTasksUpdate)}


def test_enabled_classes_get_their_ways_bandwidth_and_tasks(tmp_path, version):
    node = Node(tmp_path, version)
    plan = node.plan(
        enabled_classes(catRangeStartPercent=0, catRangeEndPercent=50, mbaPercent=55), cbm_mask="7ff"
    )
    assert plan.updates[:3] == GROUPS
    assert schemata(plan) == [
        ("LSR", "L3:0=7ff;1=7ff"),  # 0-100 % of 11 ways
        ("LSR", "MB:0=100;1=100"),
        ("LS", "L3:0=3f;1=3f"),  # ways [0, ceil(5.5)) = 6
        ("LS", "MB:0=60;1=60"),  # 55 % rounded up to a multiple of ten
        ("BE", "L3:0=f;1=f"),  # BE default 0-30 %: ways [0, ceil(3.3)) = 4
        ("BE", "MB:0=100;1=100"),
    ]
    assert tasks(plan) == {"LSR": (301, 401), "LS": (201, 202), "BE": (501, 502, 503)}
    assert plan.updates[-3:] == [
        ResctrlTasksUpdate("LSR", (301, 401), "ResctrlReconcile"),
        ResctrlTasksUpdate("LS", (201, 202), "ResctrlReconcile"),
        ResctrlTasksUpdate("BE", (501, 502, 503), "ResctrlReconcile"),
    ]


def test_amd_memory_bandwidth(tmp_path, version):
    node = Node(tmp_path, version, vendor="AuthenticAMD")
    plan = node.plan(enabled_classes(mbaPercent=55), cbm_mask="7ff")
    # 100 % -> 2048 (unlimited); 55 % -> int(25 * 8 * 0.8 * 55 / 100) = 88
    assert [line for group, line in schemata(plan) if line.startswith("MB")] == [
        "MB:0=2048;1=2048",
        "MB:0=88;1=88",
        "MB:0=2048;1=2048",
    ]


def test_node_slo_disabled_gives_every_group_the_whole_cache_and_moves_no_task(tmp_path, version):
    node = Node(tmp_path, version)
    plan = node.plan(None, cbm_mask="7ff")
    assert schemata(plan) == [
        (g, line) for g in ("LSR", "LS", "BE") for line in ("L3:0=7ff;1=7ff", "MB:0=100;1=100")
    ]
    assert tasks(plan) == {}


def test_only_tasks_not_in_the_group_yet(tmp_path, version):
    node = Node(tmp_path, version)
    for group in ("LSR", "LS", "BE"):
        node.host.populate_resctrl_group(group)
    (node.host.paths.resctrl_root / "LS" / "tasks").write_text("201\n")
    (node.host.paths.resctrl_root / "BE" / "tasks").write_text("501\n502\n503\n")
    plan = node.plan(enabled_classes(), cbm_mask="7ff")
    assert not any(isinstance(u, ResctrlGroupUpdate) for u in plan.updates)
    assert tasks(plan) == {"LSR": (301, 401), "LS": (202,)}


def test_sandbox_tasks_follow_the_pod(tmp_path, version):
    node = Node(tmp_path, version)
    web = node.pods[0]
    pod_dir = node.host.pod_dir("Burstable", web["metadata"]["uid"])
    sandbox = node.host.make_cgroup(f"{pod_dir}/{node.host.layout.container_dir_name('containerd://sb')}")
    node.tasks(sandbox, "200")
    assert tasks(node.plan(enabled_classes(), cbm_mask="7ff"))["LS"] == (201, 202, 200)
    # two unknown children: which one is the sandbox is not known
    node.host.make_cgroup(f"{pod_dir}/{node.host.layout.container_dir_name('containerd://other')}")
    plan = node.plan(enabled_classes(), cbm_mask="7ff")
    assert tasks(plan)["LS"] == (201, 202)
    assert "default/web: 2 unknown child cgroups, no sandbox tasks moved" in plan.notes


def test_pods_left_out(tmp_path, version):
    node = Node(tmp_path, version)
    node.pods[0]["metadata"]["annotations"][ANNOTATION_RESCTRL] = json.dumps({"llc": {}})  # own group
    node.pods[1]["status"]["phase"] = "Succeeded"  # db
    node.pods[3]["status"]["phase"] = "Pending"  # batch: still moved
    slo = enabled_classes()
    slo["resourceQOSStrategy"]["lsrClass"]["resctrlQOS"]["enable"] = False  # pinned (LSE) left out
    assert tasks(node.plan(slo, cbm_mask="7ff")) == {"BE": (501, 502, 503)}


def test_no_pods(tmp_path, version):
    node = Node(tmp_path, version)
    node.pods = []
    plan = node.plan(enabled_classes(), cbm_mask="7ff")
    assert plan.updates[:3] == GROUPS
    assert len(schemata(plan)) == 6
    assert tasks(plan) == {}


def test_mask_from_resctrl_info_when_the_cpu_info_has_none(tmp_path, version):
    node = Node(tmp_path, version)
    plan = node.plan(enabled_classes(), cbm_mask="")
    assert ("BE", "L3:0=f;1=f") in schemata(plan)


def test_without_mb_domains_only_l3_is_planned(tmp_path, version):
    node = Node(tmp_path, version, mba=False)
    plan = node.plan(enabled_classes(), cbm_mask="7ff")
    assert schemata(plan) == [("LSR", "L3:0=7ff;1=7ff"), ("LS", "L3:0=7ff;1=7ff"), ("BE", "L3:0=f;1=f")]
    assert "BE: no MB domains in the root schemata" in plan.notes


def test_invalid_mba_percent_is_skipped(tmp_path, version):
    node = Node(tmp_path, version)
    plan = node.plan(enabled_classes(mbaPercent=0), cbm_mask="7ff")
    assert "LS: MBA percent 0 not in [1, 100]" in plan.notes
    assert [line for group, line in schemata(plan) if group == "LS"] == ["L3:0=7ff;1=7ff"]


@pytest.mark.parametrize(
    ("setup", "gates", "reason"),
    [
        ("ok", None, ""),
        ("ok", {"RdtResctrl": False}, "feature gate RdtResctrl is off"),
        ("no cat_l3", None, "no resctrl: CPU lacks cat_l3"),
        ("no topology", None, "CPU information not collected yet"),
        ("not mounted", None, "not mounted"),
    ],
)
def test_enabled(tmp_path, setup, gates, reason):
    host = FakeHost(tmp_path, "v1")
    if setup != "no topology":
        host.set_cpu_topology(flags="fpu mba" if setup == "no cat_l3" else RDT_FLAGS)
    if setup != "not mounted":
        host.add_resctrl()
    ok, why = ResctrlReconcile().enabled(build_snapshot(host, gates=gates))
    assert ok is (reason == "")
    assert reason in why


# --- the executor makes groups ------------------------------------------------------------------


def test_group_update_makes_the_directory_once_and_again_after_an_rmdir(tmp_path):
    host = FakeHost(tmp_path, "v1")
    host.add_resctrl()
    executor = ResourceUpdateExecutor(CgroupFS(host.paths, 1))
    update = ResctrlGroupUpdate("BE", "test")
    assert executor.update(update).written
    assert (host.paths.resctrl_root / "BE").is_dir()
    assert not executor.update(update).written
    (host.paths.resctrl_root / "BE").rmdir()
    assert executor.update(update).written  # never trusted from the cache
    assert (host.paths.resctrl_root / "BE").is_dir()
