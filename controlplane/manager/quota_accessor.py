"""The running manager's quota accessor: ElasticQuotas from the informer cache, writes to the apiserver.

Upstream's ``quotaAccessor``, behind the quota admission of ``/validate-pod``:

* quotas are looked up by name in the informer cache (indexed by name, every namespace);
* a quota this replica wrote is read from its copy of that write until the cache has
  caught up (the last 100 quotas written, compared by resourceVersion): back-to-back
  batches of one quota would otherwise read the version before their own write and
  conflict. A quota the cache does not hold yet is read from the apiserver;
* a write is a PUT on the resourceVersion that was read. On a conflict it first sleeps
  the jitter it was given (a random ``[jitter/2, jitter)``), then -- with
  ``conflict_fresh_get`` -- reads the quota from the apiserver into that copy, so the
  retry is not decided on a stale cache.

Every failure reaches the evaluator as a
:class:`~controlplane.manager.webhooks.quotaevaluate.accessor.QuotaAccessError` carrying the
apiserver's message.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from typing import Any

from controlplane.manager.webhooks.quotaevaluate.accessor import (
    QuotaAccessError,
    QuotaConflictError,
    resource_version_newer,
)
from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.errors import ApiConnectionError, ApiError, ConflictError, NotFoundError
from koordinator.kube.informer import InformerFactory
from koordinator.kube.resources import ELASTIC_QUOTAS

__all__ = ["FIELD_MANAGER", "WRITTEN_CACHE_SIZE", "ApiQuotaAccessor"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: how many written quotas are remembered (upstream's LRU size)
WRITTEN_CACHE_SIZE = 100
FIELD_MANAGER = "koord-manager"
_BY_NAME = "name"


def _by_name(obj: Obj) -> list[str]:
    name = (obj.get("metadata") or {}).get("name")
    return [str(name)] if name else []


def _not_found(name: str) -> str:
    return f'elasticquotas.scheduling.sigs.k8s.io "{name}" not found'


def _message(error: ApiError | ApiConnectionError) -> str:
    if isinstance(error, ApiError) and error.message:
        return error.message
    return str(error)


class ApiQuotaAccessor:
    """:class:`~controlplane.manager.webhooks.quotaevaluate.accessor.QuotaAccessor` over an
    informer cache registered on ``factory`` and writes through ``client``."""

    def __init__(
        self,
        client: ApiClient,
        factory: InformerFactory,
        *,
        conflict_fresh_get: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.conflict_fresh_get = conflict_fresh_get
        self.clock = clock
        self._rng = rng or random.Random()
        self._quotas = factory.informer(ELASTIC_QUOTAS).add_consumer(
            name="webhook-quota-admission", indexers={_BY_NAME: _by_name}
        )
        self._written: OrderedDict[str, Obj] = OrderedDict()

    def quotas_named(self, name: str) -> list[Obj]:
        return self._quotas.store.by_index(_BY_NAME, name)

    def _remember(self, key: str, quota: Obj) -> None:
        self._written[key] = quota
        self._written.move_to_end(key)
        while len(self._written) > WRITTEN_CACHE_SIZE:
            self._written.popitem(last=False)

    def _fresher(self, key: str, cached: Obj) -> Obj:
        """``cached``, or this replica's own later write of it."""
        written = self._written.get(key)
        if written is None:
            return cached
        if not resource_version_newer(written, cached):
            del self._written[key]
            return cached
        return written

    async def get_quota(self, namespace: str, name: str) -> Obj:
        key = f"{namespace}/{name}"
        cached = self._quotas.store.get(key)
        if cached is None:
            try:
                cached = await self.client.get(ELASTIC_QUOTAS, name, namespace)
            except NotFoundError:
                raise QuotaAccessError(_not_found(name)) from None
            except (ApiError, ApiConnectionError) as exc:
                raise QuotaAccessError(f"cannot read elastic quota {key}: {_message(exc)}") from None
        return self._fresher(key, cached)

    async def update_quota(self, quota: Obj, jitter: float) -> None:
        meta = quota.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        key = f"{namespace}/{name}"
        try:
            written = await self.client.replace(ELASTIC_QUOTAS, quota, field_manager=FIELD_MANAGER)
        except ConflictError as exc:
            await self._after_conflict(key, namespace, name, jitter)
            raise QuotaConflictError(_message(exc)) from None
        except NotFoundError:
            raise QuotaAccessError(_not_found(name)) from None
        except (ApiError, ApiConnectionError) as exc:
            raise QuotaAccessError(_message(exc)) from None
        self._remember(key, written)

    async def _after_conflict(self, key: str, namespace: str, name: str, jitter: float) -> None:
        """Spread racing replicas out, then (``conflict_fresh_get``) remember the apiserver's version."""
        if jitter > 0:
            await self.clock.sleep(jitter / 2 + self._rng.random() * jitter / 2)
        if not self.conflict_fresh_get:
            return
        try:
            fresh = await self.client.get(ELASTIC_QUOTAS, name, namespace)
        except (ApiError, ApiConnectionError) as exc:
            log.warning("cannot read elastic quota %s after a conflicting write: %s", key, exc)
            return
        self._remember(key, fresh)
