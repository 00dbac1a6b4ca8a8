"""Kubeconfig credentials through the official ``kubernetes`` package's loader.

The loader resolves contexts, inline or file certificates, bearer tokens, token files and
exec credential plug-ins. It is imported inside the functions here, never at module level,
so a process that only uses :func:`koordinator.kube.config.in_cluster_config` (the
koordlet) does not pay for importing ``kubernetes``. The package is an extra
(``koordinator-py[kubeconfig]``, 120 MB installed): in a pod nothing needs it, and
``--kubeconfig`` without it is a :class:`ConfigError` saying what to install.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import yaml

from koordinator.cli import one_line, yaml_problem
from koordinator.kube.config import ClusterConfig, ConfigError

_REFRESH_EVERY_S = 10.0


def _default_path() -> str:
    env = os.environ.get("KUBECONFIG", "")
    first = env.split(os.pathsep)[0] if env else ""
    return first or str(Path.home() / ".kube" / "config")


def _check_file(path: str, context: str | None) -> None:
    """The kubeconfig exists, is YAML, a mapping, and names a context (the loader's own errors
    for these are a bare "No configuration found", a YAML traceback and a key name)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"kubeconfig {path}: no such file (--kubeconfig names it)") from None
    except OSError as exc:
        raise ConfigError(f"kubeconfig {path}: cannot read it: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"kubeconfig {path} is not valid YAML: {yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"kubeconfig {path} is not a kubeconfig (expected a mapping with clusters, users, "
            "contexts and current-context)"
        )
    if context is None and not data.get("current-context"):
        raise ConfigError(
            f"kubeconfig {path} has no current-context (choose one with "
            f"`kubectl --kubeconfig {path} config use-context NAME`)"
        )


EXTRA = "koordinator-py[kubeconfig]"


def _kubernetes() -> Any:
    """The ``kubernetes`` package (lazy: see the module docstring)."""
    try:
        import kubernetes.client
        import kubernetes.config
    except ImportError as exc:
        raise ConfigError(
            f"a kubeconfig needs the kubernetes package, which is not installed ({one_line(exc)}): "
            f"install {EXTRA}, or run in a pod with in-cluster credentials"
        ) from None
    return kubernetes


def _load(path: str | None, context: str | None, config_dict: dict[str, Any] | None) -> Any:
    if config_dict is None:
        _check_file(path or _default_path(), context)
    kubernetes = _kubernetes()
    k8s_client, k8s_config = kubernetes.client, kubernetes.config
    configuration = k8s_client.Configuration()
    try:
        if config_dict is not None:
            k8s_config.load_kube_config_from_dict(
                config_dict, context=context, client_configuration=configuration, persist_config=False
            )
        else:
            k8s_config.load_kube_config(
                config_file=path or _default_path(),
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except (k8s_config.ConfigException, OSError) as exc:
        raise ConfigError(f"cannot load kubeconfig {path or _default_path()}: {one_line(exc)}") from exc
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        # the loader walks the YAML without checking its shape
        raise ConfigError(f"malformed kubeconfig {path or 'given'}: {one_line(exc)}") from exc
    return configuration


def _bearer(configuration: Any) -> str | None:
    value = (configuration.api_key or {}).get("BearerToken") or (configuration.api_key or {}).get(
        "authorization"
    )
    if not value:
        return None
    text = str(value)
    return text[len("Bearer ") :] if text.startswith("Bearer ") else text


class KubeconfigToken:
    """A bearer token from the kubeconfig, refreshed through the loader's hook.

    Exec plug-ins and expiring tokens are re-run by the loader when they expire; after a
    401 the whole kubeconfig is loaded again, which runs the plug-in afresh.
    """

    def __init__(
        self, configuration: Any, path: str | None, context: str | None, config_dict: dict[str, Any] | None
    ) -> None:
        self._configuration = configuration
        self._path, self._context, self._dict = path, context, config_dict
        self._value = _bearer(configuration)
        self._fetched = time.monotonic()
        self._stale = False

    def _refresh(self) -> str | None:
        if self._stale:
            self._configuration = _load(self._path, self._context, self._dict)
        elif self._configuration.refresh_api_key_hook is not None:
            self._configuration.refresh_api_key_hook(self._configuration)
        return _bearer(self._configuration)

    async def token(self) -> str | None:
        if self._stale or time.monotonic() - self._fetched > _REFRESH_EVERY_S:
            self._value = await asyncio.to_thread(self._refresh)
            self._fetched = time.monotonic()
            self._stale = False
        return self._value

    def invalidate(self) -> None:
        self._stale = True


def kubeconfig_config(
    path: str | None = None, context: str | None = None, config_dict: dict[str, Any] | None = None
) -> ClusterConfig:
    """A :class:`ClusterConfig` from a kubeconfig file (default ``$KUBECONFIG``, then ``~/.kube/config``)."""
    configuration = _load(path, context, config_dict)
    namespace = None
    k8s_config = _kubernetes().config
    try:
        if config_dict is None:
            contexts, current = k8s_config.list_kube_config_contexts(path or _default_path())
            chosen = next((c for c in contexts if c.get("name") == context), current) if context else current
            namespace = (chosen or {}).get("context", {}).get("namespace")
    except (k8s_config.ConfigException, OSError):
        namespace = None
    token = KubeconfigToken(configuration, path, context, config_dict) if _bearer(configuration) else None
    return ClusterConfig(
        server=str(configuration.host),
        ca_file=configuration.ssl_ca_cert or None,
        insecure_skip_tls_verify=not configuration.verify_ssl,
        client_cert_file=configuration.cert_file or None,
        client_key_file=configuration.key_file or None,
        token=token,
        tls_server_name=getattr(configuration, "tls_server_name", None) or None,
        namespace=namespace,
    )
