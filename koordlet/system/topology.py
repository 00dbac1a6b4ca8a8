"""CPU topology from sysfs and /proc/cpuinfo: processors with socket, core, NUMA node and L3.

Upstream asks ``lscpu -e=CPU,NODE,SOCKET,CORE,CACHE,ONLINE``; lscpu reads the same sysfs
files this module reads, and numbers cores and sockets logically (in order of their first
CPU, unique across the machine), which is kept here because NodeResourceTopology
annotations and the cpuset logic compare those numbers. Processors are ordered as
upstream orders them: by NUMA node, socket, core, then CPU id.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path

from koordinator.api.cpuset import CPUSetError, parse_cpuset
from koordlet.system.errors import MalformedContentError
from koordlet.system.paths import HostPaths


@dataclass(frozen=True, slots=True, order=True)
class Processor:
    node: int
    socket: int
    core: int
    cpu: int
    l3: int = 0


@dataclass(frozen=True)
class CPUTopology:
    processors: tuple[Processor, ...]

    @property
    def number_cpus(self) -> int:
        return len(self.processors)

    def cpus(self) -> list[int]:
        return sorted(p.cpu for p in self.processors)

    def by_cpu(self) -> dict[int, Processor]:
        return {p.cpu: p for p in self.processors}

    def _group(self, attr: str) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = {}
        for p in self.processors:
            groups.setdefault(getattr(p, attr), []).append(p.cpu)
        return {k: sorted(v) for k, v in sorted(groups.items())}

    def cpus_by_node(self) -> dict[int, list[int]]:
        return self._group("node")

    def cpus_by_socket(self) -> dict[int, list[int]]:
        return self._group("socket")

    def cpus_by_core(self) -> dict[int, list[int]]:
        return self._group("core")

    def cpus_by_l3(self) -> dict[int, list[int]]:
        return self._group("l3")

    def siblings(self, cpu: int) -> list[int]:
        """Hyper-threads sharing ``cpu``'s core (including itself)."""
        core = self.by_cpu()[cpu].core
        return self.cpus_by_core()[core]


@dataclass(frozen=True)
class CPUBasicInfo:
    """What ``node.koordinator.sh/cpu-basic-info`` reports (without the resctrl mask)."""

    model_name: str
    vendor_id: str
    hyper_threading: bool
    turbo: bool
    flags: frozenset[str] = field(default_factory=frozenset)


def _read_int(path: Path, default: int | None = None) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        if default is None:
            raise MalformedContentError(errno.EBADMSG, "expected an integer", str(path)) from None
        return default


def _read_list(path: Path) -> list[int]:
    try:
        return parse_cpuset(path.read_text())
    except OSError:
        return []
    except CPUSetError:
        raise MalformedContentError(errno.EBADMSG, "expected a CPU list", str(path)) from None


def read_cpu_topology(paths: HostPaths) -> CPUTopology:
    """Online processors with logical core/socket ids, NUMA node and L3 cache id."""
    cpu_root = paths.sys("devices", "system", "cpu")
    online = _read_list(cpu_root / "online")
    if not online:
        online = sorted(int(p.name[3:]) for p in cpu_root.glob("cpu[0-9]*") if p.name[3:].isdigit())
    if not online:
        raise MalformedContentError(errno.ENOENT, "no CPUs listed", str(cpu_root))
    node_of: dict[int, int] = {}
    node_root = paths.sys("devices", "system", "node")
    for node_dir in sorted(node_root.glob("node[0-9]*")):
        for cpu in _read_list(node_dir / "cpulist"):
            node_of[cpu] = int(node_dir.name[4:])
    socket_ids: dict[int, int] = {}
    core_ids: dict[tuple[int, int], int] = {}
    processors: list[Processor] = []
    for cpu in online:
        topo = cpu_root / f"cpu{cpu}" / "topology"
        package = _read_int(topo / "physical_package_id", 0)
        core_id = _read_int(topo / "core_id", cpu)
        socket = socket_ids.setdefault(package, len(socket_ids))
        core = core_ids.setdefault((package, core_id), len(core_ids))
        l3 = _read_int(cpu_root / f"cpu{cpu}" / "cache" / "index3" / "id", 0)
        processors.append(Processor(node_of.get(cpu, 0), socket, core, cpu, l3))
    return CPUTopology(tuple(sorted(processors)))


def _cpuinfo_fields(text: str) -> dict[str, str]:
    """Fields of the first processor block of /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def read_cpu_basic_info(paths: HostPaths, topology: CPUTopology | None = None) -> CPUBasicInfo:
    try:
        text = paths.proc("cpuinfo").read_text()
    except OSError:
        text = ""
    fields = _cpuinfo_fields(text)
    smt = paths.sys("devices", "system", "cpu", "smt", "active")
    if smt.exists():
        hyper_threading = _read_int(smt, 0) == 1
    else:
        topo = topology or read_cpu_topology(paths)
        hyper_threading = any(len(cpus) > 1 for cpus in topo.cpus_by_core().values())
    no_turbo = paths.sys("devices", "system", "cpu", "intel_pstate", "no_turbo")
    turbo = no_turbo.exists() and _read_int(no_turbo, 1) == 0
    return CPUBasicInfo(
        model_name=fields.get("model name", ""),
        vendor_id=fields.get("vendor_id", ""),
        hyper_threading=hyper_threading,
        turbo=turbo,
        flags=frozenset(fields.get("flags", "").split()),
    )


@dataclass(frozen=True)
class NodeCPUInfo:
    """What the NodeInfoCollector stores as ``node_cpu_info``."""

    topology: CPUTopology
    basic: CPUBasicInfo
    #: ``info/L3/cbm_mask`` of resctrl ("" without resctrl)
    cat_l3_cbm_mask: str


@dataclass(frozen=True)
class NUMANodeInfo:
    """One entry of ``node_numa_info``."""

    node_id: int
    mem_total_bytes: int
    mem_free_bytes: int
