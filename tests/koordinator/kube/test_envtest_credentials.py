"""Credentials against the real apiserver: client certificates from a kubeconfig, service-account
tokens (in-cluster layout, rotation, exec plug-in) and the typed errors of authn/authz."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.config import SERVICE_ACCOUNT_DIR, in_cluster_config
from koordinator.kube.errors import ForbiddenError, UnauthorizedError
from koordinator.kube.kubeconfig import kubeconfig_config
from koordinator.kube.retry import RetryPolicy
from tests.envtest import Envtest
from tests.koordinator.kube.builders import config_map
from tests.koordinator.kube.test_config import _kubeconfig, whoami


async def service_account_token(client: ApiClient, namespace: str, name: str) -> str:
    await client.create(
        res.SERVICE_ACCOUNTS,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
    )
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    issued = await client.create_subresource(res.SERVICE_ACCOUNTS, name, "token", request, namespace)
    return str(issued["status"]["token"])


async def grant_configmap_reader(client: ApiClient, namespace: str, account: str) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "cm-reader", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "cm-reader", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    await client.create(res.ROLES, role)
    await client.create(res.ROLE_BINDINGS, binding)


async def test_admin_kubeconfig_with_client_certificates(envtest: Envtest):
    async with ApiClient(kubeconfig_config(str(envtest.kubeconfig))) as client:
        assert await whoami(client) == "koordinator-envtest-admin"
        assert (await client.server_version())["gitVersion"].startswith("v1.")


async def test_in_cluster_service_account_with_rotation(
    envtest: Envtest, envtest_client: ApiClient, envtest_namespace: str, tmp_path: Path
):
    first = await service_account_token(envtest_client, envtest_namespace, "first")
    second = await service_account_token(envtest_client, envtest_namespace, "second")
    await grant_configmap_reader(envtest_client, envtest_namespace, "first")
    await envtest_client.create(res.CONFIG_MAPS, config_map("visible", envtest_namespace))
    sa = tmp_path / SERVICE_ACCOUNT_DIR
    sa.mkdir(parents=True)
    (sa / "token").write_text(first)
    (sa / "ca.crt").write_bytes(envtest.ca_file.read_bytes())
    (sa / "namespace").write_text(envtest_namespace)
    host, port = envtest.url.removeprefix("https://").rsplit(":", 1)
    config = in_cluster_config(tmp_path, {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port})
    async with ApiClient(config, retry=RetryPolicy(attempts=1)) as client:
        assert await whoami(client) == f"system:serviceaccount:{envtest_namespace}:first"
        assert (await client.get(res.CONFIG_MAPS, "visible", envtest_namespace))["metadata"][
            "name"
        ] == "visible"
        with pytest.raises(ForbiddenError) as info:
            await client.list(res.PODS, envtest_namespace)
        assert info.value.code == 403
        assert 'cannot list resource "pods"' in info.value.message
        (sa / "token.next").write_text(second)
        os.replace(sa / "token.next", sa / "token")
        assert await whoami(client) == f"system:serviceaccount:{envtest_namespace}:second"
        (sa / "token").write_text("not-a-token")
        with pytest.raises(UnauthorizedError):
            await client.server_version()


async def test_exec_plugin_token_against_the_apiserver(
    envtest: Envtest, envtest_client: ApiClient, envtest_namespace: str, tmp_path: Path
):
    token = await service_account_token(envtest_client, envtest_namespace, "robot")
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json\n"
        "credential = {'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential'}\n"
        f"credential['status'] = {{'token': {token!r}}}\n"
        "print(json.dumps(credential))\n"
    )
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }
    path = _kubeconfig(tmp_path / "config", envtest.url, user)
    text = path.read_text().replace(
        f"server: {envtest.url}", f"server: {envtest.url}\n    certificate-authority: {envtest.ca_file}"
    )
    path.write_text(text)
    async with ApiClient(kubeconfig_config(str(path))) as client:
        assert await whoami(client) == f"system:serviceaccount:{envtest_namespace}:robot"
