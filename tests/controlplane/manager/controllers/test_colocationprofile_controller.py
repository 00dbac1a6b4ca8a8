"""The colocationprofile controller on the fake apiserver: pending unscheduled pods get a
controller-managed profile's labels and annotations; scheduled or running pods do not; the
per pod and profile cache; the namespaceSelector (ignored upstream) is honoured."""

from __future__ import annotations

from typing import Any

from controlplane.manager.controllers.colocationprofile.controller import ColocationProfileController
from koordinator.kube import resources as res
from tests.controlplane.manager.controllers.harness import started_fake
from tests.controlplane.manager.controllers.recommendation_harness import controllers
from tests.polling import eventually

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


def pod(fake, name: str, *, node: str = "", phase: str = "Pending", namespace: str = "default") -> None:
    spec: Obj = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    created = fake.create(
        res.PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "batch"}},
            "spec": spec,
        },
    )
    created["status"] = {"phase": phase}
    fake.update(res.PODS, created, subresource="status")


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
            await eventually(lambda: labels(fake, "pending").get("koordinator.sh/qosClass") == "BE")
            updated = fake.get(res.PODS, "pending", "default")
            # labels and annotations only: no suffix (it would grow every round), no spec changes
            assert updated["metadata"]["labels"] == {
                "app": "batch",
                "team": "a",
                "koordinator.sh/qosClass": "BE",
            }
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
