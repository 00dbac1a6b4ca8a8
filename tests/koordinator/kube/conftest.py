"""Fixtures for the kube tests: the contract backends (fake and real apiserver) and a fake server."""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from koordinator.kube.client import ApiClient
from koordinator.kube.resources import Resource
from tests.envtest import Envtest, apply_crds, create_namespace
from testsupport.fake import FakeApiServer

WIDGETS = Resource("contract.koordinator.sh", "v1alpha1", "widgets", "Widget", True)

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.contract.koordinator.sh"},
    "spec": {
        "group": "contract.koordinator.sh",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer"},
                                    "color": {"type": "string"},
                                    "tags": {"type": "array", "items": {"type": "string"}},
                                    "ports": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "map",
                                        "x-kubernetes-list-map-keys": ["name"],
                                        "items": {
                                            "type": "object",
                                            "required": ["name"],
                                            "properties": {
                                                "name": {"type": "string"},
                                                "port": {"type": "integer"},
                                            },
                                        },
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "ready": {"type": "boolean"},
                                    "observedGeneration": {"type": "integer"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


@dataclass
class Backend:
    """One API server the contract tests run against."""

    kind: str
    client: ApiClient
    namespace: str
    new_client: Callable[..., ApiClient]
    fake: FakeApiServer | None = None

    async def new_namespace(self) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        await create_namespace(self.client, name)
        return name


_crd_applied: set[str] = set()


@pytest.fixture(
    params=[
        "fake",
        "fake-http1",
        pytest.param("real", marks=pytest.mark.envtest),
        pytest.param("real-http1", marks=pytest.mark.envtest),
    ]
)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """Each contract test against the fake and the real apiserver, with the client's unary
    requests over aiohttp and over its small HTTP/1.1 client (``-http1``)."""
    kind, _, transport = request.param.partition("-")
    options = {"fast_unary": transport == "http1"}
    if kind == "fake":
        async with FakeApiServer() as fake:
            fake.register_crd(WIDGET_CRD)
            client = fake.client(**options)
            namespace = f"t-{uuid.uuid4().hex[:10]}"
            await create_namespace(client, namespace)
            try:
                yield Backend("fake", client, namespace, functools.partial(fake.client, **options), fake)
            finally:
                await client.close()
        return
    envtest: Envtest = request.getfixturevalue("envtest")
    client = envtest.client(**options)
    try:
        if envtest.url not in _crd_applied:
            await apply_crds(client, [WIDGET_CRD])
            _crd_applied.add(envtest.url)
        namespace = f"t-{uuid.uuid4().hex[:10]}"
        await create_namespace(client, namespace)
        yield Backend("real", client, namespace, functools.partial(envtest.client, **options))
    finally:
        await client.close()


@pytest.fixture
async def fake_server() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer() as server:
        yield server


@pytest.fixture
async def fake_client(fake_server: FakeApiServer) -> AsyncIterator[ApiClient]:
    async with fake_server.client() as client:
        yield client
