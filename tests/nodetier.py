"""pytest fixtures for the ``node`` tier: a real single-node Kubernetes on this machine.

Loaded for the whole suite through ``pytest_plugins`` in ``tests/conftest.py``.

* ``node_cluster`` (session): one :class:`testsupport.nodetier.Node` (etcd, kube-apiserver,
  kube-controller-manager, containerd with NRI, runc, CNI, the kubelet, kube-proxy) built
  by ``hack/node-tier.sh`` and ``hack/envtest.sh``, started for the session and stopped at
  its end. Any test using it is marked ``node`` automatically.
* ``node_client``: an admin :class:`ApiClient` of that node's apiserver.
* :func:`busybox_pod` builds the manifests the tests run (the image is imported locally).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import pytest

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.config import ClusterConfig
from koordinator.kube.errors import ConflictError, NotFoundError
from testsupport.envtest import ControlPlaneError, provision_binaries
from testsupport.nodetier import BUSYBOX_IMAGE, Node, NodeTierError, provision_node_binaries


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses a node fixture belongs to the node tier."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if any(n.startswith("node_cluster") for n in names) and not item.get_closest_marker("node"):
            item.add_marker(pytest.mark.node)


@pytest.fixture(scope="session")
def node_cluster() -> Iterator[Node]:
    if os.geteuid() != 0:
        pytest.skip("the node tier needs root (namespaces, cgroups, mounts)")
    try:
        node_bin, envtest_bin = provision_node_binaries(), provision_binaries()
    except (NodeTierError, ControlPlaneError) as exc:
        pytest.skip(f"node tier binaries unavailable: {exc}")
    node = Node("koord-node", node_bin=node_bin, envtest_bin=envtest_bin)
    try:
        node.start()
    except NodeTierError as exc:
        pytest.fail(f"the node did not start: {exc}")
    try:
        yield node
    finally:
        node.stop()


def node_config(node: Node) -> ClusterConfig:
    creds = node.kubeconfig.parent / "pki"
    return ClusterConfig(
        server=node.url,
        ca_file=str(creds / "ca.crt"),
        client_cert_file=str(creds / "admin.crt"),
        client_key_file=str(creds / "admin.key"),
    )


@pytest.fixture
async def node_client(node_cluster: Node) -> AsyncIterator[ApiClient]:
    async with ApiClient(node_config(node_cluster), qps=200.0, burst=200) as client:
        yield client


def busybox_pod(
    name: str,
    script: str,
    *,
    namespace: str = "default",
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_name: str | None = "koord-node",
    priority_class: str | None = None,
) -> dict[str, Any]:
    """A one-container busybox pod running ``sh -c script``."""
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
    if limits:
        resources["limits"] = dict(limits)
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "main",
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script],
                "resources": resources,
            }
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


async def publish_batch_resources(client: ApiClient, node: str = "koord-node") -> None:
    """What koord-manager's noderesource controller would publish from NodeMetrics: the
    kubelet admits a pod asking for batch resources only when its node has them."""
    for _ in range(10):  # the kubelet writes the node's status too
        obj = await client.get(res.NODES, node)
        for field in ("capacity", "allocatable"):
            obj["status"][field]["kubernetes.io/batch-cpu"] = "1000"
            obj["status"][field]["kubernetes.io/batch-memory"] = "2Gi"
        try:
            await client.replace_status(res.NODES, obj)
            return
        except ConflictError:
            continue
    raise AssertionError("the node's status kept changing under the batch resources")


def batch_profile(name: str, app: str, **extra: str) -> dict[str, Any]:
    """A ClusterColocationProfile turning the pods labelled ``app`` in namespaces labelled
    ``koordinator.sh/enable-colocation=true`` into BE batch pods (``extra``: more spec)."""
    return {
        "apiVersion": "config.koordinator.sh/v1alpha1",
        "kind": "ClusterColocationProfile",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
            "selector": {"matchLabels": {"app": app}},
            "qosClass": "BE",
            "priorityClassName": "koord-batch",
            "koordinatorPriority": 1000,
            **extra,
        },
    }


async def wait_running(
    client: ApiClient, namespace: str, names: Sequence[str], within: float = 60
) -> list[dict[str, Any]]:
    """The pods, once every one of them is Running with its containers started; an
    AssertionError with their statuses when that takes longer than ``within`` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        pods = [await client.get(res.PODS, name, namespace) for name in names]
        if all(
            p.get("status", {}).get("phase") == "Running"
            and all(c.get("started") for c in p["status"].get("containerStatuses") or [{}])
            for p in pods
        ):
            return pods
        if asyncio.get_running_loop().time() > deadline:
            statuses = {p["metadata"]["name"]: p.get("status") for p in pods}
            raise AssertionError(f"pods not Running after {within:.0f}s: {statuses}")
        await asyncio.sleep(0.2)


async def delete_pods(client: ApiClient, namespace: str, names: Sequence[str], within: float = 60) -> None:
    """Delete the pods and wait until they are gone."""
    for name in names:
        with contextlib.suppress(NotFoundError):
            await client.delete(res.PODS, name, namespace)
    async with asyncio.timeout(within):
        for name in names:
            while True:
                try:
                    await client.get(res.PODS, name, namespace)
                except NotFoundError:
                    break
                await asyncio.sleep(0.2)
