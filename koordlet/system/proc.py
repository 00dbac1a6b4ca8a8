"""procfs readers: CPU ticks (/proc/stat), memory (/proc/meminfo, NUMA meminfo), load
average, and which cgroups a process belongs to.

Every reader takes the injected :class:`HostPaths` and reports malformed content as
MalformedContentError naming the file; a missing file is the domain error of its errno.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, cast

from koordlet.system.cgroup import io
from koordlet.system.errors import MalformedContentError, from_oserror
from koordlet.system.paths import HostPaths

_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


def _malformed(path: Path, why: str) -> MalformedContentError:
    return MalformedContentError(errno.EBADMSG, why, str(path))


def _read(path: Path) -> bytes:
    return io.read_file(path.parent, path.name)


class CPUTicks(NamedTuple):
    """One ``cpu`` line of /proc/stat, in USER_HZ ticks (a tuple: one is built per CPU
    every collection tick)."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int
    guest: int
    guest_nice: int

    @property
    def busy(self) -> int:
        """user + nice + system + irq + softirq: upstream's "used" ticks (no idle, iowait,
        steal; guest time is already inside user)."""
        return self.user + self.nice + self.system + self.irq + self.softirq

    @property
    def total(self) -> int:
        return self.busy + self.idle + self.iowait + self.steal


@dataclass(frozen=True, slots=True)
class ProcStat:
    total: CPUTicks
    per_cpu: dict[int, CPUTicks]


_new_ticks = tuple.__new__
_WIDTH = len(_CPU_FIELDS)


def parse_proc_stat(text: str, path: Path = Path("/proc/stat")) -> ProcStat:
    total: CPUTicks | None = None
    per_cpu: dict[int, CPUTicks] = {}
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        fields = line.split()
        name = fields[0]
        try:
            numbers = list(map(int, fields[1 : _WIDTH + 1]))
        except ValueError:
            raise _malformed(path, f"non-numeric {name} line") from None
        if len(numbers) < 7:
            raise _malformed(path, f"{name} line has {len(numbers)} fields, want at least 7")
        if len(numbers) < _WIDTH:  # older kernels print fewer fields
            numbers += [0] * (_WIDTH - len(numbers))
        # built as CPUTicks._make does, without its per-call length check (always _WIDTH)
        ticks: CPUTicks = _new_ticks(CPUTicks, numbers)
        if name == "cpu":
            total = ticks
        elif name[3:].isdigit():
            per_cpu[int(name[3:])] = ticks
    if total is None:
        raise _malformed(path, "no aggregate cpu line")
    return ProcStat(total, per_cpu)


def read_proc_stat(paths: HostPaths) -> ProcStat:
    path = paths.proc("stat")
    return parse_proc_stat(_read(path).decode(errors="replace"), path)


@dataclass(frozen=True, slots=True)
class MemInfo:
    """/proc/meminfo (or a NUMA node's meminfo) in KiB, by the kernel's field names."""

    fields: dict[str, int]

    def kib(self, name: str) -> int:
        return self.fields.get(name, 0)

    @property
    def total_bytes(self) -> int:
        return self.kib("MemTotal") * 1024

    @property
    def used_bytes(self) -> int:
        """Usage without page cache: MemTotal - MemAvailable (upstream's node memory usage)."""
        return max(self.kib("MemTotal") - self.kib("MemAvailable"), 0) * 1024

    @property
    def used_with_page_cache_bytes(self) -> int:
        return max(self.kib("MemTotal") - self.kib("MemFree"), 0) * 1024

    @property
    def numa_used_bytes(self) -> int:
        """A NUMA node has no MemAvailable: total - (free + file LRU + reclaimable slab)."""
        reclaimable = (
            self.kib("MemFree")
            + self.kib("Active(file)")
            + self.kib("Inactive(file)")
            + self.kib("SReclaimable")
        )
        return max(self.kib("MemTotal") - reclaimable, 0) * 1024


def parse_meminfo(text: str, path: Path = Path("/proc/meminfo")) -> MemInfo:
    fields: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("Node "):  # a NUMA node's meminfo: "Node 0 MemTotal: ..."
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[1].isdigit():
                line = parts[2]
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        value = rest.split()
        if not value:
            continue
        try:
            fields[name.strip()] = int(value[0])
        except ValueError:
            raise _malformed(path, f"non-numeric value for {name.strip()}") from None
    if "MemTotal" not in fields:
        raise _malformed(path, "no MemTotal")
    return MemInfo(fields)


def read_meminfo(paths: HostPaths) -> MemInfo:
    path = paths.proc("meminfo")
    return parse_meminfo(_read(path).decode(errors="replace"), path)


def numa_nodes(paths: HostPaths) -> list[int]:
    """NUMA node ids with memory or CPUs (sysfs ``node<N>`` directories)."""
    try:
        names = os.listdir(paths.sys("bus", "node", "devices"))
    except OSError:
        return []
    return sorted(int(n[4:]) for n in names if n.startswith("node") and n[4:].isdigit())


def read_numa_meminfo(paths: HostPaths) -> dict[int, MemInfo]:
    out: dict[int, MemInfo] = {}
    for node in numa_nodes(paths):
        path = paths.sys("bus", "node", "devices", f"node{node}", "meminfo")
        out[node] = parse_meminfo(_read(path).decode(errors="replace"), path)
    return out


#: the /proc/meminfo fields MemInfo's usage properties read (parsed in C by the FileCache)
_MEMINFO_FIELDS = ("MemTotal", "MemFree", "MemAvailable", "Active(file)", "Inactive(file)", "SReclaimable")
_MEMINFO_KEYS = tuple(f"{name}:".encode() for name in _MEMINFO_FIELDS)


class NodeStats(NamedTuple):
    """One read of the node's CPU and memory files."""

    stat: ProcStat
    #: only the fields of ``_MEMINFO_FIELDS`` (MemInfo.kib is 0 for the others)
    meminfo: MemInfo
    #: each NUMA node's meminfo; None when one of them could not be read
    numa: dict[int, MemInfo] | None


class NodeStatsReader:
    """``/proc/stat``, ``/proc/meminfo`` and every NUMA node's meminfo, read every tick
    as one FileCache batch: the descriptors are kept (procfs and sysfs regenerate the
    content on each read from offset 0) and ``/proc/meminfo``'s fields are parsed with
    the batch, in C where the extension is built. The NUMA directory is listed on each
    read; the batch is rebuilt when its nodes change. The same values as
    :func:`read_proc_stat`, :func:`read_meminfo` and :func:`read_numa_meminfo`, and the
    same domain errors for ``/proc/stat`` and ``/proc/meminfo``. With ``totals_only``, only
    those two are read and only the aggregate ``cpu`` line of ``/proc/stat`` is parsed
    (``ProcStat.per_cpu`` and ``NodeStats.numa`` are empty).
    """

    def __init__(
        self, paths: HostPaths, cache: io.FileCache | None = None, *, totals_only: bool = False
    ) -> None:
        self.paths = paths
        self.totals_only = totals_only
        self.cache = cache if cache is not None else io.new_file_cache()
        self._stat = paths.proc("stat")
        self._meminfo = paths.proc("meminfo")
        self._nodes: list[int] | None = None
        self._numa_paths: list[Path] = []
        self._batch: io.Batch | None = None

    def _compile(self, nodes: list[int]) -> io.Batch:
        self._nodes = nodes
        self._numa_paths = [self.paths.sys("bus", "node", "devices", f"node{n}", "meminfo") for n in nodes]
        requests: list[io.Request] = [
            (os.fsencode(self._stat), io.KIND_RAW, None),
            (os.fsencode(self._meminfo), io.KIND_KEYS, _MEMINFO_KEYS),
            *((os.fsencode(path), io.KIND_RAW, None) for path in self._numa_paths),
        ]
        self.cache.retain([request[0] for request in requests])  # nodes gone: close theirs
        self._batch = self.cache.batch(requests)
        return self._batch

    def read(self) -> NodeStats:
        nodes = [] if self.totals_only else numa_nodes(self.paths)
        batch = self._batch if nodes == self._nodes and self._batch is not None else self._compile(nodes)
        failed: list[int] = []
        cells = batch.read(failed)
        if failed and failed[0] < 2:  # /proc/stat or /proc/meminfo: the tick has nothing to report
            path = self._stat if failed[0] == 0 else self._meminfo
            raise from_oserror(cast(OSError, cells[failed[0]]), directory=path.parent)
        raw = cast(bytes, cells[0])
        if self.totals_only:  # the aggregate line comes first
            raw = raw.split(b"\n", 1)[0]
        stat = parse_proc_stat(raw.decode(errors="replace"), self._stat)
        values = cast(tuple[int | None, ...], cells[1])
        fields = {name: v for name, v in zip(_MEMINFO_FIELDS, values, strict=True) if v is not None}
        if "MemTotal" not in fields:
            raise _malformed(self._meminfo, "no MemTotal")
        numa: dict[int, MemInfo] | None = None
        if not failed:  # a NUMA node's file that failed (a node gone): no NUMA figures this tick
            try:
                numa = {
                    node: parse_meminfo(cast(bytes, data).decode(errors="replace"), path)
                    for node, path, data in zip(nodes, self._numa_paths, cells[2:], strict=True)
                }
            except MalformedContentError:
                numa = None
        return NodeStats(stat, MemInfo(fields), numa)

    def close(self) -> None:
        self.cache.close()
        self._batch, self._nodes = None, None


@dataclass(frozen=True, slots=True)
class LoadAvg:
    load1: float
    load5: float
    load15: float
    running: int
    total: int


def read_loadavg(paths: HostPaths) -> LoadAvg:
    path = paths.proc("loadavg")
    fields = _read(path).decode(errors="replace").split()
    try:
        running, _, total = fields[3].partition("/")
        return LoadAvg(float(fields[0]), float(fields[1]), float(fields[2]), int(running), int(total))
    except (IndexError, ValueError):
        raise _malformed(path, "expected 'l1 l5 l15 running/total lastpid'") from None


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` -> controller -> cgroup path; the v2 entry is under ``""``."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, cgroup_path = parts
        for controller in controllers.split(",") if controllers else [""]:
            out[controller.removeprefix("name=") if controller.startswith("name=") else controller] = (
                cgroup_path
            )
    return out


def read_process_cgroups(paths: HostPaths, pid: int) -> dict[str, str]:
    """Cgroup membership of ``pid``; CgroupVanishedError when the process has exited."""
    path = paths.proc(str(pid), "cgroup")
    return parse_proc_cgroup(_read(path).decode(errors="replace"))


def parse_id_list(text: str) -> list[int]:
    """``cgroup.procs`` / ``tasks`` content: one id per line."""
    return [int(line) for line in text.split() if line.isdigit()]
