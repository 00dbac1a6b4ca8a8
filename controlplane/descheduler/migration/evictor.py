"""Eviction policies (upstream's ``migration/evictor``) behind one token bucket.

* ``Eviction``: the ``policy/v1`` Eviction subresource with the job's delete options
  (PodDisruptionBudgets hold);
* ``Delete``: a plain DELETE with them;
* ``SoftEviction``: nothing is deleted; the pod gets the
  ``scheduling.koordinator.sh/soft-eviction`` annotation (``{timestamp, deleteOptions,
  initiator, reason}``) for another agent to act on.

The pod's ``koordinator.sh/evict-policy`` label, else the job's, overrides the configured
policy (an unknown value keeps it). Evictions are rate-limited by ``evictQPS``/``evictBurst``:
with no token left, :class:`TooManyEvictionsError` is raised and the job tries again later.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from controlplane.descheduler.migration.args import (
    EVICTION_POLICIES,
    POLICY_DELETE,
    POLICY_SOFT_EVICTION,
)
from koordinator.api.extension.constants import LABEL_EVICT_POLICY
from koordinator.api.extension.scheduling import ANNOTATION_SOFT_EVICTION
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient, PatchType
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.timeutil import format_time

__all__ = ["Evictor", "TooManyEvictionsError", "policy_for"]

Obj = Mapping[str, Any]


class TooManyEvictionsError(RuntimeError):
    """No eviction token is left (``evictQPS``/``evictBurst``)."""


def policy_for(pod: Obj, job: Obj, default: str) -> str:
    for obj in (pod, job):
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_EVICT_POLICY)
        if value:
            return value if value in EVICTION_POLICIES else default
    return default


class Evictor:
    def __init__(self, client: ApiClient, qps: float, burst: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self.client = client
        self.qps = qps
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._stamp = clock.monotonic()

    def _take(self) -> None:
        now = self.clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
        if self._tokens < 1.0:
            raise TooManyEvictionsError("too many evictions: no token left (evictQPS/evictBurst)")
        self._tokens -= 1.0

    @property
    def retry_after_s(self) -> float:
        return 1.0 / self.qps

    async def evict(
        self, pod: Obj, policy: str, delete_options: Obj | None, initiator: str, reason: str
    ) -> None:
        """Evict ``pod`` by ``policy``; raises TooManyEvictionsError or the apiserver's error."""
        self._take()
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        name = str(meta.get("name") or "")
        options = dict(delete_options or {})
        if policy == POLICY_SOFT_EVICTION:
            soft = {
                "timestamp": format_time(self.clock.time()),
                "deleteOptions": options or None,
                "initiator": initiator,
                "reason": reason or initiator or "NotSet",
            }
            patch = {"metadata": {"annotations": {ANNOTATION_SOFT_EVICTION: json.dumps(soft)}}}
            await self.client.patch(res.PODS, name, patch, namespace, patch_type=PatchType.MERGE)
        elif policy == POLICY_DELETE:
            await self.client.request(
                "DELETE",
                res.PODS.path(namespace, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", **options},
            )
        else:
            body: dict[str, Any] = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
            }
            if options:
                body["deleteOptions"] = options
            await self.client.create_subresource(res.PODS, name, "eviction", body, namespace, retry_pdb=False)
