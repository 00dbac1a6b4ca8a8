"""Key material of the webhook server: the CA, the serving certificate, and their checks.

Upstream's ``pkg/webhook/util/generator``: :func:`generate_ca` and
:func:`issue_serving_certificate` create an ECDSA P-256 CA (CN ``webhook-cert-ca``) and a
serving certificate for ``localhost`` and the webhook's DNS name
(``<service>.<namespace>.svc``, or ``WEBHOOK_HOST``, which may be an IP), PEM-encoded in a
:class:`CertBundle`; :func:`certificate_valid` and :func:`ca_valid` decide when the
controller renews them. Also the key names the stores use (upstream's).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_KEY_KEY = "ca-key.pem"
CA_CERT_KEY = "ca-cert.pem"
SERVER_KEY_KEY = "key.pem"
SERVER_KEY_KEY2 = "tls.key"
SERVER_CERT_KEY = "cert.pem"
SERVER_CERT_KEY2 = "tls.crt"
CA_COMMON_NAME = "webhook-cert-ca"
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


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def generate_ca(
    now: datetime.datetime | None = None, validity: datetime.timedelta = CertPolicy.ca_validity
) -> tuple[bytes, bytes]:
    """A self-signed CA: ``(cert_pem, key_pem)``."""
    start = (now or utc_now()) - datetime.timedelta(minutes=5)
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
    start = (now or utc_now()) - datetime.timedelta(minutes=5)
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
    when = at or utc_now()
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
    now = utc_now()
    return (
        cert.not_valid_before_utc <= now and cert.not_valid_after_utc > when and ca.not_valid_after_utc > when
    )
