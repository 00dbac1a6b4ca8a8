"""The recommendation controller on the fake apiserver: status from NodeMetric pod usage, one
sample per report, a deleted target, a restart that continues from the checkpoint, a
recreated object or edited target that starts afresh, containers that leave the target,
checkpoints written at most once an interval."""

from __future__ import annotations

from typing import Any

from controlplane.manager.controllers.recommendation.controller import RecommendationController
from controlplane.manager.controllers.recommendation.settings import RecommendationSettings
from controlplane.manager.controllers.recommendation.state import RecommendationState
from koordinator.kube import resources as res
from tests.controlplane.manager.controllers.harness import started_fake
from tests.controlplane.manager.controllers.objects import node_metric, pod_metric
from tests.controlplane.manager.controllers.recommendation_harness import controllers
from tests.polling import eventually
from testsupport.fake import FakeClock

NOW = "2026-01-01T00:00:00Z"
SETTINGS = RecommendationSettings(min_samples=1)
Obj = dict[str, Any]


def deployment() -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "x"}]},
            },
        },
    }


def pod(name: str, node: str = "n1") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "x"}]},
    }


def recommendation() -> Obj:
    return {
        "apiVersion": "analysis.koordinator.sh/v1alpha1",
        "kind": "Recommendation",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "target": {
                "type": "workload",
                "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            }
        },
    }


def report(fake, update_time: str, cpu: str, memory: str) -> None:
    metric = node_metric("n1", update_time=update_time, pods=[pod_metric("web-1", cpu, memory)])
    try:
        current = fake.get(res.NODE_METRICS, "n1")
    except Exception:
        current = fake.create(res.NODE_METRICS, {k: v for k, v in metric.items() if k != "status"})
    current["status"] = metric["status"]
    fake.update(res.NODE_METRICS, current, subresource="status")


def status(fake) -> Obj:
    return fake.get(res.RECOMMENDATIONS, "web", "default").get("status") or {}


def ready(fake) -> Obj:
    return next(c for c in status(fake).get("conditions") or () if c["type"] == "RecommendationReady")


def containers(fake) -> list[Obj]:
    return (status(fake).get("podStatus") or {}).get("containerStatuses") or []


async def test_recommendations_follow_reports_survive_restarts_and_a_deleted_target():
    fake = await started_fake()
    try:
        fake.create(res.DEPLOYMENTS, deployment())
        fake.create(res.PODS, pod("web-1"))
        report(fake, "2026-01-01T00:00:00Z", "200m", "100Mi")
        fake.create(res.RECOMMENDATIONS, recommendation())
        async with fake.client() as client:
            async with controllers(client, ("recommendation",), NOW, recommendation=SETTINGS) as running:
                # cpu 0.2 -> 0.21578564 * 1.15 -> 249m; 100Mi -> 110265640.6 B * 1.15 -> 121Mi
                await eventually(
                    lambda: (
                        containers(fake)
                        == [{"containerName": "app", "resources": {"cpu": "249m", "memory": "121Mi"}}]
                    )
                )
                assert ready(fake)["status"] == "True"
                assert ready(fake)["reason"] == "Recommended"
                assert status(fake)["updateTime"] == NOW
                # a new report moves the recommendation up (p95 of {0.2 weight 1, 1.0 weight ~1})
                report(fake, "2026-01-01T00:01:00Z", "1", "1Gi")
                await eventually(
                    lambda: containers(fake) and containers(fake)[0]["resources"]["cpu"] != "249m"
                )
                controller = running.controllers["recommendation"]
                assert isinstance(controller, RecommendationController)
                state = controller.states["default/web"]
                # the same report is sampled once, however often the Recommendation is reconciled
                controller.reactor.enqueue("default/web")
                await eventually(
                    lambda: not len(controller.reactor.queue) and not controller.reactor.queue.processing
                )
                assert state.containers["app"].cpu.samples == 2
                moved = containers(fake)
            checkpoint = fake.get(res.CONFIG_MAPS, "web-recommendation", "default")
            assert checkpoint["metadata"]["ownerReferences"][0]["kind"] == "Recommendation"

            # a new controller instance continues from the checkpoint, without sampling the last report again
            async with controllers(client, ("recommendation",), NOW, recommendation=SETTINGS) as running:
                controller = running.controllers["recommendation"]
                assert isinstance(controller, RecommendationController)
                await eventually(lambda: "default/web" in controller.states)
                await eventually(
                    lambda: not len(controller.reactor.queue) and not controller.reactor.queue.processing
                )
                restored = controller.states["default/web"]
                assert restored.containers["app"].cpu.samples == 2
                assert restored.sampled == {"n1": "2026-01-01T00:01:00Z"}
                assert containers(fake) == moved

                # the Deployment goes: a condition, the last recommendations kept, no crash
                fake.delete(res.DEPLOYMENTS, "web", "default")
                controller.reactor.enqueue("default/web")
                await eventually(lambda: ready(fake)["reason"] == "TargetNotFound")
                assert ready(fake)["status"] == "False"
                assert ready(fake)["message"] == "Deployment default/web not found"
                assert containers(fake) == moved
    finally:
        await fake.stop()


async def test_no_pods_and_not_enough_samples_are_conditions():
    fake = await started_fake()
    try:
        fake.create(res.DEPLOYMENTS, deployment())
        fake.create(res.RECOMMENDATIONS, recommendation())
        async with (
            fake.client() as client,
            controllers(client, ("recommendation",), NOW, recommendation=RecommendationSettings()) as running,
        ):
            await eventually(lambda: bool(status(fake).get("conditions")))
            assert ready(fake)["reason"] == "NoPods"
            fake.create(res.PODS, pod("web-1"))
            report(fake, "2026-01-01T00:00:00Z", "200m", "100Mi")
            await eventually(lambda: ready(fake)["reason"] == "NotEnoughSamples")
            assert containers(fake) == []
            assert running.controllers["recommendation"]
    finally:
        await fake.stop()


async def test_a_configmap_of_the_checkpoints_name_that_is_not_a_checkpoint_is_left_alone():
    fake = await started_fake()
    try:
        foreign = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "web-recommendation", "namespace": "default"},
            "data": {"app.conf": "keep me"},
        }
        fake.create(res.CONFIG_MAPS, foreign)
        fake.create(res.DEPLOYMENTS, deployment())
        fake.create(res.PODS, pod("web-1"))
        report(fake, "2026-01-01T00:00:00Z", "200m", "100Mi")
        fake.create(res.RECOMMENDATIONS, recommendation())
        async with (
            fake.client() as client,
            controllers(client, ("recommendation",), NOW, recommendation=SETTINGS) as running,
        ):
            # the recommendation is written; the ConfigMap is not taken over (a merge patch would
            # have made the Recommendation its owner, and the garbage collector would delete it)
            await eventually(
                lambda: any(c["reason"] == "Recommended" for c in status(fake).get("conditions") or ())
            )
            await eventually(
                lambda: any(
                    e["reason"] == "CheckpointConflict" for e in fake.list_objects(res.EVENTS, "default")
                )
            )
            kept = fake.get(res.CONFIG_MAPS, "web-recommendation", "default")
            assert kept["data"] == {"app.conf": "keep me"}
            assert not kept["metadata"].get("ownerReferences")
            event = next(
                e for e in fake.list_objects(res.EVENTS, "default") if e["reason"] == "CheckpointConflict"
            )
            assert event["type"] == "Warning"
            assert event["involvedObject"]["kind"] == "Recommendation"

            # once it is gone, the next reconcile writes the checkpoint (no new report needed)
            fake.delete(res.CONFIG_MAPS, "web-recommendation", "default")
            controller = running.controllers["recommendation"]
            controller.reactor.enqueue("default/web")

            def written() -> bool:
                try:
                    found = fake.get(res.CONFIG_MAPS, "web-recommendation", "default")
                except Exception:
                    return False
                return "checkpoint" in found["data"]

            await eventually(written)
            owners = fake.get(res.CONFIG_MAPS, "web-recommendation", "default")["metadata"]["ownerReferences"]
            assert [(o["kind"], o["name"]) for o in owners] == [("Recommendation", "web")]
    finally:
        await fake.stop()


def labelled_pod(name: str, app: str, container: str) -> Obj:
    found = pod(name)
    found["metadata"]["labels"] = {"app": app}
    found["spec"]["containers"][0]["name"] = container
    return found


def select(name: str, app: str) -> Obj:
    return {
        "apiVersion": "analysis.koordinator.sh/v1alpha1",
        "kind": "Recommendation",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"target": {"type": "podSelector", "podSelector": {"matchLabels": {"app": app}}}},
    }


def report_pods(fake, update_time: str, *pods: Obj) -> None:
    metric = node_metric("n1", update_time=update_time, pods=list(pods))
    try:
        current = fake.get(res.NODE_METRICS, "n1")
    except Exception:
        current = fake.create(res.NODE_METRICS, {k: v for k, v in metric.items() if k != "status"})
    current["status"] = metric["status"]
    fake.update(res.NODE_METRICS, current, subresource="status")


def names(fake, name: str = "web") -> list[str]:
    found = fake.get(res.RECOMMENDATIONS, name, "default").get("status") or {}
    return [c["containerName"] for c in (found.get("podStatus") or {}).get("containerStatuses") or ()]


async def test_a_recreated_recommendation_or_an_edited_target_starts_afresh():
    fake = await started_fake()
    try:
        fake.create(res.PODS, labelled_pod("web-1", "web", "app"))
        fake.create(res.PODS, labelled_pod("db-1", "db", "db"))
        report_pods(
            fake, "2026-01-01T00:00:00Z", pod_metric("web-1", "4", "4Gi"), pod_metric("db-1", "100m", "50Mi")
        )
        fake.create(res.RECOMMENDATIONS, select("web", "web"))
        async with (
            fake.client() as client,
            controllers(client, ("recommendation",), NOW, recommendation=SETTINGS) as running,
        ):
            controller = running.controllers["recommendation"]
            assert isinstance(controller, RecommendationController)
            await eventually(lambda: names(fake) == ["app"])

            # the target edited in place: the web pods' history is not the db pods'
            edited = fake.get(res.RECOMMENDATIONS, "web", "default")
            edited["spec"] = select("web", "db")["spec"]
            fake.update(res.RECOMMENDATIONS, edited)
            await eventually(lambda: names(fake) == ["db"])
            assert list(controller.states["default/web"].containers) == ["db"]

            # deleted and created again (kubectl replace --force): nothing of the old object
            # carries over, the current report included
            fake.delete(res.RECOMMENDATIONS, "web", "default")
            fake.create(res.RECOMMENDATIONS, select("web", "web"))
            await eventually(lambda: names(fake) == ["app"])
            state = controller.states["default/web"]
            assert list(state.containers) == ["app"]
            assert state.containers["app"].cpu.samples == 1
            assert state.uid == fake.get(res.RECOMMENDATIONS, "web", "default")["metadata"]["uid"]
    finally:
        await fake.stop()


async def test_containers_the_target_no_longer_has_are_dropped():
    fake = await started_fake()
    try:
        fake.create(res.DEPLOYMENTS, deployment())
        fake.create(res.PODS, labelled_pod("web-1", "web", "app"))
        report_pods(fake, "2026-01-01T00:00:00Z", pod_metric("web-1", "200m", "100Mi"))
        # apiVersion is optional in the CRD: the kind names the workload
        found = recommendation()
        del found["spec"]["target"]["workload"]["apiVersion"]
        fake.create(res.RECOMMENDATIONS, found)
        async with (
            fake.client() as client,
            controllers(client, ("recommendation",), NOW, recommendation=SETTINGS) as running,
        ):
            await eventually(lambda: names(fake) == ["app"])
            # a rollout renames the container: the old name's frozen figures leave the status
            fake.delete(res.PODS, "web-1", "default", gracePeriodSeconds=0)
            fake.create(res.PODS, labelled_pod("web-2", "web", "main"))
            report_pods(fake, "2026-01-01T00:01:00Z", pod_metric("web-2", "300m", "200Mi"))
            await eventually(lambda: names(fake) == ["main"])
            controller = running.controllers["recommendation"]
            assert isinstance(controller, RecommendationController)
            assert list(controller.states["default/web"].containers) == ["main"]
            assert ready(fake)["message"] == "recommended from 1 pods"
    finally:
        await fake.stop()


async def test_checkpoints_are_written_at_most_once_an_interval():
    fake = await started_fake()
    try:
        fake.create(res.DEPLOYMENTS, deployment())
        fake.create(res.PODS, pod("web-1"))
        report(fake, "2026-01-01T00:00:00Z", "200m", "100Mi")
        fake.create(res.RECOMMENDATIONS, recommendation())
        settings = RecommendationSettings(min_samples=1, checkpoint_interval_s=60.0)

        def checkpointed() -> int:
            try:
                text = fake.get(res.CONFIG_MAPS, "web-recommendation", "default")["data"]["checkpoint"]
            except Exception:
                return 0
            return RecommendationState.from_checkpoint(text, 3600.0).containers["app"].cpu.samples

        async with (
            fake.client() as client,
            controllers(client, ("recommendation",), NOW, recommendation=settings) as running,
        ):
            controller = running.controllers["recommendation"]
            assert isinstance(controller, RecommendationController)
            await eventually(lambda: checkpointed() == 1)
            report(fake, "2026-01-01T00:01:00Z", "1", "1Gi")
            await eventually(lambda: controller.states["default/web"].containers["app"].cpu.samples == 2)
            await eventually(
                lambda: not len(controller.reactor.queue) and not controller.reactor.queue.processing
            )
            assert checkpointed() == 1  # sampled, not written yet
            clock = controller.ctx.clock
            assert isinstance(clock, FakeClock)
            clock.advance(60.0)
            controller.reactor.enqueue("default/web")
            await eventually(lambda: checkpointed() == 2)
    finally:
        await fake.stop()
