"""What koord-scheduler and koord-descheduler share as processes: an identity, the Lease
elector and the writer it fences, the informer factory, the is-leader gauge, and the
start and stop around their work.

A component subclasses :class:`LeadingProcess`: it builds its metrics, calls
``LeadingProcess.__init__`` with their is-leader gauge, then builds its work over
:attr:`~LeadingProcess.writer` (the client, fenced by the lease under leader election:
no write once it may have lapsed) and :attr:`~LeadingProcess.factory`. It starts its
ports in :meth:`~LeadingProcess.serve` and does its work in
:meth:`~LeadingProcess.work`, which runs once the informers synced, on the replica
holding the Lease (at once without leader election). :meth:`~LeadingProcess.run`
returns the exit status (1 once the lease is lost: the replica restarts to contend
again); :meth:`~LeadingProcess.stop` stops the informers and the ports, then
:meth:`~LeadingProcess.drain` lets the work finish what it started.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Generic, Protocol, TypeVar

from aiohttp import web
from prometheus_client import Gauge

from controlplane.reactor.leading import (
    LeaseSettings,
    SyncError,
    default_identity,
    informers_ready,
    lease_elector,
    sync_then_lead,
)
from controlplane.reactor.serving import SiteSpec, ok, readiness_handler
from koordinator.kube.client import ApiClient
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.leaderelection import LeaderElector

__all__ = ["LeadingOptions", "LeadingProcess", "ProcessError"]

log = logging.getLogger(__name__)


class ProcessError(RuntimeError):
    """The process could not start or had to stop (exit status 1)."""


class LeadingOptions(LeaseSettings, Protocol):
    """The options :class:`LeadingProcess` reads (``--leader-elect*`` and the sync bound)."""

    @property
    def leader_elect(self) -> bool: ...
    @property
    def cache_sync_timeout_s(self) -> float: ...
    @property
    def identity(self) -> str: ...


Options = TypeVar("Options", bound=LeadingOptions)


class LeadingProcess(ABC, Generic[Options]):
    #: what the log says this replica starts once it leads ("scheduling", "descheduling")
    WORK = ""

    def __init__(self, client: ApiClient, options: Options, is_leader: Gauge) -> None:
        self.client = client
        self.options = options
        self.identity = options.identity or default_identity()
        self._is_leader = is_leader
        self.elector: LeaderElector | None = None
        #: what the work writes with
        self.writer = client
        if options.leader_elect:
            self.elector = lease_elector(client, options, self.identity, self._lead, self._stopped_leading)
            self.writer = client.with_write_guard(self.elector.check_lease)
        self.factory = InformerFactory(client)
        self._sites: list[SiteSpec] = []

    @abstractmethod
    async def serve(self) -> None:
        """Start the component's ports (appending them to ``_sites``)."""

    def add_health(self, app: web.Application) -> None:
        """``/healthz`` (the process is up) and ``/readyz`` (every informer synced)."""
        app.router.add_get("/healthz", ok)
        app.router.add_get("/readyz", readiness_handler(informers_ready(self.factory)))

    @abstractmethod
    async def work(self) -> None:
        """The component's work, while leading."""

    async def drain(self) -> None:
        """After the informers and ports stopped: let the work finish what it started."""

    def _stopped_leading(self) -> None:
        self._is_leader.labels(self.options.lease_name).set(0)

    async def _lead(self) -> None:
        self._is_leader.labels(self.options.lease_name).set(1)
        log.info("leading: %s starts", self.WORK)
        await self.work()

    async def run(self) -> int:
        """Serve, sync, then do the work (as the leader); returns the exit status."""
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
        await self.drain()
