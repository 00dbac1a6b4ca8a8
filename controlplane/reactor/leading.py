"""The last step of a control-plane process's start: informers synced, then its work on the
replica holding the Lease (or at once without leader election).

:func:`sync_then_lead` starts the informers, waits for their first LIST (bounded), and
runs ``lead`` -- directly, or as the elector's leading callback while it holds the lease.
It returns the exit status: 0 when the work ended on its own, 1 when the lease was lost
(the replica exits and restarts to contend again, as kube-scheduler does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.leaderelection import LeaderElector

__all__ = ["EXIT_LOST_LEASE", "SyncError", "announce_leader", "sync_then_lead"]

log = logging.getLogger(__name__)

EXIT_LOST_LEASE = 1


class SyncError(RuntimeError):
    """The informers did not sync in time."""


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
