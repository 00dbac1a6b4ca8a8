"""Coscheduling in the scheduler: a gang is held back until its members exist, waits at
Permit until enough fit, binds all at once or none (Strict), against the fake apiserver;
PodGroup status written by the controller; bind-gang annotations on the bound pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controlplane.scheduler.config import parse
from koordinator.kube import resources as res
from tests.controlplane.scheduler.live import running
from tests.controlplane.scheduler.test_simulate import write
from tests.polling import eventually
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]
CRDS = Path(__file__).resolve().parents[3] / "crds"
GANG = "gang.scheduling.koordinator.sh"

PROFILE = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "koord-scheduler",
            "plugins": {
                "preEnqueue": {"enabled": [{"name": "Coscheduling"}]},
                "preFilter": {"enabled": [{"name": "Coscheduling"}]},
                "postFilter": {"enabled": [{"name": "Coscheduling"}]},
                "reserve": {"enabled": [{"name": "Coscheduling"}]},
                "permit": {"enabled": [{"name": "Coscheduling"}]},
                "preBind": {"enabled": [{"name": "Coscheduling"}]},
                "postBind": {"enabled": [{"name": "Coscheduling"}]},
            },
        }
    ],
}


def node(name: str, cpu: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def member(name: str, gang: str, min_available: int | None = None, *, pod_group: bool = False) -> Obj:
    meta: Obj = {"name": name, "namespace": "default"}
    if pod_group:
        meta["labels"] = {"pod-group.scheduling.sigs.k8s.io": gang}
    else:
        meta["annotations"] = {f"{GANG}/name": gang, f"{GANG}/min-available": str(min_available)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": "koord-scheduler",
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


def bound(fake: FakeApiServer, *names: str) -> list[str | None]:
    return [(fake.get(res.PODS, n, "default").get("spec") or {}).get("nodeName") for n in names]


async def test_a_gang_of_four_with_room_for_three_binds_none_then_all_once_room_appears():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.sigs.k8s.io_podgroups.yaml")
        fake.create(res.NODES, node("small", "3"))
        names = [f"w{i}" for i in range(4)]
        for name in names:
            fake.create(res.PODS, member(name, "train", 4))
        async with running(fake, parse(PROFILE)) as scheduler:
            # three fit and wait at Permit (the fourth, fitting nowhere, rejects its Strict
            # gang's waiting members each time it is tried); none binds
            await eventually(
                lambda: len(scheduler.waiting) == 3 and scheduler.queue.pending()["unschedulable"] == 1,
                within=10,
            )
            assert bound(fake, *names) == [None] * 4
            assert scheduler.bound == 0
            fake.create(res.NODES, node("more", "2"))
            await eventually(lambda: all(bound(fake, *names)), within=20)
            assert scheduler.bound == 4
            # each member carries the group it was released with
            annotations = fake.get(res.PODS, "w0", "default")["metadata"]["annotations"]
            assert annotations["internal.scheduling.koordinator.sh/bind-gang-group-id"] == "default/train"
            assert annotations["internal.scheduling.koordinator.sh/bind-gang-member-count"] == "4"


async def test_members_wait_in_the_queue_until_the_gang_has_its_minimum():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.sigs.k8s.io_podgroups.yaml")
        fake.create(res.NODES, node("big", "8"))
        fake.create(res.PODS, member("a", "pair", 2))
        async with running(fake, parse(PROFILE)) as scheduler:
            await eventually(lambda: scheduler.queue.pending()["gated"] == 1)
            assert bound(fake, "a") == [None]
            fake.create(res.PODS, member("b", "pair", 2))
            await eventually(lambda: all(bound(fake, "a", "b")))


async def test_a_pod_group_gang_binds_and_the_controller_writes_its_status():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.sigs.k8s.io_podgroups.yaml")
        fake.create(res.NODES, node("big", "8"))
        fake.create(
            res.POD_GROUPS,
            {
                "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "job", "namespace": "default"},
                "spec": {"minMember": 2, "scheduleTimeoutSeconds": 30},
            },
        )
        for name in ("p0", "p1"):
            fake.create(res.PODS, member(name, "job", pod_group=True))
        async with running(fake, parse(PROFILE)):
            await eventually(lambda: all(bound(fake, "p0", "p1")))
            await eventually(
                lambda: (
                    (fake.get(res.POD_GROUPS, "job", "default").get("status") or {}).get("phase")
                    == "Scheduled"
                ),
                within=10,
            )
            status = fake.get(res.POD_GROUPS, "job", "default")["status"]
            assert status["scheduled"] == 2


def test_simulate_releases_a_complete_gang_and_rejects_a_strict_one_that_cannot_fit(tmp_path: Path):
    from controlplane.scheduler.simulate import simulate

    pod_group = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {"minMember": 3},
    }
    nodes = write(tmp_path, "n.yaml", [node("n", "3")])
    fits = write(tmp_path, "p.yaml", [member(f"j{i}", "job", pod_group=True) for i in range(3)])
    results = simulate(parse(PROFILE), nodes, fits, [write(tmp_path, "o.yaml", [pod_group])])
    assert [(r["node"], r["status"]) for r in results] == [("n", "Scheduled")] * 3
    # each entry carries its gang as upstream summarizes it, when the member was placed
    assert results[0]["gang"]["name"] == "default/job"
    assert results[0]["gang"]["minRequiredNumber"] == 3
    assert results[2]["gang"]["waitingForBindChildren"] == ["default/j0", "default/j1", "default/j2"]
    # four of min 4 on room for three: the fourth fits nowhere and its Strict gang goes
    too_many = write(tmp_path, "q.yaml", [member(f"w{i}", "train", 4) for i in range(4)])
    results = simulate(parse(PROFILE), nodes, too_many)
    assert [r["node"] for r in results] == [None] * 4
    assert results[0]["status"].startswith("rejected at Permit by Coscheduling: ")
    assert results[3]["status"].startswith("0/1 nodes are available: 1 Insufficient cpu.")
