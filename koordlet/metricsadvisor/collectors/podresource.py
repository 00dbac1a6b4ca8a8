"""PodResourceCollector: CPU, memory and CFS throttling of every pod and container.

All pod and container cgroups are read in one batch through the StatsReader (kept
descriptors, parsed in C): CPU usage as the rate of ``cpuacct.usage`` (v2 ``usage_usec``)
in cores, memory as ``inactive_anon + active_anon + unevictable`` of ``memory.stat``
(``total_*`` on v1; with page cache, plus the file LRUs), and throttling as
``Δnr_throttled / Δnr_periods`` (upstream's PodThrottledCollector, folded into the same
read). A cgroup that vanished during the batch is skipped; the first tick of each
object only primes its counters. The sums over pods feed the SystemResourceCollector.
"""

from __future__ import annotations

from koordlet.metriccache import Rows, kinds
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase, RateCache, UsagePoint
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.stats import ALL_USAGE

_NS = 1e9


class PodResourceCollector(CollectorBase):
    NAME = "PodResourceCollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        self._cpu = RateCache(ttl=20 * self.interval)
        self._periods = RateCache(ttl=20 * self.interval)
        self._throttled = RateCache(ttl=20 * self.interval)
        self._ids: list[str] = []
        self._owners: list[tuple[bool, str, tuple[str]]] = []

    def _throttled_ratio(self, key: str, now: float, periods: int, throttled: int) -> float | None:
        d_periods = self._periods.rate(key, now, periods)
        d_throttled = self._throttled.rate(key, now, throttled)
        if d_periods is None or d_throttled is None:
            return None
        return d_throttled / d_periods if d_periods > 0 else 0.0

    def _targets(self, pods: list[PodMeta]) -> tuple[list[str], list[tuple[bool, str, tuple[str]]]]:
        """The cgroup directories to read and, for each, (is pod, id, series key); the keys
        are rebuilt only when pods or containers came or went (the reader closes the
        descriptors of cgroups gone by itself)."""
        dirs: list[str] = []
        ids: list[str] = []
        for pod in pods:
            dirs.append(pod.cgroup_dir)
            ids.append(pod.uid)
            for container in pod.containers:
                dirs.append(container.cgroup_dir)
                ids.append(container.container_id)
        if ids != self._ids:
            self._ids = ids
            owners: list[tuple[bool, str, tuple[str]]] = []
            for pod in pods:
                owners.append((True, pod.uid, (pod.uid,)))
                owners.extend((False, c.container_id, (c.container_id,)) for c in pod.containers)
            self._owners = owners
        return dirs, self._owners

    def collect(self, now: float) -> None:
        pods = self.ctx.states.get_all_pods()
        page_cache = self.ctx.config.enable_pagecache_collector
        dirs, owners = self._targets(pods)
        rows = Rows(now)
        # both pod and container kinds are keyed by one id label, so a series key is (id,)
        cpu = (rows.writer(kinds.CONTAINER_CPU_USAGE), rows.writer(kinds.POD_CPU_USAGE))
        memory = (rows.writer(kinds.CONTAINER_MEMORY_USAGE), rows.writer(kinds.POD_MEMORY_USAGE))
        cached_memory = (
            rows.writer(kinds.CONTAINER_MEMORY_USAGE_WITH_PAGE_CACHE),
            rows.writer(kinds.POD_MEMORY_USAGE_WITH_PAGE_CACHE),
        )
        throttled = (rows.writer(kinds.CONTAINER_CPU_THROTTLED), rows.writer(kinds.POD_CPU_THROTTLED))
        total_cpu = total_memory = 0.0
        for (is_pod, ident, key), sample in zip(owners, self.ctx.reader.read(dirs, ALL_USAGE), strict=True):
            if sample.vanished:
                continue
            if sample.cpu_usage_ns is not None:
                rate = self._cpu.rate(ident, now, sample.cpu_usage_ns)
                if rate is not None:
                    cores = rate / _NS
                    cpu[is_pod]((key, cores))
                    if is_pod:
                        total_cpu += cores
            if sample.memory is not None:
                usage = float(sample.memory.usage)
                memory[is_pod]((key, usage))
                if is_pod:
                    total_memory += usage
                if page_cache:
                    cached_memory[is_pod]((key, float(sample.memory.usage_with_page_cache)))
            if sample.throttling is not None:
                t = sample.throttling
                ratio = self._throttled_ratio(ident, now, t.nr_periods, t.nr_throttled)
                if ratio is not None:
                    throttled[is_pod]((key, ratio))
        self.ctx.cache.append_rows(rows)
        self.ctx.shared.update(pods=UsagePoint(total_cpu, total_memory, now))
        for cache in (self._cpu, self._periods, self._throttled):
            cache.sweep(now)
        self.started = True
