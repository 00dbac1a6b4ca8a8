"""envtest tier: a real kube-apiserver calls koord-manager's webhooks over TLS.

The manager patches the caBundle (and, with ``WEBHOOK_HOST``, the URL) into webhook
configurations the test creates; the apiserver then sends every pod of the test namespace
through ``/mutate-pod`` and ``/validate-pod``. The configurations only select the test's
own namespace, so the other tests sharing this apiserver are not affected, and they are
deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controlplane.manager.certs import CertBundle, SecretCertStore, generate_ca, issue_serving_certificate
from controlplane.manager.manager import Manager
from controlplane.manager.options import ManagerOptions
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import AlreadyExistsError, ApiError
from tests.controlplane.manager.builders import pod_webhook
from tests.envtest import Envtest, apply_crds
from testsupport.envtest.controlplane import free_port

ROOT = Path(__file__).resolve().parents[3]
SYSTEM_NAMESPACE = "koordinator-system"


@dataclass
class Setup:
    envtest: Envtest
    client: ApiClient
    test_id: str
    namespace: str
    port: int
    cert_dir: Path
    secret: str

    @property
    def mutating(self) -> str:
        return f"koord-test-mutating-{self.test_id}"

    @property
    def validating(self) -> str:
        return f"koord-test-validating-{self.test_id}"

    async def start_manager(self) -> Manager:
        options = ManagerOptions(
            webhook_port=self.port,
            webhook_bind_host="127.0.0.1",
            webhook_host="127.0.0.1",
            webhook_cert_dir=self.cert_dir,
            webhook_secret_name=self.secret,
            mutating_configuration=self.mutating,
            validating_configuration=self.validating,
            metrics_addr=None,
            health_probe_addr=None,
        )
        manager = Manager(options, self.envtest.client())
        manager.ctx.rand_intn = lambda _n: 0
        await manager.start()
        async with asyncio.timeout(60):
            while problem := await manager.readiness():
                if "handshake" not in problem and "informer" not in problem and "set up" not in problem:
                    raise AssertionError(f"manager not ready: {problem}")
                await asyncio.sleep(0.1)
        return manager

    async def stop_manager(self, manager: Manager) -> None:
        await manager.stop()
        await manager.client.close()


async def create_ignoring_existing(client: ApiClient, resource: res.Resource, obj: dict[str, Any]) -> None:
    with contextlib.suppress(AlreadyExistsError):
        await client.create(resource, obj)


@pytest.fixture
async def setup(envtest: Envtest, tmp_path: Path) -> AsyncIterator[Setup]:
    test_id = uuid.uuid4().hex[:8]
    async with envtest.client() as client:
        await apply_crds(client, [ROOT / "crds"])
        await client.ensure_namespace(SYSTEM_NAMESPACE)
        namespace = f"colo-{test_id}"
        await client.ensure_namespace(
            namespace, {"koord-webhook-test": test_id, "koordinator.sh/enable-colocation": "true"}
        )
        await create_ignoring_existing(
            client,
            res.PRIORITY_CLASSES,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "koord-batch"},
                "value": 5000,
                "preemptionPolicy": "PreemptLowerPriority",
            },
        )
        state = Setup(
            envtest,
            client,
            test_id,
            namespace,
            free_port(),
            tmp_path / "certs",
            f"koord-webhook-certs-{test_id}",
        )
        selector = {"koord-webhook-test": test_id}
        await client.create(
            res.MUTATING_WEBHOOK_CONFIGURATIONS,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": state.mutating},
                "webhooks": [pod_webhook("mpod-create.koordinator.sh", "/mutate-pod", selector)],
            },
        )
        await client.create(
            res.VALIDATING_WEBHOOK_CONFIGURATIONS,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": state.validating},
                "webhooks": [pod_webhook("vpod.koordinator.sh", "/validate-pod", selector)],
            },
        )
        await client.create(
            res.CLUSTER_COLOCATION_PROFILES,
            {
                "apiVersion": "config.koordinator.sh/v1alpha1",
                "kind": "ClusterColocationProfile",
                "metadata": {"name": f"spark-{test_id}"},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"koord-webhook-test": test_id}},
                    "selector": {"matchLabels": {"app": "spark"}},
                    "qosClass": "BE",
                    "priorityClassName": "koord-batch",
                    "koordinatorPriority": 1000,
                    "schedulerName": "koord-scheduler",
                    "labels": {"koordinator.sh/mutated": "true"},
                },
            },
        )
        try:
            yield state
        finally:
            for resource, name in (
                (res.MUTATING_WEBHOOK_CONFIGURATIONS, state.mutating),
                (res.VALIDATING_WEBHOOK_CONFIGURATIONS, state.validating),
                (res.CLUSTER_COLOCATION_PROFILES, f"spark-{test_id}"),
            ):
                with contextlib.suppress(ApiError):
                    await client.delete(resource, name)


def spark_pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "spark"}},
        "spec": {
            "containers": [
                {
                    "name": "executor",
                    "image": "registry.example/spark:3.5",
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "1Gi"},
                        "limits": {"cpu": "2", "memory": "2Gi"},
                    },
                }
            ]
        },
    }


async def wait_until_mutated(setup: Setup, limit_s: float = 45.0) -> None:
    """Dry-run pods until the apiserver calls the webhook with the configuration the manager patched."""
    last: Exception | None = None
    try:
        async with asyncio.timeout(limit_s):
            while True:
                try:
                    probe = spark_pod(f"probe-{uuid.uuid4().hex[:6]}", setup.namespace)
                    pod = await setup.client.create(res.PODS, probe, dry_run=True)
                    if pod["metadata"].get("labels", {}).get("koordinator.sh/qosClass") == "BE":
                        return
                except ApiError as exc:
                    last = exc
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"the apiserver never reached the webhook: {last}") from None


def assert_colocated(pod: dict[str, Any]) -> None:
    assert pod["metadata"]["labels"] == {
        "app": "spark",
        "koordinator.sh/mutated": "true",
        "koordinator.sh/qosClass": "BE",
        "koordinator.sh/priority": "1000",
    }
    assert pod["spec"]["schedulerName"] == "koord-scheduler"
    assert pod["spec"]["priorityClassName"] == "koord-batch"
    assert pod["spec"]["priority"] == 5000
    assert pod["spec"]["containers"][0]["resources"] == {
        "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
        "limits": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "2Gi"},
    }
    assert pod["metadata"]["annotations"]["node.koordinator.sh/extended-resource-spec"] == (
        '{"containers":{"executor":{"limits":{"kubernetes.io/batch-cpu":"2k","kubernetes.io/batch-memory":"2Gi"},'
        '"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"1Gi"}}}}'
    )


async def test_apiserver_calls_the_webhooks_over_tls(setup: Setup):
    manager = await setup.start_manager()
    try:
        configuration = await setup.client.get(res.MUTATING_WEBHOOK_CONFIGURATIONS, setup.mutating)
        client_config = configuration["webhooks"][0]["clientConfig"]
        assert client_config["url"] == f"https://127.0.0.1:{setup.port}/mutate-pod"
        assert client_config["caBundle"]
        await wait_until_mutated(setup)

        created = await setup.client.create(res.PODS, spark_pod("spark-exec-1", setup.namespace))
        assert_colocated(created)

        invalid = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "bad",
                "namespace": setup.namespace,
                "labels": {"koordinator.sh/qosClass": "LSR"},
            },
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/app:1.0",
                        "resources": {"requests": {"cpu": "1"}},
                    }
                ]
            },
        }
        with pytest.raises(ApiError) as refused:
            await setup.client.create(res.PODS, invalid)
        assert refused.value.code == 400
        assert refused.value.message == (
            'admission webhook "vpod.koordinator.sh" denied the request: '
            "Pod: Forbidden: koordinator.sh/qosClass=LSR and priorityClass= cannot be used in combination"
        )
    finally:
        await setup.stop_manager(manager)


async def test_apiserver_keeps_calling_after_restarts_with_rotated_certificates(setup: Setup):
    manager = await setup.start_manager()
    await wait_until_mutated(setup)
    first = manager.tls.loaded
    await setup.stop_manager(manager)
    assert first is not None

    # The serving certificate is about to expire: the restarted manager renews it under the same CA,
    # which the apiserver already trusts, so the very first call succeeds.
    store = SecretCertStore(setup.client, SYSTEM_NAMESPACE, setup.secret)
    expiring, key = issue_serving_certificate(
        first.ca_cert, first.ca_key, "127.0.0.1", validity=datetime.timedelta(days=1)
    )
    await store.write(CertBundle(first.ca_cert, first.ca_key, expiring, key), await store.read())
    manager = await setup.start_manager()
    try:
        renewed = manager.tls.loaded
        assert renewed is not None
        assert renewed.ca_cert == first.ca_cert
        assert renewed.cert not in (first.cert, expiring)
        assert_colocated(await setup.client.create(res.PODS, spark_pod("after-renewal", setup.namespace)))
    finally:
        await setup.stop_manager(manager)

    # The CA itself expires soon: the restarted manager makes a new CA and publishes both.
    old_ca, old_ca_key = generate_ca(validity=datetime.timedelta(days=30))
    cert, key = issue_serving_certificate(
        old_ca, old_ca_key, "127.0.0.1", validity=datetime.timedelta(days=29)
    )
    await store.write(CertBundle(old_ca, old_ca_key, cert, key), await store.read())
    manager = await setup.start_manager()
    try:
        rotated = manager.tls.loaded
        assert rotated is not None
        assert rotated.ca_cert not in (old_ca, first.ca_cert)
        await wait_until_mutated(setup)
        assert_colocated(await setup.client.create(res.PODS, spark_pod("after-ca-rotation", setup.namespace)))
    finally:
        await setup.stop_manager(manager)
