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

from dataclasses import dataclass

from aiohttp import web

from controlplane.descheduler.config import DeschedulerConfig
from controlplane.descheduler.descheduler import Descheduler
from controlplane.descheduler.metrics import DeschedulerMetrics
from controlplane.reactor.process import LeadingProcess, ProcessError
from controlplane.reactor.serving import metrics_app, start_site
from koordinator.cli import (
    LEASE_DURATION_S,
    RENEW_DEADLINE_S,
    RETRY_PERIOD_S,
    cannot_listen,
    parse_address,
)
from koordinator.kube.client import ApiClient
from koordinator.kube.events import EventRecorder
from koordinator.metrics.exposition import render_python_client

__all__ = ["COMPONENT", "DeschedulerProcess", "ProcessError", "ProcessOptions"]

COMPONENT = "koord-descheduler"
LEASE_NAMESPACE = "koordinator-system"
LEASE_NAME = "koord-descheduler"


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


class DeschedulerProcess(LeadingProcess[ProcessOptions]):
    WORK = "descheduling"

    def __init__(self, client: ApiClient, config: DeschedulerConfig, options: ProcessOptions) -> None:
        self.config = config
        self.metrics = DeschedulerMetrics()
        super().__init__(client, options, self.metrics.is_leader)
        self.descheduler = Descheduler(
            config,
            self.writer,
            self.factory,
            recorder=EventRecorder(self.writer, COMPONENT, self.identity),
            metrics=self.metrics,
        )

    async def serve(self) -> None:
        """Start the health and metrics listener(s)."""
        health = parse_address(self.config.healthz_bind_address)
        metrics = parse_address(self.config.metrics_bind_address)
        apps: dict[tuple[str, int], web.Application] = {}
        if metrics[1]:
            apps[metrics] = metrics_app(self.metrics.registry, render_python_client)
        if health[1]:
            app = apps.setdefault(health, web.Application())
            self.add_health(app)
        for (host, port), app in apps.items():
            try:
                self._sites.append(await start_site(app, host, port))
            except OSError as err:
                raise ProcessError(cannot_listen(host, port, err)) from None

    async def work(self) -> None:
        await self.descheduler.run()
