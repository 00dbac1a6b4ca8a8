"""The colocationprofile controller on the fake apiserver: pending unscheduled pods get a
controller-managed profile's labels and annotations; scheduled or running pods do not; the
per pod and profile cache; the namespaceSelector (ignored upstream) is honoured; the labels
the pod validating webhook refuses to change are left out; a refused patch is not sent again
within the force-update period; profiles combine in name order; a pod's probability draw is
kept while it is pending."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from controlplane.manager.controllers.colocationprofile.controller import (
    ColocationProfileController,
    refused_label_changes,
)
from controlplane.manager.webhooks.pod.validating import validate_colocation
from koordinator.kube import resources as res
from tests.controlplane.manager.controllers.harness import started_fake
from tests.controlplane.manager.controllers.recommendation_harness import controllers
from tests.polling import eventually
from testsupport.fake import FakeApiServer, FakeClock, Fault

NOW = "2026-01-01T00:00:00Z"
GATES = {"ColocationProfileController": True}
Obj = dict[str, Any]


def profile(managed: bool = True, namespace_selector: Obj | None = None) -> Obj:
    spec: Obj = {
        "selector": {"matchLabels": {"app": "batch"}},
        "qosClass": "BE",
        "labels": {"team": "a"},
        "annotations": {"note": "colocated"},
        "labelSuffixes": {"team": "-x"},
        "schedulerName": "koord-scheduler",
        "patch": {"spec": {"terminationGracePeriodSeconds": 1}},
    }
    if namespace_selector is not None:
        spec["namespaceSelector"] = namespace_selector
    meta: Obj = {"name": "batch"}
    if managed:
        meta["labels"] = {"config.koordinator.sh/controller-managed": "true"}
    return {
        "apiVersion": "config.koordinator.sh/v1alpha1",
        "kind": "ClusterColocationProfile",
        "metadata": meta,
        "spec": spec,
    }


def managed_profile(name: str, *, managed: bool = True, **spec: Any) -> Obj:
    """A profile selecting ``app=batch`` pods with ``spec``, controller-managed unless told."""
    meta: Obj = {"name": name}
    if managed:
        meta["labels"] = {"config.koordinator.sh/controller-managed": "true"}
    return {
        "apiVersion": "config.koordinator.sh/v1alpha1",
        "kind": "ClusterColocationProfile",
        "metadata": meta,
        "spec": {"selector": {"matchLabels": {"app": "batch"}}, **spec},
    }


def pod(
    fake: FakeApiServer,
    name: str,
    *,
    node: str = "",
    phase: str = "Pending",
    namespace: str = "default",
    labels: dict[str, str] | None = None,
) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    created = fake.create(
        res.PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "batch", **(labels or {})}},
            "spec": spec,
        },
    )
    created["status"] = {"phase": phase}
    return fake.update(res.PODS, created, subresource="status")


def set_phase(fake, name: str, phase: str) -> None:
    current = fake.get(res.PODS, name, "default")
    current["status"] = {"phase": phase}
    fake.update(res.PODS, current, subresource="status")


def colocation(running) -> ColocationProfileController:
    controller = running.controllers["colocationprofile"]
    assert isinstance(controller, ColocationProfileController)
    return controller


async def settle(controller: ColocationProfileController, *profiles: str) -> None:
    """Run one round of each profile and wait until the controller is idle."""
    for key in profiles:
        controller.reactor.enqueue(key)
    await eventually(lambda: not len(controller.reactor.queue) and not controller.reactor.queue.processing)


def scripted(*values: int, then: int) -> Callable[[int], int]:
    """A ``rand.Intn`` answering ``values`` in turn, then always ``then``."""
    answers: Iterator[int] = iter(values)
    return lambda n: next(answers, then)


def patches(fake: FakeApiServer, name: str) -> list[int]:
    """The status codes of the PATCH requests the fake answered for pod ``default/name``."""
    path = f"/api/v1/namespaces/default/pods/{name}"
    return [r.status for r in fake.requests if r.method == "PATCH" and r.path == path]


def labels(fake, name: str, namespace: str = "default") -> dict[str, str]:
    return fake.get(res.PODS, name, namespace)["metadata"].get("labels") or {}


async def test_pending_unscheduled_pods_get_the_profile_and_others_do_not():
    fake = await started_fake()
    try:
        fake.create(res.CLUSTER_COLOCATION_PROFILES, profile())
        pod(fake, "pending")
        pod(fake, "scheduled", node="n1")
        pod(fake, "running", node="n1", phase="Running")
        async with (
            fake.client() as client,
            controllers(client, ("colocationprofile",), NOW, gates=GATES) as running,
        ):
            await eventually(lambda: labels(fake, "pending").get("team") == "a")
            updated = fake.get(res.PODS, "pending", "default")
            # labels and annotations only: no suffix (it would grow every round), no spec
            # changes, and no QoS class (the validating webhook refuses changing it)
            assert updated["metadata"]["labels"] == {"app": "batch", "team": "a"}
            assert updated["metadata"]["annotations"]["note"] == "colocated"
            assert (
                "schedulerName" not in updated["spec"]
                or updated["spec"]["schedulerName"] != "koord-scheduler"
            )
            assert updated["spec"].get("terminationGracePeriodSeconds") != 1
            assert "team" not in labels(fake, "scheduled")
            assert "team" not in labels(fake, "running")

            controller = running.controllers["colocationprofile"]
            assert isinstance(controller, ColocationProfileController)
            # the pod was updated for the profile: within 5 minutes it is not touched again
            assert [k.split("/")[0] for k in controller.updated] == ["batch"]
            current = fake.get(res.PODS, "pending", "default")
            current["metadata"]["labels"]["team"] = "b"
            fake.update(res.PODS, current)
            await eventually(lambda: labels(fake, "pending")["team"] == "b")
            controller.reactor.enqueue("batch")
            await eventually(
                lambda: not len(controller.reactor.queue) and not controller.reactor.queue.processing
            )
            assert labels(fake, "pending")["team"] == "b"
            # once the cache entry expires the profile is applied again
            controller.updated.clear()
            controller.reactor.enqueue("batch")
            await eventually(lambda: labels(fake, "pending")["team"] == "a")
    finally:
        await fake.stop()


async def test_unmanaged_profiles_and_unselected_namespaces_are_left_alone():
    fake = await started_fake()
    try:
        fake.create(res.CLUSTER_COLOCATION_PROFILES, profile(managed=False))
        managed = profile(namespace_selector={"matchLabels": {"colocation": "on"}})
        managed["metadata"]["name"] = "selective"
        fake.create(res.CLUSTER_COLOCATION_PROFILES, managed)
        fake.create(
            res.NAMESPACES,
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "on", "labels": {"colocation": "on"}},
            },
        )
        fake.create(res.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "off"}})
        pod(fake, "p", namespace="on")
        pod(fake, "p", namespace="off")
        async with (
            fake.client() as client,
            controllers(client, ("colocationprofile",), NOW, gates=GATES) as running,
        ):
            await eventually(lambda: labels(fake, "p", "on").get("team") == "a")
            controller = running.controllers["colocationprofile"]
            for key in ("batch", "selective"):
                controller.reactor.enqueue(key)
            await eventually(
                lambda: not len(controller.reactor.queue) and not controller.reactor.queue.processing
            )
            # "batch" is not controller-managed; "selective" does not select namespace "off"
            assert "team" not in labels(fake, "p", "off")
    finally:
        await fake.stop()


async def test_the_controller_does_not_run_with_its_gate_off():
    fake = await started_fake()
    try:
        async with (
            fake.client() as client,
            controllers(client, ("colocationprofile", "recommendation"), NOW) as running,
        ):
            assert list(running.controllers) == ["recommendation"]
    finally:
        await fake.stop()


QOS = "koordinator.sh/qosClass"
PRIORITY = "koordinator.sh/priority"
PRIORITY_CLASS = "koordinator.sh/priority-class"
PREEMPTIBLE = "quota.scheduling.koordinator.sh/preemptible"
BATCH = {PRIORITY_CLASS: "koord-batch"}
#: the field of the validating webhook's "field is immutable" error for each label
IMMUTABLE_FIELD = {QOS: f"labels.{QOS}", PRIORITY_CLASS: "spec.priority", PRIORITY: f"labels.{PRIORITY}"}


def bare_pod(labels: dict[str, str], priority: int | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels}, "spec": spec}


@pytest.mark.parametrize(
    ("old", "new", "priority", "check_priority_label", "refused"),
    [
        ({}, {QOS: "BE"}, None, True, {QOS}),
        ({QOS: "LS"}, {QOS: "BE"}, None, True, {QOS}),
        ({QOS: "BE"}, {QOS: "BE", "team": "a"}, None, True, set()),
        ({QOS: "unknown"}, {QOS: "other"}, None, True, set()),
        ({}, {PRIORITY_CLASS: "koord-batch"}, 5500, True, set()),
        ({}, {PRIORITY_CLASS: "koord-prod"}, 5500, True, {PRIORITY_CLASS}),
        ({}, {PRIORITY: "1111"}, None, True, {PRIORITY}),
        ({}, {PRIORITY: "1111"}, None, False, set()),
        ({}, {PREEMPTIBLE: "false"}, None, True, {PREEMPTIBLE}),
    ],
    ids=[
        "qos-added",
        "qos-changed",
        "qos-kept",
        "unknown-qos-to-unknown",
        "priority-class-label-same-class",
        "priority-class-label-other-class",
        "koordinator-priority",
        "koordinator-priority-gate-on",
        "preemptible",
    ],
)
def test_the_labels_left_out_are_those_the_validating_webhook_refuses_to_change(
    old: dict[str, str],
    new: dict[str, str],
    priority: int | None,
    check_priority_label: bool,
    refused: set[str],
):
    before, after = bare_pod(old, priority), bare_pod(new, priority)
    assert refused_label_changes(before, after, check_priority_label=check_priority_label) == refused
    immutable = {
        error.field
        for error in validate_colocation(after, before, check_priority_label=check_priority_label)
        if error.detail == "field is immutable"
    }
    assert immutable == {IMMUTABLE_FIELD[label] for label in refused if label in IMMUTABLE_FIELD}


@pytest.mark.parametrize(
    ("skip_validating_priority", "sent_priority"),
    [(False, None), (True, "1111")],
    ids=["priority-label-immutable", "ColocationProfileSkipValidatingPriority"],
)
async def test_an_existing_pod_gets_the_labels_the_validating_webhook_accepts(
    skip_validating_priority: bool, sent_priority: str | None
):
    """A BE profile's plain labels and annotations land; its QoS class (and its koordinator
    priority, unless the gate lets it change) is left to admission, so the patched pod passes
    the pod validating webhook's UPDATE rules."""
    fake = await started_fake()
    try:
        fake.create(
            res.CLUSTER_COLOCATION_PROFILES,
            managed_profile(
                "be",
                qosClass="BE",
                koordinatorPriority=1111,
                labels={"team": "a"},
                annotations={"note": "colocated"},
            ),
        )
        before = {
            "plain": pod(fake, "plain"),
            # admitted with the profile: the same QoS class and priority are no change
            "admitted": pod(fake, "admitted", labels={QOS: "BE", PRIORITY: "1111", **BATCH}),
            "ls": pod(fake, "ls", labels={QOS: "LS"}),
        }
        gates = {**GATES, "ColocationProfileSkipValidatingPriority": skip_validating_priority}
        async with (
            fake.client() as client,
            controllers(client, ("colocationprofile",), NOW, gates=gates),
        ):
            await eventually(lambda: all(labels(fake, name).get("team") == "a" for name in before))
        after = {name: fake.get(res.PODS, name, "default") for name in before}
        for name, patched in after.items():
            assert patched["metadata"]["annotations"]["note"] == "colocated", name
            assert (
                validate_colocation(patched, before[name], check_priority_label=not skip_validating_priority)
                == []
            ), name
        plain = {"app": "batch", "team": "a"}
        if sent_priority:
            plain[PRIORITY] = sent_priority
        assert labels(fake, "plain") == plain
        assert labels(fake, "admitted") == {"app": "batch", "team": "a", QOS: "BE", PRIORITY: "1111", **BATCH}
        assert labels(fake, "ls") == {**plain, QOS: "LS"}
    finally:
        await fake.stop()


async def test_a_refused_patch_is_not_sent_again_within_the_force_update_period(caplog):
    fake = await started_fake()
    fake.record_requests = True
    refusal = fake.inject(
        Fault(
            status=400,
            reason="BadRequest",
            method="PATCH",
            path=r"/pods/p$",
            times=1_000_000,
            message='admission webhook "vpod.koordinator.sh" denied the request',
        )
    )
    try:
        fake.create(res.CLUSTER_COLOCATION_PROFILES, managed_profile("team", labels={"team": "a"}))
        pod(fake, "p")
        caplog.set_level(logging.WARNING, "controlplane.manager.controllers.colocationprofile")
        async with (
            fake.client() as client,
            controllers(client, ("colocationprofile",), NOW, gates=GATES) as running,
        ):
            controller = colocation(running)
            await eventually(lambda: patches(fake, "p") == [400])
            for _ in range(3):
                await settle(controller, "team")
            assert patches(fake, "p") == [400]
            assert "team" not in labels(fake, "p")
            refusals = [r for r in caplog.records if "not patched" in r.getMessage()]
            assert [r.levelno for r in refusals] == [logging.ERROR]

            # once the period has passed the patch is sent again (and now accepted)
            refusal.times = refusal.hits
            cast(FakeClock, controller.ctx.clock).advance(301)
            await settle(controller, "team")
            await eventually(lambda: labels(fake, "p").get("team") == "a")
            assert patches(fake, "p") == [400, 200]
    finally:
        await fake.stop()


async def test_a_patch_that_failed_for_a_passing_reason_is_tried_again_next_round():
    fake = await started_fake()
    fake.record_requests = True
    fake.inject(Fault(status=500, method="PATCH", path=r"/pods/p$", times=1))
    try:
        fake.create(res.CLUSTER_COLOCATION_PROFILES, managed_profile("team", labels={"team": "a"}))
        pod(fake, "p")
        async with (
            fake.client() as client,
            controllers(client, ("colocationprofile",), NOW, gates=GATES) as running,
        ):
            controller = colocation(running)
            await eventually(lambda: patches(fake, "p") == [500])
            await settle(controller, "team")
            assert labels(fake, "p").get("team") == "a"
            assert patches(fake, "p") == [500, 200]
    finally:
        await fake.stop()


@pytest.mark.parametrize(
    ("b_managed", "b_draw", "team"),
    [(True, 0, "b"), (True, 99, "a"), (False, 0, "a")],
    ids=["later-name-wins", "later-skipped-by-probability", "later-not-controller-managed"],
)
async def test_matching_profiles_combine_in_name_order(b_managed: bool, b_draw: int, team: str):
    """Profiles ``a`` and ``b`` both set ``team``: the pod converges to what the webhook gives
    (the later name wins) whatever order their rounds run in, rather than flapping; ``a``'s
    other labels apply either way, and ``a`` keeps ``team`` when ``b`` takes no part."""
    fake = await started_fake()
    try:
        pod(fake, "p")
        async with (
            fake.client() as client,
            controllers(client, ("colocationprofile",), NOW, gates=GATES) as running,
        ):
            controller = colocation(running)
            controller.rand_intn = scripted(then=b_draw)
            fake.create(
                res.CLUSTER_COLOCATION_PROFILES,
                managed_profile("a", labels={"team": "a", "from-a": "yes"}),
            )
            fake.create(
                res.CLUSTER_COLOCATION_PROFILES,
                managed_profile("b", managed=b_managed, probability="50%", labels={"team": "b"}),
            )
            await eventually(lambda: labels(fake, "p").get("from-a") == "yes")
            seen = []
            for order in (("a", "b"), ("b", "a"), ("a", "b"), ("b",), ("a",)):
                controller.updated.clear()  # the force-update period has passed
                await settle(controller, *order)
                seen.append(labels(fake, "p")["team"])
            assert seen == [team] * 5
            assert labels(fake, "p")["from-a"] == "yes"
    finally:
        await fake.stop()


async def test_the_probability_draw_is_kept_while_the_pod_is_pending():
    fake = await started_fake()
    try:
        pod(fake, "first")
        async with (
            fake.client() as client,
            controllers(client, ("colocationprofile",), NOW, gates=GATES) as running,
        ):
            controller = colocation(running)
            # the first pod draws 50 (> 10: skipped); every later draw would be 5 (applied)
            controller.rand_intn = scripted(50, then=5)
            fake.create(
                res.CLUSTER_COLOCATION_PROFILES,
                managed_profile("ten", probability="10%", labels={"team": "a"}),
            )
            await eventually(lambda: len(controller.draws) == 1)
            for _ in range(20):
                await settle(controller, "ten")
            assert "team" not in labels(fake, "first")

            # a pod that leaves Pending gives its draw back; a new pending pod draws afresh
            set_phase(fake, "first", "Running")
            pod(fake, "second")
            await eventually(
                lambda: (
                    [p["metadata"]["name"] for p in controller.pods.store.by_index("unscheduled", "pending")]
                    == ["second"]
                )
            )
            await settle(controller, "ten")
            assert labels(fake, "second").get("team") == "a"
            first_uid = fake.get(res.PODS, "first", "default")["metadata"]["uid"]
            assert [uid for _, uid in controller.draws] == [
                fake.get(res.PODS, "second", "default")["metadata"]["uid"]
            ]
            assert first_uid not in {uid for _, uid in controller.draws}
            assert "team" not in labels(fake, "first")
    finally:
        await fake.stop()


async def test_a_changed_probability_is_judged_against_the_kept_draw():
    fake = await started_fake()
    try:
        pod(fake, "p")
        async with (
            fake.client() as client,
            controllers(client, ("colocationprofile",), NOW, gates=GATES) as running,
        ):
            controller = colocation(running)
            controller.rand_intn = scripted(50, then=99)
            created = fake.create(
                res.CLUSTER_COLOCATION_PROFILES,
                managed_profile("p", probability="10%", labels={"team": "a"}),
            )
            await eventually(lambda: len(controller.draws) == 1)
            await settle(controller, "p")
            assert "team" not in labels(fake, "p")
            created["spec"]["probability"] = "60%"
            fake.update(res.CLUSTER_COLOCATION_PROFILES, created)
            # 50 <= 60: the kept draw now passes (a fresh one, 99, would not)
            await eventually(lambda: labels(fake, "p").get("team") == "a")

            # a deleted profile's draws are forgotten
            fake.delete(res.CLUSTER_COLOCATION_PROFILES, "p")
            await eventually(lambda: not controller.draws)
    finally:
        await fake.stop()
