"""Collector framework: the context collectors share, rate computation, and the runner.

A collector is a small object with a ``NAME`` (upstream's), an ``interval``, an
``enabled()`` answer and a ``collect(now)`` tick that reads the host and appends one batch
to the metric cache (and ``close()``, called once the runner has stopped, for what a
collector holds open). CPU usage is a rate (counter delta over wall-clock delta, in cores);
the first tick of any object only primes its counter, as upstream. Ticks run in one worker
thread (the native reader releases the GIL), so the event loop serving HTTP never waits
on the host; a failing tick is logged and counted, and never stops the others. The
collectors due at one instant (every 1 s collector, each second) run as one batch: one
hand-over to the worker thread and back, not one each.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from koordinator.api.features import FeatureGates
from koordinator.api.types.slo import NodeSLOSpec
from koordinator.kube.clock import SYSTEM_CLOCK, Now
from koordlet.metriccache import KVStore, MetricCache
from koordlet.metrics import KoordletMetrics
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup import columns
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.columns import Column, unknown
from koordlet.system.cgroup.stats import StatsReader
from koordlet.system.paths import HostPaths

log = logging.getLogger(__name__)


class States(Protocol):
    """What collectors need from the states informer."""

    def get_all_pods(self) -> list[PodMeta]: ...
    def get_node(self) -> Mapping[str, Any] | None: ...
    def get_node_slo(self) -> NodeSLOSpec | None: ...


@dataclass
class CollectorConfig:
    """Upstream's metricsadvisor flags (``--collect-res-used-interval`` ...), in seconds."""

    collect_res_used_interval: float = 1.0
    collect_sys_metric_outdated_interval: float = 10.0
    collect_node_cpu_info_interval: float = 60.0
    psi_collector_interval: float = 10.0
    enable_pagecache_collector: bool = False
    collect_node_storage_info_interval: float = 1.0
    cpi_collector_interval: float = 60.0
    collect_cpi_timewindow: float = 10.0
    coldpage_collector_interval: float = 5.0
    resctrl_collector_interval: float = 10.0
    enable_resctrl_collector: bool = False
    #: this koordlet's ``--qos-pressure-probe-interval`` (collectors.pressureprobe)
    pressure_probe_interval: float = 0.25


@dataclass(frozen=True)
class UsagePoint:
    cpu: float
    memory: float
    timestamp: float


@dataclass
class SharedState:
    """Latest values one collector hands to another (upstream ``framework.SharedState``)."""

    node: UsagePoint | None = None
    node_numa: dict[int, UsagePoint] = field(default_factory=dict)
    pods: UsagePoint | None = None
    pods_numa_memory: dict[int, float] = field(default_factory=dict)
    host_apps: UsagePoint | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, **values: Any) -> None:
        with self.lock:
            for name, value in values.items():
                setattr(self, name, value)

    def snapshot(self) -> SharedState:
        with self.lock:
            return SharedState(
                self.node, dict(self.node_numa), self.pods, dict(self.pods_numa_memory), self.host_apps
            )


class Hastening:
    """Collectors asked for ahead of their schedule: a collector requests them during its
    tick (on the collection thread), the runner takes them once the batch is over."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: set[str] = set()

    def request(self, names: Iterable[str]) -> None:
        with self._lock:
            self._names.update(names)

    def take(self) -> set[str]:
        with self._lock:
            names, self._names = self._names, set()
        return names


@dataclass
class CollectContext:
    paths: HostPaths
    cgroups: CgroupFS
    cache: MetricCache
    kv: KVStore
    states: States
    metrics: KoordletMetrics
    gates: FeatureGates
    config: CollectorConfig = field(default_factory=CollectorConfig)
    shared: SharedState = field(default_factory=SharedState)
    #: collections requested ahead of schedule (the runner given it honours them)
    hastening: Hastening = field(default_factory=Hastening)
    #: the cgroup stats reader every collector shares (its kept descriptors)
    reader: StatsReader = field(init=False)

    def __post_init__(self) -> None:
        self.reader = StatsReader(self.cgroups)


class RateCache:
    """Per-object cumulative counters turned into rates; entries unused for ``ttl`` expire.

    ``rate(key, now, counter)`` is None on an object's first sample, after a counter went
    backwards (a restarted cgroup) and when no time passed.
    """

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._last: dict[Any, tuple[float, float]] = {}
        self._swept = 0.0

    def rate(self, key: Any, now: float, counter: float) -> float | None:
        previous = self._last.get(key)
        self._last[key] = (now, counter)
        if previous is None:
            return None
        then, before = previous
        if now <= then or counter < before:
            return None
        return (counter - before) / (now - then)

    def sweep(self, now: float) -> None:
        """Forget objects not seen for ``ttl`` (pods that went away)."""
        if now - self._swept < self.ttl:
            return
        self._swept = now
        for key in [k for k, (t, _) in self._last.items() if now - t > self.ttl]:
            del self._last[key]

    def __len__(self) -> int:
        return len(self._last)


class PodCgroups:
    """The cgroups of a pod list as the per-tick collectors read them: every container
    (in pod order), then every pod, so that each series kind's values are one slice."""

    __slots__ = ("containers", "dirs", "ids", "pods")

    def __init__(
        self, ids: list[str], dirs: list[str], containers: int, pods: Sequence[PodMeta] = ()
    ) -> None:
        self.ids = ids
        self.dirs = dirs
        #: how many of them are containers (the first ones)
        self.containers = containers
        #: the pods they were derived from (PodMeta is frozen: the same objects, the same cgroups)
        self.pods = tuple(pods)

    @classmethod
    def of(cls, pods: Sequence[PodMeta], previous: PodCgroups | None = None) -> PodCgroups:
        """The cgroups of ``pods``; ``previous`` itself when they are the same (so that
        what a collector derived from it, and CounterDeltas' matching, carry over)."""
        if previous is not None:
            kept = previous.pods
            # the states informer hands out the same PodMeta objects while pods are
            # unchanged: compare them by identity before building any list
            if len(pods) == len(kept) and all(map(operator.is_, pods, kept)):
                return previous
        containers = [c for pod in pods for c in pod.containers]
        ids = [c.container_id for c in containers] + [pod.uid for pod in pods]
        if previous is not None and ids == previous.ids:
            previous.pods = tuple(pods)  # new objects, same cgroups
            return previous
        dirs = [c.cgroup_dir for c in containers] + [pod.cgroup_dir for pod in pods]
        return cls(ids, dirs, len(containers), pods)

    def split(self) -> tuple[list[str], list[str]]:
        """The container ids and the pod ids."""
        return self.ids[: self.containers], self.ids[self.containers :]


class CounterDeltas:
    """How much the cumulative counters of a list of objects grew, a column at a time.

    The collectors' hot path (every pod and container each tick): a column at a time
    instead of a call per object. ``rates(ids, now, counters, unit)`` returns, per object,
    how much its counter grew a second since the previous call, in ``unit``s, as a float
    column (:mod:`koordlet.system.cgroup.columns`): no value (NaN) on its first sample,
    where the counter could not be read (this time or the previous one: the object is
    primed again), and after it went backwards (a restarted cgroup). Objects
    absent from ``ids`` are forgotten. A collector passes the same ``ids`` list object
    while its objects are unchanged, which skips matching them by id.
    """

    def __init__(self) -> None:
        self._ids: Sequence[Hashable] = []
        self._then: float | None = None
        self._last: list[Any] = []

    def shift(self, ids: Sequence[Hashable], now: float, values: list[Any]) -> tuple[float | None, list[Any]]:
        """Keep ``values`` (one per object of ``ids``: a counter or a tuple of counters)
        and return the seconds since the previous call (None on the first call and when
        no time passed) with the previous values, aligned with ``ids`` (None for an object
        not seen then). For a collector that computes its own growth over several
        counters in one pass; :meth:`rates` is the single-counter case."""
        if len(ids) != len(values):
            raise ValueError(f"{len(ids)} objects for {len(values)} counters")
        last = self._last
        if ids is not self._ids:
            by_id = dict(zip(self._ids, last, strict=True))
            last = [by_id.get(ident) for ident in ids]
        then = self._then
        self._ids, self._then, self._last = ids, now, values
        if then is None or now <= then:
            return None, last
        return now - then, last

    def rates(self, ids: Sequence[Hashable], now: float, counters: list[Any], unit: float = 1.0) -> Column:
        elapsed, last = self.shift(ids, now, counters)
        if elapsed is None:
            return unknown(len(ids))
        return columns.growth(counters, last, elapsed, unit)


class Collector(Protocol):
    NAME: str

    @property
    def interval(self) -> float: ...
    def enabled(self) -> bool: ...
    def collect(self, now: float) -> None: ...
    def close(self) -> None: ...
    @property
    def started(self) -> bool: ...


class CollectorBase:
    """What every collector shares: its context, its interval (the resource collection
    interval unless given), enabled unless it says otherwise, and whether it has data yet."""

    NAME: str

    def __init__(self, ctx: CollectContext, interval: float | None = None) -> None:
        self.ctx = ctx
        self.interval = ctx.config.collect_res_used_interval if interval is None else interval
        #: set once the collector has produced what the agent waits for
        self.started = False

    def enabled(self) -> bool:
        return True

    def close(self) -> None:
        """Release what the collector holds; called once, after its last tick."""


CollectorFactory = Callable[[CollectContext], Collector]


def build_collectors(
    ctx: CollectContext, registry: Sequence[tuple[str, CollectorFactory]]
) -> list[Collector]:
    """Instantiate the registered collectors (names checked unique) and keep the enabled ones."""
    names = [name for name, _ in registry]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"collectors registered twice: {sorted(duplicates)}")
    collectors = []
    for name, factory in registry:
        collector = factory(ctx)
        if name != collector.NAME:
            raise ValueError(f"collector registered as {name!r} calls itself {collector.NAME!r}")
        if collector.enabled():
            collectors.append(collector)
        else:
            log.info("collector %s disabled", name)
    return collectors


#: collectors due within this many seconds of each other run in the same batch
BATCH_SLACK_S = 0.05


class CollectorRunner:
    """Runs each collector every ``interval`` (read again after each of its ticks: the
    CPI collector changes it) in one worker thread, those due together in one batch. The
    collectors a tick asked for through ``hastening`` run right after its batch, with every
    other collector of the same interval (so that those stay one batch), and are next due
    an interval after that."""

    def __init__(
        self,
        collectors: Sequence[Collector],
        clock: Now = SYSTEM_CLOCK.time,
        hastening: Hastening | None = None,
    ) -> None:
        self.collectors = list(collectors)
        self.clock = clock
        self.hastening = hastening if hastening is not None else Hastening()
        self.failures: dict[str, int] = {c.NAME: 0 for c in collectors}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="koordlet-collect")
        self._tasks: list[asyncio.Task[None]] = []
        self._all_started = asyncio.Event()
        #: called on the event loop after each tick with the collector's name
        self.listeners: list[Callable[[str], None]] = []

    def tick(self, collector: Collector) -> None:
        """One collection, with failures contained."""
        try:
            collector.collect(self.clock())
        except Exception:
            self.failures[collector.NAME] += 1
            log.exception("collector %s failed", collector.NAME)

    def tick_batch(self, collectors: Sequence[Collector]) -> None:
        """One collection of each of ``collectors``, in order."""
        for collector in collectors:
            self.tick(collector)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        due = dict.fromkeys(self.collectors, time.monotonic())
        while True:
            started = time.monotonic()
            batch = [c for c in self.collectors if due[c] <= started + BATCH_SLACK_S]
            await loop.run_in_executor(self._executor, self.tick_batch, batch)
            for collector in batch:
                due[collector] = started + collector.interval
                for listener in self.listeners:
                    listener(collector.NAME)
            if not self._all_started.is_set() and self.all_started():
                self._all_started.set()
            hastened = self.hastening.take()
            if hastened:
                now = time.monotonic()
                intervals = {c.interval for c in self.collectors if c.NAME in hastened}
                for collector in self.collectors:
                    if collector.NAME in hastened or collector.interval in intervals:
                        due[collector] = now
            await asyncio.sleep(max(min(due.values()) - time.monotonic(), 0.0))

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._loop(), name="collectors")] if self.collectors else []

    def all_started(self) -> bool:
        return all(c.started for c in self.collectors)

    async def wait_started(self) -> None:
        """Upstream waits for every enabled collector's first data before QoS starts
        (callers bound the wait with ``asyncio.timeout``)."""
        if self.collectors:
            await self._all_started.wait()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._executor.shutdown(wait=True)  # no tick is running after this
        for collector in self.collectors:
            try:
                collector.close()
            except Exception:
                log.exception("collector %s failed to close", collector.NAME)
