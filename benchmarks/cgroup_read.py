"""K0: read CPU, memory, throttling and PSI of 300 containers on a fake cgroup v1 tree.

Three ways of doing the same work, in the same run:

* ``native_cpu_ms``: the koordlet's StatsReader over the compiled FileCache (kept file
  descriptors, pread, parsing in C with the GIL released);
* ``python_cpu_ms``: the same StatsReader over the pure-Python twin of the FileCache;
* ``c_floor_cpu_ms``: a plain C program (``cfloor/cgroup_read.c``, built here with the
  system compiler) making the same syscalls on the same files and parsing them with the
  project's C parsers, with no Python at all.

Each figure is the median CPU time of one full read of all 300 containers (6 files each:
``cpuacct.usage``, ``cpu.stat``, ``memory.stat`` and the three ``*.pressure`` files, as an
Anolis v1 kernel offers them). ``native_vs_c_floor_ratio`` is the K0 target (<= 2).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from benchmarks.harness import Result, median, repeat_cpu_ms
from koordlet.system import native
from koordlet.system.cgroup import io, pyio
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.stats import ALL_USAGE, PRESSURES, StatsReader
from koordlet.system.paths import HostPaths

NAME = "cgroup_read"
CONTAINERS = 300
ROOT = Path(__file__).resolve().parent.parent
STATS = ALL_USAGE | frozenset(PRESSURES)
_PSI = (
    "some avg10=1.25 avg60=0.50 avg300=0.10 total=123456\nfull avg10=0.25 avg60=0.10 avg300=0.00 total=4567\n"
)
_MEMORY_KEYS = [
    *("cache", "rss", "rss_huge", "shmem", "mapped_file", "dirty", "writeback", "swap", "pgpgin"),
    *("pgpgout", "pgfault", "pgmajfault", "inactive_anon", "active_anon", "inactive_file", "active_file"),
    "unevictable",
]


def _memory_stat(i: int) -> str:
    local = "".join(f"{k} {i * 4096 + n}\n" for n, k in enumerate(_MEMORY_KEYS))
    return (
        local
        + "hierarchical_memory_limit 9223372036854771712\n"
        + "".join(f"total_{k} {i * 8192 + n}\n" for n, k in enumerate(_MEMORY_KEYS))
    )


def build_tree(root: Path, containers: int) -> tuple[CgroupFS, list[str]]:
    paths = HostPaths.rooted(root)
    cgroups = CgroupFS(paths, 1)
    relatives = []
    for i in range(containers):
        pod = f"kubepods-burstable-pod{i:08d}.slice"
        rel = f"kubepods.slice/kubepods-burstable.slice/{pod}/cri-containerd-{i:064x}.scope"
        files = {
            ("cpuacct", "cpuacct.usage"): f"{i * 1_000_003}\n",
            ("cpuacct", "cpu.pressure"): _PSI,
            ("cpuacct", "memory.pressure"): _PSI,
            ("cpuacct", "io.pressure"): _PSI,
            ("cpu", "cpu.stat"): f"nr_periods {i * 10}\nnr_throttled {i}\nthrottled_time {i * 1000}\n",
            ("memory", "memory.stat"): _memory_stat(i),
        }
        for (subsystem, name), content in files.items():
            directory = cgroups.directory(subsystem, rel)
            directory.mkdir(parents=True, exist_ok=True)
            (directory / name).write_text(content)
        relatives.append(rel)
    return cgroups, relatives


def _floor_input(cgroups: CgroupFS, relatives: list[str]) -> str:
    kinds = [
        ("i", "cpuacct", "cpuacct.usage"),
        ("t", "cpu", "cpu.stat"),
        ("m", "memory", "memory.stat"),
        ("p", "cpuacct", "cpu.pressure"),
        ("p", "cpuacct", "memory.pressure"),
        ("p", "cpuacct", "io.pressure"),
    ]
    return "".join(
        f"{kind} {cgroups.directory(subsystem, rel) / name}\n"
        for rel in relatives
        for kind, subsystem, name in kinds
    )


def build_floor(work: Path) -> Path:
    """Compile the C floor (``cfloor/cgroup_read.c``) into ``work``; returns the binary."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("cgroup_read: no C compiler to build the C floor (set CC)")
    binary = work / "cgroup_read_floor"
    src = ROOT / "benchmarks" / "cfloor" / "cgroup_read.c"
    parse = ROOT / "native" / "cgroupfs" / "src"
    subprocess.run(
        [compiler, "-O2", "-Wall", f"-I{parse}", str(src), str(parse / "parse.c"), "-o", str(binary)],
        check=True,
    )
    return binary


def c_floor_ms(work: Path, stdin: str, runs: int) -> float:
    argv = [str(build_floor(work)), str(runs + 1)]
    out = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=True)
    samples = [float(line) for line in out.stdout.split()]
    return median(samples[1:])  # the first run only warms the page cache


def run(quick: bool = False) -> Result:
    containers = 20 if quick else CONTAINERS
    runs = 3 if quick else 31
    with tempfile.TemporaryDirectory(prefix="koord-bench-") as tmp:
        work = Path(tmp)
        cgroups, relatives = build_tree(work / "host", containers)
        figures = {}
        compiled = native.load("_cgroupfs")
        if compiled is None:
            raise RuntimeError("cgroup_read: native extension not built (or KOORDLET_NO_EXTENSIONS set)")
        caches: dict[str, io.FileCache] = {"native": compiled.FileCache(), "python": pyio.FileCache()}
        for label, cache in caches.items():
            reader = StatsReader(cgroups, cache)
            samples = reader.read(relatives, STATS)  # opens and keeps the descriptors
            if any(s.errors for s in samples):
                raise RuntimeError(f"cgroup_read: {label} reader failed: {samples[0].errors}")
            figures[label] = median(repeat_cpu_ms(functools.partial(reader.read, relatives, STATS), runs))
            reader.close()
        floor = c_floor_ms(work, _floor_input(cgroups, relatives), runs)
    result = Result(
        NAME,
        params={"containers": containers, "files_per_container": 6, "cgroup": "v1", "runs": runs},
        results={
            "native_cpu_ms": round(figures["native"], 3),
            "python_cpu_ms": round(figures["python"], 3),
            "c_floor_cpu_ms": round(floor, 3),
        },
        ratios={
            "native_vs_c_floor_ratio": round(figures["native"] / floor, 2),
            "python_vs_native_ratio": round(figures["python"] / figures["native"], 2),
        },
    )
    result.headline = (
        f"cgroup_read: {containers} containers: native {figures['native']:.2f} ms, python "
        f"{figures['python']:.2f} ms, C floor {floor:.2f} ms CPU; native/C floor "
        f"{result.ratios['native_vs_c_floor_ratio']} (K0 target: native_vs_c_floor_ratio <= 2)"
    )
    return result
