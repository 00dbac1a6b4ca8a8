"""PodResourceCollector: CPU, memory and CFS throttling of every pod and container.

All pod and container cgroups are read in one batch through the StatsReader (kept
descriptors, parsed in C) and handled a statistic at a time over the whole column:
CPU usage as the rate of ``cpuacct.usage`` (v2 ``usage_usec``) in cores, memory as
``inactive_anon + active_anon + unevictable`` of ``memory.stat`` (``total_*`` on v1;
with page cache, plus the file LRUs), and throttling as ``Δnr_throttled / Δnr_periods``
(upstream's PodThrottledCollector, folded into the same read). A cgroup that vanished
during the batch is skipped; the first tick of each object only primes its counters.
The sums over pods feed the SystemResourceCollector, with the pods' memory on each NUMA
node (``memory.numa_stat``, where the kernel has it).
"""

from __future__ import annotations

from koordlet.metriccache import Key, MetricKind, Rows, kinds
from koordlet.metricsadvisor.framework import (
    CollectContext,
    CollectorBase,
    CounterDeltas,
    PodCgroups,
    UsagePoint,
)
from koordlet.system.cgroup import columns as cgroup_columns
from koordlet.system.cgroup.columns import Column, unknown
from koordlet.system.cgroup.stats import ALL_USAGE, MemoryStat, Stat, Throttling

_NS = 1e9
_NUMA = frozenset({Stat.MEMORY_NUMA})
#: usage without page cache: MemoryStat's first three (inactive_anon, active_anon, unevictable)
_USAGE_FIELDS = 3
_PERIODS, _THROTTLED = Throttling._fields.index("nr_periods"), Throttling._fields.index("nr_throttled")


def _sum(column: Column, start: int) -> float:
    """The sum of the values of ``column`` from ``start`` on (the pods')."""
    values, missing = column
    return sum(v for v in values[start:] if v == v) if missing else sum(values[start:])


class PodResourceCollector(CollectorBase):
    NAME = "PodResourceCollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        self._cpu = CounterDeltas()
        #: the (nr_periods, nr_throttled, throttled_ns) tuples of the last tick
        self._throttling = CounterDeltas()
        self._targets: PodCgroups | None = None
        self._numa_supported: bool | None = None
        #: the series keys (id,) of the containers and of the pods
        self._keys: tuple[list[Key], list[Key]] = ([], [])

    def collect(self, now: float) -> None:
        # the reader closes the descriptors of cgroups gone by itself
        targets = PodCgroups.of(self.ctx.states.get_all_pods(), self._targets)
        if targets is not self._targets:
            self._targets = targets
            containers, pods = targets.split()
            self._keys = ([(ident,) for ident in containers], [(ident,) for ident in pods])
        columns = self.ctx.reader.read_columns(targets.dirs, ALL_USAGE).columns
        rows = Rows(now)
        n, (container_keys, pod_keys) = targets.containers, self._keys

        def put(container_kind: MetricKind, pod_kind: MetricKind, column: Column) -> None:
            values, missing = column
            rows.extend_column(container_kind, container_keys, values[:n], missing)
            rows.extend_column(pod_kind, pod_keys, values[n:], missing)

        # each statistic in one pass over the column
        cores = self._cpu.rates(targets.ids, now, columns[Stat.CPU_USAGE], _NS)
        put(kinds.CONTAINER_CPU_USAGE, kinds.POD_CPU_USAGE, cores)

        memory = columns[Stat.MEMORY]  # MemoryStat's order: inactive_anon, active_anon, unevictable, ...
        usage = cgroup_columns.total(memory, _USAGE_FIELDS)
        put(kinds.CONTAINER_MEMORY_USAGE, kinds.POD_MEMORY_USAGE, usage)
        if self.ctx.config.enable_pagecache_collector:
            put(
                kinds.CONTAINER_MEMORY_USAGE_WITH_PAGE_CACHE,
                kinds.POD_MEMORY_USAGE_WITH_PAGE_CACHE,
                cgroup_columns.total(memory, len(MemoryStat._fields)),
            )

        # Throttling's order: nr_periods, nr_throttled, ...; Δnr_throttled / Δnr_periods,
        # none where either counter went back (a restarted cgroup), 0 when no period passed
        throttling = columns[Stat.THROTTLING]
        elapsed, last_throttling = self._throttling.shift(targets.ids, now, throttling)
        if elapsed is None:
            ratios = unknown(len(throttling))
        else:
            ratios = cgroup_columns.ratio(throttling, last_throttling, _PERIODS, _THROTTLED)
        put(kinds.CONTAINER_CPU_THROTTLED, kinds.POD_CPU_THROTTLED, ratios)

        self.ctx.cache.append_rows(rows)
        total_cpu = _sum(cores, n)
        total_memory = _sum(usage, n)
        self.ctx.shared.update(
            pods=UsagePoint(total_cpu, total_memory, now), pods_numa_memory=self._numa_memory(targets)
        )
        self.started = True

    def _numa_memory(self, targets: PodCgroups) -> dict[int, float]:
        """The pods' memory on each NUMA node; empty where the kernel has no numa_stat
        (asked once of the registry: kubepods, else the controller root)."""
        if self._numa_supported is None:
            self._numa_supported, _ = self.ctx.cgroups.supported("memory.numa_stat")
        if not self._numa_supported:
            return {}
        pod_dirs = targets.dirs[targets.containers :]
        per_node: dict[int, float] = {}
        for cell in self.ctx.reader.read_columns(pod_dirs, _NUMA).columns[Stat.MEMORY_NUMA]:
            if cell is not None:
                for node, used in cell.items():
                    per_node[node] = per_node.get(node, 0.0) + used
        return per_node
