"""Cgroup statistics the collectors read every tick: CPU usage, memory, throttling, PSI.

:class:`StatsReader` turns "these cgroups, these statistics" into one batched, parsed
read through a FileCache (kept descriptors, pread, parsing in C when the extension is
built), and returns it as :class:`StatColumns` (a list of values per statistic, which the
per-tick collectors handle a column at a time) or as a :class:`CgroupSample` per cgroup.
A failure never breaks the batch: each statistic that could not be read is left out and
its domain error recorded, and a cgroup that vanished is flagged so the caller skips it.

The v1/v2 differences live here and in the registry only: v1 splits the statistics over
the cpuacct, cpu and memory hierarchies and names memory counters ``total_*``; v2 keeps
everything in one directory and reports CPU time as ``usage_usec`` in ``cpu.stat``.
"""

from __future__ import annotations

import enum
import errno
import os
from array import array
from collections.abc import Callable, Sequence
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
    #: bytes charged to the cgroup on each NUMA node (``memory.numa_stat``)
    MEMORY_NUMA = "memory_numa"
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

    __slots__ = (
        "cpu_usage_ns",
        "errors",
        "memory",
        "memory_numa",
        "memory_usage",
        "pressure",
        "relative",
        "throttling",
    )

    def __init__(
        self,
        relative: str,
        cpu_usage_ns: int | None = None,
        throttling: Throttling | None = None,
        memory: MemoryStat | None = None,
        memory_usage: int | None = None,
        memory_numa: dict[int, int] | None = None,
        pressure: dict[Stat, PSI] | None = None,
    ) -> None:
        self.relative = relative
        self.cpu_usage_ns = cpu_usage_ns
        self.throttling = throttling
        self.memory = memory
        self.memory_usage = memory_usage
        self.memory_numa = memory_numa
        self.pressure: dict[Stat, PSI] = {} if pressure is None else pressure
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

Errors = dict[int, dict[Stat, HostError]]
Columns = dict[Stat, list[Any]]
#: a plan's cells (None where the read failed) and the positions of those that lack a
#: key (the FileCache says which) -> its statistics' columns, noting the positions whose
#: content lacks something in ``errors``
Split = Callable[[list[Any], list[str], Columns, Errors, list[int]], None]


def _lacking(
    stat: Stat,
    file: str,
    keys: tuple[bytes, ...],
    cells: list[Any],
    relatives: list[str],
    errors: Errors,
    lacking: list[int],
) -> list[Any]:
    """``cells`` (changed in place) with None where a tuple lacks one of ``keys`` (at most
    the positions in ``lacking``), that position's error noted."""
    for k in [k for k in lacking if cells[k] is not None and None in cells[k]]:
        missing = ", ".join(key.decode() for key, v in zip(keys, cells[k], strict=True) if v is None)
        errors.setdefault(k, {})[stat] = MalformedContentError(
            errno.EBADMSG, f"{file} lacks {missing}", relatives[k]
        )
        cells[k] = None
    return cells


def _as_read(stat: Stat) -> Split:
    def split(
        cells: list[Any], relatives: list[str], columns: Columns, errors: Errors, lacking: list[int]
    ) -> None:
        columns[stat] = cells

    return split


def _complete(stat: Stat, file: str, keys: tuple[bytes, ...]) -> Split:
    """Tuples that must carry every key (memory.stat, v1 cpu.stat)."""

    def split(
        cells: list[Any], relatives: list[str], columns: Columns, errors: Errors, lacking: list[int]
    ) -> None:
        columns[stat] = _lacking(stat, file, keys, cells, relatives, errors, lacking)

    return split


def _v2_cpu(usage: bool, throttling: bool) -> Split:
    """v2 ``cpu.stat``: usage in ns from ``usage_usec``; throttling as v1's three counters."""

    def split(
        cells: list[Any], relatives: list[str], columns: Columns, errors: Errors, lacking: list[int]
    ) -> None:
        if usage:
            first = [None if cell is None else cell[:1] for cell in cells]
            checked = _lacking(
                Stat.CPU_USAGE, "cpu.stat", _CPU_KEYS_V2[:1], first, relatives, errors, lacking
            )
            columns[Stat.CPU_USAGE] = [None if cell is None else cell[0] * 1000 for cell in checked]
        if throttling:
            rest = [None if cell is None else cell[1:] for cell in cells]
            checked = _lacking(
                Stat.THROTTLING, "cpu.stat", _CPU_KEYS_V2[1:], rest, relatives, errors, lacking
            )
            columns[Stat.THROTTLING] = [None if c is None else (c[0], c[1], c[2] * 1000) for c in checked]

    return split


NodeFields = tuple[tuple[int, int], ...] | None
_NUMA_KEYS_V1 = (b"hierarchical_total=", b"total=")
_NUMA_KEYS_V2 = (b"anon ", b"file ")


def _numa_split(combine: Callable[[tuple[NodeFields, ...]], dict[int, int] | None], wanted: str) -> Split:
    """``memory.numa_stat`` cells (per key, the line's (node, value) fields) as bytes per node."""

    def split(
        cells: list[Any], relatives: list[str], columns: Columns, errors: Errors, lacking: list[int]
    ) -> None:
        column: list[dict[int, int] | None] = []
        for k, cell in enumerate(cells):
            value = None if cell is None else combine(cell)
            if value is None and cell is not None:
                errors.setdefault(k, {})[Stat.MEMORY_NUMA] = MalformedContentError(
                    errno.EBADMSG, f"memory.numa_stat lacks {wanted}", relatives[k]
                )
            column.append(value)
        columns[Stat.MEMORY_NUMA] = column

    return split


def _numa_v1(page_size: int) -> Split:
    """v1 counts pages. The ``hierarchical_total`` line, as a pod's memory is charged to its
    container cgroups: upstream reads the first line, ``total``, which counts the pod
    cgroup's own pages only (about none); ``total`` stays the fallback for kernels that
    print no hierarchical lines."""

    def combine(cell: tuple[NodeFields, ...]) -> dict[int, int] | None:
        pages = cell[0] if cell[0] is not None else cell[1]
        return None if pages is None else {node: n * page_size for node, n in pages}

    return _numa_split(combine, "a total line")


def _numa_v2_combine(cell: tuple[NodeFields, ...]) -> dict[int, int] | None:
    """v2 counts bytes (hierarchically): anon + file per node. Upstream turns them into
    4 KiB pages and multiplies those by the page size, which counts 16 times too much on
    64 KiB-page kernels; bytes stay bytes here."""
    anon, file = cell
    if anon is None or file is None:
        return None
    per_node = dict(anon)
    for node, used in file:
        per_node[node] = per_node.get(node, 0) + used
    return per_node


_numa_v2 = _numa_split(_numa_v2_combine, "anon and file lines")


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
    split: Split
    #: the NamedTuple its values are built as by StatsReader.read (None: plain values)
    record: type[tuple[Any, ...]] | None = None
    #: its values are the statistic as parsed (StatsReader.read_values may read it)
    as_parsed: bool = False


def _vanished(errors: Errors) -> frozenset[int]:
    """Positions of the cgroups that vanished (pods or containers that ended)."""
    return frozenset(
        k
        for k, per_stat in errors.items()
        if any(isinstance(e, CgroupVanishedError) for e in per_stat.values())
    )


class StatColumns:
    """One batched read, statistic by statistic: ``columns[stat][k]`` is the value for
    the ``k``-th cgroup asked, or None where it could not be read (``errors[k]`` says
    why). A cgroup that vanished has None in every column.

    The values: CPU usage in nanoseconds and memory usage in bytes (ints); throttling as
    a tuple in :class:`Throttling`'s field order, ``memory.stat`` in :class:`MemoryStat`'s
    and pressure in :class:`PSI`'s (plain tuples: the collectors' hot loops index them);
    memory by NUMA node as ``{node: bytes}``.
    """

    __slots__ = ("columns", "errors", "relatives", "vanished")

    def __init__(self, relatives: list[str], columns: dict[Stat, list[Any]], errors: Errors) -> None:
        self.relatives = relatives
        self.columns = columns
        self.errors = errors
        #: positions of the cgroups that vanished (pods or containers that ended)
        self.vanished = _vanished(errors)
        for column in columns.values():
            for k in self.vanished:
                column[k] = None

    def samples(self) -> list[CgroupSample]:
        """The same read as one :class:`CgroupSample` per cgroup."""
        relatives = self.relatives
        columns = self.columns
        nothing: list[Any] = [None] * len(relatives)
        pressure: list[Any] = nothing
        for stat in PRESSURES:
            if stat in columns:
                if pressure is nothing:
                    pressure = [{} for _ in relatives]
                for per_cgroup, value in zip(pressure, _as_records(columns[stat], PSI), strict=True):
                    if value is not None:
                        per_cgroup[stat] = value
        throttling, memory = columns.get(Stat.THROTTLING), columns.get(Stat.MEMORY)
        samples = list(
            map(
                CgroupSample,
                relatives,
                columns.get(Stat.CPU_USAGE, nothing),
                nothing if throttling is None else _as_records(throttling, Throttling),
                nothing if memory is None else _as_records(memory, MemoryStat),
                columns.get(Stat.MEMORY_USAGE, nothing),
                columns.get(Stat.MEMORY_NUMA, nothing),
                pressure,
            )
        )
        for k, per_stat in self.errors.items():
            samples[k].errors.update(per_stat)
        return samples


_tuple_new = tuple.__new__


def _as_records(cells: list[Any], record: type[tuple[Any, ...]]) -> list[Any]:
    """``cells`` as ``record`` instances (None kept): as they are when the FileCache built
    them so (a column is built one way throughout), else converted."""
    for cell in cells:
        if cell is not None:
            if type(cell) is record:
                return cells
            break
    return [None if cell is None else _tuple_new(record, cell) for cell in cells]


class StatValues:
    """One batched read of statistics kept as the parsers give them, with no value object
    per file (:meth:`StatsReader.read_values`): the integers of every cgroup one after
    another, ``width`` per cgroup, a statistic's starting ``offsets[stat]`` within a
    cgroup's (CPU and memory usage one value; pressure :class:`PSI`'s eight, averages in
    hundredths); ``present[i]`` is 1 where value ``i`` was read (0 where the cgroup's file
    could not be read, ``errors[k]`` says why; PSI's ``full`` values are absent where the
    file has no such line). A cgroup that vanished has no value present.
    """

    __slots__ = ("errors", "offsets", "present", "relatives", "values", "vanished", "width")

    def __init__(
        self,
        relatives: list[str],
        values: array[int],
        present: bytes,
        offsets: dict[Stat, int],
        width: int,
        errors: Errors,
    ) -> None:
        self.relatives = relatives
        self.values = values
        self.offsets = offsets
        self.width = width
        self.errors = errors
        self.vanished = _vanished(errors)
        if self.vanished:
            flags = bytearray(present)
            for k in self.vanished:
                flags[k * width : (k + 1) * width] = bytes(width)
            present = bytes(flags)
        self.present = present

    def pressure(self, k: int, stat: Stat) -> tuple[int | None, ...] | None:
        """The ``k``-th cgroup's pressure ``stat`` as :meth:`StatsReader.read_columns`
        gives it: PSI's eight fields, None where absent; None where the file could not be read."""
        start = k * self.width + self.offsets[stat]
        if not self.present[start]:
            return None
        end = start + len(PSI._fields)
        values, present = self.values[start:end], self.present[start:end]
        return tuple([v if p else None for v, p in zip(values, present, strict=True)])


class _Kept(NamedTuple):
    """The last read of one set of statistics: its cgroups, plans and compiled requests."""

    relatives: list[str]
    plans: list[_Plan]
    batch: io.Batch


def _errors(kept: _Kept, cells: Sequence[Any], failed: list[int]) -> Errors:
    """The domain error of each failed request, under its cgroup and statistics."""
    errors: Errors = {}
    width, plans, requests = len(kept.plans), kept.plans, kept.batch.requests
    for i in failed:
        k, j = divmod(i, width)
        path = os.fsdecode(requests[i][0])
        error = from_oserror(cells[i], directory=os.path.dirname(path))
        per_stat = errors.setdefault(k, {})
        for stat in plans[j].stats:
            per_stat[stat] = error
    return errors


class StatsReader:
    """Batched statistic reads for many cgroups, sharing one FileCache across ticks.

    The request list of the last call for each set of statistics is kept, compiled into
    a FileCache batch: collectors read the same cgroups tick after tick (each collector
    its own set, through one shared reader), and building paths costs more than reading
    the files. When the cgroups of a set change (pods came or went), the descriptors no
    kept list reads any more are closed: those of cgroups gone, never those another
    collector still reads. :meth:`read` has the FileCache build the records
    (:class:`Throttling`, :class:`MemoryStat`, :class:`PSI`) as it parses;
    :meth:`read_columns` keeps plain tuples, which the collectors' loops index fastest.
    """

    def __init__(self, cgroups: CgroupFS, cache: io.FileCache | None = None) -> None:
        self.cgroups = cgroups
        self.cache = cache if cache is not None else io.new_file_cache()
        self._roots = {s: str(cgroups.controller_root(s)).rstrip("/") for s in Subsystem}
        #: (statistics, as records) -> what the last read of that set compiled
        self._last: dict[tuple[frozenset[Stat], bool], _Kept] = {}

    def _plans(self, stats: frozenset[Stat]) -> list[_Plan]:
        plans: list[_Plan] = []
        if self.cgroups.version == 2:
            cpu = tuple(s for s in (Stat.CPU_USAGE, Stat.THROTTLING) if s in stats)
            if cpu:
                split = _v2_cpu(Stat.CPU_USAGE in cpu, Stat.THROTTLING in cpu)
                plans.append(_Plan(cpu, Subsystem.CPU, "cpu.stat", io.KIND_KEYS, _CPU_KEYS_V2, split))
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
                        _as_read(Stat.CPU_USAGE),
                        as_parsed=True,
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
                        _complete(Stat.THROTTLING, "cpu.stat", _THROTTLE_KEYS_V1),
                        Throttling,
                    )
                )
            memory_keys, usage_file = _MEMORY_KEYS_V1, "memory.usage_in_bytes"
        if Stat.MEMORY in stats:
            split = _complete(Stat.MEMORY, "memory.stat", memory_keys)
            plans.append(
                _Plan(
                    (Stat.MEMORY,),
                    Subsystem.MEMORY,
                    "memory.stat",
                    io.KIND_KEYS,
                    memory_keys,
                    split,
                    MemoryStat,
                )
            )
        if Stat.MEMORY_USAGE in stats:
            plans.append(
                _Plan(
                    (Stat.MEMORY_USAGE,),
                    Subsystem.MEMORY,
                    usage_file,
                    io.KIND_INT,
                    None,
                    _as_read(Stat.MEMORY_USAGE),
                    as_parsed=True,
                )
            )
        if Stat.MEMORY_NUMA in stats:
            if self.cgroups.version == 1:
                split, keys = _numa_v1(os.sysconf("SC_PAGE_SIZE")), _NUMA_KEYS_V1
            else:
                split, keys = _numa_v2, _NUMA_KEYS_V2
            plans.append(
                _Plan((Stat.MEMORY_NUMA,), Subsystem.MEMORY, "memory.numa_stat", io.KIND_NODES, keys, split)
            )
        for pressure in PRESSURES:
            if pressure in stats:
                # v1 has per-cgroup PSI only on Anolis, under cpuacct
                plans.append(
                    _Plan(
                        (pressure,),
                        Subsystem.CPUACCT,
                        pressure.value,
                        io.KIND_PSI,
                        None,
                        _as_read(pressure),
                        PSI,
                        as_parsed=True,
                    )
                )
        return plans

    def _batch(self, relatives: list[str], stats: frozenset[Stat], records: bool) -> _Kept:
        key = (stats, records)
        last = self._last.get(key)
        if last is not None and last.relatives == relatives:
            return last
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
                requests.append((os.fsencode(path), plan.kind, plan.keys, plan.record if records else None))
        if len(self._last) >= _KEPT_REQUEST_LISTS and key not in self._last:
            self._last.clear()
        kept = self._last[key] = _Kept(list(relatives), plans, self.cache.batch(requests))
        if last is not None:  # the cgroups of this set changed: drop what no set reads any more
            self.cache.retain([r[0] for other in self._last.values() for r in other.batch.requests])
        return kept

    def _read(self, relatives: list[str], stats: frozenset[Stat], records: bool) -> StatColumns:
        kept = self._batch(relatives, stats, records)
        plans, batch = kept.plans, kept.batch
        failed: list[int] = []
        lacking: list[int] = []
        cells: list[Any] = batch.read(failed, lacking)
        width = len(plans)
        errors = _errors(kept, cells, failed)
        lacking_by_plan: list[list[int]] = [[] for _ in plans]
        for i in lacking:
            k, j = divmod(i, width)
            lacking_by_plan[j].append(k)
        for i in failed:  # the plan's cell becomes None, its statistics have the error
            cells[i] = None
        columns: dict[Stat, list[Any]] = {}
        for j, plan in enumerate(plans):  # one plan's cells are every width-th, from j
            plan.split(cells[j::width], relatives, columns, errors, lacking_by_plan[j])
        return StatColumns(relatives, columns, errors)

    def read_values(self, relatives: list[str], stats: frozenset[Stat]) -> StatValues:
        """``stats`` of each cgroup directory as the parsers give them, with no value object
        per file (see :class:`StatValues`). Only statistics kept as parsed (pressure, v1
        CPU usage, memory usage); ValueError for others."""
        kept = self._batch(relatives, stats, False)
        plans = kept.plans
        others = [stat.name for plan in plans if not plan.as_parsed for stat in plan.stats]
        if others:
            raise ValueError(f"not read as parsed on this host: {', '.join(sorted(others))}")
        failed: list[int] = []
        values, present, cells = kept.batch.read_values(failed)
        offsets: dict[Stat, int] = {}
        width = 0
        for plan in plans:
            offsets[plan.stats[0]] = width
            width += 1 if plan.kind == io.KIND_INT else len(PSI._fields)
        return StatValues(list(relatives), values, present, offsets, width, _errors(kept, cells, failed))

    def read_columns(self, relatives: list[str], stats: frozenset[Stat] = ALL_USAGE) -> StatColumns:
        """``stats`` of each cgroup directory (relative to the controller roots), as columns."""
        return self._read(relatives, stats, False)

    def read(self, relatives: list[str], stats: frozenset[Stat] = ALL_USAGE) -> list[CgroupSample]:
        """One sample per cgroup directory (relative to the controller roots), in order."""
        # the FileCache builds the records (Throttling, MemoryStat, PSI) as it parses
        return self._read(relatives, stats, True).samples()

    def close(self) -> None:
        self.cache.close()
        self._last.clear()
