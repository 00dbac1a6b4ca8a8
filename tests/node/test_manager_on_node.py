"""koord-manager's pod webhook on a real node: a MutatingWebhookConfiguration sends the pod
through the manager before it is stored, and the kubelet runs the mutated pod.

The manager is a host process on the node's network (as its Deployment would be with
``hostNetwork``); it makes its own certificate, patches the caBundle and URL into the
configuration, and a ClusterColocationProfile turns a plain pod into a BE batch pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import AlreadyExistsError, ApiError, NotFoundError
from tests.controlplane.manager.builders import pod_webhook
from tests.envtest import apply_crds
from tests.nodetier import batch_profile, busybox_pod, delete_pods, publish_batch_resources, wait_running
from testsupport.nodetier import Node

ROOT = Path(__file__).resolve().parents[2]
CGROUP = Path("/sys/fs/cgroup")
MUTATING = "koordinator-mutating-webhook-configuration"
NAMESPACE = "colocation"


def mutating_configuration() -> dict[str, Any]:
    selector = {"koordinator.sh/enable-colocation": "true"}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": MUTATING},
        "webhooks": [pod_webhook("mpod-create.koordinator.sh", "/mutate-pod", selector)],
    }


async def _setup(client: ApiClient) -> None:
    await apply_crds(client, [ROOT / "crds"])
    await client.ensure_namespace("koordinator-system")
    await client.ensure_namespace(NAMESPACE, {"koordinator.sh/enable-colocation": "true"})
    for resource, body in (
        (
            res.PRIORITY_CLASSES,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "koord-batch"},
                "value": 5000,
            },
        ),
        (res.MUTATING_WEBHOOK_CONFIGURATIONS, mutating_configuration()),
        (res.CLUSTER_COLOCATION_PROFILES, batch_profile("batch", "batch")),
    ):
        with contextlib.suppress(AlreadyExistsError):
            await client.create(resource, body)
    # the noderesource controller is left out below: the test publishes them
    await publish_batch_resources(client)


@pytest.fixture
async def manager(node_cluster: Node, node_client: ApiClient, tmp_path: Path) -> AsyncIterator[Path]:
    """koord-manager on the node's network, started once its namespace, the CRDs and the
    webhook configuration exist; yields its log."""
    await _setup(node_client)
    log = tmp_path / "manager.log"
    env = {
        "PATH": "/usr/bin:/bin",
        "WEBHOOK_HOST": "127.0.0.1",
        "WEBHOOK_PORT": "9876",
        "WEBHOOK_CERT_DIR": str(tmp_path / "certs"),
    }
    argv = [
        sys.executable, "-m", "controlplane.manager",
        "--kubeconfig", str(node_cluster.kubeconfig),
        "--metrics-addr=127.0.0.1:0",
        "--health-probe-addr=127.0.0.1:0",
        # the node's batch resources are the test's (no NodeMetric here to compute them from)
        "--controllers=*,-noderesource",
    ]  # fmt: skip
    proc = node_cluster.popen(argv, log, env=env)
    try:
        yield log
    finally:
        proc.kill()
        proc.wait()


async def test_the_pod_webhook_mutates_a_pod_before_the_kubelet_runs_it(
    node_cluster: Node, node_client: ApiClient, manager: Path
) -> None:
    pod = busybox_pod(
        "spark-1",
        "exec sleep 3600",
        namespace=NAMESPACE,
        requests={"cpu": "500m", "memory": "128Mi"},
        limits={"cpu": "500m", "memory": "128Mi"},
        labels={"app": "batch"},
    )
    # until the manager serves (failurePolicy Fail: the apiserver refuses the pod before)
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        try:
            await node_client.create(res.PODS, pod)
            break
        except ApiError as exc:
            if "mpod-create.koordinator.sh" not in str(exc):
                raise
            if asyncio.get_running_loop().time() > deadline:
                tail = await asyncio.to_thread(lambda: manager.read_text(errors="replace")[-3000:])
                raise AssertionError(
                    f"the webhook never answered: {exc}\n--- manager log ---\n{tail}"
                ) from exc
            await asyncio.sleep(0.5)
    try:
        [stored] = await wait_running(node_client, NAMESPACE, ["spark-1"])
        labels, spec = stored["metadata"]["labels"], stored["spec"]
        assert labels["koordinator.sh/qosClass"] == "BE"
        assert labels["koordinator.sh/priority"] == "1000", labels
        assert spec["priorityClassName"] == "koord-batch"
        resources = spec["containers"][0]["resources"]
        assert resources["requests"] == {
            "kubernetes.io/batch-cpu": "500",
            "kubernetes.io/batch-memory": "128Mi",
        }
        assert resources["limits"] == {
            "kubernetes.io/batch-cpu": "500",
            "kubernetes.io/batch-memory": "128Mi",
        }
        # what the kubelet ran is the mutated pod: no cpu or memory requests left, BestEffort
        assert stored["status"]["qosClass"] == "BestEffort"
        pod_dir = CGROUP / "cpu" / node_cluster.cgroup_root.strip("/") / "kubepods" / "besteffort"
        assert (pod_dir / f"pod{stored['metadata']['uid']}").is_dir()
        config = await node_client.get(res.MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING)
        client_config = config["webhooks"][0]["clientConfig"]
        assert client_config["caBundle"]
        assert client_config["url"].startswith("https://127.0.0.1:9876/")
    finally:
        await delete_pods(node_client, NAMESPACE, ["spark-1"])
        with contextlib.suppress(NotFoundError):
            await node_client.delete(res.MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING)
