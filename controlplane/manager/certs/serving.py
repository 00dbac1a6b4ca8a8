"""The webhook server's TLS context, and the check that it presents a valid certificate.

:class:`ServingTLS` holds the server's ``SSLContext``: loading a new pair into the live
context changes what new handshakes present while open connections keep going.

Readiness asks :meth:`ServingTLS.presents_valid`: a handshake between that live context and
a client that trusts only the CA, in memory (:func:`presented_certificate`), once per loaded
certificate -- not a connection to the server's own port on every probe, which cost a full
handshake of CPU on the event loop each time. :func:`probe_tls` is the diagnostic that does
connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from controlplane.manager.certs.keys import CertBundle, CertError, utc_now

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
        return self.loaded is not None and self.not_after is not None and self.not_after > utc_now()

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
