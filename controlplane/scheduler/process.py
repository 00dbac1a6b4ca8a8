"""The koord-scheduler process: credentials, informers, the secure health and metrics port,
leader election, and the scheduler loop on the leader only.

* **Serving** (``--secure-port``, 10259; ``--bind-address``): HTTPS with
  ``--tls-cert-file``/``--tls-private-key-file``, else a self-signed certificate made at
  start (as kube-scheduler does); ``/healthz``, ``/readyz`` (informers synced) and
  ``/metrics`` with kube-scheduler's metric names. ``--secure-port=0`` serves nothing.
* **Leader election** (``--leader-elect``, on by default) on the Lease
  ``koordinator-system/koord-scheduler``: only the leader schedules, and its writes are
  fenced by the lease (none once it may have lapsed). A replica that loses the lease exits
  with status 1, as kube-scheduler does, and its pod restarts to contend again; standby
  replicas keep their informers synced so that a new leader starts at once.
"""

from __future__ import annotations

import logging
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from controlplane.reactor.leading import (
    SyncError,
    default_identity,
    informers_ready,
    lease_elector,
    sync_then_lead,
)
from controlplane.reactor.serving import (
    SiteSpec,
    metrics_app,
    ok,
    readiness_handler,
    self_signed_context,
    start_site,
)
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.metrics import SchedulerMetrics
from controlplane.scheduler.scheduler import Scheduler
from koordinator.cli import cannot_listen
from koordinator.kube.client import ApiClient
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.leaderelection import LeaderElector
from koordinator.metrics.exposition import render_python_client

log = logging.getLogger(__name__)

COMPONENT = "koord-scheduler"
LEASE_NAMESPACE = "koordinator-system"
LEASE_NAME = "koord-scheduler"


class ProcessError(RuntimeError):
    """The scheduler could not start or had to stop (exit status 1)."""


@dataclass(frozen=True)
class ProcessOptions:
    leader_elect: bool = True
    lease_namespace: str = LEASE_NAMESPACE
    lease_name: str = LEASE_NAME
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    bind_address: str = "0.0.0.0"
    secure_port: int = 10259
    tls_cert_file: str | None = None
    tls_private_key_file: str | None = None
    cache_sync_timeout_s: float = 120.0
    identity: str = ""


class SchedulerProcess:
    def __init__(self, client: ApiClient, config: SchedulerConfig, options: ProcessOptions) -> None:
        self.client = client
        self.config = config
        self.options = options
        self.identity = options.identity or default_identity()
        self.metrics = SchedulerMetrics()
        self.elector: LeaderElector | None = None
        writer = client
        if options.leader_elect:
            self.elector = lease_elector(client, options, self.identity, self._lead, self._stopped_leading)
            writer = client.with_write_guard(self.elector.check_lease)
        self.factory = InformerFactory(client)
        self.scheduler = Scheduler(
            writer, config, recorder=EventRecorder(writer, COMPONENT, self.identity), metrics=self.metrics
        )
        self.scheduler.attach(self.factory)
        self._sites: list[SiteSpec] = []

    def _tls(self) -> ssl.SSLContext:
        options = self.options
        if options.tls_cert_file and options.tls_private_key_file:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            try:
                context.load_cert_chain(Path(options.tls_cert_file), Path(options.tls_private_key_file))
            except (OSError, ssl.SSLError) as err:
                raise ProcessError(f"cannot load --tls-cert-file/--tls-private-key-file: {err}") from None
            return context
        return self_signed_context(["localhost", "127.0.0.1", socket.gethostname()])

    async def serve(self) -> None:
        """Start the secure port (health, readiness, metrics)."""
        options = self.options
        if options.secure_port == 0:
            return
        app = metrics_app(self.metrics.registry, render_python_client)
        app.router.add_get("/healthz", ok)
        app.router.add_get("/readyz", readiness_handler(informers_ready(self.factory)))
        try:
            self._sites.append(await start_site(app, options.bind_address, options.secure_port, self._tls()))
        except OSError as err:
            raise ProcessError(
                f"{cannot_listen(options.bind_address, options.secure_port, err)} (set --secure-port)"
            ) from None

    def _stopped_leading(self) -> None:
        self.metrics.is_leader.labels(self.options.lease_name).set(0)

    async def _lead(self) -> None:
        self.metrics.is_leader.labels(self.options.lease_name).set(1)
        log.info("leading: scheduling starts")
        await self.scheduler.run()

    async def run(self) -> int:
        """Serve, sync, then schedule (as the leader); returns the exit status."""
        await self.serve()
        options = self.options
        try:
            return await sync_then_lead(
                self.factory,
                options.cache_sync_timeout_s,
                self.elector,
                self._lead,
                f"{options.lease_namespace}/{options.lease_name}",
                self.identity,
            )
        except SyncError as err:
            raise ProcessError(str(err)) from None

    async def stop(self) -> None:
        await self.factory.stop()
        for site in self._sites:
            await site.stop()
        await self.scheduler.drain()
