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
  the second half of the run (least squares over per-second samples). The metric cache
  keeps 30 minutes of samples (about 1500 a second here, 16 bytes each), so memory grows
  until the retention window is full; ``projected_rss_mib`` extends the measured slope to
  the end of that window (an extrapolation, reported for context, not a measurement).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from benchmarks import _fakehost
from benchmarks.harness import Result

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
    paths = node.paths
    roots = {
        "--cgroup-root-dir": paths.cgroup_root,
        "--proc-root-dir": paths.proc_root,
        "--sys-root-dir": paths.sys_root,
        "--sys-fs-root-dir": paths.sys_fs_root,
        "--var-run-root-dir": paths.var_run_root,
        "--run-root-dir": paths.run_root,
        "--var-lib-kubelet-dir": paths.var_lib_kubelet,
    }
    argv = [sys.executable, "-m", "koordlet", "--standalone", "--addr", f"127.0.0.1:{port}"]
    for flag, path in roots.items():
        argv += [flag, str(path)]
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
    # the first minute allocates once (series, rate caches, arenas): extrapolate from the second half
    slope = max(_slope_per_s(rss[len(rss) // 2 :]), 0.0)
    projected = memory["VmRSS"] + slope * max(RETENTION_S - (wall_s + settle), 0.0)
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
            "quick": quick,
        },
        results={
            "cpu_cores_ratio": round(cpu_s / wall_s, 4),
            "rss_mib": round(memory["VmHWM"], 1),
            "steady_rss_mib": round(memory["VmRSS"], 1),
            "rss_growth_per_min_mib": round(slope * 60.0, 2),
            "projected_rss_mib": round(projected, 1),
            "cpu_s": round(cpu_s, 2),
            "wall_s": round(wall_s, 1),
            "startup_s": round(startup_s, 2),
        },
    )
    result.headline = (
        f"koordlet_footprint: {PODS} pods, {wall_s:.0f}s sustained: {cpu_s / wall_s:.4f} cores, "
        f"peak RSS {memory['VmHWM']:.1f} MiB (end {memory['VmRSS']:.1f} MiB, "
        f"+{slope * 60:.2f} MiB/min) (K2 targets: cpu_cores_ratio <= 0.02, rss_mib <= 100)"
    )
    return result
