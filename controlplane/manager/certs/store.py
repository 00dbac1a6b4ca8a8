"""Where the webhook certificates live between restarts and across replicas.

Upstream's ``pkg/webhook/util/writer``: :class:`SecretCertStore` keeps them in the Secret
``koordinator-webhook-certs`` under upstream's keys (``ca-cert.pem``, ``ca-key.pem``,
``cert.pem``/``tls.crt``, ``key.pem``/``tls.key``), so every replica serves the same
certificate; :class:`DirectoryCertStore` is the ``WEBHOOK_CERT_WRITER=fs`` variant.
:func:`write_cert_dir` writes the PEM files the server loads.
"""

from __future__ import annotations

import base64
import contextlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from controlplane.manager.certs.keys import (
    CA_CERT_KEY,
    CA_KEY_KEY,
    SERVER_CERT_KEY,
    SERVER_CERT_KEY2,
    SERVER_KEY_KEY,
    SERVER_KEY_KEY2,
    CertBundle,
    CertError,
)
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import (
    AlreadyExistsError,
    ApiConnectionError,
    ApiError,
    ConflictError,
    NotFoundError,
)


class CertStore(Protocol):
    """Where the certificates live between restarts and across replicas."""

    async def read(self) -> CertBundle | None:
        """The stored bundle; ``None`` when nothing is stored. Incomplete data gives empty fields."""

    async def write(self, bundle: CertBundle, previous: CertBundle | None) -> CertBundle:
        """Store ``bundle`` (replacing ``previous``); returns it with its new resourceVersion.

        Raises :class:`ConflictingWriteError` when another writer got there first.
        """


class ConflictingWriteError(CertError):
    """Another replica stored certificates at the same time; read theirs instead."""


def _decode_data(data: Mapping[str, Any], key: str) -> bytes:
    raw = data.get(key)
    if not isinstance(raw, str):
        return b""
    try:
        return base64.b64decode(raw, validate=True)
    except ValueError:
        return b""


class SecretCertStore:
    """The certificates in a Secret (upstream's key names, ``tls.crt``/``tls.key`` duplicates)."""

    def __init__(self, client: ApiClient, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name

    async def read(self) -> CertBundle | None:
        try:
            secret = await self.client.get(res.SECRETS, self.name, self.namespace)
        except NotFoundError:
            return None
        except (ApiError, ApiConnectionError) as exc:
            raise CertError(f"cannot read Secret {self.namespace}/{self.name}: {exc}") from exc
        data = secret.get("data") or {}
        return CertBundle(
            ca_cert=_decode_data(data, CA_CERT_KEY),
            ca_key=_decode_data(data, CA_KEY_KEY),
            cert=_decode_data(data, SERVER_CERT_KEY),
            key=_decode_data(data, SERVER_KEY_KEY),
            resource_version=str((secret.get("metadata") or {}).get("resourceVersion") or ""),
        )

    def _body(self, bundle: CertBundle, resource_version: str) -> dict[str, Any]:
        def b64(value: bytes) -> str:
            return base64.b64encode(value).decode("ascii")

        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": "Opaque",
            "data": {
                CA_KEY_KEY: b64(bundle.ca_key),
                CA_CERT_KEY: b64(bundle.ca_cert),
                SERVER_KEY_KEY: b64(bundle.key),
                SERVER_KEY_KEY2: b64(bundle.key),
                SERVER_CERT_KEY: b64(bundle.cert),
                SERVER_CERT_KEY2: b64(bundle.cert),
            },
        }

    async def write(self, bundle: CertBundle, previous: CertBundle | None) -> CertBundle:
        try:
            if previous is None:
                stored = await self.client.create(res.SECRETS, self._body(bundle, ""), self.namespace)
            else:
                body = self._body(bundle, previous.resource_version)
                stored = await self.client.replace(res.SECRETS, body)
        except AlreadyExistsError as exc:
            raise ConflictingWriteError(
                f"Secret {self.namespace}/{self.name} was created concurrently"
            ) from exc
        except ConflictError as exc:
            raise ConflictingWriteError(f"Secret {self.namespace}/{self.name} changed concurrently") from exc
        except (ApiError, ApiConnectionError) as exc:
            raise CertError(f"cannot write Secret {self.namespace}/{self.name}: {exc}") from exc
        version = str((stored.get("metadata") or {}).get("resourceVersion") or "")
        return replace(bundle, resource_version=version)


class DirectoryCertStore:
    """The certificates as files of one directory (``WEBHOOK_CERT_WRITER=fs``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def read(self) -> CertBundle | None:
        def load(name: str) -> bytes:
            try:
                return (self.directory / name).read_bytes()
            except FileNotFoundError:
                return b""

        parts = {name: load(name) for name in (CA_CERT_KEY, CA_KEY_KEY, SERVER_CERT_KEY, SERVER_KEY_KEY)}
        if not any(parts.values()):
            return None
        return CertBundle(
            parts[CA_CERT_KEY], parts[CA_KEY_KEY], parts[SERVER_CERT_KEY], parts[SERVER_KEY_KEY]
        )

    async def write(self, bundle: CertBundle, previous: CertBundle | None) -> CertBundle:
        write_cert_dir(self.directory, bundle, include_ca_key=True)
        return bundle


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_cert_dir(directory: Path, bundle: CertBundle, *, include_ca_key: bool = False) -> None:
    """Write the PEM files (each replaced atomically); keys are readable by the owner only."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        CA_CERT_KEY: (bundle.ca_cert, 0o644),
        SERVER_CERT_KEY: (bundle.cert, 0o644),
        SERVER_CERT_KEY2: (bundle.cert, 0o644),
        SERVER_KEY_KEY: (bundle.key, 0o600),
        SERVER_KEY_KEY2: (bundle.key, 0o600),
    }
    if include_ca_key:
        files[CA_KEY_KEY] = (bundle.ca_key, 0o600)
    for name, (data, mode) in files.items():
        _atomic_write(directory / name, data, mode)
