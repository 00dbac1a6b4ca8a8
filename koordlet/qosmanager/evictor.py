"""The evictor: evicts the pods strategies chose, through the Eviction API.

* Only through ``policy/v1`` Eviction with the pod's UID as precondition, so
  PodDisruptionBudgets are honoured: a refusal is not retried and becomes a Warning event
  ``EvictPodFail`` on the pod saying why. A refused (or failed) pod is
  :meth:`Evictor.refused_lately` for ``REFUSED_SECONDS``: the strategies' next plans choose
  the next candidate instead (upstream moves on to the next candidate in the same round),
  so one pod under a PodDisruptionBudget does not keep the pressure unrelieved.
  (Upstream's default kills the containers through the CRI; this koordlet always asks the
  apiserver, which is upstream's ``--only-evict-by-api=true``.)
* Never evicts LSE, LSR or LS pods, whatever a strategy asked: those classes are what
  colocation protects.
* At most ``burst`` evictions at once and ``qps`` per second on this node; a pod evicted
  in the last five minutes is not asked again (the apiserver takes time to delete it).
* Each success is a Warning event ``EvictPodSuccess`` with the strategy's reason, and
  ``koordlet_pod_eviction{reason}`` counts it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from koordinator.kube.client import ApiClient, Preconditions
from koordinator.kube.clock import SYSTEM_CLOCK, Now
from koordinator.kube.errors import KubeError, NotFoundError, TooManyRequestsError
from koordinator.kube.events import WARNING, EventRecorder
from koordinator.kube.ratelimit import TokenBucket
from koordlet.metrics import KoordletMetrics
from koordlet.qosmanager.framework import PROTECTED, Eviction

log = logging.getLogger(__name__)

EVICT_SUCCESS = "EvictPodSuccess"
EVICT_FAIL = "EvictPodFail"
REMEMBER_SECONDS = 300.0
#: how long a pod whose eviction was refused is passed over by the strategies
REFUSED_SECONDS = 30.0
#: evictions asked at once, and per second after that, on one node
DEFAULT_BURST = 5
DEFAULT_QPS = 1.0


class Evictor:
    def __init__(
        self,
        client: ApiClient,
        metrics: KoordletMetrics,
        recorder: EventRecorder | None = None,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        clock: Now = SYSTEM_CLOCK.monotonic,
    ) -> None:
        self.client = client
        self.metrics = metrics
        self.recorder = recorder
        self.clock = clock
        self._limiter = TokenBucket(qps, burst, clock)
        self._recent: dict[str, float] = {}
        #: UID -> when its eviction was last refused or failed
        self._refusals: dict[str, float] = {}
        self.refused: list[tuple[str, str]] = []

    def refused_lately(self) -> frozenset[str]:
        """The pods whose eviction was refused or failed in the last ``REFUSED_SECONDS``."""
        now = self.clock()
        for uid in [u for u, t in self._refusals.items() if now - t > REFUSED_SECONDS]:
            del self._refusals[uid]
        return frozenset(self._refusals)

    def _remembered(self, uid: str) -> bool:
        now = self.clock()
        for key in [k for k, t in self._recent.items() if now - t > REMEMBER_SECONDS]:
            del self._recent[key]
        return uid in self._recent

    async def _event(self, eviction: Eviction, reason: str, message: str) -> None:
        if self.recorder is not None:
            await self.recorder.record(eviction.pod.pod, WARNING, reason, message)

    async def evict(self, evictions: Sequence[Eviction]) -> int:
        """Evict in order; returns how many pods the apiserver accepted to evict."""
        evicted = 0
        for eviction in evictions:
            pod = eviction.pod
            if pod.qos in PROTECTED:
                log.error("refusing to evict %s pod %s (asked by %s)", pod.qos, pod.key, eviction.feature)
                self.refused.append((pod.key, f"QoS {pod.qos} is never evicted"))
                continue
            if self._remembered(pod.uid):
                continue
            if not self._limiter.try_acquire():
                log.info("eviction rate limit reached; %s waits for the next round", pod.key)
                break
            try:
                await self.client.evict(pod.namespace, pod.name, preconditions=Preconditions(uid=pod.uid))
            except NotFoundError:
                continue
            except TooManyRequestsError as err:
                why = f"{eviction.message}; the eviction was refused: {err}"
                self._refusals[pod.uid] = self.clock()
                self.refused.append((pod.key, str(err)))
                log.warning("eviction of %s refused: %s", pod.key, err)
                await self._event(eviction, EVICT_FAIL, why)
                continue
            except KubeError as err:
                self._refusals[pod.uid] = self.clock()
                log.warning("eviction of %s failed: %s", pod.key, err)
                await self._event(eviction, EVICT_FAIL, f"{eviction.message}; the eviction failed: {err}")
                continue
            self._recent[pod.uid] = self.clock()
            self._refusals.pop(pod.uid, None)
            evicted += 1
            self.metrics.pod_eviction.labels(self.metrics.node, eviction.reason).inc()
            log.info("evicted %s: %s", pod.key, eviction.message)
            await self._event(eviction, EVICT_SUCCESS, eviction.message)
        return evicted
