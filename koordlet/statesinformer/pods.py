"""The pods informer: the node's pods as the kubelet reports them, every 10 s or sooner.

Upstream's contract: a full resync every ``--kubelet-sync-interval`` (10 s), an early one
when PLEG sees a new pod cgroup (at most 5 per second, bursts of 10), and the previous list
kept when the kubelet fails or answers with no pods at all (a restarting kubelet must not
make every pod look deleted). The first successful sync marks the informer synced; every
sync that changes the pod set or a pod's resourceVersion notifies the consumers. Each
successful sync records the containers' batch and mid resources
(:mod:`koordlet.statesinformer.resourcesummary`).

A pod whose object is equal to the one of the previous sync keeps its PodMeta (the same
object): a resync of an unchanged node resolves no cgroup directory and computes no QoS
class again, and consumers see the same PodMeta until its pod changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from koordinator.kube.ratelimit import TokenBucket
from koordlet.metrics import KoordletMetrics
from koordlet.statesinformer.podmeta import PodMeta, meta_with_uid, pod_uid
from koordlet.statesinformer.resourcesummary import record_container_resources
from koordlet.system.cgroup.layout import KubepodsLayout

log = logging.getLogger(__name__)


class PodsSource(Protocol):
    async def get_pods(self) -> list[dict[str, Any]]: ...


def _version(pod: PodMeta) -> tuple[str, str]:
    metadata = pod.pod.get("metadata") or {}
    status = pod.pod.get("status") or {}
    return str(metadata.get("resourceVersion", "")), str(status.get("phase", ""))


class PodsInformer:
    def __init__(
        self,
        source: PodsSource,
        layout: KubepodsLayout,
        *,
        interval: float = 10.0,
        on_change: Callable[[], None] | None = None,
        on_resync: Callable[[], None] | None = None,
        keep_on_empty: bool = True,
        metrics: KoordletMetrics | None = None,
    ) -> None:
        self.source = source
        self.layout = layout
        self.interval = interval
        self.on_change = on_change
        #: called after every resync, successful or not (PLEG retries its missing watches)
        self.on_resync = on_resync
        #: a kubelet answering "no pods" is restarting (keep the list); a cgroup scan is not
        self.keep_on_empty = keep_on_empty
        self.metrics = metrics
        self._pods: dict[str, PodMeta] = {}
        self._synced = asyncio.Event()
        self._wake = asyncio.Event()
        self._limiter = TokenBucket(5.0, 10)
        self.last_error: str | None = None

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def get_all_pods(self) -> list[PodMeta]:
        return list(self._pods.values())

    def get_pod(self, uid: str) -> PodMeta | None:
        return self._pods.get(uid)

    def trigger(self, reason: str = "") -> None:
        """Ask for an early resync (PLEG); rate-limited."""
        if self._limiter.try_acquire():
            log.debug("pods resync requested: %s", reason)
            self._wake.set()

    async def sync(self) -> bool:
        """One resync; False (previous list kept) when the source failed or had no pods."""
        try:
            items = await self.source.get_pods()
        except Exception as err:
            self.last_error = str(err) or type(err).__name__
            log.warning("pods sync failed, keeping %d pods: %s", len(self._pods), self.last_error)
            return False
        if not items and self.keep_on_empty:
            self.last_error = "kubelet returned no pods"
            log.info("pods sync: empty list, keeping %d pods", len(self._pods))
            return False
        pods: dict[str, PodMeta] = {}
        previous = self._pods
        for item in items:
            uid = pod_uid(item)
            if not uid:
                continue  # malformed: no UID, no cgroup
            known = previous.get(uid)
            # an equal object (compared in C, cheaper than resolving it again) keeps its meta
            meta = known if known is not None and known.pod == item else meta_with_uid(item, self.layout, uid)
            pods[uid] = meta
        changed = pods.keys() != self._pods.keys() or any(
            _version(pods[uid]) != _version(self._pods[uid]) for uid in pods
        )
        self._pods = pods
        self.last_error = None
        if self.metrics is not None:
            record_container_resources(self.metrics, pods.values())
        first = not self._synced.is_set()
        self._synced.set()
        if (changed or first) and self.on_change is not None:
            self.on_change()
        return True

    async def run(self) -> None:
        while True:
            await self.sync()
            if self.on_resync is not None:
                self.on_resync()
            self._wake.clear()
            try:
                async with asyncio.timeout(self.interval):
                    await self._wake.wait()
            except TimeoutError:
                pass
