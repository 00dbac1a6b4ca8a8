"""Credentials: the in-cluster service account (token rotation, no ``kubernetes`` import), kubeconfig
through the official loader (tokens, exec plug-ins), and the client-side rate limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.config import SERVICE_ACCOUNT_DIR, ConfigError, in_cluster_config, load_config
from koordinator.kube.kubeconfig import kubeconfig_config
from koordinator.kube.ratelimit import TokenBucket
from testsupport.fake import FakeApiServer

ROOT = Path(__file__).resolve().parents[3]


def service_account(root: Path, token: str, namespace: str = "koordinator-system") -> Path:
    sa = root / SERVICE_ACCOUNT_DIR
    sa.mkdir(parents=True, exist_ok=True)
    (sa / "token").write_text(token)
    (sa / "ca.crt").write_bytes(trustme.CA().cert_pem.bytes())
    (sa / "namespace").write_text(namespace)
    return sa


async def whoami(client: ApiClient) -> str:
    review = await client.create(
        res.SELF_SUBJECT_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    return str(review["status"]["userInfo"]["username"])


@pytest.mark.parametrize(
    ("host", "server"),
    [
        pytest.param("10.96.0.1", "https://10.96.0.1:443", id="ipv4"),
        pytest.param("fd00::1", "https://[fd00::1]:443", id="ipv6"),
    ],
)
def test_in_cluster_config(tmp_path, host, server):
    sa = service_account(tmp_path, "secret-token\n")
    config = in_cluster_config(tmp_path, {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": "443"})
    assert config.server == server
    assert config.ca_file == str(sa / "ca.crt")
    assert config.namespace == "koordinator-system"


@pytest.mark.parametrize(
    ("env", "make_files"),
    [
        pytest.param({}, True, id="no-env"),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, False, id="no-token"
        ),
    ],
)
def test_in_cluster_config_needs_env_and_token(tmp_path, env, make_files):
    if make_files:
        service_account(tmp_path, "t")
    with pytest.raises(ConfigError):
        in_cluster_config(tmp_path, env)


async def test_rotated_service_account_token_is_used(tmp_path):
    sa = service_account(tmp_path, "first")
    async with FakeApiServer(
        tokens={"first": "system:serviceaccount:ns:one", "second": "system:serviceaccount:ns:two"}
    ) as fake:
        config = in_cluster_config(
            tmp_path, {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(fake.port)}
        )
        config.server = fake.url  # the fake speaks plain HTTP
        async with ApiClient(config) as client:
            assert await whoami(client) == "system:serviceaccount:ns:one"
            # the kubelet swaps the projected token through a symlink
            (sa / "token.new").write_text("second")
            os.replace(sa / "token.new", sa / "token")
            assert await whoami(client) == "system:serviceaccount:ns:two"


def test_in_cluster_path_never_imports_kubernetes(tmp_path):
    service_account(tmp_path, "t")
    program = textwrap.dedent(
        f"""
        import asyncio, sys
        from koordinator.kube import config, client, informer, leaderelection, resources
        env = {{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}}
        cfg = config.in_cluster_config({str(tmp_path)!r}, env)
        async def main():
            async with client.ApiClient(cfg) as api:
                informer.InformerFactory(api).informer(resources.PODS, field_selector="spec.nodeName=n1")
        asyncio.run(main())
        print(sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def _kubeconfig(path: Path, server: str, user: dict[str, Any]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(config))
    return path


async def test_kubeconfig_bearer_token(tmp_path):
    async with FakeApiServer(tokens={"static-token": "bob"}) as fake:
        path = _kubeconfig(tmp_path / "config", fake.url, {"token": "static-token"})
        config = kubeconfig_config(str(path))
        assert config.namespace == "team-a"
        async with ApiClient(config) as client:
            assert await whoami(client) == "bob"


async def test_kubeconfig_exec_credential_plugin(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',"
        " 'status': {'token': 'from-plugin'}}))\n"
    )
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }
    async with FakeApiServer(tokens={"from-plugin": "carol"}) as fake:
        path = _kubeconfig(tmp_path / "config", fake.url, exec_user)
        async with ApiClient(load_config(str(path))) as client:
            assert await whoami(client) == "carol"


def test_kubeconfig_errors_are_config_errors(tmp_path):
    with pytest.raises(ConfigError):
        kubeconfig_config(str(tmp_path / "missing"))


def test_token_bucket_allows_a_burst_then_limits():
    bucket = TokenBucket(qps=0.001, burst=3)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    with pytest.raises(ValueError, match="qps must be positive"):
        TokenBucket(qps=0, burst=1)


async def test_token_bucket_refills_at_qps():
    bucket = TokenBucket(qps=1000.0, burst=1)
    assert bucket.try_acquire()
    waited = await bucket.acquire()
    assert waited > 0, "the second token had to be waited for"
    assert json.dumps({"ok": True})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "kubeconfig {path}: no such file (--kubeconfig names it)", id="missing-file"),
        pytest.param(
            "clusters: [\n  {name: a\n",
            "kubeconfig {path} is not valid YAML: line 3, column 1: expected ',' or '}}', "
            "but got '<stream end>'",
            id="malformed-yaml",
        ),
        pytest.param("- a\n- b\n", "kubeconfig {path} is not a kubeconfig", id="not-a-mapping"),
        pytest.param(
            "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n",
            "kubeconfig {path} has no current-context",
            id="no-current-context",
        ),
    ],
)
def test_a_bad_kubeconfig_is_one_clear_config_error(tmp_path, content, message):
    """For every component that loads one (koordlet, koord-manager, explain-node)."""
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as raised:
        load_config(str(path))
    assert str(raised.value).startswith(message.format(path=path))
    assert "\n" not in str(raised.value)
