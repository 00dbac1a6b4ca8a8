"""ResctrlReconcile plans: groups, L3 masks and MB values per class (Intel and AMD), tasks of
enabled classes' pods (containers and sandbox), support and mount checks, mounting resctrl
where it is missing (with a fake mount on the fake tree); ResctrlGroupUpdate through the
executor."""

from __future__ import annotations

import errno
import json
import logging
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
from koordlet.system.errors import from_errno
from koordlet.system.resctrl import Resctrl
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


# --- mounting resctrl (a fake mount on the fake tree; nothing real is ever mounted) -------------


class FakeMount:
    """Stands in for ``mount -t resctrl``: fills the fake tree's resctrl root as the kernel
    would (``schemata`` of two L3 caches with MB), or fails with ``error``; ``schemata``
    overrides what the mounted root holds (a root the strategy cannot use)."""

    def __init__(self, host: FakeHost, error: int = 0, schemata: str = "") -> None:
        self.host = host
        self.error = error
        self.schemata = schemata

    def __call__(self, resctrl: Resctrl) -> None:
        assert resctrl.root == self.host.paths.resctrl_root  # never a real path
        if self.error:
            raise from_errno(self.error, resctrl.root)
        self.host.add_resctrl("7ff", (0, 1))
        if self.schemata:
            (resctrl.root / "schemata").write_text(self.schemata)


def unmounted(tmp_path: Path, flags: str = RDT_FLAGS) -> FakeHost:
    """An RDT CPU, and an empty resctrl directory where the kernel mounts it."""
    host = FakeHost(tmp_path, "v1")
    host.set_cpu_topology(2, 2, 2, flags=flags)
    host.paths.resctrl_root.mkdir(parents=True, exist_ok=True)
    return host


def test_resctrl_is_mounted_when_missing_and_then_reconciled(tmp_path):
    host = unmounted(tmp_path)
    strategy = ResctrlReconcile(mount=FakeMount(host))
    snapshot = build_snapshot(host, slo=enabled_classes(), cbm_mask="7ff")
    assert strategy.enabled(snapshot) == (True, "")
    assert (host.paths.resctrl_root / "schemata").read_text() == "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"
    # the same round goes on with the mounted tree: the groups (made by the executor) and
    # their schemata for both caches of the mounted root
    plan = strategy.plan(snapshot)
    assert ("BE", "L3:0=f;1=f") in schemata(plan)
    executor = ResourceUpdateExecutor(CgroupFS(host.paths, 1))
    executor.update_batch([u for u in plan.updates if isinstance(u, ResctrlGroupUpdate)])
    assert Resctrl(host.paths).groups() == ["BE", "LS", "LSR"]
    assert strategy.enabled(snapshot) == (True, "")  # mounted: nothing more to do


def test_a_failed_mount_is_logged_once_and_the_strategy_stays_off(tmp_path, caplog):
    host = unmounted(tmp_path)
    mount = FakeMount(host, errno.EPERM)
    strategy = ResctrlReconcile(mount=mount)
    snapshot = build_snapshot(host, slo=enabled_classes())
    with caplog.at_level(logging.WARNING, logger="koordlet.qosmanager.strategies.resctrl"):
        reasons = {strategy.enabled(snapshot) for _ in range(3)}
    assert len(reasons) == 1  # one reason, so the manager logs the disabled strategy once too
    ok, why = reasons.pop()
    assert not ok
    assert why.startswith(f"resctrl is not mounted at {host.paths.resctrl_root}: ")
    assert why.endswith("(mounting it failed: Operation not permitted; not tried again)")
    assert [r.getMessage() for r in caplog.records if "mounting it failed" in r.getMessage()] == [
        f"{why.split(' (')[0]}, and mounting it failed: Operation not permitted; ResctrlReconcile stays off"
    ]
    # a mount that would now succeed is not tried again: the tree stays unmounted
    mount.error = 0
    assert not strategy.enabled(snapshot)[0]
    assert not (host.paths.resctrl_root / "schemata").exists()
    # mounted by someone else: the strategy runs
    host.add_resctrl("7ff", (0, 1))
    assert strategy.enabled(snapshot) == (True, "")


def test_a_mounted_resctrl_without_l3_leaves_the_strategy_off(tmp_path):
    host = unmounted(tmp_path)
    strategy = ResctrlReconcile(mount=FakeMount(host, schemata="MB:0=100;1=100\n"))
    ok, why = strategy.enabled(build_snapshot(host, slo=enabled_classes()))
    assert not ok
    assert "(mounted by the koordlet, but its schemata is invalid: schemata needs at least one" in why
    assert (host.paths.resctrl_root / "schemata").read_text() == "MB:0=100;1=100\n"


@pytest.mark.parametrize(
    ("flags", "gates"),
    [
        pytest.param("fpu sse2 ht mba", None, id="cpu-without-cat_l3"),
        pytest.param("fpu sse2 ht cat_l3", None, id="cpu-without-mba"),
        pytest.param(RDT_FLAGS, {"RdtResctrl": False}, id="gate-off"),
    ],
)
def test_resctrl_is_not_mounted_where_it_cannot_be_used(tmp_path, flags, gates):
    host = unmounted(tmp_path, flags)
    strategy = ResctrlReconcile(mount=FakeMount(host))
    assert not strategy.enabled(build_snapshot(host, slo=enabled_classes(), gates=gates))[0]
    assert list(host.paths.resctrl_root.iterdir()) == []


def test_without_a_mount_function_nothing_is_mounted(tmp_path):
    """What ``koordlet plan`` builds: it only describes, so it never mounts."""
    host = unmounted(tmp_path)
    ok, why = ResctrlReconcile().enabled(build_snapshot(host, slo=enabled_classes()))
    assert not ok
    assert why.startswith(f"resctrl is not mounted at {host.paths.resctrl_root}: ")
    assert list(host.paths.resctrl_root.iterdir()) == []


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
