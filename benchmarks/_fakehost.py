"""A fake node for the koordlet benchmarks (not a benchmark itself: the leading underscore
keeps it out of ``python -m benchmarks``).

:func:`build_node` writes, under one directory, what the koordlet reads on a real node
with cgroup v1, the systemd driver and Anolis-style PSI files under ``cpuacct``:

* kubepods with its QoS slices and ``pods`` pod cgroups of ``containers_per_pod``
  containers each (Guaranteed, Burstable and BestEffort mixed), every cgroup with the
  statistics files the collectors read (``cpuacct.usage``, ``cpu.stat``,
  ``memory.stat``, ``memory.usage_in_bytes``, the three ``*.pressure`` files) and the
  knobs they look at (``cpuset.cpus``, CFS quota and period);
* two host-application slices (``system.slice``, ``user.slice``) beside kubepods;
* ``/proc/stat`` (aggregate and per-CPU lines, a long ``intr`` line as the kernel
  prints), ``/proc/meminfo``, ``/proc/cpuinfo``, the sysfs CPU topology and the NUMA
  nodes' meminfo.

The benchmarks must not import the test suite, so this is a small, self-contained
builder rather than tests/fakes/host.py. :func:`advance` moves the counters on (a
second of work on a busy node) by rewriting the files in place with fixed-width values,
so readers holding descriptors never see a truncated file.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from koordinator.api.kubeqos import KubeQOSClass
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.layout import CgroupDriver, KubepodsLayout
from koordlet.system.paths import HostPaths

#: v1 hierarchies the fake kernel mounts
SUBSYSTEMS = ("cpu", "cpuacct", "cpuset", "memory")
HOST_APPLICATIONS = ("system.slice", "user.slice")
#: fixed width of rewritten counters (20 digits hold any int64)
_WIDTH = 20
_MEMORY_KEYS = [
    *("cache", "rss", "rss_huge", "shmem", "mapped_file", "dirty", "writeback", "swap", "pgpgin"),
    *("pgpgout", "pgfault", "pgmajfault", "inactive_anon", "active_anon", "inactive_file", "active_file"),
    "unevictable",
]
_MEMINFO_KEYS = [
    *("MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SwapCached", "Active", "Inactive"),
    *("Active(anon)", "Inactive(anon)", "Active(file)", "Inactive(file)", "Unevictable", "Mlocked"),
    *("SwapTotal", "SwapFree", "Dirty", "Writeback", "AnonPages", "Mapped", "Shmem", "KReclaimable"),
    *("Slab", "SReclaimable", "SUnreclaim", "KernelStack", "PageTables", "NFS_Unstable", "Bounce"),
    *("WritebackTmp", "CommitLimit", "Committed_AS", "VmallocTotal", "VmallocUsed", "VmallocChunk"),
    *("Percpu", "HardwareCorrupted", "AnonHugePages", "ShmemHugePages", "ShmemPmdMapped"),
    *("FileHugePages", "FilePmdMapped", "HugePages_Total", "HugePages_Free", "HugePages_Rsvd"),
    *("HugePages_Surp", "Hugepagesize", "Hugetlb", "DirectMap4k", "DirectMap2M", "DirectMap1G"),
]
_NUMA_MEMINFO_KEYS = [
    *("MemTotal", "MemFree", "MemUsed", "Active", "Inactive", "Active(anon)", "Inactive(anon)"),
    *("Active(file)", "Inactive(file)", "Unevictable", "Mlocked", "Dirty", "Writeback", "FilePages"),
    *("Mapped", "AnonPages", "Shmem", "KernelStack", "PageTables", "NFS_Unstable", "Bounce"),
    *("WritebackTmp", "KReclaimable", "Slab", "SReclaimable", "SUnreclaim", "AnonHugePages"),
]
_GIB_KIB = 1 << 20


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    """A temporary directory for a fake node: in memory (``/dev/shm``) where there is one,
    as cgroupfs and procfs are; on a disk the tree takes seconds to write and remove."""
    shm = Path("/dev/shm")
    where = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return tempfile.TemporaryDirectory(prefix="koord-bench-", dir=where)


def _counter(value: int) -> str:
    return f"{value:0{_WIDTH}d}"


def psi_text(some: float, full: float) -> str:
    return (
        f"some avg10={some:.2f} avg60={some / 2:.2f} avg300={some / 4:.2f} total={int(some * 1e6)}\n"
        f"full avg10={full:.2f} avg60={full / 2:.2f} avg300={full / 4:.2f} total={int(full * 1e6)}\n"
    )


def memory_stat_text(i: int) -> str:
    """A v1 ``memory.stat``: local counters, the hierarchical limit, the ``total_*`` counters."""
    local = "".join(f"{k} {i * 4096 + n}\n" for n, k in enumerate(_MEMORY_KEYS))
    total = "".join(f"total_{k} {i * 8192 + n}\n" for n, k in enumerate(_MEMORY_KEYS))
    return f"{local}hierarchical_memory_limit 9223372036854771712\n{total}"


def numa_stat_text(i: int) -> str:
    """A v1 ``memory.numa_stat`` on two NUMA nodes, in pages: the cgroup's own lines (a pod
    cgroup's memory is its containers'), then the hierarchical ones."""

    def lines(prefix: str, scale: int) -> str:
        return "".join(
            f"{prefix}{name}={(a + b) * scale} N0={a * scale} N1={b * scale}\n"
            for name, (a, b) in (
                ("total", (2 * i, i)),
                ("file", (i, 0)),
                ("anon", (i, i)),
                ("unevictable", (0, 0)),
            )
        )

    return lines("", 0) + lines("hierarchical_", 100)


def cpu_stat_text(periods: int, throttled: int) -> str:
    return (
        f"nr_periods {_counter(periods)}\nnr_throttled {_counter(throttled)}\n"
        f"throttled_time {_counter(throttled * 1000)}\n"
    )


@dataclass(frozen=True)
class FakePod:
    uid: str
    qos: KubeQOSClass
    cgroup_dir: str
    #: (``containerd://<id>``, cgroup directory) of each container
    containers: tuple[tuple[str, str], ...]

    def kubelet_pod(self) -> dict[str, Any]:
        """The pod as the kubelet's /pods lists it (what the states informer turns into PodMeta)."""
        statuses = [
            {"name": f"c{n}", "containerID": cid, "ready": True} for n, (cid, _) in enumerate(self.containers)
        ]
        return {
            "metadata": {"name": f"pod-{self.uid[:8]}", "namespace": "bench", "uid": self.uid},
            "spec": {"containers": [{"name": s["name"]} for s in statuses]},
            "status": {"phase": "Running", "qosClass": str(self.qos), "containerStatuses": statuses},
        }


@dataclass
class FakeNode:
    root: Path
    paths: HostPaths
    cgroups: CgroupFS
    layout: KubepodsLayout
    cpus: int
    numa_nodes: int
    pods: list[FakePod]
    #: every cgroup directory with statistics (QoS slices, host applications, pods, containers)
    cgroup_dirs: list[str]
    _tick: int = 0

    def file(self, subsystem: str, relative: str, name: str) -> Path:
        return self.cgroups.directory(subsystem, relative) / name

    def advance(self) -> None:
        """One more second of work: CPU ticks, cgroup CPU time and CFS periods grow."""
        self._tick += 1
        _write_proc(self.paths, self.cpus, self._tick)
        for n, rel in enumerate(self.cgroup_dirs):
            usage = (n + 1) * 1_000_000_000 + self._tick * 50_000_000
            _overwrite(self.file("cpuacct", rel, "cpuacct.usage"), _counter(usage) + "\n")
            stat = cpu_stat_text(self._tick * 10, self._tick * (n % 3))
            _overwrite(self.file("cpu", rel, "cpu.stat"), stat)


def _overwrite(path: Path, text: str) -> None:
    """Rewrite a file in place without truncating it first (the new text is as long)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, text.encode(), 0)
    finally:
        os.close(fd)


def _uid(i: int) -> str:
    h = f"{i:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _make_cgroup(cgroups: CgroupFS, rel: str, i: int, cpus: int) -> None:
    files = {
        ("cpuacct", "cpuacct.usage"): _counter((i + 1) * 1_000_000_000) + "\n",
        ("cpuacct", "cpu.pressure"): psi_text(1.25, 0.25),
        ("cpuacct", "memory.pressure"): psi_text(0.5, 0.1),
        ("cpuacct", "io.pressure"): psi_text(0.75, 0.5),
        ("cpu", "cpu.stat"): cpu_stat_text(0, 0),
        ("cpu", "cpu.shares"): "1024\n",
        ("cpu", "cpu.cfs_period_us"): "100000\n",
        ("cpu", "cpu.cfs_quota_us"): "-1\n",
        ("cpuset", "cpuset.cpus"): f"0-{cpus - 1}\n",
        ("cpuset", "cpuset.mems"): "0\n",
        ("memory", "memory.stat"): memory_stat_text(i),
        ("memory", "memory.usage_in_bytes"): f"{i * 8192 * 4}\n",
        ("memory", "memory.numa_stat"): numa_stat_text(i),
        ("memory", "memory.limit_in_bytes"): "9223372036854771712\n",
    }
    for (subsystem, name), content in files.items():
        _write(cgroups.directory(subsystem, rel) / name, content)


def _proc_stat(cpus: int, tick: int) -> str:
    def line(name: str, scale: int) -> str:
        user, system, idle = 1000 + tick * 40 * scale, 500 + tick * 10 * scale, 90000 + tick * 50 * scale
        return f"{name} {user} 7 {system} {idle} 120 0 33 0 0 0\n"

    lines = [line("cpu ", cpus)] + [line(f"cpu{c}", 1) for c in range(cpus)]
    lines.append("intr " + " ".join(str(tick * 7 + n % 5) for n in range(512)) + "\n")
    lines.append(f"ctxt {tick * 100000}\nbtime 1700000000\nprocesses {tick * 10}\n")
    lines.append("procs_running 3\nprocs_blocked 0\n")
    lines.append("softirq " + " ".join(str(tick * 3) for _ in range(11)) + "\n")
    return "".join(lines)


def _write_proc(paths: HostPaths, cpus: int, tick: int) -> None:
    """Rewrite /proc/stat in place, as the kernel's stays one file whose content changes
    (the koordlet keeps its descriptor and reads from offset 0 every tick)."""
    write_in_place(paths.proc("stat"), _proc_stat(cpus, tick))


def write_in_place(path: Path, text: str) -> None:
    """``text`` as the content of ``path``, keeping the file (a reader holding it open sees
    the new content); never empty in between: written over the old, then cut to length."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _cpu_list(cpus: list[int]) -> str:
    return f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else str(cpus[0])


def _write_host(paths: HostPaths, cpus: int, numa_nodes: int, memory_gib: int) -> None:
    _write_proc(paths, cpus, 0)
    total = memory_gib * _GIB_KIB
    values = {"MemTotal": total, "MemFree": total // 2, "MemAvailable": total * 3 // 5}
    _write(
        paths.proc("meminfo"),
        "".join(f"{k}: {values.get(k, 1000 + n)} kB\n" for n, k in enumerate(_MEMINFO_KEYS)),
    )
    _write(
        paths.proc("cpuinfo"),
        "\n".join(
            f"processor\t: {c}\nvendor_id\t: GenuineIntel\nmodel name\t: Fake CPU @ 2.50GHz\n"
            "flags\t\t: fpu sse2 ht\n"
            for c in range(cpus)
        )
        + "\n",
    )
    cpu_root = paths.sys("devices", "system", "cpu")
    per_node = cpus // numa_nodes
    for c in range(cpus):
        node = c // per_node
        _write(cpu_root / f"cpu{c}" / "topology" / "physical_package_id", f"{node}\n")
        _write(cpu_root / f"cpu{c}" / "topology" / "core_id", f"{c % per_node}\n")
        _write(cpu_root / f"cpu{c}" / "topology" / "thread_siblings_list", f"{c}\n")
        _write(cpu_root / f"cpu{c}" / "cache" / "index3" / "id", f"{node}\n")
    _write(cpu_root / "online", f"0-{cpus - 1}\n")
    _write(cpu_root / "smt" / "active", "0\n")
    for node in range(numa_nodes):
        members = list(range(node * per_node, (node + 1) * per_node))
        _write(paths.sys("devices", "system", "node", f"node{node}", "cpulist"), _cpu_list(members) + "\n")
        node_total = total // numa_nodes
        node_values = {"MemTotal": node_total, "MemFree": node_total // 2, "MemUsed": node_total // 2}
        _write(
            paths.sys("bus", "node", "devices", f"node{node}", "meminfo"),
            "".join(
                f"Node {node} {k}: {node_values.get(k, 100 + n)} kB\n"
                for n, k in enumerate(_NUMA_MEMINFO_KEYS)
            ),
        )


def build_node(
    root: Path,
    pods: int,
    containers_per_pod: int,
    *,
    cpus: int = 32,
    numa_nodes: int = 2,
    memory_gib: int = 128,
) -> FakeNode:
    """A node with ``pods`` pods of ``containers_per_pod`` containers under ``root``."""
    paths = HostPaths.rooted(root)
    cgroups = CgroupFS(paths, 1)
    layout = KubepodsLayout.default(CgroupDriver.SYSTEMD)
    _write_host(paths, cpus, numa_nodes, memory_gib)
    dirs: list[str] = []

    def make(rel: str) -> str:
        _make_cgroup(cgroups, rel, len(dirs), cpus)
        dirs.append(rel)
        return rel

    for subsystem in SUBSYSTEMS:
        cgroups.directory(subsystem).mkdir(parents=True, exist_ok=True)
    make(layout.root)  # with the PSI files in kubepods: how the koordlet tells a PSI kernel
    for qos in (KubeQOSClass.BURSTABLE, KubeQOSClass.BEST_EFFORT):
        make(layout.qos_dir(qos))
    for app in HOST_APPLICATIONS:
        make(app)
    fake_pods: list[FakePod] = []
    mix = (KubeQOSClass.GUARANTEED, KubeQOSClass.BURSTABLE, KubeQOSClass.BURSTABLE, KubeQOSClass.BEST_EFFORT)
    for p in range(pods):
        uid, qos = _uid(p + 1), mix[p % len(mix)]
        pod_dir = make(layout.pod_dir(qos, uid))
        containers = []
        for c in range(containers_per_pod):
            container_id = f"containerd://{(p + 1) * 1000 + c:064x}"
            containers.append((container_id, make(layout.container_dir(qos, uid, container_id))))
        fake_pods.append(FakePod(uid, qos, pod_dir, tuple(containers)))
    return FakeNode(root, paths, cgroups, layout, cpus, numa_nodes, fake_pods, dirs)
