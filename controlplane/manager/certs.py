"""Self-managed TLS of the webhook server: CA and serving certificate, Secret, caBundle, rotation.

The kube-apiserver calls webhooks over HTTPS and trusts the ``caBundle`` of the webhook
configurations. koord-manager runs its own small CA, as upstream does:

* :func:`generate_ca` / :func:`issue_serving_certificate` create an ECDSA P-256 CA
  (CN ``webhook-cert-ca``) and a serving certificate for ``localhost`` and the webhook's
  DNS name (``<service>.<namespace>.svc``, or ``WEBHOOK_HOST``, which may be an IP);
* :class:`SecretCertStore` keeps them in the Secret ``koordinator-webhook-certs`` under
  upstream's keys (``ca-cert.pem``, ``ca-key.pem``, ``cert.pem``/``tls.crt``,
  ``key.pem``/``tls.key``), so every replica serves the same certificate;
  :class:`DirectoryCertStore` is the ``WEBHOOK_CERT_WRITER=fs`` variant;
* :func:`ensure_webhook_configurations` writes the CA into every webhook of
  ``koordinator-mutating-webhook-configuration`` and
  ``koordinator-validating-webhook-configuration``, keeping the original list in the
  ``template`` annotation and dropping the webhooks whose path is not served (their gate
  is off), and points them at ``https://WEBHOOK_HOST:PORT/path`` when a host is set;
* :class:`ServingTLS` holds the server's ``SSLContext``: loading a new pair into the live
  context changes what new handshakes present while open connections keep going;
* :class:`CertController` ties it together: at start, every minute, and at once when the
  Secret or a webhook configuration is added, changed or deleted (the manager's informers
  call :meth:`CertController.trigger`) it checks the certificate -- it is renewed when it
  no longer verifies for the DNS name against the CA ``renew_before`` from now (the CA
  itself is renewed when it expires within a year) -- writes the files to the cert
  directory, patches the ``caBundle`` and reloads the server. When the CA changes, the
  bundle carries the old and the new CA for ``ca_overlap`` seconds and is patched
  *before* the server switches certificates, so the apiserver trusts both sides of the
  switch.

Readiness (:meth:`CertController.serving_valid`) needs one successful sync and the
server's TLS context presenting a certificate that verifies against the current CA
(:meth:`ServingTLS.presents_valid`): a handshake between that live context and a client
that trusts only the CA, in memory, once per loaded certificate -- not a connection to the
server's own port on every probe, which cost a full handshake of CPU on the event loop each
time.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import datetime
import ipaddress
import logging
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from koordinator.api.jsonutil import JSONError, marshal, unmarshal
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import (
    AlreadyExistsError,
    ApiConnectionError,
    ApiError,
    ConflictError,
    NotFoundError,
)

__all__ = [
    "CA_CERT_KEY",
    "CA_KEY_KEY",
    "MUTATING_CONFIGURATION",
    "VALIDATING_CONFIGURATION",
    "CertBundle",
    "CertController",
    "CertError",
    "CertPolicy",
    "CertStore",
    "DirectoryCertStore",
    "SecretCertStore",
    "ServingTLS",
    "certificate_valid",
    "ensure_webhook_configurations",
    "generate_bundle",
    "probe_tls",
    "service_dns_name",
    "write_cert_dir",
]

log = logging.getLogger(__name__)

CA_KEY_KEY = "ca-key.pem"
CA_CERT_KEY = "ca-cert.pem"
SERVER_KEY_KEY = "key.pem"
SERVER_KEY_KEY2 = "tls.key"
SERVER_CERT_KEY = "cert.pem"
SERVER_CERT_KEY2 = "tls.crt"
CA_COMMON_NAME = "webhook-cert-ca"
MUTATING_CONFIGURATION = "koordinator-mutating-webhook-configuration"
VALIDATING_CONFIGURATION = "koordinator-validating-webhook-configuration"
TEMPLATE_ANNOTATION = "template"
_CONFLICT_RETRIES = 5
#: Syncs that wrote something within one resync period before a trigger waits (see
#: :meth:`CertController.run`).
_WRITES_BEFORE_PAUSE = 3
_DAY = datetime.timedelta(days=1)


class CertError(RuntimeError):
    """Certificates could not be read, generated, stored or published."""


@dataclass(frozen=True)
class CertPolicy:
    """Lifetimes of the CA and the serving certificate, and when to renew them."""

    ca_validity: datetime.timedelta = 3650 * _DAY
    #: The CA is replaced when it would expire within this window.
    ca_renew_before: datetime.timedelta = 365 * _DAY
    serving_validity: datetime.timedelta = 365 * _DAY
    #: The serving certificate is replaced when it would not verify this far in the future.
    renew_before: datetime.timedelta = 180 * _DAY


@dataclass(frozen=True)
class CertBundle:
    """PEM-encoded CA and serving pair, with the store's resourceVersion when read from one."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes
    resource_version: str = ""

    def serving_certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert)

    def ca_certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.ca_cert)


def service_dns_name(service: str, namespace: str) -> str:
    """``ServiceToCommonName``: ``<service>.<namespace>.svc``."""
    return f"{service}.{namespace}.svc"


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def generate_ca(
    now: datetime.datetime | None = None, validity: datetime.timedelta = CertPolicy.ca_validity
) -> tuple[bytes, bytes]:
    """A self-signed CA: ``(cert_pem, key_pem)``."""
    start = (now or _now()) - datetime.timedelta(minutes=5)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_COMMON_NAME)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _load_key(pem: bytes) -> Any:
    return serialization.load_pem_private_key(pem, password=None)


def issue_serving_certificate(
    ca_cert: bytes,
    ca_key: bytes,
    dns_name: str,
    now: datetime.datetime | None = None,
    validity: datetime.timedelta = CertPolicy.serving_validity,
) -> tuple[bytes, bytes]:
    """A serving certificate for ``localhost`` and ``dns_name`` signed by the CA: ``(cert_pem, key_pem)``."""
    start = (now or _now()) - datetime.timedelta(minutes=5)
    issuer = x509.load_pem_x509_certificate(ca_cert)
    signer = _load_key(ca_key)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    try:
        names.append(x509.IPAddress(ipaddress.ip_address(dns_name)))
    except ValueError:
        names.append(x509.DNSName(dns_name))
    not_after = min(start + validity, issuer.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_name)]))
        .issuer_name(issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(signer, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def generate_bundle(
    dns_name: str,
    policy: CertPolicy = CertPolicy(),
    *,
    ca: tuple[bytes, bytes] | None = None,
    now: datetime.datetime | None = None,
) -> CertBundle:
    """A serving pair for ``dns_name``, signed by ``ca`` (``(cert, key)``) or by a new CA."""
    ca_cert, ca_key = ca if ca is not None else generate_ca(now, policy.ca_validity)
    cert, key = issue_serving_certificate(ca_cert, ca_key, dns_name, now, policy.serving_validity)
    return CertBundle(ca_cert=ca_cert, ca_key=ca_key, cert=cert, key=key)


def _public_bytes(key: Any) -> bytes:
    return bytes(
        key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def _names_match(cert: x509.Certificate, dns_name: str) -> bool:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    try:
        address = ipaddress.ip_address(dns_name)
    except ValueError:
        return dns_name in san.get_values_for_type(x509.DNSName)
    return address in san.get_values_for_type(x509.IPAddress)


def ca_valid(bundle: CertBundle, at: datetime.datetime) -> bool:
    """The CA parses, its key matches, and it is still valid at ``at``."""
    try:
        ca = bundle.ca_certificate()
        key = _load_key(bundle.ca_key)
    except (ValueError, TypeError):
        return False
    return _public_bytes(ca.public_key()) == _public_bytes(key.public_key()) and ca.not_valid_after_utc > at


def certificate_valid(bundle: CertBundle, dns_name: str, at: datetime.datetime | None = None) -> bool:
    """``validCert``: the pair matches, is issued by the CA, names ``dns_name`` and is valid at ``at``."""
    when = at or _now()
    try:
        cert = bundle.serving_certificate()
        key = _load_key(bundle.key)
        ca = bundle.ca_certificate()
    except (ValueError, TypeError):
        return False
    if _public_bytes(cert.public_key()) != _public_bytes(key.public_key()):
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    if not _names_match(cert, dns_name):
        return False
    now = _now()
    return (
        cert.not_valid_before_utc <= now and cert.not_valid_after_utc > when and ca.not_valid_after_utc > when
    )


# ---- stores ---------------------------------------------------------------------------------------


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


# ---- webhook configurations -----------------------------------------------------------------------


def _client_config_path(config: Mapping[str, Any]) -> str:
    service = config.get("service")
    if isinstance(service, Mapping):
        return str(service.get("path") or "")
    url = config.get("url")
    if isinstance(url, str):
        return urlsplit(url).path
    return ""


@dataclass(frozen=True)
class ClientConfigTarget:
    """Where the apiserver should call the webhooks."""

    namespace: str
    service: str
    #: ``WEBHOOK_HOST``: when set, webhooks are called at ``https://host:port/path``.
    host: str = ""
    port: int = 9876


def _template(configuration: dict[str, Any]) -> list[dict[str, Any]]:
    meta = configuration.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        configuration["metadata"] = meta
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = {}
        meta["annotations"] = annotations
    raw = annotations.get(TEMPLATE_ANNOTATION)
    if raw:
        try:
            template = unmarshal(raw)
        except JSONError as exc:
            raise CertError(f"{meta.get('name')}: unreadable template annotation: {exc}") from None
        if not isinstance(template, list) or not all(isinstance(item, dict) for item in template):
            raise CertError(f"{meta.get('name')}: the template annotation must be a JSON list of webhooks")
        return template
    webhooks = configuration.get("webhooks") or []
    annotations[TEMPLATE_ANNOTATION] = marshal(webhooks)
    return [dict(item) for item in webhooks]


def render_webhooks(
    template: list[dict[str, Any]], ca_bundle: bytes, served: Collection[str], target: ClientConfigTarget
) -> list[dict[str, Any]]:
    """The webhooks of a configuration: served paths only, with the CA bundle and client config set."""
    rendered = []
    encoded = base64.b64encode(ca_bundle).decode("ascii")
    for original in template:
        webhook = dict(original)
        config = dict(webhook.get("clientConfig") or {})
        path = _client_config_path(config)
        if path not in served:
            continue
        config["caBundle"] = encoded
        service = config.get("service")
        if isinstance(service, dict):
            service = {**service, "namespace": target.namespace, "name": target.service}
            config["service"] = service
            if target.host:
                config.pop("service")
                config["url"] = f"https://{target.host}:{target.port}{path}"
        webhook["clientConfig"] = config
        rendered.append(webhook)
    return rendered


async def _ensure_configuration(
    client: ApiClient,
    resource: res.Resource,
    name: str,
    ca_bundle: bytes,
    served: Collection[str],
    target: ClientConfigTarget,
) -> bool:
    for _ in range(_CONFLICT_RETRIES):
        try:
            configuration = await client.get(resource, name)
        except NotFoundError:
            raise CertError(f"not found {resource.kind} {name}") from None
        except (ApiError, ApiConnectionError) as exc:
            raise CertError(f"cannot read {resource.kind} {name}: {exc}") from exc
        before = marshal(configuration)
        template = _template(configuration)
        configuration["webhooks"] = render_webhooks(template, ca_bundle, served, target)
        if marshal(configuration) == before:
            return False
        kept = {str(w.get("name")) for w in configuration["webhooks"]}
        dropped = [str(w.get("name")) for w in template if str(w.get("name")) not in kept]
        if dropped:
            log.warning("%s %s: leaving out %s (path not served)", resource.kind, name, ", ".join(dropped))
        try:
            await client.replace(resource, configuration)
        except ConflictError:
            continue  # another replica or a helm upgrade wrote it: read it again
        except (ApiError, ApiConnectionError) as exc:
            raise CertError(f"failed to update {name}: {exc}") from exc
        log.info("updated %s %s", resource.kind, name)
        return True
    raise CertError(f"failed to update {name}: it kept changing ({_CONFLICT_RETRIES} conflicts)")


async def ensure_webhook_configurations(
    client: ApiClient,
    ca_bundle: bytes,
    served: Collection[str],
    target: ClientConfigTarget,
    *,
    mutating_name: str = MUTATING_CONFIGURATION,
    validating_name: str = VALIDATING_CONFIGURATION,
) -> bool:
    """Patch both configurations (re-read on write conflicts); returns whether anything was written."""
    changed = False
    for resource, name in (
        (res.MUTATING_WEBHOOK_CONFIGURATIONS, mutating_name),
        (res.VALIDATING_WEBHOOK_CONFIGURATIONS, validating_name),
    ):
        changed = await _ensure_configuration(client, resource, name, ca_bundle, served, target) or changed
    return changed


# ---- the serving context -----------------------------------------------------------------------------


#: Server name the readiness check verifies the presented certificate for (every serving
#: certificate names it, whatever the webhook's DNS name).
READINESS_SERVER_NAME = "localhost"
#: A failed verification is tried again after this long (a certificate not yet valid becomes valid).
REVERIFY_AFTER_S = 10.0


def _pump(client: ssl.SSLObject, server: ssl.SSLObject, bios: tuple[ssl.MemoryBIO, ...]) -> str:
    """Drive a client and a server handshake over memory BIOs; ``""`` once the client is done."""
    client_in, client_out, server_in, server_out = bios
    for _ in range(8):
        try:
            client.do_handshake()
        except ssl.SSLWantReadError:
            pass
        except (ssl.SSLError, ValueError) as exc:
            return f"TLS handshake with the webhook server's certificate failed: {exc}"
        else:
            return ""
        server_in.write(client_out.read())
        try:
            server.do_handshake()
        except ssl.SSLWantReadError:
            pass
        except (ssl.SSLError, ValueError) as exc:
            return f"TLS handshake with the webhook server's certificate failed (server side): {exc}"
        client_in.write(server_out.read())
    return "TLS handshake with the webhook server's certificate did not complete"


def presented_certificate(
    context: ssl.SSLContext, ca_pem: bytes, server_name: str = READINESS_SERVER_NAME
) -> tuple[str, x509.Certificate | None]:
    """Handshake in memory with ``context`` as a client that trusts only ``ca_pem``.

    Returns ``("", certificate)`` with the certificate ``context`` presents when it verifies
    for ``server_name`` (chain, validity, name, key usage: what a client connecting to the
    server checks), else ``(reason, None)``. No socket is opened.
    """
    try:
        client_context = ssl.create_default_context(cadata=ca_pem.decode("ascii"))
    except (ssl.SSLError, ValueError) as exc:
        return f"the CA does not load: {exc}", None
    bios = (ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO())
    client = client_context.wrap_bio(bios[0], bios[1], server_hostname=server_name)
    server = context.wrap_bio(bios[2], bios[3], server_side=True)
    problem = _pump(client, server, bios)
    if problem:
        return problem, None
    der = client.getpeercert(binary_form=True)
    if not der:
        return "the webhook server presented no certificate", None
    return "", x509.load_der_x509_certificate(der)


@dataclass(frozen=True)
class _Verdict:
    problem: str
    checked_at: float
    #: When the verified certificate and its CA are both valid (epoch seconds).
    valid_from: float = 0.0
    valid_until: float = 0.0


#: The TLS 1.2 suites the webhook server offers (OpenSSL names): ECDHE with AES-GCM or
#: ChaCha20-Poly1305.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL"


class ServingTLS:
    """The server's SSLContext; :meth:`load` swaps the certificate for new handshakes only."""

    def __init__(self) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        # TLS 1.2: forward-secret AEAD suites only (no CBC); TLS 1.3 suites are all AEAD.
        self.context.set_ciphers(TLS12_CIPHERS)
        self.context.set_alpn_protocols(["http/1.1"])
        self.loaded: CertBundle | None = None
        self.not_after: datetime.datetime | None = None
        self._verdict: _Verdict | None = None

    def load(self, cert_file: Path, key_file: Path, bundle: CertBundle) -> None:
        scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            scratch.load_cert_chain(str(cert_file), str(key_file))
        except (ssl.SSLError, OSError) as exc:
            raise CertError(f"cannot load {cert_file}: {exc}") from exc
        self.context.load_cert_chain(str(cert_file), str(key_file))
        self.loaded = bundle
        self.not_after = bundle.serving_certificate().not_valid_after_utc
        self._verdict = None

    @property
    def ready(self) -> bool:
        return self.loaded is not None and self.not_after is not None and self.not_after > _now()

    def presents_valid(self) -> str:
        """``""`` when new handshakes get a certificate that verifies against the loaded CA.

        Verified by :func:`presented_certificate` against the live context the first time
        after each :meth:`load` (and again :data:`REVERIFY_AFTER_S` after a failure); in
        between, only the clock is compared with the validity of the certificate and the CA.
        """
        loaded = self.loaded
        if loaded is None:
            return "no serving certificate loaded"
        now = time.time()
        verdict = self._verdict
        if verdict is None or (verdict.problem and now - verdict.checked_at >= REVERIFY_AFTER_S):
            verdict = self._verdict = self._verify(loaded, now)
        if verdict.problem:
            return verdict.problem
        if not verdict.valid_from <= now < verdict.valid_until:
            return "the serving certificate or its CA is outside its validity period"
        return ""

    def _verify(self, loaded: CertBundle, now: float) -> _Verdict:
        problem, presented = presented_certificate(self.context, loaded.ca_cert)
        if presented is None:
            return _Verdict(problem or "no certificate presented", now)
        try:
            ca = loaded.ca_certificate()
        except ValueError as exc:
            return _Verdict(f"the CA does not load: {exc}", now)
        return _Verdict(
            "",
            now,
            max(presented.not_valid_before_utc, ca.not_valid_before_utc).timestamp(),
            min(presented.not_valid_after_utc, ca.not_valid_after_utc).timestamp(),
        )


async def probe_tls(
    host: str, port: int, ca_pem: bytes, server_hostname: str = "localhost", limit_s: float = 3.0
) -> str:
    """Connect and handshake with a server, verifying against ``ca_pem``; ``""`` or the reason it failed.

    A diagnostic (and the tests' witness for :meth:`ServingTLS.presents_valid`); readiness
    does not connect to the server.
    """
    context = ssl.create_default_context(cadata=ca_pem.decode("ascii", "replace"))
    try:
        async with asyncio.timeout(limit_s):
            _, writer = await asyncio.open_connection(
                host, port, ssl=context, server_hostname=server_hostname
            )
    except (OSError, ssl.SSLError, TimeoutError, ValueError) as exc:
        return f"TLS handshake with {host}:{port} failed: {exc}"
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
        async with asyncio.timeout(limit_s):
            await writer.wait_closed()
    return ""


# ---- the controller ---------------------------------------------------------------------------------


@dataclass
class CertController:
    """Keeps certificates, cert directory, webhook configurations and the server in step."""

    store: CertStore
    dns_name: str
    cert_dir: Path
    tls: ServingTLS
    served_paths: Collection[str]
    target: ClientConfigTarget
    client: ApiClient | None = None
    policy: CertPolicy = field(default_factory=CertPolicy)
    resync_period: float = 60.0
    ca_overlap: float = 600.0
    mutating_name: str = MUTATING_CONFIGURATION
    validating_name: str = VALIDATING_CONFIGURATION
    clock: Callable[[], float] = time.monotonic
    initialized: asyncio.Event = field(default_factory=asyncio.Event)
    last_error: str = ""
    _previous_cas: list[tuple[bytes, float]] = field(default_factory=list)
    _wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    async def _ensure_bundle(self) -> tuple[CertBundle, bytes | None, bool]:
        """The valid bundle (renewed if needed), the CA it replaced if any, and whether it was written."""
        for _ in range(3):
            current = await self.store.read()
            renew_at = _now() + self.policy.renew_before
            if current is not None and certificate_valid(current, self.dns_name, renew_at):
                return current, None, False
            keep_ca = current is not None and ca_valid(current, _now() + self.policy.ca_renew_before)
            ca = (current.ca_cert, current.ca_key) if current is not None and keep_ca else None
            fresh = generate_bundle(self.dns_name, self.policy, ca=ca)
            try:
                stored = await self.store.write(fresh, current)
            except ConflictingWriteError as exc:
                log.info("%s; reading the certificates written by the other replica", exc)
                continue
            log.info(
                "webhook certificate for %s %s (expires %s)%s",
                self.dns_name,
                "created" if current is None else "renewed",
                stored.serving_certificate().not_valid_after_utc.isoformat(),
                "" if ca is not None else ", with a new CA",
            )
            replaced_ca = current.ca_cert if current is not None and ca is None and current.ca_cert else None
            return stored, replaced_ca, True
        raise CertError("certificates keep changing under concurrent writers")

    def ca_bundle(self, bundle: CertBundle) -> bytes:
        now = self.clock()
        self._previous_cas = [
            (ca, until) for ca, until in self._previous_cas if until > now and ca != bundle.ca_cert
        ]
        return b"".join([bundle.ca_cert, *(ca for ca, _ in self._previous_cas)])

    def _remember(self, bundle: CertBundle, replaced_ca: bytes | None) -> None:
        if replaced_ca is None and self.tls.loaded is not None and self.tls.loaded.ca_cert != bundle.ca_cert:
            replaced_ca = self.tls.loaded.ca_cert
        if replaced_ca is not None:
            self._previous_cas.append((replaced_ca, self.clock() + self.ca_overlap))

    def _serve(self, bundle: CertBundle) -> None:
        loaded = self.tls.loaded
        if loaded is not None and loaded.cert == bundle.cert and loaded.key == bundle.key:
            return
        write_cert_dir(self.cert_dir, bundle)
        self.tls.load(self.cert_dir / SERVER_CERT_KEY, self.cert_dir / SERVER_KEY_KEY, bundle)
        log.info("serving webhook certificate %x", bundle.serving_certificate().serial_number)

    async def prepare(self) -> None:
        """Ensure the certificate and load it into the server context (nothing is published yet)."""
        bundle, replaced_ca, _ = await self._ensure_bundle()
        self._remember(bundle, replaced_ca)
        self._serve(bundle)

    async def sync(self) -> bool:
        """One pass: ensure the certificate, publish the CA bundle, serve the certificate.

        A server that already serves a certificate switches only after the bundle that
        trusts the new one is published; a server that serves nothing yet starts first.
        Returns whether it wrote anything (the Secret or a webhook configuration).
        """
        bundle, replaced_ca, wrote = await self._ensure_bundle()
        self._remember(bundle, replaced_ca)
        if self.tls.loaded is None:
            self._serve(bundle)
        if self.client is not None:
            wrote = (
                await ensure_webhook_configurations(
                    self.client,
                    self.ca_bundle(bundle),
                    self.served_paths,
                    self.target,
                    mutating_name=self.mutating_name,
                    validating_name=self.validating_name,
                )
                or wrote
            )
        self._serve(bundle)
        self.last_error = ""
        self.initialized.set()
        return wrote

    def trigger(self) -> None:
        """Sync at once (the Secret or a webhook configuration was added, changed or deleted)."""
        self._wakeup.set()

    async def run(self) -> None:
        """Sync now, then every ``resync_period`` and whenever :meth:`trigger` is called.

        Failures retry with backoff. A trigger that arrives while a sync runs (its own writes
        included) gives one more sync, which finds nothing to do. Another writer that
        disagrees (a replica of another version during a rolling upgrade, a tool that keeps
        resetting the ``caBundle``) must not make the two fight in a tight loop: once
        :data:`_WRITES_BEFORE_PAUSE` syncs within the last ``resync_period`` wrote something,
        a trigger waits 1 s, then 2 s, 4 s ... (at most ``resync_period``) before its sync.
        """
        backoff = 1.0
        writes: collections.deque[float] = collections.deque()
        while True:
            # cleared before the sync: a change made while it runs is not lost
            self._wakeup.clear()
            try:
                if await self.sync():
                    writes.append(self.clock())
                backoff = 1.0
                delay = self.resync_period
            except (CertError, ApiError, ApiConnectionError, OSError, ValueError) as exc:
                self.last_error = str(exc)
                log.error("sync of webhook certificates and configurations failed: %s", exc)
                delay = backoff
                backoff = min(backoff * 2, self.resync_period)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wakeup.wait()
            while writes and writes[0] <= self.clock() - self.resync_period:
                writes.popleft()
            if self._wakeup.is_set() and len(writes) >= _WRITES_BEFORE_PAUSE:
                pause = min(2.0 ** (len(writes) - _WRITES_BEFORE_PAUSE), self.resync_period)
                log.warning(
                    "webhook certificates or configurations were rewritten %d times in %.0fs: another "
                    "writer disagrees with this replica? next sync in %.0fs",
                    len(writes),
                    self.resync_period,
                    pause,
                )
                await asyncio.sleep(pause)

    def serving_valid(self) -> str:
        """``""`` when the server presents a certificate that verifies against the current CA.

        Cheap on every call (see :meth:`ServingTLS.presents_valid`): readiness probes ask it.
        """
        if not self.initialized.is_set():
            return self.last_error or "webhook certificates are not set up yet"
        if self.tls.loaded is None or not self.tls.ready:
            return "no valid serving certificate loaded"
        return self.tls.presents_valid()
