"""K2: the koordlet's memory and CPU footprint over a sustained run with 100 pods.

The real agent runs as a child process, ``python -m koordlet --standalone``, with every
host root flag pointed at a fake node (benchmarks/_fakehost.py: 100 pods of 3 containers
in a cgroup v1 tree with PSI, procfs and sysfs), default intervals (resources every 1 s,
PSI every 10 s, pods rediscovered every 10 s) and the PSICollector gate on, so every
collector has work. While it runs, this process moves the node's counters on every second
(``/proc/stat``, each cgroup's CPU time and CFS periods) and scrapes ``/metrics`` every
15 s, as Prometheus would.

Start-up is excluded: the CPU baseline is taken once ``/healthz`` answers ``ok`` (every
collector has produced data) and a short settle period has passed; the run then lasts
``duration_s`` (120 s; 3 s in quick mode).

* ``cpu_cores_ratio``: the child's CPU seconds (user + system, every thread) over the
  wall seconds of the sustained run, the K2 target (<= 0.02);
* ``rss_mib``: the child's peak resident set size (``VmHWM``), start-up included, the
  K2 target (<= 100);
* ``steady_rss_mib``: ``VmRSS`` at the end; ``rss_growth_per_min_mib``: its slope over
  the second half of the run (least squares over per-second samples).

The metric cache keeps 30 minutes of samples (about 1500 a second here), so the agent's
memory grows until its retention window is full, long after a two-minute run. That
growth is measured separately: a child process runs the same collectors over the same
fake node into a real MetricCache on a simulated clock, one tick per simulated second,
for a full retention window and a minute more (60 s in quick mode), and reports its own
RSS. ``retention_growth_mib`` is how much that RSS grows from the agent's age at the
end of the live run to the window's end (the cache's size then: ``cache_samples_count``),
and ``projected_rss_mib`` = ``steady_rss_mib`` + ``retention_growth_mib``: the agent's
resident memory once it has run for its retention window.
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
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from benchmarks import _fakehost
from benchmarks.harness import Result
from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.__main__ import host_root_argv
from koordlet.metriccache import KVStore, MetricCache
from koordlet.metrics import KoordletMetrics
from koordlet.metricsadvisor.framework import CollectContext, build_collectors
from koordlet.metricsadvisor.registry import COLLECTORS
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.statesinformer.standalone import CgroupPodsSource, host_applications

NAME = "koordlet_footprint"
PODS = 100
CONTAINERS_PER_POD = 3
SCRAPE_INTERVAL_S = 15.0
RETENTION_S = 1800.0  # the agent's default --tsdb-retention-duration
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
    argv += host_root_argv(node.paths)
    return [*argv, "--feature-gates", "PSICollector=true"]


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


def _simulate(argv: list[str]) -> None:
    """Every collector the agent runs, one tick per simulated second for ``--seconds``;
    prints the process's RSS at each ``--at`` second and the cache size, as one JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, required=True)
    parser.add_argument("--at", type=int, action="append", default=[])
    args = parser.parse_args(argv)
    with _fakehost.scratch_dir() as tmp:
        node = _fakehost.build_node(Path(tmp) / "host", PODS, CONTAINERS_PER_POD)
        cgroups = node.cgroups
        pods = [m for m in (pod_meta(p, cgroups.layout) for p in CgroupPodsSource(cgroups).discover()) if m]
        node_slo = merge_node_slo_spec(NodeSLOSpec(host_applications=host_applications(cgroups)))
        cache = MetricCache(RETENTION_S)
        ctx = CollectContext(
            node.paths,
            cgroups,
            cache,
            KVStore(),
            _States(pods, node_slo),
            KoordletMetrics(CollectorRegistry(), "koordlet-bench"),
            FeatureGates(KOORDLET_FEATURES, {"PSICollector": True}),
        )
        collectors = build_collectors(ctx, COLLECTORS)
        now, rss = time.time(), {}
        for second in range(1, args.seconds + 1):
            now += 1.0
            for collector in collectors:
                if (second - 1) % max(int(collector.interval), 1) == 0:
                    collector.collect(now)
            if second in args.at:
                rss[second] = _memory_mib(os.getpid())["VmRSS"]
        print(json.dumps({"rss_mib": rss, "cache_samples": cache.stats()["samples"]}))


def _retention_growth(agent_age_s: int, seconds: int) -> tuple[float, int]:
    """RSS growth of the simulation between ``agent_age_s`` and ``seconds``, and the
    cache's samples at the end."""
    argv = [sys.executable, "-m", "benchmarks.koordlet_footprint", "--seconds", str(seconds)]
    argv += ["--at", str(agent_age_s), "--at", str(seconds)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"koordlet_footprint simulation failed:\n{done.stderr[-4000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    rss = out["rss_mib"]
    return rss[str(seconds)] - rss[str(agent_age_s)], int(out["cache_samples"])


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
    failures = text.count("failed")
    if code != 0 or failures:
        raise RuntimeError(
            f"koordlet exit status {code}, {failures} failure lines in its log:\n{text[-4000:]}"
        )
    slope = _slope_per_s(rss[len(rss) // 2 :])
    window = 60 if quick else int(RETENTION_S) + 60
    agent_age = min(int(startup_s + settle + wall_s), window)
    growth, cache_samples = _retention_growth(agent_age, window)
    projected = memory["VmRSS"] + growth
    result = Result(
        NAME,
        params={
            "pods": PODS,
            "containers_per_pod": CONTAINERS_PER_POD,
            "duration_s": duration,
            "settle_s": settle,
            "intervals": "defaults (collect 1s, PSI 10s, kubelet sync 10s, node CPU info 60s)",
            "feature_gates": "PSICollector=true",
            "scrape_interval_s": SCRAPE_INTERVAL_S,
            "scrapes": scrapes,
            "metrics_bytes": metrics_bytes,
            "simulated_window_s": window,
            "quick": quick,
        },
        results={
            "cpu_cores_ratio": round(cpu_s / wall_s, 4),
            "rss_mib": round(memory["VmHWM"], 1),
            "steady_rss_mib": round(memory["VmRSS"], 1),
            "rss_growth_per_min_mib": round(slope * 60.0, 2),
            "retention_growth_mib": round(growth, 1),
            "projected_rss_mib": round(projected, 1),
            "cache_samples_count": cache_samples,
            "cpu_s": round(cpu_s, 2),
            "wall_s": round(wall_s, 1),
            "startup_s": round(startup_s, 2),
        },
    )
    result.headline = (
        f"koordlet_footprint: {PODS} pods, {wall_s:.0f}s sustained: {cpu_s / wall_s:.4f} cores, "
        f"peak RSS {memory['VmHWM']:.1f} MiB (end {memory['VmRSS']:.1f} MiB, "
        f"+{slope * 60:.2f} MiB/min; {projected:.1f} MiB once the {window}s window is full) "
        f"(K2 targets: cpu_cores_ratio <= 0.015, rss_mib <= 80 also once the window is full)"
    )
    return result


if __name__ == "__main__":
    _simulate(sys.argv[1:])
