"""Resctrl hook on a fake resctrl tree: a group per annotated pod, its schemata, its tasks, and
groups removed when their pods go (100 create/delete cycles leave nothing behind)."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from koordinator.api.extension.topology import ANNOTATION_CPU_BASIC_INFO, ANNOTATION_RESCTRL
from koordlet.executor import (
    Host,
    ResctrlGroupRemoveUpdate,
    ResctrlGroupUpdate,
    ResctrlSchemataUpdate,
    ResctrlTasksUpdate,
    ResourceUpdateExecutor,
    Update,
)
from koordlet.runtimehooks.framework import HookManager
from koordlet.runtimehooks.hooks.resctrl import Resctrl
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts, PodContext
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.resctrl import Resctrl as ResctrlFS
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.runtimehooks.hookenv import node_facts, pod_of

ON = {"Resctrl": True}


def basic_info(vendor: str = "GenuineIntel", cbm: str = "7ff") -> dict[str, str]:
    return {ANNOTATION_CPU_BASIC_INFO: json.dumps({"vendorID": vendor, "catL3CbmMask": cbm})}


class Node:
    """A fake node with resctrl mounted (11 cache ways, cache ids 0 and 1, MBA)."""

    def __init__(
        self, tmp_path: Any, version: str = "v1", *, mba: bool = True, topology: bool = True
    ) -> None:
        self.host = FakeHost(tmp_path, version)  # type: ignore[arg-type]
        self.host.add_resctrl("7ff", (0, 1), mba=mba)
        self.gates = dict(ON)
        self.topology = basic_info() if topology else {}
        self.fs = ResctrlFS(self.host.paths)

    def facts(self) -> NodeFacts:
        return node_facts(self.host, gates=self.gates, topology=self.topology)

    def pod(
        self, name: str, annotation: dict[str, Any] | str | None, tids: dict[str, str] | None = None
    ) -> PodMeta:
        builder = make_pod(name).qos("LS").kube_qos("Burstable")
        for container in tids or {"main": ""}:
            builder.container(container, cid=f"containerd://{name}-{container}".ljust(77, "0"))
        if annotation is not None:
            text = annotation if isinstance(annotation, str) else json.dumps(annotation)
            builder.annotation(ANNOTATION_RESCTRL, text)
        meta = pod_of(self.host, builder.build())
        self.host.add_pod("Burstable", meta.uid, [c.container_id for c in meta.containers])
        tasks_file = "tasks" if self.host.version == "v1" else "cgroup.threads"
        for started in meta.containers:
            directory = self.host.cgroup_dir("cpu", started.cgroup_dir)
            (directory / tasks_file).write_text((tids or {}).get(started.name, ""))
        return meta

    def plan(self, pod: PodMeta, hook: Resctrl | None = None) -> list[Update]:
        """The pod level, then each container, as the reconciler runs them."""
        hook = hook or Resctrl()
        facts = self.facts()
        ctx = PodContext(pod, facts)
        hook.pod(ctx)
        out = list(ctx.response.extra)
        for container in pod.containers:
            cctx = ContainerContext(pod, container, facts)
            hook.container(cctx)
            out += cctx.response.extra
        return out


class KernelLikeResctrl(ResctrlFS):
    """resctrl over the fake tree, answering as the kernel does: a new group has the root's
    schemata and an empty tasks file, a schemata write replaces only its resource's line,
    rmdir takes the group's files with it."""

    def __init__(self, host: FakeHost) -> None:
        super().__init__(host.paths)
        self.fake = host

    def create_group(self, group: str) -> bool:
        created = super().create_group(group)
        if created:
            self.fake.populate_resctrl_group(group)
        return created

    def delete_group(self, group: str) -> bool:
        directory = self.group_dir(group)
        for child in directory.iterdir() if directory.is_dir() else ():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        return super().delete_group(group)

    def write_schemata_line(self, group: str, line: str) -> None:
        path = self.group_dir(group) / "schemata"
        before = path.read_text().splitlines() if path.exists() else []
        super().write_schemata_line(group, line)
        kept = [old for old in before if old[:3] != line[:3]]
        path.write_text("\n".join([*kept, line]) + "\n")


class KernelLikeExecutor(ResourceUpdateExecutor):
    """The executor writing through :class:`KernelLikeResctrl`."""

    def __init__(self, host: FakeHost) -> None:
        cgroups = CgroupFS.detect(host.paths)
        super().__init__(cgroups)
        self.host = Host(cgroups, KernelLikeResctrl(host))


@pytest.fixture(params=["v1", "v2"])
def node(request, tmp_path) -> Node:
    return Node(tmp_path, request.param)


def schemata(plan: list[Update]) -> list[str]:
    return [u.line for u in plan if isinstance(u, ResctrlSchemataUpdate)]


# --- enabled --------------------------------------------------------------------------------


def test_enabled_reasons(tmp_path):
    host = FakeHost(tmp_path, "v1")
    hook = Resctrl()
    assert hook.enabled(node_facts(host)) == (False, "feature gate Resctrl is off")
    enabled, why = Resctrl().enabled(node_facts(host, gates=ON))
    assert not enabled
    assert why.startswith(f"resctrl is not mounted at {host.paths.resctrl_root}")
    host.add_resctrl()
    assert Resctrl().enabled(node_facts(host, gates=ON)) == (True, "")


# --- plans ----------------------------------------------------------------------------------


def test_group_and_schemata_from_the_annotation(node):
    pod = node.pod("web", {"llc": {"schemata": {"range": [0, 30]}}, "mb": {"schemata": {"percent": 55}}})
    plan = node.plan(pod)
    group = f"koordlet-{pod.uid}"
    assert plan[0] == ResctrlGroupUpdate(group, "Resctrl")
    # 11 ways: [ceil(0), ceil(3.3)) = ways 0-3 = 0xf; Intel MBA rounds 55 up to 60
    assert schemata(plan) == ["L3:0=f;1=f", "MB:0=60;1=60"]
    assert {u.group for u in plan if isinstance(u, ResctrlSchemataUpdate)} == {group}


def test_per_cache_entries_override_and_unnamed_ids_keep_the_root_value(node):
    annotation = {
        "llc": {"schemataPerCache": [{"cacheid": 1, "range": [50, 100]}]},
        "mb": {"schemata": {"percent": 100}, "schemataPerCache": [{"cacheid": 0, "percent": 20}]},
    }
    # cache 1: ways [ceil(5.5), 11) = 6-10 = 0x7c0; cache 0 keeps the root's 0x7ff
    assert schemata(node.plan(node.pod("web", annotation))) == ["L3:0=7ff;1=7c0", "MB:0=20;1=100"]


def test_amd_memory_bandwidth(tmp_path):
    node = Node(tmp_path)
    node.topology = basic_info("AuthenticAMD")
    pod = node.pod(
        "web", {"mb": {"schemata": {"percent": 55}, "schemataPerCache": [{"cacheid": 1, "percent": 100}]}}
    )
    assert schemata(node.plan(pod)) == ["MB:0=88;1=2048"]  # int(160 * 55 / 100); 100 % is unlimited


def test_mask_and_vendor_from_resctrl_when_the_topology_has_none(tmp_path):
    node = Node(tmp_path, topology=False)
    node.host.set_cpu_topology(vendor="AuthenticAMD")
    pod = node.pod("web", {"llc": {"schemata": {"range": [0, 50]}}, "mb": {"schemata": {"percent": 50}}})
    assert schemata(node.plan(pod)) == ["L3:0=3f;1=3f", "MB:0=80;1=80"]


def test_values_the_kernel_would_refuse_are_skipped(node):
    pod = node.pod(
        "web",
        {"llc": {"schemata": {"range": [30, 10]}}, "mb": {"schemata": {"percent": 150}}},
    )
    plan = node.plan(pod)
    assert schemata(plan) == []
    assert plan[0] == ResctrlGroupUpdate(f"koordlet-{pod.uid}", "Resctrl")  # the group is still its own


def test_no_mba_no_mb_line(tmp_path):
    node = Node(tmp_path, mba=False)
    pod = node.pod("web", {"llc": {"schemata": {"range": [0, 100]}}, "mb": {"schemata": {"percent": 50}}})
    assert schemata(node.plan(pod)) == ["L3:0=7ff;1=7ff"]


def test_pods_without_or_with_a_malformed_annotation_get_nothing(node):
    assert node.plan(node.pod("plain", None, {"main": "11\n"})) == []
    assert node.plan(node.pod("broken", "{llc", {"main": "12\n"})) == []


def test_container_tasks_not_in_the_group_yet(node):
    pod = node.pod("web", {"llc": {"schemata": {"range": [0, 30]}}}, {"main": "101\n102\n", "side": "201\n"})
    group = f"koordlet-{pod.uid}"
    tasks = [u for u in node.plan(pod) if isinstance(u, ResctrlTasksUpdate)]
    assert tasks == [
        ResctrlTasksUpdate(group, (101, 102), "Resctrl"),
        ResctrlTasksUpdate(group, (201,), "Resctrl"),
    ]
    node.host.populate_resctrl_group(group)
    (node.host.paths.resctrl_root / group / "tasks").write_text("101\n201\n")
    tasks = [u for u in node.plan(pod) if isinstance(u, ResctrlTasksUpdate)]
    assert tasks == [ResctrlTasksUpdate(group, (102,), "Resctrl")]


def test_remove_pod_removes_its_group(node):
    pod = node.pod("web", {"llc": {}})
    ctx = PodContext(pod, node.facts())
    Resctrl().remove_pod(ctx)
    assert ctx.response.extra == [ResctrlGroupRemoveUpdate(f"koordlet-{pod.uid}", "Resctrl")]


def test_all_pods_removes_the_groups_of_pods_gone(node):
    kept = node.pod("kept", {"llc": {}})
    gone = node.pod("gone", {"llc": {}})
    unannotated = node.pod("unannotated", None)
    for group in ("LS", "BE", f"koordlet-{kept.uid}", f"koordlet-{gone.uid}", f"koordlet-{unannotated.uid}"):
        node.host.populate_resctrl_group(group)

    def removed(*pods: PodMeta) -> list[Update]:
        return sorted((ResctrlGroupRemoveUpdate(f"koordlet-{p.uid}", "Resctrl") for p in pods), key=str)

    assert sorted(Resctrl().all_pods([kept, unannotated], node.facts()), key=str) == removed(
        gone, unannotated
    )
    node.gates = {}
    # turned off: every koordlet- group goes, the QoS-class groups stay
    assert sorted(Resctrl().all_pods([kept], node.facts()), key=str) == removed(kept, gone, unannotated)


# --- applied on the fake tree ---------------------------------------------------------------


def apply(node: Node, executor: KernelLikeExecutor, hook: Resctrl, pods: list[PodMeta]) -> None:
    for pod in pods:
        outcomes = executor.update_batch(node.plan(pod, hook))
        assert all(o.error is None for o in outcomes), [o.error for o in outcomes]
    outcomes = executor.update_batch(hook.all_pods(pods, node.facts()), cacheable=False)
    assert all(o.error is None for o in outcomes), [o.error for o in outcomes]


def test_applied_group_schemata_and_tasks(node):
    executor = KernelLikeExecutor(node.host)
    hook = Resctrl()
    pod = node.pod(
        "web",
        {"llc": {"schemata": {"range": [0, 30]}}, "mb": {"schemata": {"percent": 40}}},
        {"main": "7\n8\n"},
    )
    apply(node, executor, hook, [pod])
    group = f"koordlet-{pod.uid}"
    assert node.fs.groups() == [group]
    applied = node.fs.read_schemata(group)
    assert (applied.l3_line(), applied.mb_line()) == ("L3:0=f;1=f", "MB:0=40;1=40")
    assert node.fs.read_tasks(group) == [7, 8]
    apply(node, executor, hook, [])
    assert node.fs.groups() == []


def test_nothing_leaks_across_100_pod_lifecycles(tmp_path):
    node = Node(tmp_path)
    executor = KernelLikeExecutor(node.host)
    hook = Resctrl()
    node.host.populate_resctrl_group("LS")
    steady = node.pod("steady", {"llc": {"schemata": {"range": [0, 50]}}}, {"main": "10\n"})
    apply(node, executor, hook, [steady])
    baseline_groups = node.fs.groups()
    baseline_cache = dict(executor._cache)
    for i in range(100):
        churn = node.pod(
            f"churn-{i}",
            {"llc": {"schemata": {"range": [50, 100]}}, "mb": {"schemata": {"percent": 30}}},
            {"main": f"{1000 + i}\n"},
        )
        apply(node, executor, hook, [steady, churn])
        assert node.fs.read_tasks(f"koordlet-{churn.uid}") == [1000 + i]
        apply(node, executor, hook, [steady])
        node.host.remove_cgroup(churn.cgroup_dir)
    assert node.fs.groups() == baseline_groups == sorted(["LS", f"koordlet-{steady.uid}"])
    assert node.fs.read_tasks(f"koordlet-{steady.uid}") == [10]
    # the executor keeps nothing of the removed groups
    assert dict(executor._cache) == baseline_cache


def test_through_the_reconciler(tmp_path):
    node = Node(tmp_path)
    pods = [
        node.pod("web", {"llc": {"schemata": {"range": [0, 30]}}}, {"main": "21\n22\n"}),
        node.pod("plain", None, {"main": "31\n"}),
    ]
    facts = node.facts()
    executor = KernelLikeExecutor(node.host)
    reconciler = Reconciler(HookManager([Resctrl()]), lambda: facts, lambda: pods, executor)
    assert [o.error for o in reconciler.reconcile() if o.error is not None] == []
    group = f"koordlet-{pods[0].uid}"
    assert node.fs.groups() == [group]
    assert node.fs.read_schemata(group).l3_line() == "L3:0=f;1=f"
    assert node.fs.read_tasks(group) == [21, 22]
    pods.pop(0)
    assert [o.error for o in reconciler.reconcile() if o.error is not None] == []
    assert node.fs.groups() == []
