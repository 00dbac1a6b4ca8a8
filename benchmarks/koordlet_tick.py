"""K1: one koordlet collection tick on a node with 100 pods of 3 containers (fake host tree).

A tick is what the real collectors do for the node and every pod and container: the
NodeResourceCollector (``/proc/stat``, ``/proc/meminfo``, NUMA meminfo), the
PodResourceCollector (CPU usage, memory and CFS throttling of 400 cgroups, one batched
read, and each pod's memory by NUMA node) and the PSICollector (cpu, memory and io
pressure of the same cgroups), each turning what it read into samples appended to the
metric cache. They run through a
real :class:`CollectContext` whose states hand out PodMeta built by
``statesinformer.podmeta.pod_meta`` from the pods the standalone cgroup discovery finds
in the tree. The tree is cgroup v1 with Anolis-style PSI files under ``cpuacct``
(benchmarks/_fakehost.py).

Three ways of doing the same work, in the same run:

* ``native_cpu_ms``: the koordlet with its default backend (compiled FileCache and
  parsers), the K1 target (<= 3 ms);
* ``python_cpu_ms``: the same koordlet code with ``KOORDLET_NO_EXTENSIONS=1`` (every
  read and parse in the pure-Python twins);
* ``c_floor_cpu_ms``: the plain C program of ``cfloor/cgroup_read.c`` making the same
  syscalls on the same files (kept descriptors for the cgroup files, a fresh open of the
  procfs and sysfs files, the NUMA directory listed) and parsing them, with no Python.

The koordlet figures are measured in child processes (one per backend, identical code),
each the median CPU time of one tick after warm-up ticks (the first tick only primes the
rate counters). ``native_{node,pods,psi}_cpu_ms`` break the native tick down by
collector; ``native_per_second_cpu_ms`` is what an average second costs at the default
intervals (node and pods every second, PSI every tenth). Counters are left as they are
between ticks: a tick does the same work whatever the values.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from benchmarks import _fakehost
from benchmarks.cgroup_read import c_floor_ms
from benchmarks.harness import Result, median
from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.metriccache import KVStore, MetricCache
from koordlet.metrics import KoordletMetrics
from koordlet.metricsadvisor.collectors.noderesource import NodeResourceCollector
from koordlet.metricsadvisor.collectors.performance import PSICollector
from koordlet.metricsadvisor.collectors.podresource import PodResourceCollector
from koordlet.metricsadvisor.framework import CollectContext, Collector
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.statesinformer.standalone import CgroupPodsSource
from koordlet.system import native
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.paths import HostPaths

NAME = "koordlet_tick"
PODS = 100
CONTAINERS_PER_POD = 3
WARMUP_TICKS = 3
#: the PSI collector's default interval (10 s) in resource-collection ticks (1 s)
PSI_EVERY_N_TICKS = 10
ROOT = Path(__file__).resolve().parent.parent
_COLLECTORS = {"NodeResourceCollector": "node", "PodResourceCollector": "pods", "PSICollector": "psi"}


class _States:
    """The states informer as the collectors see it: a fixed pod list, no Node, default NodeSLO."""

    def __init__(self, pods: list[PodMeta]) -> None:
        self._pods = pods

    def get_all_pods(self) -> list[PodMeta]:
        return list(self._pods)

    def get_node(self) -> Mapping[str, Any] | None:
        return None

    def get_node_slo(self) -> NodeSLOSpec | None:
        return None


def _child(argv: list[str]) -> None:
    """Measure ticks over the tree at ``--root``; prints one JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--runs", type=int, required=True)
    args = parser.parse_args(argv)

    paths = HostPaths.rooted(args.root)
    cgroups = CgroupFS.detect(paths)
    pods = [m for m in (pod_meta(p, cgroups.layout) for p in CgroupPodsSource(cgroups).discover()) if m]
    ctx = CollectContext(
        paths,
        cgroups,
        MetricCache(),
        KVStore(),
        _States(pods),
        KoordletMetrics(CollectorRegistry(), "bench-node"),
        FeatureGates(KOORDLET_FEATURES, {"PSICollector": True}),
    )
    psi = PSICollector(ctx)
    collectors: list[Collector] = [NodeResourceCollector(ctx), PodResourceCollector(ctx), psi]
    if not all(c.enabled() for c in collectors) or not psi.supported():
        raise RuntimeError("koordlet_tick: a collector is disabled or PSI not detected on the fake tree")
    now = time.time()
    per_collector: dict[str, list[float]] = {c.NAME: [] for c in collectors}
    ticks: list[float] = []
    for run in range(WARMUP_TICKS + args.runs):
        now += 1.0
        tick_start = time.process_time()
        for collector in collectors:
            start = time.process_time()
            collector.collect(now)
            per_collector[collector.NAME].append((time.process_time() - start) * 1000.0)
        elapsed = (time.process_time() - tick_start) * 1000.0
        if run >= WARMUP_TICKS:
            ticks.append(elapsed)
    stats = ctx.cache.stats()
    out = {
        "backend": native.backend_report()["_cgroupfs"],
        "pods": len(pods),
        "containers": sum(len(p.containers) for p in pods),
        "series": stats["series"],
        "samples_per_tick": stats["samples"] // (WARMUP_TICKS + args.runs),
        "tick_ms": ticks,
        "collector_ms": {name: median(v[WARMUP_TICKS:]) for name, v in per_collector.items()},
    }
    print(json.dumps(out))


def _measure(root: Path, runs: int, python: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("KOORDLET_NO_EXTENSIONS", None)
    if python:
        env["KOORDLET_NO_EXTENSIONS"] = "1"
    argv = [sys.executable, "-m", "benchmarks.koordlet_tick", "--root", str(root), "--runs", str(runs)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"koordlet_tick child failed:\n{done.stderr[-4000:]}")
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def _floor_input(node: _fakehost.FakeNode) -> str:
    """Every file one tick reads, as ``<kind> <path>`` lines for the C floor."""
    cgroups, lines = node.cgroups, []
    for pod in node.pods:
        for rel in (pod.cgroup_dir, *(d for _, d in pod.containers)):
            lines += [
                f"i {cgroups.directory('cpuacct', rel) / 'cpuacct.usage'}",
                f"t {cgroups.directory('cpu', rel) / 'cpu.stat'}",
                f"m {cgroups.directory('memory', rel) / 'memory.stat'}",
                *(
                    f"p {cgroups.directory('cpuacct', rel) / f'{r}.pressure'}"
                    for r in ("cpu", "memory", "io")
                ),
            ]
    numa = node.paths.sys("bus", "node", "devices")
    # the pod collector reads the pods' memory by NUMA node too
    lines += [f"u {cgroups.directory('memory', pod.cgroup_dir) / 'memory.numa_stat'}" for pod in node.pods]
    lines += [f"s {node.paths.proc('stat')}", f"n {node.paths.proc('meminfo')}", f"d {numa}"]
    lines += [f"n {numa / f'node{n}' / 'meminfo'}" for n in range(node.numa_nodes)]
    return "".join(f"{line}\n" for line in lines)


def run(quick: bool = False) -> Result:
    runs = 5 if quick else 31
    with _fakehost.scratch_dir() as tree, tempfile.TemporaryDirectory(prefix="koord-bench-") as tmp:
        node = _fakehost.build_node(Path(tree) / "host", PODS, CONTAINERS_PER_POD)
        floor_input = _floor_input(node)
        floor = c_floor_ms(Path(tmp), floor_input, runs)
        measured = {label: _measure(node.root, runs, label == "python") for label in ("native", "python")}
    native_run, python_run = measured["native"], measured["python"]
    if native_run["backend"] != "native" or not python_run["backend"].startswith("python"):
        raise RuntimeError(
            f"koordlet_tick: wrong backends {native_run['backend']!r}, {python_run['backend']!r}"
        )
    if (native_run["pods"], native_run["containers"]) != (PODS, PODS * CONTAINERS_PER_POD):
        raise RuntimeError(
            f"koordlet_tick: discovered {native_run['pods']} pods, {native_run['containers']} containers"
        )
    figures = {label: median(m["tick_ms"]) for label, m in measured.items()}
    results = {
        "native_cpu_ms": round(figures["native"], 3),
        "python_cpu_ms": round(figures["python"], 3),
        "c_floor_cpu_ms": round(floor, 3),
    }
    per_collector = native_run["collector_ms"]
    for name, short in _COLLECTORS.items():
        results[f"native_{short}_cpu_ms"] = round(per_collector[name], 3)
    # at default intervals PSI is read every 10th second: the native CPU of an average second
    results["native_per_second_cpu_ms"] = round(
        per_collector["NodeResourceCollector"]
        + per_collector["PodResourceCollector"]
        + per_collector["PSICollector"] / PSI_EVERY_N_TICKS,
        3,
    )
    result = Result(
        NAME,
        params={
            "pods": PODS,
            "containers_per_pod": CONTAINERS_PER_POD,
            "runs": runs,
            "warmup_ticks": WARMUP_TICKS,
            "cgroup": "v1 (PSI under cpuacct)",
            "collectors": list(_COLLECTORS),
            "files_per_tick": floor_input.count("\n"),
            "samples_per_tick": native_run["samples_per_tick"],
            "quick": quick,
        },
        results=results,
        ratios={
            "native_vs_c_floor_ratio": round(figures["native"] / floor, 2),
            "python_vs_native_ratio": round(figures["python"] / figures["native"], 2),
        },
    )
    result.headline = (
        f"koordlet_tick: {PODS} pods x {CONTAINERS_PER_POD} containers: native {figures['native']:.2f} ms, "
        f"python {figures['python']:.2f} ms, C floor {floor:.2f} ms CPU per tick; native/C floor "
        f"{result.ratios['native_vs_c_floor_ratio']} "
        "(K1 targets: native_cpu_ms <= 2, native_vs_c_floor_ratio <= 1.5)"
    )
    return result


if __name__ == "__main__":
    _child(sys.argv[1:])
