"""The PodMigrationJob lifecycle against the fake apiserver: Evict creates a job, arbitration
admits it, the reconcile runs it to the end (EvictDirectly; ReservationFirst with the test
playing koord-scheduler and the kubelet), and the ways a job fails."""

from __future__ import annotations

from typing import Any

from controlplane.descheduler.migration.arbitration import ANNOTATION_PASSED
from controlplane.descheduler.migration.reservation import reservation_for
from controlplane.descheduler.migration.workloads import max_unavailable
from koordinator.kube import resources as res
from koordinator.kube.timeutil import parse_time
from tests.controlplane.descheduler.builders import node, pod, replica_set
from tests.controlplane.descheduler.migration.cluster import Cluster, cluster, running_pod

Obj = dict[str, Any]
REASON = "node is overloaded"
EVICT_DIRECTLY = {"defaultJobMode": "EvictDirectly"}
NODES = [node("node-a"), node("node-b")]


def web(c: Cluster, replicas: int = 4) -> tuple[str, str, str]:
    """The ReplicaSet ``web`` with ``replicas``; the owner its pods name."""
    created = c.add(replica_set("web", "default", "", replicas))
    return ("ReplicaSet", "web", created["metadata"]["uid"])


def web_owner(p: Obj) -> tuple[str, str, str]:
    ref = p["metadata"]["ownerReferences"][0]
    return (ref["kind"], ref["name"], ref["uid"])


def web_pending_pod(c: Cluster) -> Obj:
    return pod("web-1", owner=web(c), phase="Pending", ready=False)


async def evicted_job(
    c: Cluster, name: str = "web-1", node_name: str = "node-a", **fields: Any
) -> tuple[Obj, Obj]:
    """A pod of ``web`` and the job Evict made for it, admitted."""
    p = c.add(running_pod(name, node_name, web(c), **fields))
    await c.cached(lambda ctl: ctl.pods.store.get(f"default/{name}") is not None)
    assert await c.controller.evict(p, REASON, "LowNodeLoad") is True
    job = c.only_job()
    await c.cached_jobs(1)
    await c.controller.arbitrate()
    return p, job


def condition(job: Obj, kind: str) -> Obj | None:
    for c in (job.get("status") or {}).get("conditions") or ():
        if c["type"] == kind:
            return dict(c)
    return None


def reservation_of(c: Cluster, job_name: str) -> str:
    """The Reservation the job recorded."""
    ref = (c.job(job_name)["spec"].get("reservationOptions") or {}).get("reservationRef") or {}
    return str(ref.get("name") or "")


def scheduled(node_name: str) -> Obj:
    """A Reservation status as koord-scheduler writes it on placing it."""
    return {
        "phase": "Available",
        "nodeName": node_name,
        "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "Scheduled"},
            {"type": "Ready", "status": "True", "reason": "Available"},
        ],
    }


async def reservation_made(c: Cluster) -> tuple[Obj, Obj, str]:
    """Evict and admit ``web-1`` (ReservationFirst), run the controller until the job
    records the Reservation it made."""
    p, job = await evicted_job(c)
    name = job["metadata"]["name"]
    c.start()
    await c.until(lambda: reservation_of(c, name) != "")
    return p, job, reservation_of(c, name)


def user_job(p: Obj, name: str, *, paused: bool = False, admitted: bool = False, mode: str = "") -> Obj:
    """A PodMigrationJob as a user writes it."""
    spec: Obj = {"podRef": {"namespace": p["metadata"]["namespace"], "name": p["metadata"]["name"]}}
    if paused:
        spec["paused"] = True
    if mode:
        spec["mode"] = mode
    meta: Obj = {"name": name}
    if admitted:
        meta["annotations"] = {ANNOTATION_PASSED: "true"}
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "PodMigrationJob",
        "metadata": meta,
        "spec": spec,
    }


async def test_evict_directly() -> None:
    async with cluster(EVICT_DIRECTLY, NODES) as c:
        p, job = await evicted_job(c)
        name = job["metadata"]["name"]
        assert job["metadata"]["annotations"] == {
            "koordinator.sh/evict-reason": REASON,
            "koordinator.sh/evict-trigger": "LowNodeLoad",
            "koordinator.sh/job-created-by": c.controller.reconciler_uid,
        }
        assert job["spec"]["mode"] == "EvictDirectly"
        assert job["spec"]["ttl"] == "5m0s"
        assert job["spec"]["podRef"] == {
            "kind": "Pod",
            "apiVersion": "v1",
            "namespace": "default",
            "name": "web-1",
            "uid": p["metadata"]["uid"],
        }
        assert c.job(name)["metadata"]["annotations"][ANNOTATION_PASSED] == "true"
        c.start()
        await c.until(lambda: c.phase(name) == "Succeeded")
        status = c.job(name)["status"]
        assert status["message"] == 'Pod "default/web-1" has been evicted'
        assert status["status"] == "Complete"
        assert c.phases(name) == ["", "Running", "Succeeded"]
        assert c.pod("web-1") is None
        descheduled = [e for e in c.events("web-1", "Pod") if e["reason"] == "Descheduled"]
        assert len(descheduled) == 1
        assert descheduled[0]["type"] == "Normal"
        assert descheduled[0]["message"] == f'Pod evicted from node "node-a" by the reason "{REASON}"'
        assert c.evicted("success", "LowNodeLoad", "default", "node-a") == 1.0
        # upstream records no event for an EvictDirectly success
        assert "Complete" not in [e["reason"] for e in c.events(name, "PodMigrationJob")]
        evicting = [e for e in c.events(name, "PodMigrationJob") if e["reason"] == "Evicting"]
        assert [e["message"] for e in evicting] == [
            f'Pod "default/web-1" evicted from node "node-a" by the reason "{REASON}"'
        ]


async def test_reservation_first() -> None:
    async with cluster(None, NODES) as c:
        p, job, r_name = await reservation_made(c)
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        assert r_name == uid
        reservation = c.reservation(uid)
        assert reservation is not None
        labels = reservation["metadata"]["labels"]
        assert labels["app.kubernetes.io/created-by"] == "koord-descheduler"
        assert labels["scheduling.koordinator.sh/reservation-order"].isdigit()
        spec = reservation["spec"]
        assert spec["allocateOnce"] is True
        assert spec["ttl"] == "5m0s"
        owner = p["metadata"]["ownerReferences"][0]
        assert spec["owners"] == [{"controller": {**owner, "namespace": "default"}}]
        template = spec["template"]
        assert template["metadata"]["name"] == "web-1"
        assert "nodeName" not in template["spec"]
        assert template["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ] == {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]}
            ]
        }
        ref = c.job(name)["spec"]["reservationOptions"]["reservationRef"]
        assert ref == {
            "kind": "Reservation",
            "apiVersion": "v1alpha1",
            "name": uid,
            "uid": reservation["metadata"]["uid"],
        }
        assert c.phase(name) == "Running"
        # while the Reservation is Pending the pod stays
        c.clock.advance(10.0)
        assert c.pod("web-1") is not None

        # koord-scheduler places the Reservation on node-b
        c.write_status(res.RESERVATIONS, uid, scheduled("node-b"))
        await c.until(lambda: c.pod("web-1") is None)
        await c.until(lambda: condition(c.job(name), "PodBoundReservation") is not None)
        status = c.job(name)["status"]
        assert status["nodeName"] == "node-b"
        assert condition(c.job(name), "ReservationScheduled")["status"] == "True"  # type: ignore[index]
        eviction = condition(c.job(name), "Eviction")
        assert eviction is not None
        assert (eviction["status"], eviction["reason"]) == ("True", "EvictComplete")
        waiting = condition(c.job(name), "PodBoundReservation")
        assert waiting is not None
        assert (waiting["status"], waiting["reason"]) == ("False", "WaitForPodBindReservation")
        assert c.phase(name) == "Running"

        # the replacement is bound to the Reservation and Ready
        new = c.add(running_pod("web-new", "node-b", web_owner(p)))
        bound = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": "default",
            "name": "web-new",
            "uid": new["metadata"]["uid"],
        }
        c.write_status(res.RESERVATIONS, uid, {"phase": "Succeeded", "currentOwners": [bound]})
        await c.until(lambda: c.phase(name) == "Succeeded")
        status = c.job(name)["status"]
        assert status["podRef"] == {
            "kind": "Pod",
            "apiVersion": "v1",
            "namespace": "default",
            "name": "web-new",
            "uid": new["metadata"]["uid"],
        }
        message = f'Bind Pod "default/web-new" in Reservation "{uid}"'
        assert status["message"] == message
        assert status["status"] == "Complete"
        assert c.phases(name) == ["", "Running", "Succeeded"]
        reasons = [e["reason"] for e in c.events(name, "PodMigrationJob")]
        for expected in (
            "ReservationCreated",
            "ReservationScheduled",
            "Evicting",
            "EvictComplete",
            "WaitForPodBindReservation",
            "PodBoundReservation",
            "Complete",
        ):
            assert expected in reasons
        complete = [e for e in c.events(name, "PodMigrationJob") if e["reason"] == "Complete"]
        assert [e["message"] for e in complete] == [message]
        assert c.evicted("success", "LowNodeLoad", "default", "node-a") == 1.0


async def test_the_replacement_must_be_ready() -> None:
    async with cluster(None, NODES) as c:
        p, job, uid = await reservation_made(c)
        name = job["metadata"]["name"]
        c.write_status(res.RESERVATIONS, uid, scheduled("node-b"))
        await c.until(lambda: c.pod("web-1") is None)
        new = c.add(running_pod("web-new", "node-b", web_owner(p), ready=False))
        bound = {"namespace": "default", "name": "web-new", "uid": new["metadata"]["uid"]}
        c.write_status(res.RESERVATIONS, uid, {"phase": "Succeeded", "currentOwners": [bound]})
        await c.until(lambda: condition(c.job(name), "BoundPodReady") is not None)
        waiting = condition(c.job(name), "BoundPodReady")
        assert waiting is not None
        assert (waiting["status"], waiting["reason"]) == ("False", "WaitForBoundPodReady")
        assert c.job(name)["status"]["podRef"]["name"] == "web-new"
        c.clock.advance(10.0)
        assert c.phase(name) == "Running"
        # the kubelet reports it Ready
        c.write_status(res.PODS, "web-new", {"conditions": [{"type": "Ready", "status": "True"}]}, "default")
        await c.until(lambda: c.phase(name) == "Succeeded")
        ready = condition(c.job(name), "BoundPodReady")
        assert ready is not None
        assert ready["status"] == "True"
        assert c.job(name)["status"]["message"] == f'Bind Pod "default/web-new" in Reservation "{uid}"'


async def test_a_reservation_on_the_pods_own_node_fails_the_job() -> None:
    async with cluster(None, NODES) as c:
        _, job, uid = await reservation_made(c)
        name = job["metadata"]["name"]
        c.write_status(res.RESERVATIONS, uid, scheduled("node-a"))
        await c.until(lambda: c.phase(name) == "Failed")
        status = c.job(name)["status"]
        assert status["reason"] == "ForbiddenMigratePod"
        assert status["message"] == f'Scheduler assignes the Reservation "{uid}" on the same node as the Pod'
        assert c.pod("web-1") is not None
        await c.until(lambda: c.reservation(uid) is None)
        assert c.evicted("success", "LowNodeLoad", "default", "node-a") == 0.0
        warnings = [e for e in c.events(name, "PodMigrationJob") if e["reason"] == "ForbiddenMigratePod"]
        assert [e["type"] for e in warnings] == ["Warning"]


async def test_an_unschedulable_reservation_fails_the_job() -> None:
    async with cluster(None, NODES) as c:
        _, job, uid = await reservation_made(c)
        name = job["metadata"]["name"]
        unschedulable = {
            "type": "Scheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available",
        }
        c.write_status(res.RESERVATIONS, uid, {"phase": "Failed", "conditions": [unschedulable]})
        await c.until(lambda: c.phase(name) == "Failed")
        status = c.job(name)["status"]
        assert (status["reason"], status["message"]) == ("Unschedulable", "0/3 nodes are available")
        assert c.pod("web-1") is not None
        assert c.evicted("success", "LowNodeLoad", "default", "node-a") == 0.0
        await c.until(lambda: c.reservation(uid) is None)
        # the condition sync warns once; the abort itself records no event
        warnings = [e for e in c.events(name, "PodMigrationJob") if e["type"] == "Warning"]
        assert [(e["reason"], e["message"]) for e in warnings] == [
            ("Unschedulable", "0/3 nodes are available")
        ]


async def test_a_job_failed_as_unschedulable_keeps_the_unschedulable_condition() -> None:
    async with cluster(None, NODES) as c:
        _, job, uid = await reservation_made(c)
        name = job["metadata"]["name"]
        unschedulable = {
            "type": "Scheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available",
        }
        c.write_status(res.RESERVATIONS, uid, {"phase": "Failed", "conditions": [unschedulable]})
        await c.until(lambda: c.phase(name) == "Failed")
        reported = condition(c.job(name), "ReservationScheduled")
        assert reported is not None
        assert (reported["status"], reported["reason"], reported["message"]) == (
            "False",
            "Unschedulable",
            "0/3 nodes are available",
        )


async def test_a_pending_unschedulable_reservation_is_reported_and_waited_on() -> None:
    async with cluster(None, NODES) as c:
        _, job, uid = await reservation_made(c)
        name = job["metadata"]["name"]
        unschedulable = {
            "type": "Scheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available",
        }
        c.write_status(res.RESERVATIONS, uid, {"phase": "Pending", "conditions": [unschedulable]})
        await c.until(lambda: condition(c.job(name), "ReservationScheduled") is not None)
        reported = condition(c.job(name), "ReservationScheduled")
        assert reported is not None
        assert (reported["status"], reported["reason"], reported["message"]) == (
            "False",
            "Unschedulable",
            "0/3 nodes are available",
        )
        assert c.phase(name) == "Running"
        warnings = [e for e in c.events(name, "PodMigrationJob") if e["reason"] == "Unschedulable"]
        assert [(e["type"], e["message"]) for e in warnings] == [("Warning", "0/3 nodes are available")]
        assert c.pod("web-1") is not None
        # it waits for the TTL
        c.clock.advance(300.0)
        await c.until(lambda: c.phase(name) == "Failed")
        assert c.job(name)["status"]["reason"] == "Timeout"


async def test_an_expired_reservation_fails_the_job() -> None:
    async with cluster(None, NODES) as c:
        _, job, uid = await reservation_made(c)
        name = job["metadata"]["name"]
        expired = {"type": "Ready", "status": "False", "reason": "Expired"}
        c.write_status(res.RESERVATIONS, uid, {"phase": "Failed", "conditions": [expired]})
        await c.until(lambda: c.phase(name) == "Failed")
        status = c.job(name)["status"]
        assert (status["reason"], status["message"]) == ("ReservationExpired", "Reservation expired")
        assert c.pod("web-1") is not None


async def test_a_missing_reservation_fails_the_job() -> None:
    async with cluster(None, NODES) as c:
        _, job, uid = await reservation_made(c)
        name = job["metadata"]["name"]
        c.fake.delete(res.RESERVATIONS, uid)
        await c.until(lambda: c.phase(name) == "Failed")
        status = c.job(name)["status"]
        assert status["reason"] == "MissingReservation"
        assert uid in status["message"]
        assert c.pod("web-1") is not None


async def test_ttl_timeout() -> None:
    async with cluster(None, NODES) as c:
        _, job, uid = await reservation_made(c)
        name = job["metadata"]["name"]
        born = parse_time(job["metadata"]["creationTimestamp"])
        # the Reservation stays Pending (the job looks again every 3 s): 299.5 s after its
        # creation the job still runs, at 300 s it has timed out
        c.clock.advance(born + 290.0 - c.clock.time())
        await c.until(lambda: c.clock.time() >= born + 299.5, advance=0.5)
        assert c.phase(name) == "Running"
        await c.until(lambda: c.phase(name) == "Failed", advance=0.5)
        assert c.clock.time() >= born + 300.0
        status = c.job(name)["status"]
        assert (status["reason"], status["message"]) == ("Timeout", "Abort job caused by timeout")
        await c.until(lambda: c.reservation(uid) is None)
        assert c.pod("web-1") is not None
        timeouts = [e for e in c.events(name, "PodMigrationJob") if e["reason"] == "Timeout"]
        assert [e["type"] for e in timeouts] == ["Warning"]


async def test_an_eviction_a_disruption_budget_holds_times_out() -> None:
    async with cluster(EVICT_DIRECTLY, NODES) as c:
        c.add(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            }
        )
        c.write_status(
            res.POD_DISRUPTION_BUDGETS,
            "web",
            {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1},
            "default",
        )
        _, job = await evicted_job(c, labels={"app": "web"})
        name = job["metadata"]["name"]
        c.start()
        await c.until(lambda: c.evicted("error", "LowNodeLoad", "default", "node-a") >= 1)
        assert c.phase(name) == "Running"
        assert c.pod("web-1") is not None
        failed = [e for e in c.events(name, "PodMigrationJob") if e["reason"] == "Evicting"]
        assert failed
        assert failed[0]["type"] == "Warning"
        assert failed[0]["message"].startswith('Failed evict Pod "default/web-1" caused by ')
        c.clock.advance(300.0)
        await c.until(lambda: c.phase(name) == "Failed")
        assert c.job(name)["status"]["reason"] == "Timeout"
        assert c.pod("web-1") is not None


async def test_a_missing_pod_fails_the_job() -> None:
    async with cluster(EVICT_DIRECTLY, NODES) as c:
        p = c.add(running_pod("web-1", "node-a", web(c)))
        await c.cached(lambda ctl: ctl.pods.store.get("default/web-1") is not None)
        assert await c.controller.evict(p, REASON, "LowNodeLoad") is True
        name = c.only_job()["metadata"]["name"]
        c.fake.delete(res.PODS, "web-1", "default")
        await c.cached(
            lambda ctl: ctl.pods.store.get("default/web-1") is None and len(ctl.jobs.store.values()) == 1
        )
        # a job whose pod is gone passes arbitration and fails at once
        await c.controller.arbitrate()
        c.start()
        await c.until(lambda: c.phase(name) == "Failed")
        status = c.job(name)["status"]
        assert (status["reason"], status["message"]) == (
            "MissingPod",
            'Abort job caused by missing Pod "default/web-1"',
        )
        missing = [e for e in c.events(name, "PodMigrationJob") if e["reason"] == "MissingPod"]
        assert [e["type"] for e in missing] == ["Warning"]


async def test_paused_jobs_are_left_alone() -> None:
    async with cluster(EVICT_DIRECTLY, NODES) as c:
        control, _ = await evicted_job(c)
        db = c.add(replica_set("db", "default", "", 4))
        owner = ("ReplicaSet", "db", db["metadata"]["uid"])
        paused = [c.add(running_pod(f"db-{i}", "node-b", owner)) for i in range(2)]
        waiting = c.add(user_job(paused[0], "paused-waiting", paused=True))
        admitted = c.add(user_job(paused[1], "paused-admitted", paused=True, admitted=True))
        await c.cached_jobs(3)
        c.start()
        control_name = next(
            j["metadata"]["name"]
            for j in c.jobs()
            if j["spec"]["podRef"]["name"] == control["metadata"]["name"]
        )
        await c.until(lambda: c.phase(control_name) == "Succeeded")
        # past every TTL: still nothing
        c.clock.advance(400.0)
        await c.until(lambda: c.clock.monotonic() >= 410.0)
        for before in (waiting, admitted):
            now = c.job(before["metadata"]["name"])
            assert now["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
            assert not now.get("status")
        assert c.pod("db-0") is not None
        assert c.pod("db-1") is not None
        assert c.reservations() == []


async def test_arbitration_fails_a_job_whose_pod_may_never_migrate() -> None:
    async with cluster(EVICT_DIRECTLY, NODES) as c:
        ds = c.add(running_pod("ds-1", "node-a", ("DaemonSet", "agent", "agent-uid")))
        assert await c.controller.evict(ds, REASON, "LowNodeLoad") is False
        assert c.jobs() == []
        c.add(user_job(ds, "by-hand"))
        await c.cached(lambda ctl: len(ctl.jobs.store.values()) == 1 and ctl.pods.store.get("default/ds-1"))
        await c.controller.arbitrate()
        assert c.phase("by-hand") == "Failed"
        status = c.job("by-hand")["status"]
        assert status["reason"] == "ForbiddenMigratePod"
        assert (
            status["message"]
            == 'Pod "default/ds-1" is forbidden to migrate because it does not meet the requirements'
        )
        assert ANNOTATION_PASSED not in (c.job("by-hand")["metadata"].get("annotations") or {})
        assert c.pod("ds-1") is not None


async def test_arbitration_keeps_jobs_over_the_node_limit_waiting() -> None:
    async with cluster(EVICT_DIRECTLY, NODES) as c:
        pods = []
        for i in range(3):
            rs = c.add(replica_set(f"rs-{i}", "default", "", 4))
            pods.append(
                c.add(running_pod(f"p-{i}", "node-a", ("ReplicaSet", f"rs-{i}", rs["metadata"]["uid"])))
            )
        for i, p in enumerate(pods):
            c.add(user_job(p, f"job-{i}"))
        await c.cached(lambda ctl: len(ctl.jobs.store.values()) == 3 and len(ctl.pods.store.values()) == 3)
        await c.controller.arbitrate()

        def admitted() -> list[str]:
            return sorted(
                j["metadata"]["name"]
                for j in c.jobs()
                if (j["metadata"].get("annotations") or {}).get(ANNOTATION_PASSED) == "true"
            )

        assert len(admitted()) == 2
        left = next(j["metadata"]["name"] for j in c.jobs() if j["metadata"]["name"] not in admitted())
        # still waiting, not failed
        assert c.phase(left) == ""
        await c.controller.arbitrate()
        assert len(admitted()) == 2
        # one admitted job ends: the waiting one is admitted in a later round
        c.write_status(res.POD_MIGRATION_JOBS, admitted()[0], {"phase": "Succeeded"})
        await c.cached(
            lambda ctl: any(j.get("status", {}).get("phase") == "Succeeded" for j in ctl.jobs.store.values())
        )
        await c.controller.arbitrate()
        assert left in admitted()


async def test_evict_refusals() -> None:
    async with cluster(None, NODES) as c:
        owner = web(c)
        other = c.add(running_pod("web-2", "node-a", owner, scheduler="default-scheduler"))
        first = c.add(running_pod("web-1", "node-a", owner))
        await c.cached(lambda ctl: len(ctl.pods.store.values()) == 2)
        assert c.controller.filter_reason(other) == (
            "pod's scheduler default-scheduler cannot place Reservations (schedulerNames)"
        )
        assert await c.controller.evict(other, REASON, "LowNodeLoad") is False
        assert await c.controller.evict(first, REASON, "LowNodeLoad") is True
        # one job per pod, even before the informer delivers it
        assert c.controller.filter_reason(first) == "pod already has a PodMigrationJob"
        assert await c.controller.evict(first, REASON, "LowNodeLoad") is False
        assert len(c.jobs()) == 1


async def test_evict_directly_mode_takes_any_scheduler() -> None:
    async with cluster(EVICT_DIRECTLY, NODES) as c:
        p = c.add(running_pod("web-1", "node-a", web(c), scheduler="default-scheduler"))
        await c.cached(lambda ctl: ctl.pods.store.get("default/web-1") is not None)
        assert await c.controller.evict(p, REASON, "LowNodeLoad") is True


async def test_dry_run_creates_nothing() -> None:
    async with cluster({"dryRun": True}, NODES) as c:
        p = c.add(running_pod("web-1", "node-a", web(c)))
        await c.cached(lambda ctl: ctl.pods.store.get("default/web-1") is not None)
        assert await c.controller.evict(p, REASON, "LowNodeLoad") is True
        c.start()
        c.clock.advance(5.0)
        await c.until(lambda: c.clock.monotonic() >= 10.0)
        assert c.jobs() == []
        assert c.reservations() == []
        assert c.pod("web-1") is not None


async def test_deleting_a_job_deletes_its_reservation() -> None:
    async with cluster(None, NODES) as c:
        _, job, uid = await reservation_made(c)
        c.fake.delete(res.POD_MIGRATION_JOBS, job["metadata"]["name"])
        await c.until(lambda: c.reservation(uid) is None)
        assert c.pod("web-1") is not None


async def test_a_pending_pod_is_migrated_once_it_is_scheduled() -> None:
    async with cluster(None, NODES) as c:
        p = c.add(web_pending_pod(c))
        await c.cached(lambda ctl: ctl.pods.store.get("default/web-1") is not None)
        assert await c.controller.evict(p, REASON, "LowNodeLoad") is True
        name = c.only_job()["metadata"]["name"]
        await c.cached_jobs(1)
        await c.controller.arbitrate()
        c.start()
        await c.until(lambda: reservation_of(c, name) != "")
        uid = reservation_of(c, name)
        reservation = c.reservation(uid)
        assert reservation is not None
        assert reservation["spec"]["owners"] == [
            {"object": {"uid": p["metadata"]["uid"], "kind": "Pod", "name": "web-1", "namespace": "default"}}
        ]
        c.write_status(res.RESERVATIONS, uid, scheduled("node-b"))
        await c.until(lambda: condition(c.job(name), "PodScheduled") is not None)
        assert condition(c.job(name), "PodScheduled")["status"] == "False"  # type: ignore[index]
        # koord-scheduler binds the pod (to its Reservation's node)
        await c.client.bind("default", "web-1", "node-b")
        await c.until(lambda: c.phase(name) == "Succeeded")
        assert c.job(name)["status"]["message"] == 'Assign Pod "default/web-1" to node "node-b"'
        # nothing was evicted
        assert c.pod("web-1") is not None


async def test_limits_under_a_hundred_candidates() -> None:
    """10 ReplicaSets of 10 pods over 5 nodes; pod i of rs-r on node (r + i) % 5. Evict asks
    for all 100 in order: Filter counts every Pending job, so rs-0 gets p0 (node-0) and p1
    (node-1) and then is full (at most max_unavailable(10) = 2 migrating); rs-1 gets node-1
    and node-2 ... rs-4 gets node-4 and node-0: 10 jobs, 2 per node, and the rest is
    refused. Arbitration then admits all 10."""
    nodes = [node(f"node-{n}") for n in range(5)]
    async with cluster(EVICT_DIRECTLY, nodes) as c:
        pods: list[Obj] = []
        for r in range(10):
            rs = c.add(replica_set(f"rs-{r}", "default", "", 10))
            owner = ("ReplicaSet", f"rs-{r}", rs["metadata"]["uid"])
            pods += [c.add(running_pod(f"rs-{r}-{i}", f"node-{(r + i) % 5}", owner)) for i in range(10)]
        await c.cached(
            lambda ctl: (
                len(ctl.pods.store.values()) == 100
                and len(ctl.owners[("apps", "ReplicaSet")].store.values()) == 10
            )
        )
        results = [await c.controller.evict(p, REASON, "LowNodeLoad") for p in pods]
        assert sum(results) == 10
        by_pod = {p["metadata"]["name"]: p for p in pods}

        def per(jobs: list[Obj], key: str) -> dict[str, int]:
            counts: dict[str, int] = {}
            for j in jobs:
                p = by_pod[j["spec"]["podRef"]["name"]]
                value = (
                    p["spec"]["nodeName"] if key == "node" else p["metadata"]["ownerReferences"][0]["name"]
                )
                counts[value] = counts.get(value, 0) + 1
            return counts

        jobs = c.jobs()
        assert per(jobs, "node") == {f"node-{n}": 2 for n in range(5)}
        assert per(jobs, "workload") == {f"rs-{r}": 2 for r in range(5)}
        assert sorted(j["spec"]["podRef"]["name"] for j in jobs) == sorted(
            f"rs-{r}-{i}" for r in range(5) for i in range(2)
        )
        await c.cached_jobs(10)
        await c.controller.arbitrate()
        admitted = [
            j for j in c.jobs() if (j["metadata"].get("annotations") or {}).get(ANNOTATION_PASSED) == "true"
        ]
        assert len(admitted) == 10
        assert max(per(admitted, "node").values()) <= 2
        assert max(per(admitted, "workload").values()) <= max_unavailable(10, None) == 2


async def test_priority_threshold_by_class_name() -> None:
    high = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
    }
    async with cluster({"priorityThreshold": {"name": "high"}, **EVICT_DIRECTLY}, [*NODES, high]) as c:
        p = running_pod("web-1", "node-a", web(c))
        p["spec"]["priorityClassName"] = "high"
        created = c.add(p)
        assert created["spec"]["priority"] == 1000
        await c.cached(lambda ctl: ctl.pods.store.get("default/web-1") is not None)
        assert await c.controller.evict(created, REASON, "LowNodeLoad") is False


async def test_the_job_waits_for_a_graceful_termination() -> None:
    async with cluster(EVICT_DIRECTLY, NODES) as c:
        # 30 s grace: the eviction only starts the termination
        p = c.add(pod("web-1", node="node-a", owner=web(c)))
        await c.cached(lambda ctl: ctl.pods.store.get("default/web-1") is not None)
        assert await c.controller.evict(p, REASON, "LowNodeLoad") is True
        name = c.only_job()["metadata"]["name"]
        await c.cached_jobs(1)
        await c.controller.arbitrate()
        c.start()
        await c.until(lambda: "deletionTimestamp" in (c.pod("web-1") or {}).get("metadata", {}))
        c.clock.advance(20.0)
        await c.until(lambda: c.clock.monotonic() >= 25.0)
        assert c.phase(name) == "Running"
        eviction = condition(c.job(name), "Eviction")
        assert eviction is not None
        assert (eviction["status"], eviction["reason"]) == ("False", "Evicting")
        # the kubelet has stopped it
        c.fake.delete(res.PODS, "web-1", "default", gracePeriodSeconds=0)
        await c.until(lambda: c.phase(name) == "Succeeded")


async def test_default_delete_options_go_into_the_job_and_the_eviction() -> None:
    async with cluster({**EVICT_DIRECTLY, "defaultDeleteOptions": {"gracePeriodSeconds": 0}}, NODES) as c:
        p = c.add(pod("web-1", node="node-a", owner=web(c)))
        await c.cached(lambda ctl: ctl.pods.store.get("default/web-1") is not None)
        assert await c.controller.evict(p, REASON, "LowNodeLoad") is True
        job = c.only_job()
        assert job["spec"]["deleteOptions"] == {"gracePeriodSeconds": 0}
        await c.cached_jobs(1)
        await c.controller.arbitrate()
        c.start()
        await c.until(lambda: c.phase(job["metadata"]["name"]) == "Succeeded")
        assert c.pod("web-1") is None


async def test_soft_eviction_waits_for_another_agent_to_remove_the_pod() -> None:
    async with cluster({**EVICT_DIRECTLY, "evictionPolicy": "SoftEviction"}, NODES) as c:
        _, job = await evicted_job(c)
        name = job["metadata"]["name"]
        c.start()
        soft = "scheduling.koordinator.sh/soft-eviction"
        await c.until(lambda: soft in ((c.pod("web-1") or {}).get("metadata", {}).get("annotations") or {}))
        marked = c.pod("web-1")
        assert marked is not None
        assert '"initiator": "LowNodeLoad"' in marked["metadata"]["annotations"][soft]
        c.clock.advance(30.0)
        await c.until(lambda: c.clock.monotonic() >= 35.0)
        assert c.phase(name) == "Running"
        c.fake.delete(res.PODS, "web-1", "default")
        await c.until(lambda: c.phase(name) == "Succeeded")


async def test_the_pod_label_overrides_the_eviction_policy() -> None:
    policy = {"koordinator.sh/evict-policy": "SoftEviction"}
    async with cluster(EVICT_DIRECTLY, NODES) as c:
        p = c.add(running_pod("web-1", "node-a", web(c), labels=policy))
        await c.cached(lambda ctl: ctl.pods.store.get("default/web-1") is not None)
        assert await c.controller.evict(p, REASON, "LowNodeLoad") is True
        await c.cached_jobs(1)
        await c.controller.arbitrate()
        c.start()
        soft = "scheduling.koordinator.sh/soft-eviction"
        await c.until(lambda: soft in ((c.pod("web-1") or {}).get("metadata", {}).get("annotations") or {}))


async def test_a_users_job_gets_the_pods_uid_and_runs() -> None:
    async with cluster(EVICT_DIRECTLY, NODES) as c:
        p = c.add(running_pod("web-1", "node-a", web(c)))
        c.add(user_job(p, "by-hand"))
        await c.cached(lambda ctl: len(ctl.jobs.store.values()) == 1 and ctl.pods.store.get("default/web-1"))
        await c.controller.arbitrate()
        c.start()
        await c.until(lambda: c.phase("by-hand") == "Succeeded")
        assert c.job("by-hand")["spec"]["podRef"]["uid"] == p["metadata"]["uid"]
        assert c.pod("web-1") is None


async def test_a_users_reservation_gets_an_order() -> None:
    async with cluster(None, NODES) as c:
        p = c.add(running_pod("web-1", "node-a", web(c)))
        mine = reservation_for(p, "mine", None, 0)
        del mine["metadata"]["labels"]["scheduling.koordinator.sh/reservation-order"]
        c.add(mine)
        job = user_job(p, "by-hand", admitted=True)
        job["spec"]["reservationOptions"] = {"reservationRef": {"name": "mine"}}
        c.add(job)
        c.start()
        await c.until(lambda: condition(c.job("by-hand"), "ReservationCreated") is not None)
        reservation = c.reservation("mine")
        assert reservation is not None
        assert reservation["metadata"]["labels"]["scheduling.koordinator.sh/reservation-order"].isdigit()
        assert condition(c.job("by-hand"), "ReservationCreated")["status"] == "True"  # type: ignore[index]
        # no Reservation of its own
        assert [r["metadata"]["name"] for r in c.reservations()] == ["mine"]


async def test_the_jobs_reservation_template_shapes_the_reservation() -> None:
    """``spec.reservationOptions.template``: its name, labels, ttl and pod template are used;
    what it leaves empty (owners: the CRD requires the field) comes from the pod; the job
    records the template used."""
    async with cluster(None, NODES) as c:
        p = c.add(running_pod("web-1", "node-a", web(c)))
        await c.cached(lambda ctl: ctl.pods.store.get("default/web-1") is not None)
        job = user_job(p, "move-to-b", admitted=True)
        pinned = {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "node-b"},
                "containers": [{"name": "main", "image": "app"}],
            },
        }
        job["spec"]["reservationOptions"] = {
            "template": {
                "metadata": {"name": "my-reservation", "labels": {"team": "x"}},
                "spec": {"ttl": "30m", "template": pinned, "owners": []},
            }
        }
        c.add(job)
        c.start()
        await c.until(lambda: reservation_of(c, "move-to-b") != "")
        assert reservation_of(c, "move-to-b") == "my-reservation"
        reservation = c.reservation("my-reservation")
        assert reservation is not None
        assert reservation["metadata"]["labels"]["team"] == "x"
        assert reservation["metadata"]["labels"]["app.kubernetes.io/created-by"] == "koord-descheduler"
        spec = reservation["spec"]
        assert (spec["ttl"], spec["allocateOnce"]) == ("30m", True)
        assert spec["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-b"}
        owner = p["metadata"]["ownerReferences"][0]
        assert spec["owners"] == [{"controller": {**owner, "namespace": "default"}}]
        recorded = c.job("move-to-b")["spec"]["reservationOptions"]["template"]
        assert recorded["metadata"] == {"name": "my-reservation", "labels": reservation["metadata"]["labels"]}
        assert (recorded["spec"]["template"], recorded["spec"]["owners"]) == (
            spec["template"],
            spec["owners"],
        )
        assert [r["metadata"]["name"] for r in c.reservations()] == ["my-reservation"]
        # the job goes on with the Reservation it named
        c.write_status(res.RESERVATIONS, "my-reservation", scheduled("node-b"))
        await c.until(lambda: c.pod("web-1") is None)
        assert c.job("move-to-b")["status"]["nodeName"] == "node-b"


async def test_the_object_limiter_holds_the_next_pod_of_the_workload() -> None:
    """10 replicas may migrate 2 per 5 minutes: after one eviction the next pod waits 150 s."""
    async with cluster(EVICT_DIRECTLY, NODES) as c:
        owner = web(c, replicas=10)
        first = c.add(running_pod("web-1", "node-a", owner))
        second = c.add(running_pod("web-2", "node-a", owner))
        await c.cached(lambda ctl: len(ctl.pods.store.values()) == 2)
        assert await c.controller.evict(first, REASON, "LowNodeLoad") is True
        name = c.only_job()["metadata"]["name"]
        await c.cached_jobs(1)
        await c.controller.arbitrate()
        c.start()
        await c.until(lambda: c.phase(name) == "Succeeded", advance=0.1)
        evicted_at = c.clock.monotonic()
        assert c.controller.filter_reason(second) == (
            "workload ReplicaSet default/web was migrated too recently (object limiter)"
        )
        assert await c.controller.evict(second, REASON, "LowNodeLoad") is False
        c.clock.advance(evicted_at + 150.0 - c.clock.monotonic())
        assert await c.controller.evict(second, REASON, "LowNodeLoad") is True


async def test_without_arbitration_jobs_run_at_once() -> None:
    async with cluster({**EVICT_DIRECTLY, "arbitrationArgs": {"enabled": False}}, NODES) as c:
        p = c.add(running_pod("web-1", "node-a", web(c)))
        await c.cached(lambda ctl: ctl.pods.store.get("default/web-1") is not None)
        c.start()
        assert await c.controller.evict(p, REASON, "LowNodeLoad") is True
        name = c.only_job()["metadata"]["name"]
        await c.until(lambda: c.phase(name) == "Succeeded")


async def test_old_jobs_are_collected_with_their_reservations() -> None:
    async with cluster(None, NODES) as c:
        _, job, uid = await reservation_made(c)
        name = job["metadata"]["name"]
        born = parse_time(job["metadata"]["creationTimestamp"])
        await c.until(lambda: c.phase(name) == "Failed", advance=5.0)
        assert c.job(name)["status"]["reason"] == "Timeout"
        # TTL 5m + 5m
        c.clock.advance(born + 599.0 - c.clock.time())
        await c.controller.scavenge()
        assert c.phase(name) == "Failed"
        c.clock.advance(1.0)
        await c.controller.scavenge()
        assert [j["metadata"]["name"] for j in c.jobs()] == []
        assert c.reservation(uid) is None


async def test_jobs_without_a_ttl_are_collected_after_30_minutes() -> None:
    async with cluster({**EVICT_DIRECTLY, "defaultJobTTL": "0s"}, NODES) as c:
        _, job = await evicted_job(c)
        name = job["metadata"]["name"]
        assert "ttl" not in job["spec"]
        born = parse_time(job["metadata"]["creationTimestamp"])
        c.clock.advance(born + 1799.0 - c.clock.time())
        await c.controller.scavenge()
        assert [j["metadata"]["name"] for j in c.jobs()] == [name]
        c.clock.advance(1.0)
        await c.controller.scavenge()
        assert c.jobs() == []
