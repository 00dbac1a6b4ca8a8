"""Quota admission on ``/validate-pod`` (``EnableQuotaAdmission``) against the fake apiserver.

Verdicts and messages are upstream's (``evaluate_quota_test.go`` cases among them); the
charge is read back from the ElasticQuota's ``child-request`` annotation on the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from controlplane.manager.cache import InformerCluster
from controlplane.manager.quota_accessor import ApiQuotaAccessor
from controlplane.manager.webhooks.context import WebhookContext
from controlplane.manager.webhooks.dispatch import AdmissionDispatcher
from controlplane.manager.webhooks.elasticquota.topology import QuotaTopology
from controlplane.manager.webhooks.quotaevaluate.evaluator import QuotaEvaluator, QuotaUpdatePolicy
from koordinator.api.features import CONTROL_PLANE_FEATURES, FeatureGates
from koordinator.kube import resources as res
from koordinator.kube.informer import InformerFactory
from tests.controlplane.manager.builders import Admission, gates, make_pod, quota, review
from tests.controlplane.manager.test_manager_server import fake, seed, start
from testsupport.fake import FakeApiServer, Fault

__all__ = ["fake"]

ROOT = Path(__file__).resolve().parents[3]
Q = "quota.scheduling.koordinator.sh/"
CHILD = Q + "child-request"
ADMISSION = Q + "admission"
ON = "EnableQuotaAdmission=true"
VALIDATE = "/validate-pod"
CONFLICT = (
    'Operation cannot be fulfilled on elasticquotas.scheduling.sigs.k8s.io "q": '
    "the object has been modified; please apply your changes to the latest version and try again"
)

Obj = dict[str, Any]


def team_quota(
    name: str = "q",
    *,
    namespace: str = "team",
    max: dict[str, str] | None = None,
    child: dict[str, str] | None = None,
    admission: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    notes = dict(annotations or {})
    if child is not None:
        notes[CHILD] = json.dumps(child, separators=(",", ":"))
    if admission is not None:
        notes[ADMISSION] = json.dumps(admission, separators=(",", ":"))
    return quota(
        name,
        namespace=namespace,
        max=max if max is not None else {"cpu": "4", "memory": "8Gi"},
        annotations=notes or None,
    )


def pod(quota_name: str | None = "q", namespace: str = "team", name: str = "p", **requests: str) -> Obj:
    builder = make_pod(name).namespace(namespace)
    if any(resource.startswith("kubernetes.io/batch-") for resource in requests):
        builder.qos("BE").priority(5500)  # what the colocation checks ask of a batch pod
    if quota_name is not None:
        builder.labels(**{Q + "name": quota_name})
    return builder.container("main", requests=requests or {"cpu": "2", "memory": "4Gi"}).build()


def refused(message: str) -> Obj:
    return {"metadata": {}, "message": message, "code": 400}


class Cluster:
    """The pod validating webhook with quota admission, over informers on the fake apiserver."""

    def __init__(self, server: FakeApiServer, dispatcher: AdmissionDispatcher) -> None:
        self.fake = server
        self.dispatcher = dispatcher

    async def validate(self, body: Obj) -> Obj:
        answer = await self.dispatcher.review(VALIDATE, orjson.dumps(body))
        response: Obj = orjson.loads(answer)["response"]
        return response

    def annotations(self, name: str = "q", namespace: str = "team") -> dict[str, str]:
        stored = self.fake.get(res.ELASTIC_QUOTAS, name, namespace)
        return dict(stored["metadata"].get("annotations") or {})

    def child_request(self, name: str = "q", namespace: str = "team") -> str | None:
        return self.annotations(name, namespace).get(CHILD)


@contextlib.asynccontextmanager
async def cluster(
    quotas: list[Obj], feature_gates: str = ON, policy: QuotaUpdatePolicy | None = None
) -> AsyncIterator[Cluster]:
    async with FakeApiServer() as server:
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            server.register_crd(crd)
        for obj in quotas:
            server.create(res.ELASTIC_QUOTAS, obj)
        async with server.client() as client:
            factory = InformerFactory(client)
            enabled = gates(feature_gates)
            topology = QuotaTopology()
            informers = InformerCluster(
                client, factory, enabled, topology, config_namespace="koordinator-system"
            )
            policy = policy or QuotaUpdatePolicy()
            accessor = ApiQuotaAccessor(client, factory, conflict_fresh_get=policy.conflict_fresh_get)
            evaluator = QuotaEvaluator(accessor, policy=policy)
            ctx = WebhookContext(cluster=informers, gates=enabled, quotas=topology, quota_evaluator=evaluator)
            factory.start()
            try:
                await factory.wait_for_sync()
                yield Cluster(server, AdmissionDispatcher(ctx))
            finally:
                await evaluator.aclose()
                await factory.stop()


# ---- CREATE ---------------------------------------------------------------------------------------


async def test_an_admitted_pod_is_charged_into_the_quotas_child_request():
    async with cluster([team_quota(child={"cpu": "2", "memory": "2Gi"})]) as env:
        response = await env.validate(review(pod(cpu="1500m", memory="512Mi")))
        assert response["allowed"] is True
        assert env.child_request() == '{"cpu":"3500m","memory":"2560Mi"}'
        response = await env.validate(review(pod(name="p2", cpu="500m", memory="1Gi")))
        assert response["allowed"] is True
        assert env.child_request() == '{"cpu":"4","memory":"3584Mi"}'


@pytest.mark.parametrize(
    ("quota_obj", "requests", "message"),
    [
        pytest.param(
            team_quota(child={"cpu": "4", "memory": "2Gi"}),
            {"cpu": "2", "memory": "4Gi"},
            "exceeded quota: team/q, requested: cpu=2, used: cpu=4, limited: cpu=4",
            id="cpu-over-max",
        ),
        pytest.param(
            team_quota(child={"cpu": "4", "memory": "8Gi"}),
            {"cpu": "2", "memory": "4Gi"},
            "exceeded quota: team/q, requested: cpu=2,memory=4Gi, used: cpu=4,memory=8Gi, "
            "limited: cpu=4,memory=8Gi",
            id="cpu-and-memory-over-max",
        ),
        pytest.param(
            team_quota(max={"cpu": "1", "memory": "2Gi"}),
            {"cpu": "2", "memory": "4Gi"},
            "exceeded quota: team/q, requested: cpu=2,memory=4Gi, used: , limited: cpu=1,memory=2Gi",
            id="no-admission-uses-max",
        ),
        pytest.param(
            team_quota(max={"cpu": "1", "memory": "2Gi"}, admission={}),
            {"cpu": "2", "memory": "4Gi"},
            "exceeded quota: team/q, requested: cpu=2,memory=4Gi, used: , limited: cpu=1,memory=2Gi",
            id="empty-admission-uses-max",
        ),
        pytest.param(
            team_quota(admission={"cpu": "0", "memory": "0Gi"}),
            {"cpu": "2", "memory": "4Gi"},
            "exceeded quota: team/q, requested: cpu=2,memory=4Gi, used: , limited: cpu=0,memory=0",
            id="admission-zero",
        ),
        pytest.param(
            team_quota(
                max={"kubernetes.io/batch-cpu": "4", "kubernetes.io/batch-memory": "8Gi"},
                child={"kubernetes.io/batch-cpu": "4", "kubernetes.io/batch-memory": "8Gi"},
            ),
            {"kubernetes.io/batch-cpu": "1", "kubernetes.io/batch-memory": "2Gi"},
            "exceeded quota: team/q, requested: kubernetes.io/batch-cpu=1,kubernetes.io/batch-memory=2Gi, "
            "used: kubernetes.io/batch-cpu=4,kubernetes.io/batch-memory=8Gi, "
            "limited: kubernetes.io/batch-cpu=4,kubernetes.io/batch-memory=8Gi",
            id="batch-resources",
        ),
    ],
)
async def test_a_pod_over_the_admission_limit_is_refused_and_nothing_is_charged(quota_obj, requests, message):
    async with cluster([quota_obj]) as env:
        before = env.child_request()
        response = await env.validate(review(pod(**requests)))
        assert (response["allowed"], response["status"]) == (False, refused(message))
        assert env.child_request() == before


@pytest.mark.parametrize(
    ("quota_obj", "requests", "charged"),
    [
        pytest.param(
            team_quota(child={"cpu": "4", "memory": "2Gi"}, admission={"cpu": "8", "memory": "16Gi"}),
            {"cpu": "2", "memory": "4Gi"},
            '{"cpu":"6","memory":"6Gi"}',
            id="admission-above-max",
        ),
        pytest.param(
            team_quota(admission={"kubernetes.io/batch-cpu": "0"}),
            {"cpu": "2", "memory": "4Gi"},
            '{"cpu":"2","memory":"4Gi"}',
            id="admission-names-other-resources-only",
        ),
        pytest.param(
            team_quota(
                max={"kubernetes.io/batch-cpu": "4", "kubernetes.io/batch-memory": "8Gi"},
                child={"kubernetes.io/batch-cpu": "4", "kubernetes.io/batch-memory": "8Gi"},
            ),
            {"cpu": "2", "memory": "4Gi"},
            '{"kubernetes.io/batch-cpu":"4","kubernetes.io/batch-memory":"8Gi"}',
            id="nothing-the-quota-limits",
        ),
        pytest.param(
            team_quota(max={"example.com/foo": "4"}),
            {"cpu": "200", "memory": "400Gi"},
            None,
            id="quota-limits-no-pod-resource",
        ),
    ],
)
async def test_admitted_pods_charge_only_what_the_quota_limits(quota_obj, requests, charged):
    async with cluster([quota_obj]) as env:
        response = await env.validate(review(pod(**requests)))
        assert response["allowed"] is True
        assert env.child_request() == charged


@pytest.mark.parametrize(
    "quota_name",
    ["koordinator-default-quota", "koordinator-system-quota", "koordinator-root-quota", None],
)
async def test_special_quotas_and_pods_without_a_quota_are_not_checked(quota_name):
    async with cluster([team_quota(max={"cpu": "1", "memory": "1Gi"})]) as env:
        response = await env.validate(review(pod(quota_name, namespace="elsewhere", cpu="64")))
        assert response["allowed"] is True
        assert env.child_request() is None


async def test_a_quota_named_like_the_namespace_or_listing_it_is_charged_without_a_label():
    by_name = team_quota("team", child={"cpu": "1"})
    listing = team_quota("shared-pool", namespace="pools", annotations={Q + "namespaces": '["batch"]'})
    async with cluster([by_name, listing]) as env:
        assert (await env.validate(review(pod(None, cpu="1"))))["allowed"] is True
        assert env.child_request("team") == '{"cpu":"2"}'
        assert (await env.validate(review(pod(None, namespace="batch", cpu="3"))))["allowed"] is True
        assert env.child_request("shared-pool", "pools") == '{"cpu":"3"}'


@pytest.mark.parametrize(
    ("quotas", "quota_name", "message"),
    [
        pytest.param([team_quota()], "missing", "elastic quota missing not found", id="unknown"),
        pytest.param(
            [team_quota("shared", namespace="a"), team_quota("shared", namespace="b")],
            "shared",
            "more than one elastic quota shared found",
            id="ambiguous",
        ),
    ],
)
async def test_a_quota_that_cannot_be_told_apart_refuses_the_pod(quotas, quota_name, message):
    async with cluster(quotas) as env:
        response = await env.validate(review(pod(quota_name)))
        assert (response["allowed"], response["status"]) == (False, refused(message))


async def test_an_unreadable_quota_refuses_the_pod_with_the_reason():
    broken = team_quota(annotations={CHILD: "{not json"})
    async with cluster([broken]) as env:
        response = await env.validate(review(pod()))
        assert response["allowed"] is False
        assert response["status"]["message"].startswith(
            f"invalid annotation {CHILD} of elastic quota team/q: "
        )
        assert env.child_request() == "{not json"


async def test_with_the_gate_off_nothing_is_checked_or_charged():
    async with cluster([team_quota(child={"cpu": "4", "memory": "8Gi"})], feature_gates="") as env:
        response = await env.validate(review(pod(cpu="64")))
        assert response["allowed"] is True
        assert env.child_request() == '{"cpu":"4","memory":"8Gi"}'
        response = await env.validate(review(pod("missing")))
        assert response["allowed"] is True


async def test_a_dry_run_is_checked_but_never_charged():
    async with cluster([team_quota(child={"cpu": "3"})]) as env:
        assert (await env.validate(review(pod(cpu="1"), dry_run=True)))["allowed"] is True
        response = await env.validate(review(pod(cpu="2"), dry_run=True))
        assert response["status"] == refused(
            "exceeded quota: team/q, requested: cpu=2, used: cpu=3, limited: cpu=4"
        )
        assert env.child_request() == '{"cpu":"3"}'


async def test_replace_resources_rewrite_the_pod_before_it_is_charged():
    pool = team_quota(max={"memory": "0Gi", "example.io/cpu": "4k", "example.io/gpu": "3"})
    replaced = make_pod("p").namespace("team").labels(**{Q + "name": "q"})
    replaced.annotations({"pod.koordinator.sh/replace-resources": "cpu:example.io/cpu,memory:"})
    replaced.container("main", requests={"cpu": "2", "memory": "4Gi", "example.io/gpu": "1"})
    transform = f"{ON},ElasticQuotaEvaluationTransformPod=true,ReplaceResourcesTransformer=true"
    async with cluster([pool], transform) as env:
        assert (await env.validate(review(replaced.build())))["allowed"] is True
        assert env.child_request() == '{"example.io/cpu":"2k","example.io/gpu":"1"}'
    async with cluster([pool]) as env:
        response = await env.validate(review(replaced.build()))
        assert response["status"] == refused(
            "exceeded quota: team/q, requested: memory=4Gi, used: , limited: memory=0"
        )


# ---- UPDATE ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("feature_gates", "old_quota", "new_quota", "message"),
    [
        pytest.param(ON, "q", "missing", None, id="on-update-gate-off"),
        pytest.param(f"{ON},EnableQuotaAdmissionOnUpdate=true", "missing", "missing", None, id="same-quota"),
        pytest.param(
            f"{ON},EnableQuotaAdmissionOnUpdate=true",
            "q",
            "missing",
            "elastic quota missing not found",
            id="moved-to-unknown-quota",
        ),
        pytest.param(f"{ON},EnableQuotaAdmissionOnUpdate=true", "q", "full", None, id="moved-is-not-charged"),
    ],
)
async def test_updates_are_looked_at_only_when_the_quota_changes(
    feature_gates, old_quota, new_quota, message
):
    full = team_quota("full", child={"cpu": "4", "memory": "8Gi"})
    async with cluster([team_quota(), full], feature_gates) as env:
        body = review(pod(new_quota), operation="UPDATE", old=pod(old_quota))
        response = await env.validate(body)
        if message is None:
            assert response["allowed"] is True
        else:
            assert (response["allowed"], response["status"]) == (False, refused(message))
        assert env.child_request("full") == '{"cpu":"4","memory":"8Gi"}'
        assert env.child_request() is None


# ---- batches and conflicts ------------------------------------------------------------------------


async def test_concurrent_pods_of_one_quota_are_admitted_up_to_the_limit_and_charged_once_each():
    async with cluster([team_quota(max={"cpu": "3"})]) as env:
        bodies = [review(pod(name=f"p{i}", cpu="1")) for i in range(5)]
        responses = await asyncio.gather(*(env.validate(body) for body in bodies))
        assert sum(r["allowed"] for r in responses) == 3
        assert [r["status"] for r in responses if not r["allowed"]] == [
            refused("exceeded quota: team/q, requested: cpu=1, used: cpu=3, limited: cpu=3")
        ] * 2
        assert env.child_request() == '{"cpu":"3"}'


async def test_a_conflicting_write_is_retried_on_the_quota_read_again():
    async with cluster([team_quota(child={"cpu": "1"})]) as env:
        env.fake.inject(Fault(409, method="PUT", path="/elasticquotas/q$", message=CONFLICT, times=2))
        response = await env.validate(review(pod(cpu="2", memory="1Gi")))
        assert response["allowed"] is True
        assert env.child_request() == '{"cpu":"3","memory":"1Gi"}'


async def test_another_writers_change_is_kept_when_the_write_conflicts():
    policy = QuotaUpdatePolicy(conflict_fresh_get=True, retry_jitter=0.01)
    async with cluster([team_quota()], policy=policy) as env:
        stored = env.fake.get(res.ELASTIC_QUOTAS, "q", "team")
        stored["metadata"]["annotations"] = {CHILD: '{"cpu":"1"}'}
        env.fake.update(res.ELASTIC_QUOTAS, stored)  # another replica, behind this one's cache
        response = await env.validate(review(pod(cpu="2", memory="1Gi")))
        assert response["allowed"] is True
        assert env.child_request() == '{"cpu":"3","memory":"1Gi"}'


async def test_a_write_that_keeps_conflicting_refuses_the_pod():
    async with cluster([team_quota()]) as env:
        env.fake.inject(Fault(409, method="PUT", path="/elasticquotas/q$", message=CONFLICT, times=100))
        response = await env.validate(review(pod()))
        assert (response["allowed"], response["status"]) == (
            False,
            refused(f"failed to persist the child-request of elastic quota team/q: {CONFLICT}"),
        )
        assert env.child_request() is None


# ---- wiring -------------------------------------------------------------------------------------


async def test_the_manager_charges_pods_when_the_gate_is_on(fake: FakeApiServer, tmp_path):
    on = FeatureGates(CONTROL_PLANE_FEATURES, {"EnableQuotaAdmission": True})
    async with fake.client() as client:
        await seed(client)
        fake.create(res.ELASTIC_QUOTAS, team_quota())
        manager = await start(client, tmp_path, gates=on)
        try:
            answer = await manager.dispatcher.review(VALIDATE, orjson.dumps(review(pod(cpu="1"))))
        finally:
            await manager.stop()
    assert orjson.loads(answer)["response"]["allowed"] is True
    stored = fake.get(res.ELASTIC_QUOTAS, "q", "team")
    assert stored["metadata"]["annotations"][CHILD] == '{"cpu":"1"}'


async def test_offline_admission_charges_in_memory():
    admission = Admission([team_quota(child={"cpu": "3"})], feature_gates=ON)
    assert (await admission.call(VALIDATE, review(pod(cpu="1"))))["allowed"] is True
    response = await admission.call(VALIDATE, review(pod(name="p2", cpu="1")))
    assert response["status"] == refused(
        "exceeded quota: team/q, requested: cpu=1, used: cpu=4, limited: cpu=4"
    )
    quota_now = await admission.quota_accessor.get_quota("team", "q")
    assert quota_now["metadata"]["annotations"][CHILD] == '{"cpu":"4"}'
