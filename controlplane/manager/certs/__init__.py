"""Self-managed TLS of the webhook server: CA and serving certificate, Secret, caBundle, rotation.

The kube-apiserver calls webhooks over HTTPS and trusts the ``caBundle`` of the webhook
configurations. koord-manager runs its own small CA, as upstream does (``pkg/webhook/util``).
One module per role:

* :mod:`.keys` -- :func:`generate_ca` / :func:`issue_serving_certificate` create an ECDSA
  P-256 CA (CN ``webhook-cert-ca``) and a serving certificate for ``localhost`` and the
  webhook's DNS name (``<service>.<namespace>.svc``, or ``WEBHOOK_HOST``, which may be an
  IP); :func:`certificate_valid` says when they must be renewed;
* :mod:`.store` -- :class:`SecretCertStore` keeps them in the Secret
  ``koordinator-webhook-certs`` under upstream's keys (``ca-cert.pem``, ``ca-key.pem``,
  ``cert.pem``/``tls.crt``, ``key.pem``/``tls.key``), so every replica serves the same
  certificate; :class:`DirectoryCertStore` is the ``WEBHOOK_CERT_WRITER=fs`` variant;
* :mod:`.configurations` -- :func:`ensure_webhook_configurations` writes the CA into every
  webhook of ``koordinator-mutating-webhook-configuration`` and
  ``koordinator-validating-webhook-configuration``, keeping the original list in the
  ``template`` annotation and dropping the webhooks whose path is not served (their gate
  is off), and points them at ``https://WEBHOOK_HOST:PORT/path`` when a host is set;
* :mod:`.serving` -- :class:`ServingTLS` holds the server's ``SSLContext``: loading a new
  pair into the live context changes what new handshakes present while open connections
  keep going;
* :mod:`.controller` -- :class:`CertController` ties it together: at start, every minute,
  and at once when the Secret or a webhook configuration is added, changed or deleted (the
  manager's informers call :meth:`CertController.trigger`) it checks the certificate -- it
  is renewed when it no longer verifies for the DNS name against the CA ``renew_before``
  from now (the CA itself is renewed when it expires within a year) -- writes the files to
  the cert directory, patches the ``caBundle`` and reloads the server. When the CA changes,
  the bundle carries the old and the new CA for ``ca_overlap`` seconds and is patched
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

from controlplane.manager.certs.configurations import (
    MUTATING_CONFIGURATION,
    VALIDATING_CONFIGURATION,
    ClientConfigTarget,
    ensure_webhook_configurations,
)
from controlplane.manager.certs.controller import CertController
from controlplane.manager.certs.keys import (
    CA_CERT_KEY,
    CA_KEY_KEY,
    CertBundle,
    CertError,
    CertPolicy,
    certificate_valid,
    generate_bundle,
    generate_ca,
    issue_serving_certificate,
    service_dns_name,
)
from controlplane.manager.certs.serving import ServingTLS, probe_tls
from controlplane.manager.certs.store import CertStore, DirectoryCertStore, SecretCertStore, write_cert_dir

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
    "ClientConfigTarget",
    "DirectoryCertStore",
    "SecretCertStore",
    "ServingTLS",
    "certificate_valid",
    "ensure_webhook_configurations",
    "generate_bundle",
    "generate_ca",
    "issue_serving_certificate",
    "probe_tls",
    "service_dns_name",
    "write_cert_dir",
]
