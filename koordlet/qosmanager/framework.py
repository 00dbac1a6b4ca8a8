"""QoS strategy framework: the snapshot a strategy reads, the plan it returns, the runner.

A strategy turns a :class:`Snapshot` (time, the Node decoded once, merged NodeSLO, pods,
recent metrics, host facts, and the cgroups as that round sees them) into a :class:`Plan`
(cgroup and file updates, leveled cgroup batches, evictions, gauge values and which of its
gauges' series may stay, or the reason it planned nothing). Only the runner acts: the
executor writes, the evictor evicts; a strategy writes nothing.

One round of a strategy -- snapshot, :meth:`Strategy.enabled`, :meth:`Strategy.plan`, and
the writes -- runs on a worker thread, so no strategy does host I/O on the event loop; only
the evictions (API calls) run there. The snapshot's :class:`CgroupView` captures each
cgroup value, listing and support answer the first time the round asks for it, so a
strategy sees one consistent value per file however often it reads it. Reads outside the
cgroups (block devices and mounts for blkio, resctrl schemata, sysctls) are made by the
strategy on that same worker thread. Some strategies keep state between rounds (the token
buckets of cpu_burst); a strategy's rounds never overlap.

Each strategy runs on its own interval, and again as soon as the collectors bring new
usage: the agent reports each finished collection (:meth:`QoSManager.collected`), and once
every collector of ``wake_on`` (the node and pod usage collectors) has finished one since
the last wake, the strategies are woken, once. Waking on each of them would run every
strategy twice per collection interval, the first time with the pods' usage of the
previous one. After a woken round, a strategy's own tick comes :data:`WOKEN_GRACE`
intervals later, so that while collections arrive every interval they alone drive the
strategy (once per collection); when they stop, the interval takes over. A strategy
that raises is logged and counted, and the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from koordinator.api.extension.qos import QoSClass
from koordinator.api.features import FeatureGates
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.executor import CgroupUpdate, ResourceUpdateExecutor, Update
from koordlet.metriccache import MetricCache, MetricKind
from koordlet.metriccache.kinds import HOST_APPLICATION_CPU_USAGE, POD_CPU_USAGE, POD_MEMORY_USAGE
from koordlet.metrics import KoordletMetrics, prune
from koordlet.qosmanager.strategies.podspec import quantity
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.layout import KubepodsLayout
from koordlet.system.cgroup.registry import Subsystem, Value
from koordlet.system.errors import HostError
from koordlet.system.paths import HostPaths
from koordlet.system.topology import NodeCPUInfo

log = logging.getLogger(__name__)


class MetricsView:
    """Recent values from the metric cache, as strategies ask for them."""

    def __init__(self, cache: MetricCache) -> None:
        self.cache = cache

    def last(self, kind: MetricKind, start: float, end: float, **labels: str) -> float | None:
        result = self.cache.query(kind, start, end, **labels)
        return result.value("last") if result.count() else None

    def avg(self, kind: MetricKind, start: float, end: float, **labels: str) -> float | None:
        result = self.cache.query(kind, start, end, **labels)
        return result.value("avg") if result.count() else None

    def count(self, kind: MetricKind, start: float, end: float, **labels: str) -> int:
        return self.cache.query(kind, start, end, **labels).count()

    def last_by_label(self, kind: MetricKind, label: str, start: float, end: float) -> dict[str, float]:
        """The last value of every series of ``kind`` in the window, by the value of ``label``."""
        index = kind.labels.index(label)
        out: dict[str, float] = {}
        for values in self.cache.label_values(kind):
            last = self.last(kind, start, end, **dict(zip(kind.labels, values, strict=True)))
            if last is not None:
                out[values[index]] = last
        return out


class CgroupView:
    """The cgroups as one round of a strategy sees them: read-only, each value, listing and
    support answer captured on first use (a failed read is None, never an error)."""

    def __init__(self, cgroups: CgroupFS) -> None:
        self.cgroups = cgroups
        self._values: dict[tuple[str, str], Value | None] = {}
        self._listings: dict[tuple[str, str, int], list[str]] = {}
        self._support: dict[str, bool] = {}

    def read(self, key: str, relative: str) -> Value | None:
        where = (key, relative)
        if where not in self._values:
            try:
                self._values[where] = self.cgroups.read(key, relative)
            except HostError:
                self._values[where] = None
        return self._values[where]

    def children(self, subsystem: Subsystem | str, relative: str) -> list[str]:
        where = (str(subsystem), relative, 0)
        if where not in self._listings:
            self._listings[where] = self.cgroups.children(subsystem, relative)
        return list(self._listings[where])

    def at_depth(self, subsystem: Subsystem | str, relative: str, depth: int) -> list[str]:
        where = (str(subsystem), relative, depth)
        if where not in self._listings:
            self._listings[where] = self.cgroups.at_depth(subsystem, relative, depth)
        return list(self._listings[where])

    def supported(self, key: str) -> bool:
        if key not in self._support:
            self._support[key] = self.cgroups.supported(key)[0]
        return self._support[key]


@dataclass(frozen=True)
class NodeView:
    """The Node object as strategies read it, decoded once per snapshot: its annotations,
    and its capacity and allocatable quantities (CPU in milli-cores, other resources as
    plain integers; malformed quantities are left out)."""

    annotations: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, int] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def decode(cls, node: Mapping[str, Any] | None) -> NodeView:
        node = node or {}
        status = node.get("status")
        status = status if isinstance(status, Mapping) else {}
        annotations = (node.get("metadata") or {}).get("annotations")
        return cls(
            annotations=dict(annotations) if isinstance(annotations, Mapping) else {},
            capacity=_quantities(status.get("capacity")),
            allocatable=_quantities(status.get("allocatable")),
        )


def _quantities(resources: object) -> dict[str, int]:
    if not isinstance(resources, Mapping):
        return {}
    decoded = ((name, quantity(resources, name)) for name in resources)
    return {name: value for name, value in decoded if value is not None}


@dataclass(frozen=True)
class HostFacts:
    cgroup_version: int
    layout: KubepodsLayout
    cpu_info: NodeCPUInfo | None
    #: the kubelet's CPU manager policy ("none" or "static")
    kubelet_cpu_policy: str = "none"
    vendor_id: str = ""
    #: the host roots (proc, sys, resctrl) for strategies that read or write outside
    #: cgroups; None means those of the cgroup view (:attr:`Snapshot.host_paths`)
    paths: HostPaths | None = None


@dataclass(frozen=True)
class Snapshot:
    now: float
    node: NodeView
    node_slo: NodeSLOSpec
    pods: Sequence[PodMeta]
    metrics: MetricsView
    host: HostFacts
    cgroups: CgroupView
    gates: FeatureGates
    collect_interval: float = 1.0
    #: pods whose eviction the apiserver refused lately (a PodDisruptionBudget): the
    #: eviction strategies choose the next candidate instead (see the evictor)
    unevictable: frozenset[str] = frozenset()

    @property
    def host_paths(self) -> HostPaths:
        """The host roots: :attr:`HostFacts.paths`, else those the cgroup view reads under."""
        return self.host.paths or self.cgroups.cgroups.paths

    def pod_cpu(self, window: float) -> dict[str, float]:
        """Last CPU (cores) of every pod with samples, by UID."""
        return self.metrics.last_by_label(POD_CPU_USAGE, "pod_uid", self.now - window, self.now)

    def pod_memory(self, window: float) -> dict[str, float]:
        """Last memory (bytes) of every pod with samples, by UID."""
        return self.metrics.last_by_label(POD_MEMORY_USAGE, "pod_uid", self.now - window, self.now)

    def host_app_cpu(self, window: float) -> dict[str, float]:
        return self.metrics.last_by_label(
            HOST_APPLICATION_CPU_USAGE, "host_app_name", self.now - window, self.now
        )


#: QoS classes never evicted, whatever a strategy asks: those colocation protects
PROTECTED = (QoSClass.LSE, QoSClass.LSR, QoSClass.LS)


@dataclass(frozen=True)
class Eviction:
    pod: PodMeta
    #: the koordlet feature that asked (``BEMemoryEvict``...), checked against the pod's
    #: ``koordinator.sh/eviction-policy`` annotation
    feature: str
    #: ``koordlet_pod_eviction`` reason label
    reason: str
    message: str


@dataclass
class Plan:
    strategy: str
    updates: list[Update] = field(default_factory=list)
    #: batches applied parents-first-merged then children-first-real (see the executor)
    leveled: list[list[list[CgroupUpdate]]] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    #: (KoordletMetrics attribute, label values after the node label, value)
    gauges: list[tuple[str, tuple[str, ...], float]] = field(default_factory=list)
    #: KoordletMetrics attribute -> the label values (after the node label) its series may
    #: keep: the others (pods and containers that went away) are removed
    retain: dict[str, set[tuple[str, ...]]] = field(default_factory=dict)
    #: why nothing (or less) was planned
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> Plan:
        self.notes.append(text)
        return self

    @property
    def empty(self) -> bool:
        return not (self.updates or self.leveled or self.evictions)


class Strategy(Protocol):
    NAME: str
    interval: float
    #: seconds without planning after this strategy evicted (0 = no cooldown); a strategy
    #: with a true ``cooldown_from_start`` attribute also waits that long after its first round
    cooldown: float

    def enabled(self, snapshot: Snapshot) -> tuple[bool, str]: ...
    def plan(self, snapshot: Snapshot) -> Plan: ...


class GatedStrategy:
    """Base of the strategies switched by one feature gate, with no cooldown: subclasses name
    themselves and their gate and plan; those with more conditions extend :meth:`enabled`."""

    NAME: str
    GATE: str
    cooldown = 0.0

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval

    def enabled(self, snapshot: Snapshot) -> tuple[bool, str]:
        if not snapshot.gates.enabled(self.GATE):
            return False, f"feature gate {self.GATE} is off"
        return True, ""


class Evicting(Protocol):
    async def evict(self, evictions: Sequence[Eviction]) -> int: ...


#: after a round woken by a collection, the strategy's own tick waits this many intervals
WOKEN_GRACE = 1.2


class QoSManager:
    """Runs every strategy on its interval: snapshot, plan, execute."""

    def __init__(
        self,
        strategies: Sequence[Strategy],
        snapshot: Callable[[], Snapshot],
        executor: ResourceUpdateExecutor,
        evictor: Evicting | None,
        metrics: KoordletMetrics,
        *,
        wake_on: Iterable[str] = (),
    ) -> None:
        names = [s.NAME for s in strategies]
        if len(set(names)) != len(names):
            raise ValueError(f"strategies registered twice: {sorted(n for n in names if names.count(n) > 1)}")
        self.strategies = list(strategies)
        self.snapshot = snapshot
        self.executor = executor
        self.evictor = evictor
        self.metrics = metrics
        self.failures = dict.fromkeys(names, 0)
        self.last_plans: dict[str, Plan] = {}
        self._why_disabled: dict[str, str] = {}
        self._last_eviction: dict[str, float] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._wake: dict[str, asyncio.Event] = {name: asyncio.Event() for name in names}
        #: the collectors whose fresh data a wake waits for, each at least once
        self.wake_on = frozenset(wake_on)
        self._collected: set[str] = set()

    def wake(self) -> None:
        """Fresh metrics arrived: run every strategy now instead of at its next interval
        (a change is acted on one collection after it happens, not one interval later)."""
        for event in self._wake.values():
            event.set()

    def collected(self, collector: str) -> None:
        """``collector`` finished a collection: wake the strategies once every collector of
        :attr:`wake_on` has finished one since the last wake (others are ignored)."""
        if collector not in self.wake_on:
            return
        self._collected.add(collector)
        if self._collected >= self.wake_on:
            self._collected.clear()
            self.wake()

    def plan(self, strategy: Strategy, snapshot: Snapshot) -> Plan | None:
        """The strategy's plan, or None when it is disabled or cooling down."""
        enabled, why = strategy.enabled(snapshot)
        if not enabled:
            if self._why_disabled.get(strategy.NAME) != why:
                log.info("strategy %s disabled: %s", strategy.NAME, why)
                self._why_disabled[strategy.NAME] = why
            return None
        self._why_disabled.pop(strategy.NAME, None)
        if getattr(strategy, "cooldown_from_start", False):
            self._last_eviction.setdefault(strategy.NAME, snapshot.now)
        since = snapshot.now - self._last_eviction.get(strategy.NAME, float("-inf"))
        if strategy.cooldown and since < strategy.cooldown:
            return None
        return strategy.plan(snapshot)

    def apply(self, plan: Plan) -> None:
        """Write a plan's updates and record its gauges."""
        self.executor.update_batch(plan.updates)
        for batch in plan.leveled:
            self.executor.leveled(batch)
        node = self.metrics.node
        for attribute, labels, value in plan.gauges:
            getattr(self.metrics, attribute).labels(node, *labels).set(value)
        for attribute, alive in plan.retain.items():
            prune(getattr(self.metrics, attribute), {(node, *labels) for labels in alive})

    def round(self, strategy: Strategy) -> tuple[float, Plan | None]:
        """Snapshot, plan and write: the host-facing part of a round, run on a worker thread.
        Returns the snapshot's time and the plan (None when disabled or cooling down)."""
        snapshot = self.snapshot()
        plan = self.plan(strategy, snapshot)
        if plan is not None:
            self.last_plans[strategy.NAME] = plan
            self.apply(plan)
        return snapshot.now, plan

    async def run_once(self, strategy: Strategy) -> Plan | None:
        loop = asyncio.get_running_loop()
        try:
            now, plan = await loop.run_in_executor(None, self.round, strategy)
            if plan is not None and plan.evictions and self.evictor is not None:
                evicted = await self.evictor.evict(plan.evictions)
                if evicted:
                    self._last_eviction[strategy.NAME] = now
            return plan
        except Exception:
            self.failures[strategy.NAME] += 1
            log.exception("strategy %s failed", strategy.NAME)
            return None

    async def _loop(self, strategy: Strategy) -> None:
        wake = self._wake[strategy.NAME]
        woken = False
        while True:
            started = time.monotonic()
            wake.clear()
            await self.run_once(strategy)
            # after a round the collectors woke, the interval's own tick comes a fifth of an
            # interval late: with collections as frequent as the interval, the next one wakes
            # the strategy first instead of both running it a moment apart
            period = strategy.interval * (WOKEN_GRACE if woken else 1.0)
            woken = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(period - (time.monotonic() - started), 0.0)):
                    await wake.wait()
                    woken = True
            # never more often than five times an interval, however often metrics arrive
            await asyncio.sleep(max(strategy.interval / 5 - (time.monotonic() - started), 0.0))

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._loop(s), name=f"qos-{s.NAME}") for s in self.strategies]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
