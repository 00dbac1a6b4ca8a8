"""pytest fixtures for the envtest tier: a real kube-apiserver and etcd on loopback.

Loaded for the whole suite through ``pytest_plugins`` in ``tests/conftest.py``.

* ``envtest`` (session): binaries from ``$KOORD_ENVTEST_BIN`` or built/cached by
  ``hack/envtest.sh``; one etcd and one kube-apiserver (RBAC, default admission plug-ins,
  service-account signing keys, a generated serving certificate) started for the session
  and stopped at its end. Any test using it is marked ``envtest`` automatically.
* ``envtest_client`` / ``envtest_namespace``: an admin :class:`ApiClient` and a fresh
  namespace per test.
* :meth:`Envtest.apply_crds` applies CRD YAML files (e.g. ``crds/*.yaml``) and waits for
  them to be Established.
* ``envtest_faults`` (function): a control plane of the test's own whose apiserver may be
  killed and restarted (:meth:`Envtest.kill_apiserver`, :meth:`Envtest.restart_apiserver`)
  and that can run a second apiserver on the same etcd.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordinator.api.extension.priority import PRIORITY_CLASS_OBJECTS
from koordinator.kube.client import ApiClient
from koordinator.kube.config import ClusterConfig
from koordinator.kube.errors import AlreadyExistsError, ApiError
from koordinator.kube.resources import CUSTOM_RESOURCE_DEFINITIONS, NAMESPACES, PRIORITY_CLASSES
from testsupport.envtest import ApiServerProcess, ControlPlane, ControlPlaneError, provision_binaries

CRD_MANAGER = "koordinator-envtest"
ESTABLISH_TIMEOUT_S = 60.0


class Envtest:
    """Connection details and helpers for one running control plane."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    @property
    def url(self) -> str:
        return self.plane.url

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    @property
    def ca_file(self) -> Path:
        return self.plane.creds.ca_cert

    def config(self, server: str | None = None) -> ClusterConfig:
        """Admin credentials (client certificate in ``system:masters``)."""
        creds = self.plane.creds
        return ClusterConfig(
            server=server or self.url,
            ca_file=str(creds.ca_cert),
            client_cert_file=str(creds.admin_cert),
            client_key_file=str(creds.admin_key),
        )

    def client(self, server: str | None = None, **kwargs: Any) -> ApiClient:
        kwargs.setdefault("qps", 1000.0)
        kwargs.setdefault("burst", 1000)
        return ApiClient(self.config(server), **kwargs)

    async def apply_crds(
        self, client: ApiClient, sources: Sequence[Path | str | dict[str, Any]]
    ) -> list[str]:
        return await apply_crds(client, sources)

    def kill_apiserver(self) -> None:
        self.plane.kill_apiserver()

    def restart_apiserver(self) -> None:
        self.plane.restart_apiserver()

    def start_extra_apiserver(self) -> ApiServerProcess:
        return self.plane.start_extra_apiserver()


def crd_documents(paths: Sequence[Path | str]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in the given YAML files (or directories of them)."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        files.extend(sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")) if path.is_dir() else [path])
    docs = []
    for file in files:
        for doc in yaml.safe_load_all(file.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    return docs


async def apply_crds(client: ApiClient, sources: Sequence[Path | str | dict[str, Any]]) -> list[str]:
    """Server-side apply each CRD (files, directories or dicts) and wait until all are Established."""
    docs = [s for s in sources if isinstance(s, dict)]
    docs += crd_documents([s for s in sources if not isinstance(s, dict)])
    names = []
    for doc in docs:
        await client.apply(CUSTOM_RESOURCE_DEFINITIONS, doc, field_manager=CRD_MANAGER, force=True)
        names.append(str(doc["metadata"]["name"]))
    await wait_established(client, names)
    return names


async def wait_established(client: ApiClient, names: Sequence[str]) -> None:
    """Poll each CRD until its Established condition is True (at most ``ESTABLISH_TIMEOUT_S``)."""
    pending = list(names)
    async with asyncio.timeout(ESTABLISH_TIMEOUT_S):
        while pending:
            crd = await client.get(CUSTOM_RESOURCE_DEFINITIONS, pending[0])
            conditions = (crd.get("status") or {}).get("conditions") or ()
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                pending.pop(0)
            else:
                await asyncio.sleep(0.1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses an envtest fixture belongs to the envtest tier."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if any(n.startswith("envtest") for n in names) and not item.get_closest_marker("envtest"):
            item.add_marker(pytest.mark.envtest)


@pytest.fixture(scope="session")
def envtest_bin() -> Path:
    try:
        return provision_binaries()
    except ControlPlaneError as exc:
        pytest.skip(f"envtest binaries unavailable: {exc}")


@contextlib.contextmanager
def own_envtest(binaries: Path) -> Iterator[Envtest]:
    """A control plane of the caller's own (a session, a module, a test), stopped at the end;
    a test failure when it does not start."""
    try:
        plane = ControlPlane(binaries).start()
    except ControlPlaneError as exc:
        pytest.fail(f"envtest control plane did not start: {exc}")
    try:
        yield Envtest(plane)
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def envtest(envtest_bin: Path) -> Iterator[Envtest]:
    with own_envtest(envtest_bin) as plane:
        yield plane


@pytest.fixture
def envtest_faults(envtest_bin: Path) -> Iterator[Envtest]:
    """A control plane owned by one test, free to kill and restart."""
    with own_envtest(envtest_bin) as plane:
        yield plane


@pytest.fixture
async def envtest_client(envtest: Envtest) -> AsyncIterator[ApiClient]:
    async with envtest.client() as client:
        yield client


@pytest.fixture
async def envtest_namespace(envtest_client: ApiClient) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await create_namespace(envtest_client, name)
    yield name
    # a Terminating namespace left behind is harmless in a throw-away etcd
    with contextlib.suppress(ApiError):
        await envtest_client.delete(NAMESPACES, name)


async def create_namespace(client: ApiClient, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    try:
        await client.create(NAMESPACES, body)
    except AlreadyExistsError:
        return


async def create_priority_classes(client: ApiClient) -> None:
    """Koordinator's PriorityClasses (koord-prod, koord-mid, koord-batch, koord-free), as the
    chart installs them."""
    for name, (value, policy) in PRIORITY_CLASS_OBJECTS.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "preemptionPolicy": policy,
        }
        with contextlib.suppress(AlreadyExistsError):
            await client.create(PRIORITY_CLASSES, body)


async def prepare_koordinator(client: ApiClient, crds: Sequence[Path | str]) -> tuple[str, str]:
    """A cluster ready for Koordinator's control plane: ``crds`` installed, the
    ``koordinator-system`` namespace and the priority classes; then a fresh namespace for
    the test and a tag for its nodes, returned as (namespace, tag)."""
    await apply_crds(client, crds)
    await create_namespace(client, "koordinator-system")
    await create_priority_classes(client)
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    await create_namespace(client, namespace)
    return namespace, uuid.uuid4().hex[:6]
