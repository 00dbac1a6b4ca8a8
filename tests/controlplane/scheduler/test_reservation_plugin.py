"""Reservation in the live scheduler against the fake apiserver: a Reservation is scheduled
and Available, its room is kept from other pods, its owner lands on it with
``reservation-allocated`` and the Reservation records the owner (allocate-once: Succeeded);
an expired one is failed and collected. Also ``simulate`` with placed Reservations: owners,
reservation affinity and ``reservation-order``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.reservation import reservation_args
from controlplane.scheduler.simulate import simulate
from koordinator.kube import resources as res
from tests.controlplane.scheduler.live import running
from tests.controlplane.scheduler.profile import only_scoring
from tests.controlplane.scheduler.test_simulate import write
from tests.polling import eventually
from testsupport.fake import FakeApiServer, Fault

Obj = dict[str, Any]
CRDS = Path(__file__).resolve().parents[3] / "crds"
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"


def node(name: str, cpu: str = "4") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}},
    }


def pod(name: str, cpu: str, labels: Obj | None = None, annotations: Obj | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": "default", "labels": labels or {}}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": "koord-scheduler",
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def reservation(
    name: str,
    cpu: str,
    *,
    owners: list[Obj] | None = None,
    ttl: str = "1h",
    labels: Obj | None = None,
    node_name: str = "",
    allocate_once: bool = True,
) -> Obj:
    spec: Obj = {
        "template": {
            "metadata": {"namespace": "default"},
            "spec": {
                "schedulerName": "koord-scheduler",
                "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
            },
        },
        "owners": owners if owners is not None else [{"labelSelector": {"matchLabels": {"app": "web"}}}],
        "ttl": ttl,
        "allocateOnce": allocate_once,
    }
    obj: Obj = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }
    if node_name:  # as the scheduler left it: Available there
        obj["metadata"]["uid"] = f"uid-{name}"
        obj["status"] = {
            "phase": "Available",
            "nodeName": node_name,
            "allocatable": {"cpu": cpu},
            "conditions": [
                {"type": "Scheduled", "status": "True", "reason": "Scheduled"},
                {"type": "Ready", "status": "True", "reason": "Available"},
            ],
        }
    return obj


def config(args: Obj | None = None) -> Any:
    return only_scoring("Reservation", weight=5000, args=args, binds=True)


def bound_to(fake: FakeApiServer, name: str) -> str | None:
    found: str | None = fake.get(res.PODS, name, "default")["spec"].get("nodeName")
    return found


def status_of(fake: FakeApiServer, name: str) -> Obj:
    found: Obj = fake.get(res.RESERVATIONS, name).get("status") or {}
    return found


async def test_a_reservation_holds_its_room_until_its_owner_takes_it():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.koordinator.sh_reservations.yaml")
        fake.create(res.NODES, node("n1"))
        fake.create(res.RESERVATIONS, reservation("web-capacity", "3"))
        async with running(fake, config()):
            await eventually(lambda: status_of(fake, "web-capacity").get("phase") == "Available")
            status = status_of(fake, "web-capacity")
            assert status["nodeName"] == "n1"
            assert status["allocatable"] == {"cpu": "3"}
            assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
                ("Scheduled", "True", "Scheduled"),
                ("Ready", "True", "Available"),
            ]
            # 3 of n1's 4 CPUs are held: a pod of 2 that is no owner does not fit
            fake.create(res.PODS, pod("other", "2"))
            await eventually(lambda: any(e["reason"] == "FailedScheduling" for e in _events(fake, "other")))
            assert bound_to(fake, "other") is None
            # the owner (app=web) gets the reservation's room back, and lands in it
            fake.create(res.PODS, pod("web-0", "3", labels={"app": "web"}))
            await eventually(lambda: bound_to(fake, "web-0") == "n1")
            allocated = json.loads(
                fake.get(res.PODS, "web-0", "default")["metadata"]["annotations"][ALLOCATED]
            )
            reserved = fake.get(res.RESERVATIONS, "web-capacity")
            assert allocated == {"name": "web-capacity", "uid": reserved["metadata"]["uid"]}
            # the controller records the owner; allocate-once: the reservation is used up
            await eventually(lambda: status_of(fake, "web-capacity").get("phase") == "Succeeded")
            status = status_of(fake, "web-capacity")
            assert status["currentOwners"] == [
                {"namespace": "default", "name": "web-0", "uid": _uid(fake, "web-0")}
            ]
            assert status["allocated"] == {"cpu": "3"}


async def test_an_unschedulable_reservation_says_so_and_stays_pending():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.koordinator.sh_reservations.yaml")
        fake.create(res.NODES, node("n1"))
        fake.create(res.RESERVATIONS, reservation("too-big", "8"))
        async with running(fake, config()):
            await eventually(lambda: bool(status_of(fake, "too-big").get("conditions")))
            status = status_of(fake, "too-big")
            assert status.get("phase", "Pending") == "Pending"
            assert "nodeName" not in status
            [scheduled] = status["conditions"]
            assert (scheduled["type"], scheduled["status"], scheduled["reason"]) == (
                "Scheduled",
                "False",
                "Unschedulable",
            )
            assert "Insufficient cpu" in scheduled["message"]


async def test_an_expired_reservation_is_failed_and_collected():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.koordinator.sh_reservations.yaml")
        fake.create(res.NODES, node("n1"))
        fake.create(res.RESERVATIONS, reservation("short", "1", ttl="1s"))
        async with running(fake, config({"gcDurationSeconds": 1})):
            await eventually(lambda: status_of(fake, "short").get("phase") in ("Available", "Failed"))
            await eventually(lambda: status_of(fake, "short").get("phase") == "Failed", within=15)
            ready = [c for c in status_of(fake, "short")["conditions"] if c["type"] == "Ready"]
            assert [(c["status"], c["reason"]) for c in ready] == [("False", "Expired")]
            # its room is free again, and a second later it is gone
            fake.create(res.PODS, pod("after", "4"))
            await eventually(lambda: bound_to(fake, "after") == "n1")
            await eventually(lambda: not fake.list_objects(res.RESERVATIONS), within=15)


def _events(fake: FakeApiServer, pod_name: str) -> list[Obj]:
    return [e for e in fake.list_objects(res.EVENTS, "default") if e["involvedObject"]["name"] == pod_name]


def _uid(fake: FakeApiServer, name: str) -> str:
    uid: str = fake.get(res.PODS, name, "default")["metadata"]["uid"]
    return uid


def test_simulate_places_owners_on_their_reservations_by_order_and_affinity(tmp_path):
    nodes = write(tmp_path, "nodes.yaml", [node("n1"), node("n2"), node("n3")])
    placed = [
        reservation("r-n1", "2", node_name="n1", labels={"scheduling.koordinator.sh/reservation-order": "2"}),
        reservation("r-n2", "2", node_name="n2", labels={"scheduling.koordinator.sh/reservation-order": "1"}),
        reservation(
            "r-n3", "2", node_name="n3", owners=[{"object": {"name": "named", "namespace": "default"}}]
        ),
    ]
    objects = write(tmp_path, "objects.yaml", placed)
    pending = [
        pod("web-0", "2", labels={"app": "web"}),
        pod(
            "pinned",
            "2",
            labels={"app": "web"},
            annotations={"scheduling.koordinator.sh/reservation-affinity": json.dumps({"name": "r-n1"})},
        ),
        pod("named", "2"),
        pod("other", "3"),
    ]
    results = {
        r["pod"]: r for r in simulate(config(), nodes, write(tmp_path, "pods.yaml", pending), [objects])
    }
    # web-0: r-n1 and r-n2 match its labels; r-n2 has the smaller order: 1000 there, then
    # r-n1's MostAllocated (2 of 2 cpu: 100); normalized to 100 and 10, x 5000
    web = results["default/web-0"]
    assert web["node"] == "n2"
    assert web["reservation"]["name"] == "r-n2"
    assert web["scores"]["n2"]["Reservation"] == 100
    assert web["scores"]["n1"]["Reservation"] == 10
    # reservation affinity by name: only r-n1's node
    pinned = results["default/pinned"]
    assert (pinned["node"], pinned["reservation"]["name"]) == ("n1", "r-n1")
    assert set(pinned["filtered"]) == {"n2", "n3"}
    assert pinned["filtered"]["n3"] == ["node(s) no reservations match reservation affinity"]
    # an owner by object name
    assert (results["default/named"]["node"], results["default/named"]["reservation"]["name"]) == (
        "n3",
        "r-n3",
    )
    # a pod no reservation owns sees every node with 2 of 4 CPUs held: 3 fit nowhere
    assert results["default/other"]["node"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"minCandidateNodesPercentage": 101}, "minCandidateNodesPercentage: Invalid value: 101"),
        ({"gcDurationSeconds": 0}, "gcDurationSeconds: Invalid value: 0"),
        ({"enablePreemption": "yes"}, "enablePreemption: Invalid value"),
        ({"other": 1}, "unknown field(s)"),
    ],
    ids=["percentage", "gc-duration", "preemption-flag", "unknown"],
)
def test_bad_args_are_refused_naming_the_field(args, message):
    with pytest.raises(ArgsError, match=re.escape(message)):
        reservation_args(args)


@pytest.mark.parametrize(
    ("owner", "pod_meta"),
    [
        ({"object": {"name": "p"}}, {}),
        ({"object": {"uid": "uid-p"}}, {"uid": "uid-p"}),
        ({"controller": {"name": "web-rs", "kind": "ReplicaSet"}}, {"controller": "web-rs"}),
        ({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}}, {}),
        ({"labelSelector": {"matchLabels": {"app": "web", "tier": "front"}}}, {"tier": "front"}),
    ],
    ids=["object-name-any-namespace", "object-uid", "controller-name", "selector-expressions", "two-labels"],
)
def test_each_kind_of_owner_finds_its_pod(tmp_path, owner, pod_meta):
    """Owners are indexed by one of their parts; each kind must still find its pods."""
    nodes = write(tmp_path, "nodes.yaml", [node("n1"), node("n2")])
    objects = write(tmp_path, "objects.yaml", [reservation("r", "3", node_name="n2", owners=[owner])])
    labels = {"app": "web"}
    if "tier" in pod_meta:
        labels["tier"] = pod_meta["tier"]
    obj = pod("p", "3", labels=labels)
    if "uid" in pod_meta:
        obj["metadata"]["uid"] = pod_meta["uid"]
    if "controller" in pod_meta:
        obj["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": pod_meta["controller"],
                "uid": "rs-uid",
                "controller": True,
            }
        ]
    [result] = simulate(config(), nodes, write(tmp_path, "pods.yaml", [obj]), [objects])
    assert (result["node"], result["reservation"]["name"]) == ("n2", "r")


def _with_priority(obj: Obj, priority: int) -> Obj:
    obj["spec"]["priority"] = priority
    return obj


def _events_of_reservation(fake: FakeApiServer, name: str) -> list[Obj]:
    return [
        e
        for e in fake.list_objects(res.EVENTS, "default")
        if e["involvedObject"].get("kind") == "Reservation" and e["involvedObject"]["name"] == name
    ]


def preemption_config(enable: bool) -> Any:
    config = only_scoring("Reservation", weight=5000, args={"enablePreemption": enable}, binds=True)
    return config


@pytest.mark.parametrize("enable", [False, True], ids=["default-no-preemption", "enablePreemption"])
async def test_a_reservation_preempts_lower_pods_only_with_enable_preemption(enable):
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.koordinator.sh_reservations.yaml")
        fake.create(res.NODES, node("n1"))
        low = _with_priority(pod("low", "3"), 10)
        low["spec"]["nodeName"] = "n1"
        fake.create(res.PODS, low)
        async with running(fake, preemption_config(enable)):
            fake.create(res.RESERVATIONS, reservation("big", "3"))
            if not enable:
                # 3 of 4 CPUs are taken: the reservation waits, told why on its own Events
                await eventually(
                    lambda: any(
                        e["reason"] == "FailedScheduling" for e in _events_of_reservation(fake, "big")
                    )
                )
                assert bound_to(fake, "low") == "n1"
                assert status_of(fake, "big").get("phase") != "Available"
            else:
                # the lower-priority pod is evicted (deleted; no kubelet here to finish it,
                # so the test does) and the reservation placed
                await eventually(
                    lambda: bool(fake.get(res.PODS, "low", "default")["metadata"].get("deletionTimestamp"))
                )
                fake.delete(res.PODS, "low", "default", gracePeriodSeconds=0)
                await eventually(lambda: status_of(fake, "big").get("phase") == "Available")


async def test_a_reservation_is_never_a_preemption_victim():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.koordinator.sh_reservations.yaml")
        fake.create(res.NODES, node("n1"))
        held = reservation("held", "3", node_name="n1")
        held["spec"]["template"]["spec"]["priority"] = 0  # lower than the pod below
        created = fake.create(res.RESERVATIONS, held)
        created["status"] = held["status"]
        fake.update(res.RESERVATIONS, created, subresource="status")
        async with running(fake, config()):
            fake.create(res.PODS, _with_priority(pod("urgent", "2"), 1000))
            await eventually(lambda: any(e["reason"] == "FailedScheduling" for e in _events(fake, "urgent")))
            [failed] = [e for e in _events(fake, "urgent") if e["reason"] == "FailedScheduling"]
            assert "No preemption victims found" in failed["message"]
            assert status_of(fake, "held")["phase"] == "Available"


async def test_an_owner_whose_binding_fails_is_not_written_as_the_reservations_owner():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "scheduling.koordinator.sh_reservations.yaml")
        fake.create(res.NODES, node("n1"))
        fake.create(res.RESERVATIONS, reservation("web-capacity", "3"))
        async with running(fake, config()) as scheduler:
            await eventually(lambda: status_of(fake, "web-capacity").get("phase") == "Available")
            # the owner's first binding hangs through a controller round, then fails
            fake.inject(Fault(status=500, method="POST", path="/pods/web-0/binding", delay=2.0))
            fake.create(res.PODS, pod("web-0", "3", labels={"app": "web"}))
            await eventually(lambda: scheduler.bind_failures == 1)
            status = status_of(fake, "web-capacity")
            assert status["phase"] == "Available"
            assert "currentOwners" not in status
            assert "allocated" not in status
            # scheduled again and bound this time: now it is the owner
            await eventually(lambda: bound_to(fake, "web-0") == "n1")
            await eventually(lambda: status_of(fake, "web-capacity").get("phase") == "Succeeded")
            assert status_of(fake, "web-capacity")["currentOwners"] == [
                {"namespace": "default", "name": "web-0", "uid": _uid(fake, "web-0")}
            ]


def test_an_owner_may_name_any_owner_reference_of_the_pod(tmp_path):
    """Upstream's MatchReservationControllerReference looks at every ownerReference, not
    only the controlling one."""
    nodes = write(tmp_path, "nodes.yaml", [node("n1"), node("n2")])
    owners = [
        {"controller": {"apiVersion": "batch/v1", "kind": "Job", "name": "job-a", "namespace": "default"}}
    ]
    objects = write(tmp_path, "objects.yaml", [reservation("r", "3", node_name="n2", owners=owners)])
    obj = pod("p", "3")
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True},
        {"apiVersion": "batch/v1", "kind": "Job", "name": "job-a", "uid": "job-uid"},
    ]
    other = pod("q", "3")
    other["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "job-b", "uid": "job-b-uid"},
    ]
    [result, unowned] = simulate(config(), nodes, write(tmp_path, "pods.yaml", [obj, other]), [objects])
    assert (result["node"], result["reservation"]["name"]) == ("n2", "r")
    assert "reservation" not in unowned


def _with_reserved(obj: Obj, cpu: str) -> Obj:
    obj["metadata"]["annotations"] = {
        "node.koordinator.sh/reservation": json.dumps({"resources": {"cpu": cpu}})
    }
    return obj


@pytest.mark.parametrize(
    ("name", "cpu", "labels", "fits"),
    [
        ("other", "1", {}, False),
        ("owner-all", "4", {"app": "web"}, False),
        ("owner-rest", "3", {"app": "web"}, True),
    ],
    ids=["non-owner-not-in-the-reserved-part", "owner-not-in-the-reserved-part", "owner-in-the-rest"],
)
def test_the_reserved_part_of_a_reservation_is_held_from_every_pod(tmp_path, name, cpu, labels, fits):
    """``node.koordinator.sh/reservation`` on a Reservation limits what its owners may use;
    the part it keeps is still held on the node, not freed for other pods."""
    nodes = write(tmp_path, "nodes.yaml", [node("n1", cpu="4")])
    held = _with_reserved(reservation("r", "4", node_name="n1"), "1")
    objects = write(tmp_path, "objects.yaml", [held])
    [result] = simulate(
        config(), nodes, write(tmp_path, "pods.yaml", [pod(name, cpu, labels=labels)]), [objects]
    )
    assert (result["node"] == "n1") is fits, result["status"]
    if fits:
        assert result["reservation"]["name"] == "r"


def test_the_most_preferred_reservation_order_counts_only_on_feasible_nodes(tmp_path):
    """The node of the smallest order fails the pod (its Restricted reservation is too
    small): the next smallest order among the nodes left gets 1000."""
    nodes = write(tmp_path, "nodes.yaml", [node("n1"), node("n2"), node("n3")])
    order = "scheduling.koordinator.sh/reservation-order"
    placed = [
        reservation("r-n1", "1", node_name="n1", labels={order: "1"}),
        reservation("r-n2", "4", node_name="n2", labels={order: "2"}),
        reservation("r-n3", "2", node_name="n3"),
    ]
    placed[0]["spec"]["allocatePolicy"] = "Restricted"
    objects = write(tmp_path, "objects.yaml", placed)
    [result] = simulate(
        config(), nodes, write(tmp_path, "pods.yaml", [pod("web-0", "2", labels={"app": "web"})]), [objects]
    )
    assert result["filtered"]["n1"] == ["Reservation(s) Insufficient cpu"]
    # n2: 1000 -> 100; n3: MostAllocated 2 of 2 CPUs (100) -> 10
    assert result["scores"]["n2"]["Reservation"] == 100
    assert result["scores"]["n3"]["Reservation"] == 10
    assert (result["node"], result["reservation"]["name"]) == ("n2", "r-n2")


def test_a_node_scores_by_the_reservation_reserve_would_put_the_pod_in(tmp_path):
    """n1 holds an ordered reservation (order 5, 2 of 8 CPUs: 25) and an unordered one the
    pod would fill (100): Reserve takes the ordered one, so n1 scores 25, not 100."""
    nodes = write(tmp_path, "nodes.yaml", [node("n1", cpu="16"), node("n2")])
    order = "scheduling.koordinator.sh/reservation-order"
    placed = [
        reservation("r-ordered", "8", node_name="n1", labels={order: "5"}),
        reservation("r-snug", "2", node_name="n1"),
        reservation("r-n2", "4", node_name="n2", labels={order: "3"}),
    ]
    objects = write(tmp_path, "objects.yaml", placed)
    [result] = simulate(
        config(), nodes, write(tmp_path, "pods.yaml", [pod("web-0", "2", labels={"app": "web"})]), [objects]
    )
    # n2 is preferred (1000 -> 100); n1's nominated reservation scores 25 (-> 2)
    assert result["scores"]["n2"]["Reservation"] == 100
    assert result["scores"]["n1"]["Reservation"] == 2
    assert (result["node"], result["reservation"]["name"]) == ("n2", "r-n2")
