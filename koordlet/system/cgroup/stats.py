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
import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

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

    # members are singletons compared by identity: hash them so too (Enum's own __hash__
    # hashes the name in Python, and collectors key dicts by Stat thousands of times a tick)
    __hash__ = object.__hash__


ALL_USAGE = frozenset({Stat.CPU_USAGE, Stat.THROTTLING, Stat.MEMORY})
PRESSURES = (Stat.CPU_PRESSURE, Stat.MEMORY_PRESSURE, Stat.IO_PRESSURE)


class Throttling(NamedTuple):
    """Cumulative CFS bandwidth counters (``cpu.stat``); throttled time in nanoseconds."""

    nr_periods: int
    nr_throttled: int
    throttled_ns: int


class MemoryStat(NamedTuple):
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


class CgroupSample:
    """What was read for one cgroup; a statistic that failed is None with its error kept."""

    __slots__ = ("cpu_usage_ns", "errors", "memory", "memory_usage", "pressure", "relative", "throttling")

    def __init__(self, relative: str) -> None:
        self.relative = relative
        self.cpu_usage_ns: int | None = None
        self.throttling: Throttling | None = None
        self.memory: MemoryStat | None = None
        self.memory_usage: int | None = None
        self.pressure: dict[Stat, PSI] = {}
        self.errors: dict[Stat, HostError] = {}

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in sorted(self.__slots__))
        return f"CgroupSample({fields})"

    @property
    def vanished(self) -> bool:
        """The cgroup went away (a pod or container that ended): skip it this tick."""
        errors = self.errors
        return bool(errors) and any(isinstance(e, CgroupVanishedError) for e in errors.values())


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

Store = Callable[[CgroupSample, tuple[int | None, ...] | int | bytes], None]


def _store_cpu_usage(sample: CgroupSample, cell: object) -> None:
    sample.cpu_usage_ns = cell  # type: ignore[assignment]


def _store_memory_usage(sample: CgroupSample, cell: object) -> None:
    sample.memory_usage = cell  # type: ignore[assignment]


def _lacks(
    sample: CgroupSample, stat: Stat, file: str, keys: tuple[bytes, ...], cell: tuple[int | None, ...]
) -> None:
    missing = ", ".join(k.decode() for k, v in zip(keys, cell, strict=True) if v is None)
    sample.errors[stat] = MalformedContentError(errno.EBADMSG, f"{file} lacks {missing}", sample.relative)


def _memory(keys: tuple[bytes, ...]) -> Store:
    def store(sample: CgroupSample, cell: Any) -> None:
        if None in cell:
            _lacks(sample, Stat.MEMORY, "memory.stat", keys, cell)
        else:
            sample.memory = tuple.__new__(MemoryStat, cell)

    return store


def _store_throttling_v1(sample: CgroupSample, cell: Any) -> None:
    if None in cell:
        _lacks(sample, Stat.THROTTLING, "cpu.stat", _THROTTLE_KEYS_V1, cell)
    else:
        sample.throttling = tuple.__new__(Throttling, cell)


def _v2_cpu(usage: bool, throttling: bool) -> Store:
    def store(sample: CgroupSample, cell: Any) -> None:
        if usage:
            if cell[0] is None:
                _lacks(sample, Stat.CPU_USAGE, "cpu.stat", _CPU_KEYS_V2[:1], cell[:1])
            else:
                sample.cpu_usage_ns = cell[0] * 1000
        if throttling:
            if None in cell[1:]:
                _lacks(sample, Stat.THROTTLING, "cpu.stat", _CPU_KEYS_V2[1:], cell[1:])
            else:
                sample.throttling = Throttling(cell[1], cell[2], cell[3] * 1000)

    return store


def _pressure(stat: Stat) -> Store:
    def store(sample: CgroupSample, cell: Any) -> None:
        sample.pressure[stat] = tuple.__new__(PSI, cell)

    return store


#: request lists kept by a StatsReader (one per set of statistics; collectors use a few)
_KEPT_REQUEST_LISTS = 8


@dataclass(frozen=True, slots=True)
class _Plan:
    #: the statistics this file serves (v2 cpu.stat serves two)
    stats: tuple[Stat, ...]
    subsystem: Subsystem
    file: str
    kind: int
    keys: tuple[bytes, ...] | None
    store: Store


class StatsReader:
    """Batched statistic reads for many cgroups, sharing one FileCache across ticks.

    The request list of the last call for each set of statistics is kept: collectors
    read the same cgroups tick after tick (each collector its own set, through one shared
    reader), and building paths costs more than reading the files. When the cgroups of a
    set change (pods came or went), the descriptors no kept list reads any more are
    closed: those of cgroups gone, never those another collector still reads.
    """

    def __init__(self, cgroups: CgroupFS, cache: io.FileCache | None = None) -> None:
        self.cgroups = cgroups
        self.cache = cache if cache is not None else io.new_file_cache()
        self._roots = {s: str(cgroups.controller_root(s)).rstrip("/") for s in Subsystem}
        #: statistics -> (relatives, plans, requests) of the last read of that set
        self._last: dict[frozenset[Stat], tuple[list[str], list[_Plan], list[io.Request]]] = {}

    def _plans(self, stats: frozenset[Stat]) -> list[_Plan]:
        plans: list[_Plan] = []
        if self.cgroups.version == 2:
            cpu = tuple(s for s in (Stat.CPU_USAGE, Stat.THROTTLING) if s in stats)
            if cpu:
                store = _v2_cpu(Stat.CPU_USAGE in cpu, Stat.THROTTLING in cpu)
                plans.append(_Plan(cpu, Subsystem.CPU, "cpu.stat", io.KIND_KEYS, _CPU_KEYS_V2, store))
            memory_keys, usage_file = _MEMORY_KEYS_V2, "memory.current"
        else:
            if Stat.CPU_USAGE in stats:
                plans.append(
                    _Plan(
                        (Stat.CPU_USAGE,),
                        Subsystem.CPUACCT,
                        "cpuacct.usage",
                        io.KIND_INT,
                        None,
                        _store_cpu_usage,
                    )
                )
            if Stat.THROTTLING in stats:
                plans.append(
                    _Plan(
                        (Stat.THROTTLING,),
                        Subsystem.CPU,
                        "cpu.stat",
                        io.KIND_KEYS,
                        _THROTTLE_KEYS_V1,
                        _store_throttling_v1,
                    )
                )
            memory_keys, usage_file = _MEMORY_KEYS_V1, "memory.usage_in_bytes"
        if Stat.MEMORY in stats:
            store = _memory(memory_keys)
            plans.append(
                _Plan((Stat.MEMORY,), Subsystem.MEMORY, "memory.stat", io.KIND_KEYS, memory_keys, store)
            )
        if Stat.MEMORY_USAGE in stats:
            plans.append(
                _Plan(
                    (Stat.MEMORY_USAGE,), Subsystem.MEMORY, usage_file, io.KIND_INT, None, _store_memory_usage
                )
            )
        for pressure in PRESSURES:
            if pressure in stats:
                # v1 has per-cgroup PSI only on Anolis, under cpuacct
                plans.append(
                    _Plan(
                        (pressure,), Subsystem.CPUACCT, pressure.value, io.KIND_PSI, None, _pressure(pressure)
                    )
                )
        return plans

    def _requests(self, relatives: list[str], stats: frozenset[Stat]) -> tuple[list[_Plan], list[io.Request]]:
        last = self._last.get(stats)
        if last is not None and last[0] == relatives:
            return last[1], last[2]
        plans = self._plans(stats)
        requests: list[io.Request] = []
        for relative in relatives:
            rel = relative.strip("/")
            for plan in plans:
                path = (
                    f"{self._roots[plan.subsystem]}/{rel}/{plan.file}"
                    if rel
                    else f"{self._roots[plan.subsystem]}/{plan.file}"
                )
                requests.append((os.fsencode(path), plan.kind, plan.keys))
        if len(self._last) >= _KEPT_REQUEST_LISTS and stats not in self._last:
            self._last.clear()
        self._last[stats] = (list(relatives), plans, requests)
        if last is not None:  # the cgroups of this set changed: drop what no set reads any more
            self.cache.retain([r[0] for _, _, kept in self._last.values() for r in kept])
        return plans, requests

    def read(self, relatives: list[str], stats: frozenset[Stat] = ALL_USAGE) -> list[CgroupSample]:
        """One sample per cgroup directory (relative to the controller roots), in order."""
        plans, requests = self._requests(relatives, stats)
        cells = self.cache.read(requests)
        samples = [CgroupSample(relative) for relative in relatives]
        width = len(plans)
        for j, plan in enumerate(plans):  # one plan's cells are every width-th, from j
            store = plan.store
            for k, (sample, cell) in enumerate(zip(samples, cells[j::width], strict=True)):
                if isinstance(cell, OSError):
                    path = os.fsdecode(requests[k * width + j][0])
                    error = from_oserror(cell, directory=os.path.dirname(path))
                    for stat in plan.stats:
                        sample.errors[stat] = error
                else:
                    store(sample, cell)
        return samples

    def close(self) -> None:
        self.cache.close()
        self._last.clear()
