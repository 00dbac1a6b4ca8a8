"""The koord-descheduler process: informers, the health and metrics port, leader election,
and the descheduler (rounds and migration controller) on the leader only.

* **Serving**: ``healthzBindAddress`` and ``metricsBindAddress`` (both ``0.0.0.0:10251`` by
  default, one listener when equal) over plain HTTP as upstream: ``/healthz``, ``/readyz``
  (informers synced) and ``/metrics``. A port of 0 serves nothing.
* **Leader election** (on by default) on the Lease ``koordinator-system/koord-descheduler``:
  only the leader deschedules and its writes are fenced by the lease. A replica that loses
  the lease exits 1 and restarts to contend again; standbys keep their informers synced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web

from controlplane.descheduler.config import DeschedulerConfig
from controlplane.descheduler.descheduler import Descheduler
from controlplane.descheduler.metrics import DeschedulerMetrics
from controlplane.reactor.leading import (
    SyncError,
    default_identity,
    informers_ready,
    lease_elector,
    sync_then_lead,
)
from controlplane.reactor.serving import SiteSpec, metrics_app, ok, readiness_handler, start_site
from koordinator.cli import (
    LEASE_DURATION_S,
    RENEW_DEADLINE_S,
    RETRY_PERIOD_S,
    cannot_listen,
    parse_address,
)
from koordinator.kube.client import ApiClient
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.leaderelection import LeaderElector
from koordinator.metrics.exposition import render_python_client

__all__ = ["COMPONENT", "DeschedulerProcess", "ProcessError", "ProcessOptions"]

log = logging.getLogger(__name__)

COMPONENT = "koord-descheduler"
LEASE_NAMESPACE = "koordinator-system"
LEASE_NAME = "koord-descheduler"


class ProcessError(RuntimeError):
    """The descheduler could not start (exit status 1)."""


@dataclass(frozen=True)
class ProcessOptions:
    leader_elect: bool = True
    lease_namespace: str = LEASE_NAMESPACE
    lease_name: str = LEASE_NAME
    lease_duration_s: float = LEASE_DURATION_S
    renew_deadline_s: float = RENEW_DEADLINE_S
    retry_period_s: float = RETRY_PERIOD_S
    cache_sync_timeout_s: float = 120.0
    identity: str = ""


class DeschedulerProcess:
    def __init__(self, client: ApiClient, config: DeschedulerConfig, options: ProcessOptions) -> None:
        self.client = client
        self.config = config
        self.options = options
        self.identity = options.identity or default_identity()
        self.metrics = DeschedulerMetrics()
        self.elector: LeaderElector | None = None
        writer = client
        if options.leader_elect:
            self.elector = lease_elector(client, options, self.identity, self._lead, self._stopped_leading)
            writer = client.with_write_guard(self.elector.check_lease)
        self.factory = InformerFactory(client)
        self.descheduler = Descheduler(
            config,
            writer,
            self.factory,
            recorder=EventRecorder(writer, COMPONENT, self.identity),
            metrics=self.metrics,
        )
        self._sites: list[SiteSpec] = []

    async def serve(self) -> None:
        """Start the health and metrics listener(s)."""
        health = parse_address(self.config.healthz_bind_address)
        metrics = parse_address(self.config.metrics_bind_address)
        apps: dict[tuple[str, int], web.Application] = {}
        if metrics[1]:
            apps[metrics] = metrics_app(self.metrics.registry, render_python_client)
        if health[1]:
            app = apps.setdefault(health, web.Application())
            app.router.add_get("/healthz", ok)
            app.router.add_get("/readyz", readiness_handler(informers_ready(self.factory)))
        for (host, port), app in apps.items():
            try:
                self._sites.append(await start_site(app, host, port))
            except OSError as err:
                raise ProcessError(cannot_listen(host, port, err)) from None

    def _stopped_leading(self) -> None:
        self.metrics.is_leader.labels(self.options.lease_name).set(0)

    async def _lead(self) -> None:
        self.metrics.is_leader.labels(self.options.lease_name).set(1)
        log.info("leading: descheduling starts")
        await self.descheduler.run()

    async def run(self) -> int:
        """Serve, sync, then deschedule (as the leader); returns the exit status."""
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
