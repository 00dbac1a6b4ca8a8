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

from koordlet.metriccache import Sample, kinds
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase, RateCache, UsagePoint
from koordlet.system.cgroup.stats import ALL_USAGE

_NS = 1e9


class PodResourceCollector(CollectorBase):
    NAME = "PodResourceCollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        self._cpu = RateCache(ttl=20 * self.interval)
        self._periods = RateCache(ttl=20 * self.interval)
        self._throttled = RateCache(ttl=20 * self.interval)
        self._dirs: list[str] = []

    def _throttled_ratio(self, key: str, now: float, periods: int, throttled: int) -> float | None:
        d_periods = self._periods.rate(key, now, periods)
        d_throttled = self._throttled.rate(key, now, throttled)
        if d_periods is None or d_throttled is None:
            return None
        return d_throttled / d_periods if d_periods > 0 else 0.0

    def collect(self, now: float) -> None:
        pods = self.ctx.states.get_all_pods()
        page_cache = self.ctx.config.enable_pagecache_collector
        dirs: list[str] = []
        owners: list[tuple[bool, str]] = []  # (is_pod, uid or container id)
        for pod in pods:
            dirs.append(pod.cgroup_dir)
            owners.append((True, pod.uid))
            for container in pod.containers:
                dirs.append(container.cgroup_dir)
                owners.append((False, container.container_id))
        if dirs != self._dirs:  # pods came or went: close the descriptors of those gone
            self.ctx.reader.retain(dirs, ALL_USAGE)
            self._dirs = dirs
        samples: list[Sample] = []
        total_cpu = total_memory = 0.0
        for (is_pod, ident), sample in zip(owners, self.ctx.reader.read(dirs, ALL_USAGE), strict=True):
            if sample.vanished:
                continue
            if sample.cpu_usage_ns is not None:
                rate = self._cpu.rate(ident, now, sample.cpu_usage_ns)
                if rate is not None:
                    cores = rate / _NS
                    if is_pod:
                        samples.append(kinds.POD_CPU_USAGE.sample(cores, now, pod_uid=ident))
                        total_cpu += cores
                    else:
                        samples.append(kinds.CONTAINER_CPU_USAGE.sample(cores, now, container_id=ident))
            if sample.memory is not None:
                usage = float(sample.memory.usage)
                if is_pod:
                    samples.append(kinds.POD_MEMORY_USAGE.sample(usage, now, pod_uid=ident))
                    total_memory += usage
                else:
                    samples.append(kinds.CONTAINER_MEMORY_USAGE.sample(usage, now, container_id=ident))
                if page_cache:
                    cached = float(sample.memory.usage_with_page_cache)
                    if is_pod:
                        samples.append(
                            kinds.POD_MEMORY_USAGE_WITH_PAGE_CACHE.sample(cached, now, pod_uid=ident)
                        )
                    else:
                        kind = kinds.CONTAINER_MEMORY_USAGE_WITH_PAGE_CACHE
                        samples.append(kind.sample(cached, now, container_id=ident))
            if sample.throttling is not None:
                t = sample.throttling
                ratio = self._throttled_ratio(ident, now, t.nr_periods, t.nr_throttled)
                if ratio is not None:
                    if is_pod:
                        samples.append(kinds.POD_CPU_THROTTLED.sample(ratio, now, pod_uid=ident))
                    else:
                        samples.append(kinds.CONTAINER_CPU_THROTTLED.sample(ratio, now, container_id=ident))
        self.ctx.cache.append(samples)
        self.ctx.shared.update(pods=UsagePoint(total_cpu, total_memory, now))
        for cache in (self._cpu, self._periods, self._throttled):
            cache.sweep(now)
        self.started = True
