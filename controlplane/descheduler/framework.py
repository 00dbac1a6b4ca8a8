"""The descheduling framework: profiles of plug-ins at four extension points, the handle
plug-ins read the cluster through, and the evictor they evict through.

* **Deschedule** and **Balance** plug-ins run once per round (``deschedulingInterval``), in
  profile order, deschedule before balance; each gets the round's nodes.
* **Filter** plug-ins say whether a pod may be evicted at all; **Evict** (the first enabled
  one) does the eviction -- MigrationController, which creates a PodMigrationJob.
* :class:`EvictionLimiter` is the framework's own cap per round: ``maxNoOfPodsToEvictPerNode``,
  ``...PerNamespace`` and ``...Total`` (``evictions/evictions.go``); an eviction over one of
  them is refused and counted nowhere.

The :class:`ProfileEvictor` a plug-in gets combines them: ``filter`` asks every filter
plug-in, ``evict`` checks the limits, then asks the evict plug-in, and counts what it
accepted.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from koordinator.nodemetrics import NodeMetricRecord

__all__ = [
    "BalancePlugin",
    "DeschedulePlugin",
    "EvictFilterPlugin",
    "EvictPlugin",
    "EvictionLimiter",
    "Evictor",
    "FilterPlugin",
    "Handle",
    "ProfileEvictor",
]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


class Evictor(Protocol):
    def filter(self, pod: Obj) -> bool: ...

    async def evict(self, pod: Obj, reason: str, plugin: str) -> bool: ...


class FilterPlugin(Protocol):
    name: str

    def filter(self, pod: Obj) -> bool: ...


class EvictPlugin(Protocol):
    name: str

    async def evict(self, pod: Obj, reason: str, plugin: str) -> bool: ...


class EvictFilterPlugin(Protocol):
    """A plug-in at both points (MigrationController)."""

    name: str

    def filter(self, pod: Obj) -> bool: ...

    async def evict(self, pod: Obj, reason: str, plugin: str) -> bool: ...


class BalancePlugin(Protocol):
    name: str

    async def balance(self, nodes: Sequence[Obj]) -> None: ...


class DeschedulePlugin(Protocol):
    name: str

    async def deschedule(self, nodes: Sequence[Obj]) -> None: ...


@dataclass
class EvictionLimiter:
    """The framework's per-round limits (None: unlimited)."""

    per_node: int | None = None
    per_namespace: int | None = None
    total: int | None = None
    by_node: Counter[str] = field(default_factory=Counter)
    by_namespace: Counter[str] = field(default_factory=Counter)
    count: int = 0

    def refusal(self, pod: Obj) -> str | None:
        """Why one more eviction of ``pod`` is over a limit (None: it is not)."""
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        if self.total is not None and self.count >= self.total:
            return f"maximum number of evicted pods ({self.total}) reached"
        if self.per_node is not None and self.by_node[node] >= self.per_node:
            return f"maximum number of pods evicted per node ({self.per_node}) reached on node {node}"
        if self.per_namespace is not None and self.by_namespace[namespace] >= self.per_namespace:
            return (
                f"maximum number of pods evicted per namespace ({self.per_namespace}) reached in {namespace}"
            )
        return None

    def record(self, pod: Obj) -> None:
        self.count += 1
        self.by_node[str((pod.get("spec") or {}).get("nodeName") or "")] += 1
        self.by_namespace[str((pod.get("metadata") or {}).get("namespace") or "")] += 1

    def reset(self) -> None:
        self.by_node.clear()
        self.by_namespace.clear()
        self.count = 0


@dataclass
class ProfileEvictor:
    """What a profile's plug-ins evict through."""

    filters: Sequence[FilterPlugin]
    evictor: EvictPlugin | None
    limiter: EvictionLimiter
    #: the configuration's ``dryRun``: evictions are logged and counted, the plug-in is not asked
    dry_run: bool = False
    #: called with (pod, plugin, reason) for each eviction accepted (metrics, explain)
    on_evicted: Callable[[Obj, str, str], None] | None = None

    def filter(self, pod: Obj) -> bool:
        return all(plugin.filter(pod) for plugin in self.filters)

    async def evict(self, pod: Obj, reason: str, plugin: str) -> bool:
        if self.evictor is None and not self.dry_run:
            log.info("no evict plug-in enabled: pod %s not evicted", _key(pod))
            return False
        refusal = self.limiter.refusal(pod)
        if refusal is not None:
            log.info("pod %s not evicted: %s", _key(pod), refusal)
            return False
        if self.dry_run:
            log.info("evicted pod %s in dry run mode (%s: %s)", _key(pod), plugin, reason)
        elif self.evictor is None or not await self.evictor.evict(pod, reason, plugin):
            return False
        self.limiter.record(pod)
        if self.on_evicted is not None:
            self.on_evicted(pod, plugin, reason)
        return True


def _key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


class Handle(Protocol):
    """The cluster as plug-ins read it."""

    def pods_on_node(self, node: str) -> Sequence[Obj]: ...

    def node_metrics(self) -> Mapping[str, NodeMetricRecord]: ...

    def now(self) -> float: ...

    @property
    def evictor(self) -> Evictor: ...
