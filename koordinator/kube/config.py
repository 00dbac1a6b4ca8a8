"""Where the apiserver is and how to authenticate: :class:`ClusterConfig` and token sources.

Two ways to get one:

* :func:`in_cluster_config` reads the pod's service-account mount (token, CA, namespace) and
  ``KUBERNETES_SERVICE_HOST``/``_PORT``. The token file is re-read whenever it changes on
  disk (the kubelet rotates projected tokens by swapping a symlink), and at least once a
  minute. This path never imports the ``kubernetes`` package.
* :func:`koordinator.kube.kubeconfig.kubeconfig_config` goes through the official loader
  (client certificates, bearer tokens, exec credential plug-ins).

:func:`load_config` picks in-cluster when the environment says so, else the kubeconfig.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

SERVICE_ACCOUNT_DIR = Path("var/run/secrets/kubernetes.io/serviceaccount")
_TOKEN_MAX_AGE_S = 60.0


class ConfigError(Exception):
    """No usable cluster configuration."""


class TokenSource(Protocol):
    async def token(self) -> str | None:
        """The bearer token to send now, or ``None`` for none."""
        ...

    def invalidate(self) -> None:
        """The server rejected the last token (401): fetch a fresh one next time."""
        ...


@dataclass
class StaticToken:
    value: str

    async def token(self) -> str | None:
        return self.value

    def invalidate(self) -> None:
        """A static token cannot be refreshed; the caller sees the 401."""


class FileToken:
    """A token file re-read when its identity (inode, size, mtime) changes or it is a minute old."""

    def __init__(self, path: str | os.PathLike[str], max_age_s: float = _TOKEN_MAX_AGE_S) -> None:
        self.path = Path(path)
        self.max_age_s = max_age_s
        self._value: str | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._read_at = 0.0

    def _stat(self) -> tuple[int, int, int]:
        st = self.path.stat()
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def read(self) -> str:
        try:
            stamp = self._stat()
            now = time.monotonic()
            if self._value is None or stamp != self._stamp or now - self._read_at > self.max_age_s:
                value = self.path.read_text().strip()
                if not value:
                    raise ConfigError(f"{self.path}: empty token file")
                self._value, self._stamp, self._read_at = value, stamp, now
        except OSError as exc:
            if self._value is None:
                raise ConfigError(f"cannot read token file {self.path}: {exc}") from exc
            # Keep the last good token while the file is being swapped.
        return self._value

    async def token(self) -> str | None:
        return self.read()

    def invalidate(self) -> None:
        self._stamp = None


@dataclass
class ClusterConfig:
    """Connection settings for :class:`koordinator.kube.client.ApiClient`."""

    server: str
    ca_file: str | None = None
    ca_data: str | None = None
    insecure_skip_tls_verify: bool = False
    client_cert_file: str | None = None
    client_key_file: str | None = None
    token: TokenSource | None = None
    tls_server_name: str | None = None
    namespace: str | None = None
    user_agent: str = "koordinator-py"
    extra_headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.server = self.server.rstrip("/")
        if not self.server.startswith(("http://", "https://")):
            raise ConfigError(f"server must be an http(s) URL, got {self.server!r}")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS settings, or ``None`` for a plain-HTTP server."""
        if self.server.startswith("http://"):
            return None
        ctx = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        if self.insecure_skip_tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.client_cert_file:
            ctx.load_cert_chain(self.client_cert_file, self.client_key_file)
        return ctx


def in_cluster_config(
    root: str | os.PathLike[str] = "/", environ: Mapping[str, str] | None = None
) -> ClusterConfig:
    """The service-account configuration of a pod (``root`` re-roots the mount for tests)."""
    env = os.environ if environ is None else environ
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    port = env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError(
            "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set"
        )
    sa_dir = Path(root) / SERVICE_ACCOUNT_DIR
    token = FileToken(sa_dir / "token")
    token.read()
    ca = sa_dir / "ca.crt"
    if not ca.is_file():
        raise ConfigError(f"service-account CA bundle {ca} is missing")
    namespace_file = sa_dir / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.is_file() else None
    host_part = f"[{host}]" if ":" in host else host
    return ClusterConfig(
        server=f"https://{host_part}:{port}", ca_file=str(ca), token=token, namespace=namespace or None
    )


def load_config(kubeconfig: str | None = None, context: str | None = None) -> ClusterConfig:
    """In-cluster configuration when running in a pod and no kubeconfig is named, else the kubeconfig."""
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster_config()
    from koordinator.kube.kubeconfig import kubeconfig_config

    return kubeconfig_config(kubeconfig, context)
