"""Certificates and keys for a throw-away control plane.

One self-signed CA signs the apiserver's serving certificate (valid for the loopback
addresses and the in-cluster service names) and an admin client certificate in the
``system:masters`` group; a separate key pair signs service-account tokens. Everything is
written as PEM files into one directory.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=7)
SERVING_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVING_IPS = ("127.0.0.1", "::1", "10.96.0.1")
ADMIN_USER = "koordinator-envtest-admin"


@dataclass(frozen=True)
class Credentials:
    """Paths of the PEM files a control plane needs."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public_key: Path
    sa_private_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def generate_credentials(directory: Path, extra_serving_ips: Sequence[str] = ()) -> Credentials:
    """Write a CA, serving and admin certificates and service-account keys into ``directory``;
    the serving certificate is valid for ``extra_serving_ips`` too."""
    directory.mkdir(parents=True, exist_ok=True)
    creds = Credentials(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_public_key=directory / "sa.pub",
        sa_private_key=directory / "sa.key",
    )
    ca_key = _key()
    ca_name = _name("koordinator-envtest-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(creds.ca_key, ca_key)
    _write_cert(creds.ca_cert, ca_cert)

    serving_key = _key()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVING_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in (*SERVING_IPS, *extra_serving_ips)]
    serving = (
        _builder(_name("kube-apiserver"), ca_name, serving_key)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(creds.serving_key, serving_key)
    _write_cert(creds.serving_cert, serving)

    _client(ca_cert, ca_key, ADMIN_USER, "system:masters", creds.admin_cert, creds.admin_key)

    sa_key = _key()
    _write_key(creds.sa_private_key, sa_key)
    creds.sa_public_key.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return creds


def _client(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    user: str,
    group: str | None,
    cert_path: Path,
    key_path: Path,
) -> None:
    key = _key()
    cert = (
        _builder(_name(user, group), ca_cert.subject, key)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(key_path, key)
    _write_cert(cert_path, cert)


def client_certificate(creds: Credentials, user: str, group: str | None, stem: Path) -> tuple[Path, Path]:
    """A client certificate for ``user`` (CN) in ``group`` (O), signed by the control plane's
    CA: written to ``<stem>.crt`` and ``<stem>.key``, whose paths are returned."""
    ca_key = serialization.load_pem_private_key(creds.ca_key.read_bytes(), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{creds.ca_key}: not an EC private key")
    ca_cert = x509.load_pem_x509_certificate(creds.ca_cert.read_bytes())
    cert_path, key_path = stem.with_suffix(".crt"), stem.with_suffix(".key")
    _client(ca_cert, ca_key, user, group, cert_path, key_path)
    return cert_path, key_path
