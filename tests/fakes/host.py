"""A strict fake host under a temporary directory: cgroup v1 or v2, systemd or cgroupfs,
an optional custom kubelet cgroup root (kind), procfs, sysfs CPU topology and resctrl.

Built through :class:`HostPaths.rooted`, so production code reads it exactly as it reads a
real node: no patching of ``open``. New cgroups get the files the kernel creates for them,
with the kernel's defaults, so a write to a knob this "kernel" lacks fails the way it fails
on a node. :meth:`FakeHost.set` mirrors upstream's ``WriteCgroupFileContents``: values go
through the production registry (validated and converted for the cgroup version).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from koordinator.api.cpuset import format_cpuset
from koordinator.api.kubeqos import KubeQOSClass
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.layout import CgroupDriver, KubepodsLayout
from koordlet.system.cgroup.registry import RESOURCES, Subsystem, Value
from koordlet.system.paths import HostPaths

V1_SUBSYSTEMS = ("cpu", "cpuacct", "cpuset", "memory", "blkio", "pids", "net_cls", "perf_event")
V2_CONTROLLERS = "cpuset cpu io memory hugetlb pids"
V1_MEMORY_STAT_KEYS = [
    *("cache", "rss", "rss_huge", "shmem", "mapped_file", "dirty", "writeback", "pgpgin", "pgpgout"),
    *("pgfault", "pgmajfault", "inactive_anon", "active_anon", "inactive_file", "active_file"),
    *("unevictable", "hierarchical_memory_limit"),
]
V2_MEMORY_STAT_KEYS = [
    *("anon", "file", "kernel_stack", "pagetables", "sock", "shmem", "file_mapped", "file_dirty"),
    *("file_writeback", "inactive_anon", "active_anon", "inactive_file", "active_file", "unevictable"),
    *("slab_reclaimable", "slab_unreclaimable"),
]
_PSI_ZERO = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"

#: optional kernel features: the files they add to every cgroup
FEATURE_FILES: dict[str, dict[str, dict[str, str]]] = {
    # feature -> version -> file -> default
    "cpu.idle": {"v1": {"cpu/cpu.idle": "0\n"}, "v2": {"cpu.idle": "0\n"}},
    "cfs_burst": {"v1": {"cpu/cpu.cfs_burst_us": "0\n"}, "v2": {"cpu.max.burst": "0\n"}},
    "bvt": {"v1": {"cpu/cpu.bvt_warp_ns": "0\n"}, "v2": {"cpu.bvt_warp_ns": "0\n"}},
    "memory_qos": {
        "v1": {"memory/memory.min": "0\n", "memory/memory.low": "0\n", "memory/memory.high": "max\n"},
        "v2": {},
    },
    "wmark": {
        "v1": {
            "memory/memory.wmark_ratio": "0\n",
            "memory/memory.wmark_scale_factor": "50\n",
            "memory/memory.wmark_min_adj": "0\n",
            "memory/memory.priority": "0\n",
            "memory/memory.use_priority_oom": "0\n",
            "memory/memory.oom.group": "0\n",
        },
        "v2": {"memory.wmark_ratio": "0\n", "memory.priority": "0\n", "memory.use_priority_oom": "0\n"},
    },
    "net_cls": {"v1": {"net_cls/net_cls.classid": "0\n", "net_cls/cgroup.procs": ""}, "v2": {}},
    "perf_event": {"v1": {"perf_event/cgroup.procs": ""}, "v2": {}},
    "psi": {
        "v1": {
            "cpuacct/cpu.pressure": _PSI_ZERO,
            "cpuacct/memory.pressure": _PSI_ZERO,
            "cpuacct/io.pressure": _PSI_ZERO,
        },
        "v2": {},  # part of every v2 cgroup here
    },
}


def _v1_files(memory_stat: str) -> dict[str, str]:
    return {
        "cpu/cpu.shares": "1024\n",
        "cpu/cpu.cfs_period_us": "100000\n",
        "cpu/cpu.cfs_quota_us": "-1\n",
        "cpu/cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
        "cpu/tasks": "",
        "cpu/cgroup.procs": "",
        "cpuacct/cpuacct.usage": "0\n",
        "cpuacct/cpuacct.stat": "user 0\nsystem 0\n",
        "cpuacct/tasks": "",
        "cpuacct/cgroup.procs": "",
        "cpuset/cpuset.cpus": "\n",
        "cpuset/cpuset.mems": "\n",
        "cpuset/tasks": "",
        "cpuset/cgroup.procs": "",
        "memory/memory.limit_in_bytes": "9223372036854771712\n",
        "memory/memory.usage_in_bytes": "0\n",
        "memory/memory.stat": memory_stat,
        "memory/memory.numa_stat": "total=0 N0=0\n",
        "memory/cgroup.procs": "",
        "blkio/blkio.weight": "100\n",
        "blkio/blkio.throttle.read_bps_device": "",
        "blkio/blkio.throttle.write_bps_device": "",
        "blkio/blkio.throttle.read_iops_device": "",
        "blkio/blkio.throttle.write_iops_device": "",
        "pids/pids.max": "max\n",
    }


def _v2_files(memory_stat: str) -> dict[str, str]:
    return {
        "cgroup.controllers": V2_CONTROLLERS + "\n",
        "cgroup.subtree_control": V2_CONTROLLERS + "\n",
        "cgroup.procs": "",
        "cgroup.threads": "",
        "cpu.weight": "100\n",
        "cpu.max": "max 100000\n",
        "cpu.stat": "".join(
            f"{k} 0\n"
            for k in (
                "usage_usec",
                "user_usec",
                "system_usec",
                "nr_periods",
                "nr_throttled",
                "throttled_usec",
            )
        ),
        "cpuset.cpus": "\n",
        "cpuset.cpus.effective": "\n",
        "cpuset.mems": "\n",
        "cpuset.mems.effective": "\n",
        "memory.max": "max\n",
        "memory.current": "0\n",
        "memory.min": "0\n",
        "memory.low": "0\n",
        "memory.high": "max\n",
        "memory.stat": memory_stat,
        "memory.numa_stat": "anon N0=0\nfile N0=0\n",
        "io.weight": "default 100\n",
        "io.max": "",
        "pids.max": "max\n",
        "cpu.pressure": _PSI_ZERO,
        "memory.pressure": _PSI_ZERO,
        "io.pressure": _PSI_ZERO,
    }


class FakeHost:
    def __init__(
        self,
        root: Path,
        cgroup: Literal["v1", "v2"] = "v1",
        *,
        driver: Literal["systemd", "cgroupfs"] = "systemd",
        kubelet_cgroup_root: str = "/",
        features: Iterable[str] = (),
        kubepods: bool = True,
    ) -> None:
        self.root = root
        self.version = cgroup
        self.features = frozenset(features)
        unknown = self.features - set(FEATURE_FILES)
        if unknown:
            raise ValueError(f"unknown fake kernel features: {sorted(unknown)}")
        self.paths = HostPaths.rooted(root)
        self.cgroups = CgroupFS(self.paths, 1 if cgroup == "v1" else 2)
        self.layout = KubepodsLayout.default(CgroupDriver(driver), kubelet_cgroup_root)
        self.write("proc/sys/kernel/osrelease", "6.1.0-fake\n")
        self.make_cgroup("")
        if cgroup == "v1":
            self.write_cgroup("cpuset", "", "cpuset.cpus", "0-3\n")
            self.write_cgroup("cpuset", "", "cpuset.mems", "0\n")
        if kubepods:
            parts = self.layout.root.split("/")
            for depth in range(1, len(parts) + 1):
                self.make_cgroup("/".join(parts[:depth]))
            for qos in (KubeQOSClass.BURSTABLE, KubeQOSClass.BEST_EFFORT):
                self.make_cgroup(self.layout.qos_dir(qos))

    # --- raw files ---------------------------------------------------------------------------

    def write(self, relpath: str, content: str) -> Path:
        path = self.root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        return path

    def read(self, relpath: str) -> str:
        return (self.root / relpath).read_text()

    def cgroup_dir(self, controller: str, relative: str = "") -> Path:
        return self.cgroups.directory(controller, relative)

    def mkdir_cgroup(self, controller: str, relative: str) -> Path:
        path = self.cgroup_dir(controller, relative)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_cgroup(self, controller: str, relative: str, name: str, content: str) -> Path:
        directory = self.cgroup_dir(controller, relative)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / name
        path.write_text(content)
        return path

    # --- cgroups like the kernel makes them ------------------------------------------------

    def _default_files(self) -> dict[str, str]:
        if self.version == "v1":
            stat = "".join(f"{k} 0\n" for k in V1_MEMORY_STAT_KEYS) + "".join(
                f"total_{k} 0\n" for k in V1_MEMORY_STAT_KEYS
            )
            files = _v1_files(stat)
        else:
            files = _v2_files("".join(f"{k} 0\n" for k in V2_MEMORY_STAT_KEYS))
        for feature in sorted(self.features):
            files.update(FEATURE_FILES[feature][self.version])
        return files

    def make_cgroup(self, relative: str) -> str:
        """mkdir a cgroup in every hierarchy with the files (and defaults) the kernel gives it."""
        rel = relative.strip("/")
        for name, content in self._default_files().items():
            if self.version == "v1":
                subsystem, _, filename = name.partition("/")
                directory = self.cgroups.directory(subsystem, rel)
            else:
                filename, directory = name, self.cgroups.directory(Subsystem.CPU, rel)
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / filename
            if not path.exists():
                path.write_text(content)
        return rel

    def remove_cgroup(self, relative: str) -> None:
        """The cgroup disappears (a pod or container ended), in every hierarchy.

        Files are emptied before they are removed: a reader holding a descriptor then
        reads nothing, as a removed cgroup's files answer nothing on a node (ENODEV).
        """
        subsystems = V1_SUBSYSTEMS if self.version == "v1" else ("cpu",)
        for subsystem in subsystems:
            top = self.cgroups.directory(subsystem, relative)
            for path in sorted(top.rglob("*"), reverse=True) if top.exists() else []:
                if path.is_file():
                    path.write_bytes(b"")
            shutil.rmtree(top, ignore_errors=True)

    def set(self, key: str, relative: str, value: Value) -> None:
        """Write a registered resource as the koordlet would: validated and converted for
        this cgroup version (raises InvalidValueError for a value the registry refuses)."""
        resource = RESOURCES[key]
        text = resource.render(self.cgroups.version, value)
        path = self.cgroups.path(key, relative, for_write=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        if self.version == "v2" and key in ("cpuset.cpus", "cpuset.mems"):
            (path.parent / f"{path.name}.effective").write_text(text + "\n")

    def get(self, key: str, relative: str = "") -> Value:
        return self.cgroups.read(key, relative)

    # --- pods -----------------------------------------------------------------------------

    def pod_dir(self, qos: KubeQOSClass | str, uid: str) -> str:
        return self.layout.pod_dir(KubeQOSClass(qos), uid)

    def add_pod(self, qos: KubeQOSClass | str, uid: str, containers: Iterable[str] = ()) -> str:
        """Create a pod cgroup and its containers' (IDs like ``containerd://abc``)."""
        pod = self.make_cgroup(self.pod_dir(qos, uid))
        for container_id in containers:
            self.make_cgroup(f"{pod}/{self.layout.container_dir_name(container_id)}")
        return pod

    def container_dir(self, qos: KubeQOSClass | str, uid: str, container_id: str) -> str:
        return self.layout.container_dir(KubeQOSClass(qos), uid, container_id)

    # --- statistics -----------------------------------------------------------------------

    def _stat_dir(self, v1_subsystem: str, relative: str) -> Path:
        return self.cgroups.directory(v1_subsystem if self.version == "v1" else "cpu", relative)

    def set_cpu_usage(self, relative: str, usage_ns: int) -> None:
        if self.version == "v1":
            (self._stat_dir("cpuacct", relative) / "cpuacct.usage").write_text(f"{usage_ns}\n")
        else:
            self._update_keys(self._stat_dir("cpu", relative) / "cpu.stat", {"usage_usec": usage_ns // 1000})

    def set_throttling(self, relative: str, nr_periods: int, nr_throttled: int, throttled_ns: int) -> None:
        path = self._stat_dir("cpu", relative) / "cpu.stat"
        if self.version == "v1":
            values = {"nr_periods": nr_periods, "nr_throttled": nr_throttled, "throttled_time": throttled_ns}
        else:
            values = {
                "nr_periods": nr_periods,
                "nr_throttled": nr_throttled,
                "throttled_usec": throttled_ns // 1000,
            }
        self._update_keys(path, values)

    def set_memory_stat(self, relative: str, **counters: int) -> None:
        """Counters by their v2 names (``active_anon=...``); v1 also gets the ``total_*`` keys."""
        path = self._stat_dir("memory", relative) / "memory.stat"
        if self.version == "v1":
            counters = {**counters, **{f"total_{k}": v for k, v in counters.items()}}
        self._update_keys(path, counters)

    def set_memory_numa(self, relative: str, anon: Mapping[int, int], file: Mapping[int, int]) -> None:
        """Bytes per NUMA node as the kernel prints ``memory.numa_stat``: v2 in bytes; v1 in
        pages, with this cgroup's own pages (none: they are its children's) on the first
        lines and the hierarchical ones after."""
        nodes = sorted(anon.keys() | file.keys())

        def line(name: str, values: Mapping[int, int]) -> str:
            per_node = [values.get(n, 0) for n in nodes]
            return " ".join(
                [f"{name}={sum(per_node)}", *(f"N{n}={v}" for n, v in zip(nodes, per_node, strict=True))]
            )

        if self.version == "v2":
            text = "".join(
                f"{name} " + " ".join(f"N{n}={values.get(n, 0)}" for n in nodes) + "\n"
                for name, values in (("anon", anon), ("file", file), ("kernel_stack", {}))
            )
        else:
            page = os.sysconf("SC_PAGE_SIZE")
            pages = {
                "total": {n: (anon.get(n, 0) + file.get(n, 0)) // page for n in nodes},
                "file": {n: file.get(n, 0) // page for n in nodes},
                "anon": {n: anon.get(n, 0) // page for n in nodes},
                "unevictable": {},
            }
            own = [line(name, {}) for name in pages]
            text = "\n".join(own + [line(f"hierarchical_{name}", v) for name, v in pages.items()]) + "\n"
        (self._stat_dir("memory", relative) / "memory.numa_stat").write_text(text)

    def set_memory_usage(self, relative: str, usage: int) -> None:
        name = "memory.usage_in_bytes" if self.version == "v1" else "memory.current"
        (self._stat_dir("memory", relative) / name).write_text(f"{usage}\n")

    def set_pressure(
        self, relative: str, resource: str, some: Iterable[float], full: Iterable[float] | None
    ) -> None:
        """``some``/``full`` as (avg10, avg60, avg300, total); v1 writes them under cpuacct."""
        lines = [_psi_line("some", some)] + ([_psi_line("full", full)] if full is not None else [])
        (self._stat_dir("cpuacct", relative) / f"{resource}.pressure").write_text("\n".join(lines) + "\n")

    @staticmethod
    def _update_keys(path: Path, values: Mapping[str, int]) -> None:
        lines = path.read_text().splitlines() if path.exists() else []
        seen: set[str] = set()
        out = []
        for line in lines:
            key = line.split(" ", 1)[0]
            if key in values:
                out.append(f"{key} {values[key]}")
                seen.add(key)
            else:
                out.append(line)
        out += [f"{k} {v}" for k, v in values.items() if k not in seen]
        path.write_text("\n".join(out) + "\n")

    # --- procfs ---------------------------------------------------------------------------

    def set_proc_stat(self, total: Iterable[int], per_cpu: Mapping[int, Iterable[int]] | None = None) -> None:
        """Tick fields user nice system idle iowait irq softirq steal guest guest_nice."""
        lines = ["cpu  " + " ".join(map(str, total))]
        lines += [f"cpu{cpu} " + " ".join(map(str, ticks)) for cpu, ticks in sorted((per_cpu or {}).items())]
        lines += ["intr 0", "ctxt 0", "btime 0", "processes 1", "procs_running 1", "procs_blocked 0"]
        self.write("proc/stat", "\n".join(lines) + "\n")

    def set_meminfo(self, **kib: int) -> None:
        """Fields by the kernel's names with '(' ')' written as '_' (``Active_file_``)."""
        names = {k: k.replace("_file_", "(file)").replace("_anon_", "(anon)") for k in kib}
        self.write("proc/meminfo", "".join(f"{names[k]}: {v} kB\n" for k, v in kib.items()))

    def set_node_pressure(
        self, resource: str, some: Iterable[float], full: Iterable[float] | None = None
    ) -> None:
        lines = [_psi_line("some", some)] + ([_psi_line("full", full)] if full is not None else [])
        self.write(f"proc/pressure/{resource}", "\n".join(lines) + "\n")

    # --- sysfs ------------------------------------------------------------------------------

    def set_cpu_topology(
        self,
        sockets: int = 1,
        cores_per_socket: int = 2,
        threads_per_core: int = 2,
        numa_per_socket: int = 1,
        *,
        model: str = "Fake CPU @ 2.50GHz",
        vendor: str = "GenuineIntel",
        flags: str = "fpu sse2 ht",
    ) -> list[int]:
        """Linux numbering: first threads of every core, then the siblings; returns the CPUs."""
        cores = sockets * cores_per_socket
        cpus = list(range(cores * threads_per_core))
        base = "sys/devices/system/cpu"
        nodes: dict[int, list[int]] = {}
        for cpu in cpus:
            core = cpu % cores
            socket = core // cores_per_socket
            node = socket * numa_per_socket + (core % cores_per_socket) * numa_per_socket // cores_per_socket
            siblings = [core + t * cores for t in range(threads_per_core)]
            self.write(f"{base}/cpu{cpu}/topology/physical_package_id", f"{socket}\n")
            self.write(f"{base}/cpu{cpu}/topology/core_id", f"{core % cores_per_socket}\n")
            self.write(f"{base}/cpu{cpu}/topology/thread_siblings_list", format_cpuset(siblings) + "\n")
            self.write(f"{base}/cpu{cpu}/cache/index3/id", f"{socket}\n")
            nodes.setdefault(node, []).append(cpu)
        self.write(f"{base}/online", format_cpuset(cpus) + "\n")
        self.write(f"{base}/smt/active", ("1" if threads_per_core > 1 else "0") + "\n")
        for node, members in nodes.items():
            self.write(f"sys/devices/system/node/node{node}/cpulist", format_cpuset(members) + "\n")
        blocks = [
            f"processor\t: {cpu}\nvendor_id\t: {vendor}\nmodel name\t: {model}\nflags\t\t: {flags}\n"
            for cpu in cpus
        ]
        self.write("proc/cpuinfo", "\n".join(blocks) + "\n")
        return cpus

    def set_numa_meminfo(self, node: int, **kib: int) -> None:
        names = {k: k.replace("_file_", "(file)") for k in kib}
        body = "".join(f"Node {node} {names[k]}: {v} kB\n" for k, v in kib.items())
        self.write(f"sys/bus/node/devices/node{node}/meminfo", body)

    # --- resctrl ------------------------------------------------------------------------------

    def add_resctrl(
        self,
        cbm_mask: str = "7ff",
        cache_ids: Iterable[int] = (0,),
        *,
        mba: bool = True,
        monitoring: bool = True,
    ) -> Path:
        root = self.paths.resctrl_root
        ids = list(cache_ids)
        schemata = ["L3:" + ";".join(f"{i}={cbm_mask}" for i in ids)]
        if mba:
            schemata.append("MB:" + ";".join(f"{i}=100" for i in ids))
        self.write(str((root / "schemata").relative_to(self.root)), "\n".join(schemata) + "\n")
        self.write(str((root / "tasks").relative_to(self.root)), "1\n")
        info = root / "info"
        self.write(str((info / "L3" / "cbm_mask").relative_to(self.root)), cbm_mask + "\n")
        self.write(str((info / "L3" / "num_closids").relative_to(self.root)), "16\n")
        if mba:
            self.write(str((info / "MB" / "min_bandwidth").relative_to(self.root)), "10\n")
        if monitoring:
            features = "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n"
            self.write(str((info / "L3_MON" / "mon_features").relative_to(self.root)), features)
        return root

    def populate_resctrl_group(self, group: str, mon: Mapping[int, Mapping[str, int]] | None = None) -> None:
        """What the kernel does on mkdir: a group's schemata (copied from the root) and tasks."""
        root = self.paths.resctrl_root
        directory = root / group
        directory.mkdir(exist_ok=True)
        (directory / "schemata").write_text((root / "schemata").read_text())
        (directory / "tasks").write_text("")
        for cache_id, values in (mon or {}).items():
            domain = directory / "mon_data" / f"mon_L3_{cache_id:02d}"
            domain.mkdir(parents=True, exist_ok=True)
            for name, value in values.items():
                (domain / name).write_text(f"{value}\n")


def _psi_line(kind: str, values: Iterable[float]) -> str:
    avg10, avg60, avg300, total = values
    return f"{kind} avg10={avg10:.2f} avg60={avg60:.2f} avg300={avg300:.2f} total={int(total)}"
