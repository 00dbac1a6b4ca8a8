"""The certificate controller: certificates, cert directory, webhook configurations and server in step.

Upstream's ``pkg/webhook/util/controller``. :class:`CertController` checks the certificate
at start, every minute, and at once when the Secret or a webhook configuration is added,
changed or deleted (the manager's informers call :meth:`CertController.trigger`): it is
renewed when it no longer verifies for the DNS name against the CA ``renew_before`` from
now (the CA itself is renewed when it expires within a year); then it writes the files to
the cert directory, patches the ``caBundle`` and reloads the server. When the CA changes,
the bundle carries the old and the new CA for ``ca_overlap`` seconds and is patched
*before* the server switches certificates, so the apiserver trusts both sides of the
switch.

Readiness (:meth:`CertController.serving_valid`) needs one successful sync and the server's
TLS context presenting a certificate that verifies against the current CA
(:meth:`ServingTLS.presents_valid`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.manager.certs.configurations import (
    MUTATING_CONFIGURATION,
    VALIDATING_CONFIGURATION,
    ClientConfigTarget,
    ensure_webhook_configurations,
)
from controlplane.manager.certs.keys import (
    SERVER_CERT_KEY,
    SERVER_KEY_KEY,
    CertBundle,
    CertError,
    CertPolicy,
    ca_valid,
    certificate_valid,
    generate_bundle,
    utc_now,
)
from controlplane.manager.certs.serving import ServingTLS
from controlplane.manager.certs.store import CertStore, ConflictingWriteError, write_cert_dir
from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Now
from koordinator.kube.errors import ApiConnectionError, ApiError

log = logging.getLogger(__name__)

#: Syncs that wrote something within one resync period before a trigger waits (see
#: :meth:`CertController.run`).
_WRITES_BEFORE_PAUSE = 3


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
    clock: Now = SYSTEM_CLOCK.monotonic
    initialized: asyncio.Event = field(default_factory=asyncio.Event)
    last_error: str = ""
    _previous_cas: list[tuple[bytes, float]] = field(default_factory=list)
    _wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    async def _ensure_bundle(self) -> tuple[CertBundle, bytes | None, bool]:
        """The valid bundle (renewed if needed), the CA it replaced if any, and whether it was written."""
        for _ in range(3):
            current = await self.store.read()
            renew_at = utc_now() + self.policy.renew_before
            if current is not None and certificate_valid(current, self.dns_name, renew_at):
                return current, None, False
            keep_ca = current is not None and ca_valid(current, utc_now() + self.policy.ca_renew_before)
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
