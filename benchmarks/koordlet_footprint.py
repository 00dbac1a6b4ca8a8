"""K2: the koordlet's memory and CPU footprint over a sustained run with 100 pods.

The real agent runs as a child process, ``python -m koordlet --standalone``, with every
host root flag pointed at a fake node (benchmarks/_fakehost.py: 100 pods of 3 containers
in a cgroup v1 tree with PSI, procfs and sysfs), default intervals (resources every 1 s,
PSI every 10 s, CPI every 60 s, pods rediscovered every 10 s) and the PSICollector and
CPICollector gates on, so every collector has work (the CPI collector checks once whether
the host can count cycles and instructions; on a host without a PMU it says why and
collects nothing). While it runs, this process moves the node's counters on every second
(``/proc/stat``, each cgroup's CPU time and CFS periods) and scrapes ``/metrics`` every
15 s, as Prometheus would.

Start-up is excluded: the CPU baseline is taken once ``/healthz`` answers ``ok`` (every
collector has produced data) and a short settle period has passed; the run then lasts
``duration_s`` (120 s; 3 s in quick mode).

* ``cpu_cores_ratio``: the child's CPU seconds (user + system, every thread) over the
  wall seconds of the sustained run, the K2 target (<= 0.015);
* ``rss_mib``: the child's peak resident set size (``VmHWM``), start-up included, the
  K2 target (<= 80);
* ``steady_rss_mib``: ``VmRSS`` at the end; ``rss_growth_per_min_mib``: its slope over
  the second half of the run (least squares over per-second samples).

Prediction: the agent trains its peak predictor in every mode, ``--standalone`` included
(``koordlet/agent.py``), so ``cpu_cores_ratio`` and ``steady_rss_mib`` include it. The
benchmark checks that (``params.prediction_in_agent``: whether the agent wrote checkpoints
under the fake node's var-run root) and, where an agent runs none, measures the
predictor in the simulation below, as the agent would run it: a
training every ``--prediction-training-interval`` (1 min, the first at start), expiry and
up to 12 checkpoints every minute, checkpoints under the fake node's var-run root.

* ``prediction_train_cpu_ms``: the median CPU of one training over the 100 pods (107
  models: the pods, the node, five priority classes, the system), from the trainings
  after the agent's age;
* ``prediction_cpu_cores_ratio``: the predictor's CPU seconds (trainings, expiry,
  checkpoints) per simulated second after the agent's age, and
  ``cpu_cores_with_prediction_ratio`` = ``cpu_cores_ratio`` + that (or just
  ``cpu_cores_ratio`` when the agent ran the predictor itself);
* ``prediction_mib``: what the predictor's steps up to the agent's age left allocated
  (``tracemalloc`` around each step: the models, mostly), which the live agent lacks.

The metric cache keeps 30 minutes of samples (about 1500 a second here): the last minute
in memory, older blocks in segment files under ``--tsdb-path`` (the agent runs with one
in the fake node's tree). Its index of those blocks, and anything else that grows with the
window, grows until the window is full, long after a two-minute run. That growth is
measured separately: a child process runs the same collectors over the same fake node
into a real MetricCache with its blocks in a directory, as the agent's, on a simulated
clock, one tick per simulated second,
for a full retention window and a minute more (in quick mode, until 10 s past the
first training after the agent's age), and reports its own RSS.
``retention_growth_mib`` is how much that RSS grows from the agent's age at the end of
the live run to the window's end (the cache's size then: ``cache_samples_count``), and
``projected_rss_mib`` = ``steady_rss_mib`` + ``retention_growth_mib`` (+
``prediction_mib`` where the live agent ran no predictor): the agent's resident memory
once it has run for its retention window, the predictor's models and the CPI collector
included.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from benchmarks import _fakehost
from benchmarks.harness import Result, median
from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.__main__ import host_root_argv
from koordlet.metriccache import KVStore, MetricCache
from koordlet.metrics import KoordletMetrics
from koordlet.metricsadvisor.framework import CollectContext, build_collectors
from koordlet.metricsadvisor.registry import COLLECTORS
from koordlet.prediction import PeakPredictServer, PredictionConfig, checkpoint_dir_under
from koordlet.prediction.config import DEFAULT_CHECKPOINT_FILEPATH
from koordlet.prediction.server import CHECKPOINT_STEP_SECONDS, GC_INTERVAL_SECONDS
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.statesinformer.standalone import CgroupPodsSource, host_applications

NAME = "koordlet_footprint"
PODS = 100
CONTAINERS_PER_POD = 3
SCRAPE_INTERVAL_S = 15.0
RETENTION_S = 1800.0  # the agent's default --tsdb-retention-duration
FEATURE_GATES = "PSICollector=true,CPICollector=true"
_GATES = {"PSICollector": True, "CPICollector": True}
ROOT = Path(__file__).resolve().parent.parent
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _memory_mib(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0]) / 1024.0
    return out


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        return 0, b""


def _slope_per_s(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (t, y) points."""
    n = len(points)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (y - mean_y) for t, y in points) / var if var else 0.0


def _agent_argv(node: _fakehost.FakeNode, port: int) -> list[str]:
    argv = [sys.executable, "-m", "koordlet", "--standalone", "--addr", f"127.0.0.1:{port}"]
    argv += [*host_root_argv(node.paths), "--tsdb-path", str(node.root / "metric-data")]
    return [*argv, "--feature-gates", FEATURE_GATES]


def _wait_healthy(base: str, child: subprocess.Popen[bytes], log: Path, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(
                f"koordlet exited with {child.returncode} before ready:\n{log.read_text()[-4000:]}"
            )
        status, body = _get(f"{base}/healthz", timeout=1.0)
        if status == 200 and body.strip() == b"ok":
            return
        time.sleep(0.2)
    raise RuntimeError(f"koordlet not ready within {limit_s:.0f}s:\n{log.read_text()[-4000:]}")


def _stop(child: subprocess.Popen[bytes]) -> int:
    """SIGTERM (the agent shuts down gracefully), SIGKILL if it does not within 20 s."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            return child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return child.returncode


class _States:
    """What the standalone states informer gives the collectors: the discovered pods and
    the default NodeSLO with the host applications beside kubepods."""

    def __init__(self, pods: list[PodMeta], node_slo: NodeSLOSpec) -> None:
        self._pods, self._node_slo = pods, node_slo

    def get_all_pods(self) -> list[PodMeta]:
        return list(self._pods)

    def get_node(self) -> Mapping[str, Any] | None:
        return None

    def get_node_slo(self) -> NodeSLOSpec:
        return self._node_slo


def _checkpoint_dir(node: _fakehost.FakeNode) -> Path:
    """Where the agent keeps its prediction checkpoints on the fake node (the default
    ``--prediction-checkpoint-filepath`` under its var-run root)."""
    return checkpoint_dir_under(node.paths.var_run_root, DEFAULT_CHECKPOINT_FILEPATH)


class _PredictorSteps:
    """The predict server's three loops (training, expiry, checkpoints) on the simulated
    clock, each run at its period from the first second on, as the agent's ``_every``
    runs them. Steps up to ``trace_until`` are traced (``retained_bytes``: what they left
    allocated); later ones are timed (``cpu_s``, ``train_ms``)."""

    def __init__(self, server: PeakPredictServer, trace_until: int) -> None:
        self.server = server
        self.trace_until = trace_until
        self.retained_bytes = 0
        self.cpu_s = 0.0
        self.train_ms: list[float] = []
        self._loops: list[tuple[str, int, Callable[[], None]]] = [
            ("train", max(int(server.config.training_interval_seconds), 1), server.train),
            ("gc", int(GC_INTERVAL_SECONDS), server.gc),
            ("checkpoint", int(CHECKPOINT_STEP_SECONDS), server.checkpoint),
        ]

    def run_due(self, second: int) -> None:
        for name, period, step in self._loops:
            if (second - 1) % period:
                continue
            if second <= self.trace_until:
                tracemalloc.start()
                step()
                self.retained_bytes += tracemalloc.get_traced_memory()[0]
                tracemalloc.stop()
                continue
            start = time.process_time()
            step()
            elapsed = time.process_time() - start
            self.cpu_s += elapsed
            if name == "train":
                self.train_ms.append(elapsed * 1000.0)


def _simulate(argv: list[str]) -> None:
    """Every collector the agent runs, one tick per simulated second for ``--seconds``,
    and the predictor's steps at their periods; prints the process's RSS at each ``--at``
    second, the cache size and the predictor's figures (``--trace-until``: the last second
    whose predictor steps are traced rather than timed), as one JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, required=True)
    parser.add_argument("--at", type=int, action="append", default=[])
    parser.add_argument("--trace-until", type=int, default=0)
    args = parser.parse_args(argv)
    with _fakehost.scratch_dir() as tmp:
        node = _fakehost.build_node(Path(tmp) / "host", PODS, CONTAINERS_PER_POD)
        cgroups = node.cgroups
        pods = [m for m in (pod_meta(p, cgroups.layout) for p in CgroupPodsSource(cgroups).discover()) if m]
        node_slo = merge_node_slo_spec(NodeSLOSpec(host_applications=host_applications(cgroups)))
        cache = MetricCache(RETENTION_S, directory=Path(tmp) / "metric-data")  # as the agent's --tsdb-path
        states = _States(pods, node_slo)
        ctx = CollectContext(
            node.paths,
            cgroups,
            cache,
            KVStore(),
            states,
            KoordletMetrics(CollectorRegistry(), "koordlet-bench"),
            FeatureGates(KOORDLET_FEATURES, _GATES),
        )
        collectors = build_collectors(ctx, COLLECTORS)
        now, rss = time.time(), {}
        server = PeakPredictServer(
            PredictionConfig(_checkpoint_dir(node)),
            cache.query,
            lambda: [meta.pod for meta in states.get_all_pods()],
            clock=lambda: now,
        )
        server.restore()
        predictor = _PredictorSteps(server, args.trace_until)
        for second in range(1, args.seconds + 1):
            now += 1.0
            for collector in collectors:
                if (second - 1) % max(int(collector.interval), 1) == 0:
                    collector.collect(now)
            predictor.run_due(second)
            if second in args.at:
                rss[second] = _memory_mib(os.getpid())["VmRSS"]
        timed_s = args.seconds - min(args.trace_until, args.seconds)
        checkpoints = _checkpoint_dir(node)
        print(
            json.dumps(
                {
                    "rss_mib": rss,
                    "cache_samples": cache.stats()["samples"],
                    "collectors": [c.NAME for c in collectors],
                    "prediction": {
                        "models": len(server.models),
                        "checkpoints": len(list(checkpoints.iterdir())) if checkpoints.is_dir() else 0,
                        "retained_mib": predictor.retained_bytes / (1 << 20),
                        "train_ms": median(predictor.train_ms) if predictor.train_ms else None,
                        "trainings_timed": len(predictor.train_ms),
                        "cores": predictor.cpu_s / timed_s if timed_s else None,
                    },
                }
            )
        )


def _retention_growth(agent_age_s: int, seconds: int) -> dict[str, Any]:
    """The simulation's RSS growth between ``agent_age_s`` and ``seconds``
    (``growth_mib``), the cache's samples at the end and the predictor's figures."""
    argv = [sys.executable, "-m", "benchmarks.koordlet_footprint", "--seconds", str(seconds)]
    argv += ["--at", str(agent_age_s), "--at", str(seconds), "--trace-until", str(agent_age_s)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"koordlet_footprint simulation failed:\n{done.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    rss = out["rss_mib"]
    out["growth_mib"] = rss[str(seconds)] - rss[str(agent_age_s)]
    return out


def run(quick: bool = False) -> Result:
    duration = 3.0 if quick else 120.0
    settle = 0.5 if quick else 5.0
    with _fakehost.scratch_dir() as tmp:
        work = Path(tmp)
        node = _fakehost.build_node(work / "host", PODS, CONTAINERS_PER_POD)
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        log = work / "koordlet.log"
        env = {k: v for k, v in os.environ.items() if k not in ("KOORDLET_NO_EXTENSIONS", "agent_mode")}
        env["NODE_NAME"] = "koordlet-bench"
        with log.open("wb") as out:
            child = subprocess.Popen(
                _agent_argv(node, port), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env
            )
        try:
            started = time.monotonic()
            _wait_healthy(base, child, log)
            startup_s = time.monotonic() - started
            end_settle = time.monotonic() + settle
            while time.monotonic() < end_settle:
                node.advance()
                time.sleep(min(1.0, max(end_settle - time.monotonic(), 0.0)))
            pid = child.pid
            cpu_start, wall_start = _cpu_seconds(pid), time.monotonic()
            rss: list[tuple[float, float]] = []
            scrapes, next_scrape, metrics_bytes = 0, wall_start, 0
            while (now := time.monotonic()) < wall_start + duration:
                node.advance()
                if now >= next_scrape:
                    status, body = _get(f"{base}/metrics")
                    if status != 200:
                        raise RuntimeError(f"koordlet /metrics answered {status}")
                    scrapes, metrics_bytes, next_scrape = scrapes + 1, len(body), now + SCRAPE_INTERVAL_S
                rss.append((now - wall_start, _memory_mib(pid)["VmRSS"]))
                if child.poll() is not None:
                    raise RuntimeError(f"koordlet exited with {child.returncode}:\n{log.read_text()[-4000:]}")
                time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
            cpu_s, wall_s = _cpu_seconds(pid) - cpu_start, time.monotonic() - wall_start
            memory = _memory_mib(pid)
            status, body = _get(f"{base}/metrics")
            if status != 200 or b"koordlet_node_used_cpu_cores{" not in body:
                raise RuntimeError("koordlet /metrics lacks the node usage: collectors are not running")
        finally:
            code = _stop(child)
        text = log.read_text(errors="replace")
        # the agent's predictor writes its first checkpoints within a minute of its start
        agent_predicts = _checkpoint_dir(node).is_dir()
    failures = text.count("failed")
    if code != 0 or failures:
        raise RuntimeError(
            f"koordlet exit status {code}, {failures} failure lines in its log:\n{text[-4000:]}"
        )
    slope = _slope_per_s(rss[len(rss) // 2 :])
    live_age = int(startup_s + settle + wall_s)
    # quick: just past the first training after the agent's age (one with the pods' usage)
    window = (live_age // 60 + 1) * 60 + 10 if quick else int(RETENTION_S) + 60
    agent_age = min(live_age, window)
    simulated = _retention_growth(agent_age, window)
    growth, prediction = simulated["growth_mib"], simulated["prediction"]
    if prediction["train_ms"] is None:
        raise RuntimeError(f"koordlet_footprint: no training after the agent's age ({agent_age}s) to time")
    # what the live agent did not run, the simulation adds
    prediction_mib = 0.0 if agent_predicts else prediction["retained_mib"]
    prediction_cores = 0.0 if agent_predicts else prediction["cores"]
    projected = memory["VmRSS"] + growth + prediction_mib
    cores = cpu_s / wall_s
    result = Result(
        NAME,
        params={
            "pods": PODS,
            "containers_per_pod": CONTAINERS_PER_POD,
            "duration_s": duration,
            "settle_s": settle,
            "intervals": (
                "defaults (collect 1s, PSI 10s, CPI 60s, kubelet sync 10s, node CPU info 60s, "
                "prediction training 1m)"
            ),
            "feature_gates": FEATURE_GATES,
            "collectors": simulated["collectors"],
            "prediction_in_agent": agent_predicts,
            "prediction": (
                "run by the agent"
                if agent_predicts
                else "not run by koordlet --standalone (only with the NodeMetric report): measured in "
                "the simulation and added to projected_rss_mib and cpu_cores_with_prediction_ratio"
            ),
            "prediction_training_interval_s": 60,
            "prediction_models": prediction["models"],
            "prediction_checkpoints": prediction["checkpoints"],
            "prediction_trainings_timed": prediction["trainings_timed"],
            "scrape_interval_s": SCRAPE_INTERVAL_S,
            "scrapes": scrapes,
            "metrics_bytes": metrics_bytes,
            "simulated_window_s": window,
            "quick": quick,
        },
        results={
            "cpu_cores_ratio": round(cores, 4),
            "cpu_cores_with_prediction_ratio": round(cores + prediction_cores, 4),
            "rss_mib": round(memory["VmHWM"], 1),
            "steady_rss_mib": round(memory["VmRSS"], 1),
            "rss_growth_per_min_mib": round(slope * 60.0, 2),
            "retention_growth_mib": round(growth, 1),
            "projected_rss_mib": round(projected, 1),
            "cache_samples_count": simulated["cache_samples"],
            "prediction_mib": round(prediction["retained_mib"], 2),
            "prediction_train_cpu_ms": round(prediction["train_ms"], 2),
            "prediction_cpu_cores_ratio": round(prediction["cores"], 5),
            "cpu_s": round(cpu_s, 2),
            "wall_s": round(wall_s, 1),
            "startup_s": round(startup_s, 2),
        },
    )
    result.headline = (
        f"koordlet_footprint: {PODS} pods, {wall_s:.0f}s sustained: {cores:.4f} cores "
        f"({cores + prediction_cores:.4f} with prediction), "
        f"peak RSS {memory['VmHWM']:.1f} MiB (end {memory['VmRSS']:.1f} MiB, "
        f"+{slope * 60:.2f} MiB/min; {projected:.1f} MiB once the {window}s window is full) "
        f"(K2 targets: cpu_cores_ratio <= 0.015, rss_mib <= 80 also once the window is full)"
    )
    return result


if __name__ == "__main__":
    _simulate(sys.argv[1:])
