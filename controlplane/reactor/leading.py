"""How a control-plane process leads: its identity and Lease elector (:func:`lease_elector`),
readiness from its informers (:func:`informers_ready`), and the last step of its start,
informers synced, then its work on the replica holding the Lease (or at once without
leader election).

:func:`sync_then_lead` starts the informers, waits for their first LIST (bounded), and
runs ``lead`` -- directly, or as the elector's leading callback while it holds the lease.
It returns the exit status: 0 when the work ended on its own, 1 when the lease was lost
(the replica exits and restarts to contend again, as kube-scheduler does).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

from koordinator.kube.client import ApiClient
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.leaderelection import LeaderElectionConfig, LeaderElector

__all__ = [
    "EXIT_LOST_LEASE",
    "LeaseSettings",
    "SyncError",
    "announce_leader",
    "default_identity",
    "informers_ready",
    "lease_elector",
    "sync_then_lead",
]

log = logging.getLogger(__name__)

EXIT_LOST_LEASE = 1


class SyncError(RuntimeError):
    """The informers did not sync in time."""


class LeaseSettings(Protocol):
    """The leader-election options a process takes (``--leader-elect*``)."""

    @property
    def lease_namespace(self) -> str: ...
    @property
    def lease_name(self) -> str: ...
    @property
    def lease_duration_s(self) -> float: ...
    @property
    def renew_deadline_s(self) -> float: ...
    @property
    def retry_period_s(self) -> float: ...


def default_identity() -> str:
    """A replica's identity when none is given: the host name and a UUID, as client-go's."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def lease_elector(
    client: ApiClient,
    settings: LeaseSettings,
    identity: str,
    lead: Callable[[], Awaitable[None]],
    stopped: Callable[[], None],
) -> LeaderElector:
    """The elector of the process's Lease: ``lead`` runs while it holds it, ``stopped`` once
    it no longer does; new leaders are logged."""
    return LeaderElector(
        client,
        LeaderElectionConfig(
            namespace=settings.lease_namespace,
            name=settings.lease_name,
            identity=identity,
            lease_duration=settings.lease_duration_s,
            renew_deadline=settings.renew_deadline_s,
            retry_period=settings.retry_period_s,
        ),
        on_started_leading=lead,
        on_stopped_leading=stopped,
        on_new_leader=announce_leader(identity),
    )


def informers_ready(factory: InformerFactory) -> Callable[[], Awaitable[str]]:
    """A readiness check: "" once every informer synced, else why not."""

    async def ready() -> str:
        return "" if all(i.has_synced for i in factory.informers) else "informer caches not synced"

    return ready


def announce_leader(own_identity: str) -> Callable[[str], None]:
    """An ``on_new_leader`` callback that logs who leads."""

    def announce(identity: str) -> None:
        log.info("the leader is %s%s", identity, " (this replica)" if identity == own_identity else "")

    return announce


async def sync_then_lead(
    factory: InformerFactory,
    sync_timeout_s: float,
    elector: LeaderElector | None,
    lead: Callable[[], Awaitable[None]],
    lease: str,
    identity: str,
) -> int:
    """Start and sync the informers, then lead (``lead`` is the elector's leading callback
    when there is one); the exit status."""
    factory.start()
    try:
        async with asyncio.timeout(sync_timeout_s):
            await factory.wait_for_sync()
    except TimeoutError:
        raise SyncError(f"informer caches did not sync within {sync_timeout_s:.0f}s") from None
    if elector is None:
        await lead()
        return 0
    log.info("contending for the lease %s as %s", lease, identity)
    await elector.run()
    log.error("leaderelection lost: %s", lease)
    return EXIT_LOST_LEASE
