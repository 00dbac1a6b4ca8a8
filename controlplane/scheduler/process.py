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

import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from controlplane.reactor.process import LeadingProcess, ProcessError
from controlplane.reactor.serving import metrics_app, self_signed_context, start_site
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.metrics import SchedulerMetrics
from controlplane.scheduler.scheduler import Scheduler
from koordinator.cli import cannot_listen
from koordinator.kube.client import ApiClient
from koordinator.kube.events import EventRecorder
from koordinator.metrics.exposition import render_python_client

__all__ = ["COMPONENT", "ProcessError", "ProcessOptions", "SchedulerProcess"]

COMPONENT = "koord-scheduler"
LEASE_NAMESPACE = "koordinator-system"
LEASE_NAME = "koord-scheduler"


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


class SchedulerProcess(LeadingProcess[ProcessOptions]):
    WORK = "scheduling"

    def __init__(self, client: ApiClient, config: SchedulerConfig, options: ProcessOptions) -> None:
        self.config = config
        self.metrics = SchedulerMetrics()
        super().__init__(client, options, self.metrics.is_leader)
        self.scheduler = Scheduler(
            self.writer,
            config,
            recorder=EventRecorder(self.writer, COMPONENT, self.identity),
            metrics=self.metrics,
        )
        self.scheduler.attach(self.factory)

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
        self.add_health(app)
        try:
            self._sites.append(await start_site(app, options.bind_address, options.secure_port, self._tls()))
        except OSError as err:
            raise ProcessError(
                f"{cannot_listen(options.bind_address, options.secure_port, err)} (set --secure-port)"
            ) from None

    async def work(self) -> None:
        await self.scheduler.run()

    async def drain(self) -> None:
        await self.scheduler.drain()
