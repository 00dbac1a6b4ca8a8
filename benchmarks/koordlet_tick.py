"""K1: one koordlet collection tick on a node with 100 pods of 3 containers (fake host tree),
and the other periodic work of the agent's node-level loop: the CPI collector's tick and
one training of the peak predictor.

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
  parsers), the K1 target (<= 2 ms, and <= 1.5 times the C floor);
* ``python_cpu_ms``: the same koordlet code with ``KOORDLET_NO_EXTENSIONS=1`` (every
  read and parse in the pure-Python twins);
* ``c_floor_cpu_ms``: the plain C program of ``cfloor/cgroup_read.c`` making the same
  syscalls on the same files (kept descriptors for the cgroup, procfs and meminfo files, the
  NUMA directory listed) and parsing them, with no Python.

The koordlet figures are measured in child processes (one per backend, identical code),
each the median CPU time of one tick after warm-up ticks (the first tick only primes the
rate counters). The C floor runs beside the native child as a server, one run after each
of its ticks (``cgroup_read serve``), and its figure is the median of those runs: the two
are measured alternately, tick by tick, and on one CPU (each child keeps to the last CPU
it may use), so that they see the same machine. On a shared 2-CPU VM the speed drifts
by tens of percent within a minute and the two CPUs differ by as much: a floor measured
before or after the koordlet, or on the other CPU, carried that into the ratio (1.1 to
2.0 from one run to the next; measured this way, it moves by about a tenth).
``native_{node,pods,psi}_cpu_ms`` break the native tick down by collector. Counters are
left as they are between ticks: a tick does the same work whatever the values.

``native_cpu_ms`` is the K1 target's tick, node + pods + PSI, and nothing else. Measured
beside it in the native child, on the same metric cache:

* ``native_cpi_cpu_ms``: one tick of the CPICollector (gate on) after its first. The
  collector checks once, with a real ``perf_event_open``, whether this host can count
  cycles and instructions; where it cannot (a VM without a PMU: ``params.cpi_supported``
  false, with the reason) a tick costs only the remembered answer, and the check itself is
  ``native_cpi_check_cpu_ms`` (paid once per agent). The fake tree is cgroup v1 without a
  ``perf_event`` hierarchy, so on a host with a PMU the check says that instead, and the
  tick is again the remembered answer: counting itself is not measured here.
* ``native_prediction_cpu_ms``: one training of the peak predictor
  (:class:`koordlet.prediction.PeakPredictServer`, the agent's defaults, checkpoints under
  the fake node's var-run root) over the 100 pods: the p90 of the last training interval
  (60 s) of each pod's and the node's CPU and memory usage, read from the metric cache the
  ticks filled (ticks are added until it holds a full interval), and one sample added to
  each model (100 pods, the node, 5 priority classes, the system: ``params.
  prediction_models``). Median of ``runs`` trainings at the same instant.

``native_per_second_cpu_ms`` is what an average second costs at the default intervals:
node and pods every second, PSI every tenth, the CPI collector every 60th (on a host
without a PMU; with one, a round is two ticks), a training every 60th
(``--prediction-training-interval`` 1m).
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
from benchmarks.cgroup_read import build_floor
from benchmarks.harness import Result, median
from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.metriccache import KVStore, MetricCache
from koordlet.metrics import KoordletMetrics
from koordlet.metricsadvisor.collectors.cpi import CPICollector
from koordlet.metricsadvisor.collectors.noderesource import NodeResourceCollector
from koordlet.metricsadvisor.collectors.performance import PSICollector
from koordlet.metricsadvisor.collectors.podresource import PodResourceCollector
from koordlet.metricsadvisor.framework import CollectContext, Collector
from koordlet.prediction import PeakPredictServer, PredictionConfig, checkpoint_dir_under
from koordlet.prediction.config import DEFAULT_CHECKPOINT_FILEPATH
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
#: the CPI collector's default interval (60 s) and the default training interval (1 min)
CPI_EVERY_N_TICKS = 60
PREDICTION_EVERY_N_TICKS = 60
ROOT = Path(__file__).resolve().parent.parent
_COLLECTORS = {"NodeResourceCollector": "node", "PodResourceCollector": "pods", "PSICollector": "psi"}


class _Floor:
    """The C floor in ``serve`` mode: the file list once, then one run per :meth:`run`."""

    def __init__(self, binary: str, listing: str, cpus: set[int]) -> None:
        self._proc = subprocess.Popen(
            [binary, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        os.sched_setaffinity(self._proc.pid, cpus)
        self._send(listing + "\n")  # an empty line ends the list

    def _send(self, text: str) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        stdin.write(text)
        stdin.flush()

    def run(self) -> float:
        """The CPU milliseconds of one run over every file."""
        self._send("run\n")
        assert self._proc.stdout is not None
        answer = self._proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"koordlet_tick: the C floor exited with {self._proc.wait()}")
        return float(answer)

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=30)


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


def _cpi_ticks(cpi: CPICollector, now: float, runs: int) -> dict[str, Any]:
    """The CPI collector's first tick (its support check) and ``runs`` more, each at the
    collector's own next instant; the medians in ms and what the check found."""
    start = time.process_time()
    cpi.collect(now)
    check_ms = (time.process_time() - start) * 1000.0
    ticks = []
    for _ in range(runs):
        now += cpi.interval
        start = time.process_time()
        cpi.collect(now)
        ticks.append((time.process_time() - start) * 1000.0)
    cpi.close()
    return {
        "check_ms": check_ms,
        "tick_ms": median(ticks),
        "supported": cpi.unsupported_reason is None,
        "reason": cpi.unsupported_reason or "hardware counters available",
    }


def _trainings(ctx: CollectContext, pods: list[PodMeta], now: float, runs: int) -> dict[str, Any]:
    """``runs`` trainings of the peak predictor at ``now`` over the cache the ticks filled."""
    config = PredictionConfig(checkpoint_dir_under(ctx.paths.var_run_root, DEFAULT_CHECKPOINT_FILEPATH))
    states = ctx.states
    # the pods as the agent hands them to the predictor: every call, from the states informer
    server = PeakPredictServer(
        config, ctx.cache.query, lambda: [meta.pod for meta in states.get_all_pods()], clock=lambda: now
    )
    server.restore()  # nothing to restore on a fresh tree: the start-up path, as the agent runs it
    trainings = []
    for _ in range(runs):
        start = time.process_time()
        server.train()
        trainings.append((time.process_time() - start) * 1000.0)
    pod_models = sum(1 for meta in pods if meta.uid in server.models)
    if pod_models != len(pods):
        raise RuntimeError(f"koordlet_tick: the predictor trained {pod_models} of {len(pods)} pod models")
    return {"train_ms": median(trainings), "models": len(server.models)}


def _child(argv: list[str]) -> None:
    """Measure ticks over the tree at ``--root`` (with ``--predict``, the CPI collector and
    the predictor's training too); prints one JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--predict", action="store_true")
    parser.add_argument("--floor", help="the C floor's binary, run once after each tick")
    parser.add_argument("--floor-input", help="the file listing the C floor reads")
    args = parser.parse_args(argv)
    # one CPU for the koordlet and its floor: CPUs of a shared VM differ by tens of percent
    cpu = {max(os.sched_getaffinity(0))}
    os.sched_setaffinity(0, cpu)
    floor = _Floor(args.floor, Path(args.floor_input).read_text(), cpu) if args.floor else None

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
        FeatureGates(KOORDLET_FEATURES, {"PSICollector": True, "CPICollector": True}),
    )
    psi = PSICollector(ctx)
    collectors: list[Collector] = [NodeResourceCollector(ctx), PodResourceCollector(ctx), psi]
    if not all(c.enabled() for c in collectors) or not psi.supported():
        raise RuntimeError("koordlet_tick: a collector is disabled or PSI not detected on the fake tree")
    now = time.time()
    per_collector: dict[str, list[float]] = {c.NAME: [] for c in collectors}
    ticks: list[float] = []
    floor_runs: list[float] = []
    for run in range(WARMUP_TICKS + args.runs):
        now += 1.0
        tick_start = time.process_time()
        for collector in collectors:
            start = time.process_time()
            collector.collect(now)
            per_collector[collector.NAME].append((time.process_time() - start) * 1000.0)
        elapsed = (time.process_time() - tick_start) * 1000.0
        floor_ms = floor.run() if floor is not None else None  # the first runs warm it too
        if run >= WARMUP_TICKS:
            ticks.append(elapsed)
            if floor_ms is not None:
                floor_runs.append(floor_ms)
    if floor is not None:
        floor.close()
    stats = ctx.cache.stats()
    samples_per_tick = stats["samples"] // (WARMUP_TICKS + args.runs)
    extra: dict[str, Any] = {}
    if args.predict:
        cpi = CPICollector(ctx)
        if not cpi.enabled():
            raise RuntimeError("koordlet_tick: the CPICollector gate is off")
        extra["cpi"] = _cpi_ticks(cpi, now, args.runs)
        # fill the cache up to one training interval: the samples a training reads
        for _ in range(WARMUP_TICKS + args.runs, PREDICTION_EVERY_N_TICKS + 1):
            now += 1.0
            for collector in collectors:
                collector.collect(now)
        extra["prediction"] = _trainings(ctx, pods, now, args.runs)
    out = {
        "backend": native.backend_report()["_cgroupfs"],
        "pods": len(pods),
        "containers": sum(len(p.containers) for p in pods),
        "series": stats["series"],
        "samples_per_tick": samples_per_tick,
        "tick_ms": ticks,
        "floor_ms": floor_runs,
        "collector_ms": {name: median(v[WARMUP_TICKS:]) for name, v in per_collector.items()},
        **extra,
    }
    print(json.dumps(out))


def _measure(root: Path, runs: int, python: bool, floor: list[str]) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("KOORDLET_NO_EXTENSIONS", None)
    if python:
        env["KOORDLET_NO_EXTENSIONS"] = "1"
    argv = [sys.executable, "-m", "benchmarks.koordlet_tick", "--root", str(root), "--runs", str(runs)]
    if not python:  # the CPI tick, the training and the floor beside the native agent only
        argv += ["--predict", *floor]
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
        listing = Path(tmp) / "floor-input"
        listing.write_text(floor_input)
        floor_args = ["--floor", str(build_floor(Path(tmp))), "--floor-input", str(listing)]
        measured = {
            label: _measure(node.root, runs, label == "python", floor_args) for label in ("native", "python")
        }
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
    floor = median(native_run["floor_ms"])
    results = {
        "native_cpu_ms": round(figures["native"], 3),
        "python_cpu_ms": round(figures["python"], 3),
        "c_floor_cpu_ms": round(floor, 3),
    }
    per_collector = native_run["collector_ms"]
    for name, short in _COLLECTORS.items():
        results[f"native_{short}_cpu_ms"] = round(per_collector[name], 3)
    cpi, prediction = native_run["cpi"], native_run["prediction"]
    results["native_cpi_cpu_ms"] = round(cpi["tick_ms"], 3)
    results["native_cpi_check_cpu_ms"] = round(cpi["check_ms"], 3)
    results["native_prediction_cpu_ms"] = round(prediction["train_ms"], 3)
    # at default intervals PSI is read every 10th second, CPI and a training every 60th:
    # the native CPU of an average second
    results["native_per_second_cpu_ms"] = round(
        per_collector["NodeResourceCollector"]
        + per_collector["PodResourceCollector"]
        + per_collector["PSICollector"] / PSI_EVERY_N_TICKS
        + cpi["tick_ms"] / CPI_EVERY_N_TICKS
        + prediction["train_ms"] / PREDICTION_EVERY_N_TICKS,
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
            "feature_gates": "PSICollector=true,CPICollector=true",
            "native_cpu_ms_includes": "node + pods + PSI collectors (one tick)",
            "c_floor_measured": "one run after each native tick (the two alternate, on one CPU)",
            "cpi_supported": cpi["supported"],
            "cpi_note": (
                f"{cpi['reason']}: the check runs once (native_cpi_check_cpu_ms), "
                "a CPI tick after it costs only its remembered answer"
                if not cpi["supported"]
                else "counters open on this host and the tree has a perf_event hierarchy"
            ),
            "prediction_models": prediction["models"],
            "prediction_training_interval_s": PREDICTION_EVERY_N_TICKS,
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
        f"{result.ratios['native_vs_c_floor_ratio']}; CPI tick {cpi['tick_ms']:.3f} ms, "
        f"prediction training {prediction['train_ms']:.2f} ms ({prediction['models']} models), "
        f"{results['native_per_second_cpu_ms']:.2f} ms in an average second "
        "(K1 targets: native_cpu_ms <= 2, native_vs_c_floor_ratio <= 1.5)"
    )
    return result


if __name__ == "__main__":
    _child(sys.argv[1:])
