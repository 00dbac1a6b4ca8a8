"""Cgroup statistics the collectors read every tick: CPU usage, memory, throttling, PSI.

:class:`StatsReader` turns "these cgroups, these statistics" into one batched, parsed
read through a FileCache (kept descriptors, pread, parsing in C when the extension is
built), and returns a :class:`CgroupSample` per cgroup. A failure never breaks the batch:
each statistic that could not be read is left out and its domain error recorded, and a
cgroup that vanished is flagged so the caller skips it.

The v1/v2 differences live here and in the registry only: v1 splits the statistics over
the cpuacct, cpu and memory hierarchies and names memory counters ``total_*``; v2 keeps
everything in one directory and reports CPU time as ``usage_usec`` in ``cpu.stat``.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field

from koordlet.system.cgroup import io
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.registry import Subsystem
from koordlet.system.errors import CgroupVanishedError, HostError, MalformedContentError, from_oserror
from koordlet.system.psi import PSI


class Stat(enum.Enum):
    CPU_USAGE = "cpu_usage"
    THROTTLING = "throttling"
    MEMORY = "memory"
    MEMORY_USAGE = "memory_usage"
    CPU_PRESSURE = "cpu.pressure"
    MEMORY_PRESSURE = "memory.pressure"
    IO_PRESSURE = "io.pressure"


ALL_USAGE = frozenset({Stat.CPU_USAGE, Stat.THROTTLING, Stat.MEMORY})
PRESSURES = (Stat.CPU_PRESSURE, Stat.MEMORY_PRESSURE, Stat.IO_PRESSURE)


@dataclass(frozen=True, slots=True)
class Throttling:
    """Cumulative CFS bandwidth counters (``cpu.stat``); throttled time in nanoseconds."""

    nr_periods: int
    nr_throttled: int
    throttled_ns: int


@dataclass(frozen=True, slots=True)
class MemoryStat:
    """The ``memory.stat`` counters the koordlet uses, in bytes (v1 ``total_*``: hierarchical)."""

    inactive_anon: int
    active_anon: int
    unevictable: int
    inactive_file: int
    active_file: int

    @property
    def usage(self) -> int:
        """Usage without page cache: anon + unevictable (upstream's ``MemoryStatRaw.Usage``)."""
        return self.inactive_anon + self.active_anon + self.unevictable

    @property
    def usage_with_page_cache(self) -> int:
        return self.usage + self.active_file + self.inactive_file


@dataclass(slots=True)
class CgroupSample:
    """What was read for one cgroup; a statistic that failed is None with its error kept."""

    relative: str
    cpu_usage_ns: int | None = None
    throttling: Throttling | None = None
    memory: MemoryStat | None = None
    memory_usage: int | None = None
    pressure: dict[Stat, PSI] = field(default_factory=dict)
    errors: dict[Stat, HostError] = field(default_factory=dict)

    @property
    def vanished(self) -> bool:
        """The cgroup went away (a pod or container that ended): skip it this tick."""
        return any(isinstance(e, CgroupVanishedError) for e in self.errors.values())


_MEMORY_KEYS_V1 = (
    b"total_inactive_anon",
    b"total_active_anon",
    b"total_unevictable",
    b"total_inactive_file",
    b"total_active_file",
)
_MEMORY_KEYS_V2 = (b"inactive_anon", b"active_anon", b"unevictable", b"inactive_file", b"active_file")
_THROTTLE_KEYS_V1 = (b"nr_periods", b"nr_throttled", b"throttled_time")
#: v2 cpu.stat serves usage and throttling from one file
_CPU_KEYS_V2 = (b"usage_usec", b"nr_periods", b"nr_throttled", b"throttled_usec")
_V2_CPU_FIELDS = {Stat.CPU_USAGE: (0,), Stat.THROTTLING: (1, 2, 3)}


@dataclass(frozen=True, slots=True)
class _Plan:
    stat: Stat
    subsystem: Subsystem
    file: str
    kind: int
    keys: tuple[bytes, ...] | None


class StatsReader:
    """Batched statistic reads for many cgroups, sharing one FileCache across ticks."""

    def __init__(self, cgroups: CgroupFS, cache: io.FileCache | None = None) -> None:
        self.cgroups = cgroups
        self.cache = cache if cache is not None else io.new_file_cache()

    def _plans(self, stats: frozenset[Stat]) -> list[_Plan]:
        v2 = self.cgroups.version == 2
        plans: list[_Plan] = []
        if v2 and stats & {Stat.CPU_USAGE, Stat.THROTTLING}:
            plans.append(_Plan(Stat.CPU_USAGE, Subsystem.CPU, "cpu.stat", io.KIND_KEYS, _CPU_KEYS_V2))
        elif not v2:
            if Stat.CPU_USAGE in stats:
                plans.append(_Plan(Stat.CPU_USAGE, Subsystem.CPUACCT, "cpuacct.usage", io.KIND_INT, None))
            if Stat.THROTTLING in stats:
                plans.append(
                    _Plan(Stat.THROTTLING, Subsystem.CPU, "cpu.stat", io.KIND_KEYS, _THROTTLE_KEYS_V1)
                )
        if Stat.MEMORY in stats:
            keys = _MEMORY_KEYS_V2 if v2 else _MEMORY_KEYS_V1
            plans.append(_Plan(Stat.MEMORY, Subsystem.MEMORY, "memory.stat", io.KIND_KEYS, keys))
        if Stat.MEMORY_USAGE in stats:
            name = "memory.current" if v2 else "memory.usage_in_bytes"
            plans.append(_Plan(Stat.MEMORY_USAGE, Subsystem.MEMORY, name, io.KIND_INT, None))
        for pressure in PRESSURES:
            if pressure in stats:
                # v1 has per-cgroup PSI only on Anolis, under cpuacct
                plans.append(_Plan(pressure, Subsystem.CPUACCT, pressure.value, io.KIND_PSI, None))
        return plans

    def read(self, relatives: list[str], stats: frozenset[Stat] = ALL_USAGE) -> list[CgroupSample]:
        """One sample per cgroup directory (relative to the controller roots), in order."""
        plans = self._plans(stats)
        requests: list[io.Request] = []
        for relative in relatives:
            for plan in plans:
                path = self.cgroups.directory(plan.subsystem, relative) / plan.file
                requests.append((os.fsencode(path), plan.kind, plan.keys))
        cells = self.cache.read(requests)
        samples: list[CgroupSample] = []
        i = 0
        for relative in relatives:
            sample = CgroupSample(relative)
            for plan in plans:
                self._store(sample, plan, cells[i], stats, requests[i][0])
                i += 1
            samples.append(sample)
        return samples

    def _store(
        self, sample: CgroupSample, plan: _Plan, cell: object, stats: frozenset[Stat], path: bytes
    ) -> None:
        # v2 cpu.stat answers for both CPU usage and throttling
        targets: list[Stat] = [plan.stat]
        if plan.keys is _CPU_KEYS_V2:
            targets = [s for s in (Stat.CPU_USAGE, Stat.THROTTLING) if s in stats]
        if isinstance(cell, OSError):
            error = from_oserror(cell, directory=os.path.dirname(os.fsdecode(path)))
            for stat in targets:
                sample.errors[stat] = error
            return
        if isinstance(cell, int):
            if plan.stat is Stat.CPU_USAGE:
                sample.cpu_usage_ns = cell
            else:
                sample.memory_usage = cell
            return
        assert isinstance(cell, tuple)
        if plan.kind == io.KIND_PSI:
            sample.pressure[plan.stat] = PSI.from_values(cell)
            return
        keys = plan.keys or ()
        for stat in targets:
            indices = _V2_CPU_FIELDS[stat] if keys is _CPU_KEYS_V2 else tuple(range(len(keys)))
            values = [cell[i] for i in indices]
            if any(v is None for v in values):
                missing = ", ".join(keys[i].decode() for i in indices if cell[i] is None)
                sample.errors[stat] = MalformedContentError(
                    74, f"{plan.file} lacks {missing}", os.fsdecode(path)
                )
                continue
            numbers = [int(v) for v in values if v is not None]
            if stat is Stat.MEMORY:
                sample.memory = MemoryStat(*numbers)
            elif stat is Stat.CPU_USAGE:
                sample.cpu_usage_ns = numbers[0] * 1000
            elif keys is _CPU_KEYS_V2:
                sample.throttling = Throttling(numbers[0], numbers[1], numbers[2] * 1000)
            else:
                sample.throttling = Throttling(numbers[0], numbers[1], numbers[2])

    def retain(self, relatives: list[str], stats: frozenset[Stat] = ALL_USAGE) -> None:
        """Close kept descriptors of cgroups no longer read (after pods went away)."""
        keep = [
            os.fsencode(self.cgroups.directory(plan.subsystem, relative) / plan.file)
            for relative in relatives
            for plan in self._plans(stats)
        ]
        self.cache.retain(keep)

    def close(self) -> None:
        self.cache.close()
