"""NodeResourceCollector: node CPU and memory usage, overall and per NUMA node.

CPU is the busy ticks of /proc/stat (user + nice + system + irq + softirq) over the wall
time elapsed, in cores: ``Δticks / (Δseconds * CLK_TCK)``. Memory is ``MemTotal -
MemAvailable`` (and ``MemTotal - MemFree`` with page cache). A NUMA node's CPU is the sum of
its CPUs' busy-tick rates; its memory is what its meminfo does not count as free or
reclaimable. The first tick only primes the tick counters. The files are read through a
:class:`~koordlet.system.proc.NodeStatsReader` (kept descriptors, one batch a tick).
"""

from __future__ import annotations

from koordlet.metriccache import Sample, kinds
from koordlet.metricsadvisor.framework import (
    CollectContext,
    CollectorBase,
    CounterDeltas,
    RateCache,
    UsagePoint,
)
from koordlet.system import kernel, proc
from koordlet.system.topology import read_cpu_topology


class NodeResourceCollector(CollectorBase):
    NAME = "NodeResourceCollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        self._ticks = RateCache(ttl=20 * self.interval)
        self._cpu_node: dict[int, int] = {}
        #: busy ticks of each CPU, a column per tick
        self._per_cpu = CounterDeltas()
        self._cpu_ids: list[int] = []
        #: /proc/stat and the meminfo files, on kept descriptors
        self._reader = proc.NodeStatsReader(ctx.paths)

    def _numa_of_cpus(self) -> dict[int, int]:
        if not self._cpu_node:
            try:
                topology = read_cpu_topology(self.ctx.paths)
            except OSError:
                return {}
            self._cpu_node = {p.cpu: p.node for p in topology.processors}
        return self._cpu_node

    def close(self) -> None:
        self._reader.close()

    def collect(self, now: float) -> None:
        hz = kernel.clock_ticks()
        stat, meminfo, numa = self._reader.read()
        samples: list[Sample] = []
        memory = float(meminfo.used_bytes)
        samples.append(kinds.NODE_MEMORY_USAGE.sample(memory, now))
        if self.ctx.config.enable_pagecache_collector:
            samples.append(
                kinds.NODE_MEMORY_USAGE_WITH_PAGE_CACHE.sample(float(meminfo.used_with_page_cache_bytes), now)
            )
        rate = self._ticks.rate("node", now, stat.total.busy)
        numa_cpu: dict[int, float] = {}
        cpu_node = self._numa_of_cpus()
        cpu_ids = list(stat.per_cpu)
        if cpu_ids != self._cpu_ids:  # the same list while the CPUs are: CounterDeltas' fast path
            self._cpu_ids = cpu_ids
        per_cpu, _ = self._per_cpu.rates(self._cpu_ids, now, [t.busy for t in stat.per_cpu.values()], hz)
        for cpu_id, cores in zip(self._cpu_ids, per_cpu, strict=True):
            if cores == cores and cpu_id in cpu_node:  # NaN: no rate yet
                node_id = cpu_node[cpu_id]
                numa_cpu[node_id] = numa_cpu.get(node_id, 0.0) + cores
        numa_memory = {} if numa is None else {n: float(info.numa_used_bytes) for n, info in numa.items()}
        for node, used in numa_memory.items():
            samples.append(kinds.NODE_NUMA_MEMORY_USAGE.sample(used, now, numa_node_id=str(node)))
        numa_points = {}
        if rate is not None:
            cpu = rate / hz
            samples.append(kinds.NODE_CPU_USAGE.sample(cpu, now))
            for node_id, node_cpu in numa_cpu.items():
                samples.append(kinds.NODE_NUMA_CPU_USAGE.sample(node_cpu, now, numa_node_id=str(node_id)))
                numa_points[node_id] = UsagePoint(node_cpu, numa_memory.get(node_id, 0.0), now)
            self.ctx.shared.update(node=UsagePoint(cpu, memory, now), node_numa=numa_points)
            metrics = self.ctx.metrics
            metrics.node_used_cpu_cores.labels(metrics.node).set(cpu)
            metrics.node_used_memory_bytes.labels(metrics.node).set(memory)
            self.started = True
        self.ctx.cache.append(samples)
