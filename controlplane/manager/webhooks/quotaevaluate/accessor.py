"""How the quota evaluator reads ElasticQuotas and writes their ``child-request`` back.

:class:`QuotaAccessor` is the interface (upstream's ``QuotaAccessor``): look quotas up by
name, read one by ``namespace/name``, and write one back on the resourceVersion it was
read at -- a stale write raises :class:`QuotaConflictError`, which the evaluator answers
by reading the quota again and re-checking its batch. The running manager's accessor
(informer cache plus API writes) is
:class:`controlplane.manager.quota_accessor.ApiQuotaAccessor`; :class:`StaticQuotaAccessor`
serves ``koord-manager admit`` and tests from a fixed list of objects, keeping what it
writes in memory.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

__all__ = [
    "QuotaAccessError",
    "QuotaAccessor",
    "QuotaConflictError",
    "StaticQuotaAccessor",
    "resource_version_newer",
]

Obj = dict[str, Any]


class QuotaAccessError(RuntimeError):
    """A quota could not be read or written; the message says why."""


class QuotaConflictError(QuotaAccessError):
    """The quota changed since it was read (HTTP 409)."""


class QuotaAccessor(Protocol):
    def quotas_named(self, name: str) -> list[Obj]:
        """Every ElasticQuota called ``name``, in any namespace."""
        ...

    async def get_quota(self, namespace: str, name: str) -> Obj:
        """The freshest copy known; raises :class:`QuotaAccessError` when it cannot be read."""
        ...

    async def update_quota(self, quota: Obj, jitter: float) -> None:
        """Write ``quota`` back on its resourceVersion.

        Raises :class:`QuotaConflictError` when it changed meanwhile (after sleeping a random
        time in ``[jitter/2, jitter)`` when ``jitter`` is positive, so replicas racing for one
        quota spread out) and :class:`QuotaAccessError` for any other failure.
        """
        ...


def _resource_version(obj: Mapping[str, Any]) -> int | None:
    raw = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(raw))
    except ValueError:
        return None


def resource_version_newer(candidate: Mapping[str, Any], than: Mapping[str, Any]) -> bool:
    """Whether ``candidate`` is a later version than ``than`` (etcd versions compare as integers;
    versions that are not integers are never newer)."""
    mine, theirs = _resource_version(candidate), _resource_version(than)
    return mine is not None and theirs is not None and mine > theirs


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class StaticQuotaAccessor:
    """Quotas from a fixed list of objects; writes bump the resourceVersion in memory."""

    def __init__(self, quotas: Iterable[Mapping[str, Any]]) -> None:
        self._quotas: dict[str, Obj] = {}
        self._version = 0
        for quota in quotas:
            meta = _meta(quota)
            stored = copy.deepcopy(dict(quota))
            stored.setdefault("metadata", {}).setdefault("resourceVersion", "1")
            self._quotas[_key(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = stored
            self._version = max(self._version, _resource_version(stored) or 0)

    def quotas_named(self, name: str) -> list[Obj]:
        return [copy.deepcopy(q) for q in self._quotas.values() if _meta(q).get("name") == name]

    async def get_quota(self, namespace: str, name: str) -> Obj:
        quota = self._quotas.get(_key(namespace, name))
        if quota is None:
            raise QuotaAccessError(f'elasticquotas.scheduling.sigs.k8s.io "{name}" not found')
        return copy.deepcopy(quota)

    async def update_quota(self, quota: Obj, jitter: float) -> None:
        meta = _meta(quota)
        name = str(meta.get("name") or "")
        key = _key(str(meta.get("namespace") or ""), name)
        stored = self._quotas.get(key)
        if stored is None:
            raise QuotaAccessError(f'elasticquotas.scheduling.sigs.k8s.io "{name}" not found')
        if str(_meta(stored).get("resourceVersion")) != str(meta.get("resourceVersion")):
            raise QuotaConflictError(
                f'Operation cannot be fulfilled on elasticquotas.scheduling.sigs.k8s.io "{name}": '
                "the object has been modified; please apply your changes to the latest version and try again"
            )
        self._version += 1
        written = copy.deepcopy(quota)
        written["metadata"]["resourceVersion"] = str(self._version)
        self._quotas[key] = written
