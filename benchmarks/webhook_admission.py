"""M1: the pod mutating webhook over TLS -- latency at 500 req/s offered, and saturation throughput.

The webhook server runs in a child process of its own, started the way koord-manager starts
its webhook server: the real aiohttp webhook app, the real TLS context and dispatcher, the
process tuning of :func:`controlplane.manager.server.settle_after_start`, and a
ClusterColocationProfile that matches every pod (so each request goes through profile
matching, batch-resource replacement, the extended-resource-spec annotation and a JSON
patch), answered from a static cluster view.

The load comes from a separate, established constant-rate generator, vegeta
(github.com/tsenart/vegeta), built from its Go module by ``hack/vegeta.sh`` into a cache
outside the repository (``KOORD_VEGETA`` names a binary to use instead). It speaks
HTTP/1.1 keep-alive over TLS on loopback, and its pauses (Go's are sub-millisecond and
concurrent) cannot stall the Python server's measurement. If vegeta cannot be built the
benchmark fails: there is no fallback to an in-process generator.

* ``p50_ms``, ``p99_ms``, ``p999_ms``, ``max_ms``: open loop at ``500`` requests per second
  (vegeta's constant-rate pacer starts each request on schedule, adding workers rather than
  waiting for answers, so a stalled server cannot hide queueing), one continuous attack:
  a warm-up, then three 10-second windows split by each request's start time. The target
  holds "in every window", so each headline figure is the *worst* window's (the largest
  p50, p99, p99.9 and max over the windows); every window's figures are in
  ``params["windows"]``;
* ``saturation_rps``: closed loop, ``64`` requests in flight (``-rate=0 -max-workers=64``),
  as many as the server answers; after a warm-up, three 5-second windows; the median is
  reported and every window is in ``params["saturation_windows_rps"]``;
* ``server_cores_at_offered_cores``: CPU seconds per second the server used at 500 req/s
  (the largest window's);
* ``server_cpu_per_request_at_saturation_ms``: CPU time the server spent per answer over the
  saturation windows (with ``server_cores_at_saturation_cores``: under 1, the server
  waited for a CPU or for the load generator) -- the figure that decides
  ``saturation_rps``, and steadier than it on a busy machine.

Per window the server child also reports what could have stalled it: its garbage
collections (count and longest pause, from ``gc.callbacks``), the event loop's longest lag
(a 10 ms timer that notes how late it fires) with how much of it the loop ran and how much
it waited for a CPU (the kernel's schedstat), and the time the loop waited for a CPU in the
whole window -- on a shared machine, the part of the tail that other processes caused.

Every answer is checked (HTTP 200, allowed, a patch). Quick mode (the test suite's smoke
run) measures one window of a second each.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import csv
import io
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks.harness import Result

NAME = "webhook_admission"
OFFERED_RPS = 500
CONCURRENCY = 64
PATH = "/mutate-pod"
ROOT = Path(__file__).resolve().parent.parent
VEGETA_SCRIPT = ROOT / "hack" / "vegeta.sh"
#: The event loop monitor's period in the server child.
LAG_PERIOD_S = 0.010
TARGET_P99_MS = 5.0
TARGET_P999_MS = 10.0
TARGET_SATURATION_RPS = 4000.0


def cluster_objects() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "spark", "labels": {"colocation": "on"}},
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "koord-batch"},
            "value": 5000,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        {
            "apiVersion": "config.koordinator.sh/v1alpha1",
            "kind": "ClusterColocationProfile",
            "metadata": {"name": "spark-batch"},
            "spec": {
                "namespaceSelector": {"matchLabels": {"colocation": "on"}},
                "selector": {"matchLabels": {"app": "spark"}},
                "qosClass": "BE",
                "priorityClassName": "koord-batch",
                "koordinatorPriority": 1000,
                "schedulerName": "koord-scheduler",
                "labels": {"koordinator.sh/mutated": "true"},
            },
        },
    ]


def review_body(index: int) -> bytes:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "spark-exec-",
            "namespace": "spark",
            "labels": {"app": "spark", "spark-role": "executor", "spark-app-id": f"app-{index % 50}"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "driver",
                    "uid": "00000000-0000-0000-0000-000000000001",
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "executor",
                    "image": "registry.example/spark:3.5",
                    "args": ["executor", "--cores", "2"],
                    "env": [{"name": f"SPARK_ENV_{k}", "value": f"value-{k}"} for k in range(8)],
                    "resources": {
                        "requests": {"cpu": "1500m", "memory": "3Gi"},
                        "limits": {"cpu": "2", "memory": "4Gi"},
                    },
                    "volumeMounts": [{"name": "spark-local", "mountPath": "/var/data"}],
                }
            ],
            "volumes": [{"name": "spark-local", "emptyDir": {}}],
            "tolerations": [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
            "restartPolicy": "Never",
        },
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"00000000-0000-4000-8000-{index:012d}",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "spark",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:spark:spark",
                "groups": ["system:serviceaccounts"],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
    return orjson.dumps(review)


# ---- the server child ----------------------------------------------------------------------------------


class StallRecorder:
    """Garbage collections and event-loop lags of the server child, with wall-clock times.

    A collection is noted by ``gc.callbacks`` (start and stop). A lag is how late a 10 ms
    timer fires; for each lag the kernel's schedstat of the loop's thread tells how much of
    the late interval it ran (the server was busy) and how long it waited for a CPU (the
    machine was busy). All are kept with ``time.time()`` for the parent's windows.
    """

    def __init__(self) -> None:
        self.collections: list[tuple[float, float, int]] = []
        self.lags: list[tuple[float, float, float, float]] = []
        self._gc_started = 0.0

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            pause = (time.perf_counter() - self._gc_started) * 1000.0
            self.collections.append((time.time(), pause, int(info["generation"])))

    @staticmethod
    def _schedstat() -> tuple[int, int]:
        """(ns on a CPU, ns waiting for one) of the calling thread."""
        try:
            with open("/proc/thread-self/schedstat", "rb") as stat:
                run, wait, _ = stat.read().split()
        except (OSError, ValueError):
            return 0, 0
        return int(run), int(wait)

    async def watch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        expected = loop.time() + LAG_PERIOD_S
        run, wait = self._schedstat()
        while True:
            await asyncio.sleep(max(0.0, expected - loop.time()))
            now = loop.time()
            lag = (now - expected) * 1000.0
            run_now, wait_now = self._schedstat()
            if lag > 1.0:
                self.lags.append((time.time(), lag, (run_now - run) / 1e6, (wait_now - wait) / 1e6))
            run, wait = run_now, wait_now
            expected = max(expected + LAG_PERIOD_S, now)

    def dump(self) -> bytes:
        return orjson.dumps({"collections": self.collections, "lags": self.lags})


def _serve(cert_dir: Path) -> None:
    """Child process: serve the webhook over TLS on a free port; print the port, run until SIGTERM.

    Started as koord-manager starts its webhook server: the cluster view ready, then
    :func:`settle_after_start`, then the TLS site.
    """
    import gc
    import logging

    from controlplane.manager.certs import ServingTLS, generate_bundle, write_cert_dir
    from controlplane.manager.server import settle_after_start, webhook_app
    from controlplane.manager.webhooks.cluster import StaticCluster
    from controlplane.manager.webhooks.context import WebhookContext
    from controlplane.manager.webhooks.dispatch import AdmissionDispatcher
    from controlplane.reactor.serving import start_site

    logging.basicConfig(level=logging.WARNING)
    stalls = StallRecorder()

    async def main() -> None:
        bundle = generate_bundle("localhost")
        write_cert_dir(cert_dir, bundle)
        tls = ServingTLS()
        tls.load(cert_dir / "cert.pem", cert_dir / "key.pem", bundle)
        ctx = WebhookContext(cluster=StaticCluster(cluster_objects()))
        dispatcher = AdmissionDispatcher(ctx)

        async def ready() -> str:
            return ""

        settle_after_start()
        site = await start_site(webhook_app(dispatcher, ready), "127.0.0.1", 0, tls.context)
        gc.callbacks.append(stalls.on_gc)
        monitor = asyncio.create_task(stalls.watch_loop())
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print(site.port, flush=True)
        await stop.wait()
        monitor.cancel()
        (cert_dir / "stalls.json").write_bytes(stalls.dump())
        await site.stop()

    asyncio.run(main())


# ---- the load generator -------------------------------------------------------------------------------


def vegeta_binary() -> str:
    """The vegeta binary: ``KOORD_VEGETA``, else built (or found in its cache) by ``hack/vegeta.sh``."""
    explicit = os.environ.get("KOORD_VEGETA")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise RuntimeError(f"{NAME}: KOORD_VEGETA={explicit} is not an executable")
        return explicit
    built = subprocess.run(["bash", str(VEGETA_SCRIPT)], capture_output=True, text=True, check=False)
    lines = built.stdout.strip().splitlines()
    if built.returncode != 0 or not lines or not os.access(lines[-1], os.X_OK):
        raise RuntimeError(
            f"{NAME}: the load generator vegeta could not be built by hack/vegeta.sh "
            f"(exit status {built.returncode}); its output ends:\n{built.stderr[-2000:]}"
        )
    return lines[-1]


def targets_file(path: Path, port: int, count: int) -> None:
    """``count`` distinct AdmissionReviews as vegeta JSON targets (used round-robin)."""
    url = f"https://localhost:{port}{PATH}"
    header = {"Content-Type": ["application/json"]}
    with path.open("wb") as out:
        for index in range(count):
            body = base64.b64encode(review_body(index)).decode("ascii")
            out.write(orjson.dumps({"method": "POST", "url": url, "body": body, "header": header}))
            out.write(b"\n")


def attack(
    vegeta: str, work: Path, port: int, name: str, duration_s: float, rate: str, extra: list[str]
) -> list[tuple[float, float]]:
    """Run one vegeta attack; returns ``(start unix time, latency ms)`` of every request, in order.

    Raises if any request failed or was not answered with an allowed review carrying a patch.
    """
    results = work / f"{name}.bin"
    subprocess.run(
        [
            vegeta,
            "attack",
            "-format=json",
            f"-targets={work / 'targets.json'}",
            f"-rate={rate}",
            f"-duration={duration_s}s",
            f"-root-certs={work / 'ca-cert.pem'}",
            f"-connect-to=localhost:{port}:127.0.0.1:{port}",
            "-http2=false",
            "-keepalive=true",
            "-timeout=10s",
            f"-name={name}",
            f"-output={results}",
            *extra,
        ],
        check=True,
    )
    encoded = subprocess.run(
        [vegeta, "encode", "--to", "csv", str(results)], check=True, capture_output=True
    ).stdout
    samples: list[tuple[float, float]] = []
    checked: dict[bytes, None] = {}
    for row in csv.reader(io.StringIO(encoded.decode())):
        timestamp_ns, code, latency_ns, error, body = row[0], row[1], row[2], row[5], row[6]
        if code != "200" or error:
            raise RuntimeError(f"{NAME}: request failed: status {code} {error}")
        raw = body.encode()
        if raw not in checked:  # answers repeat with the targets; decode each once
            check_answer(base64.b64decode(raw))
            checked[raw] = None
        samples.append((int(timestamp_ns) / 1e9, int(latency_ns) / 1e6))
    samples.sort()
    results.unlink()
    return samples


def check_answer(answer: bytes) -> None:
    response = orjson.loads(answer)["response"]
    if not response.get("allowed") or "patch" not in response:
        raise RuntimeError(f"the webhook did not mutate the pod: {response}")


def percentile(ordered: list[float], fraction: float) -> float:
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[index]


def split(
    samples: list[tuple[float, float]], warm_up_s: float, seconds: float, windows: int
) -> list[tuple[float, float, list[float]]]:
    """``(start, end, sorted latencies)`` of each window after the warm-up, by request start time."""
    if not samples:
        raise RuntimeError(f"{NAME}: the attack produced no results")
    first = samples[0][0] + warm_up_s
    out = []
    for index in range(windows):
        start, end = first + index * seconds, first + (index + 1) * seconds
        out.append((start, end, sorted(lat for at, lat in samples if start <= at < end)))
    return out


def _usage_of(pid: int) -> tuple[float, float]:
    """(CPU seconds of the process, seconds its main thread -- the event loop -- waited for a CPU)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        waited_ns = int(Path(f"/proc/{pid}/schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0, 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), waited_ns / 1e9


class UsageSampler:
    """The server's CPU use and CPU wait sampled at given wall-clock times (a thread beside the attack)."""

    def __init__(self, pid: int, times: list[float]) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self._thread = threading.Thread(target=self._run, args=(pid, times), daemon=True)
        self._thread.start()

    def _run(self, pid: int, times: list[float]) -> None:
        for at in times:
            time.sleep(max(0.0, at - time.time()))
            self.samples.append((time.time(), *_usage_of(pid)))

    def per_interval(self) -> list[tuple[float, float]]:
        """(cores, ms waited for a CPU) between consecutive samples."""
        self._thread.join()
        out = []
        for (t0, c0, w0), (t1, c1, w1) in zip(self.samples, self.samples[1:], strict=False):
            out.append(((c1 - c0) / (t1 - t0) if t1 > t0 else 0.0, (w1 - w0) * 1000.0))
        return out


def _window_stalls(stalls: dict[str, Any], start: float, end: float) -> dict[str, float]:
    """The server's stalls in one window: collections, and its worst loop lag split into ran / waited."""
    collections = [c for c in stalls["collections"] if start <= c[0] < end]
    lags = [lag for lag in stalls["lags"] if start <= lag[0] < end]
    _, lag_ms, ran_ms, waited_ms = max(lags, key=lambda lag: lag[1], default=(0.0, 0.0, 0.0, 0.0))
    return {
        "server_gc_count": len(collections),
        "server_gc_max_ms": round(max((c[1] for c in collections), default=0.0), 3),
        "server_gc_full_count": sum(1 for c in collections if c[2] == 2),
        "server_loop_lag_max_ms": round(lag_ms, 3),
        # of the worst lag's interval (10 ms + the lag): the server ran / waited for a CPU
        "server_loop_lag_max_ran_ms": round(ran_ms, 3),
        "server_loop_lag_max_waited_ms": round(waited_ms, 3),
    }


def run(quick: bool) -> Result:
    windows = 1 if quick else 3
    seconds = 1.0 if quick else 10.0
    warm_up = 0.5 if quick else 3.0
    saturation_seconds = 1.0 if quick else 5.0
    saturation_warm_up = 0.5 if quick else 1.0
    vegeta = vegeta_binary()
    with tempfile.TemporaryDirectory(prefix="koord-webhook-bench-") as tmp:
        work = Path(tmp)
        server = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.webhook_admission", "--serve", str(work)],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            text=True,
        )
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            targets_file(work / "targets.json", port, 200)
            begin = time.time()
            sampler = UsageSampler(server.pid, [begin + warm_up + i * seconds for i in range(windows + 1)])
            open_samples = attack(
                vegeta, work, port, "open", warm_up + windows * seconds, f"{OFFERED_RPS}/1s", []
            )
            usage = sampler.per_interval()
            saturation_begin = time.time() + saturation_warm_up
            saturation_sampler = UsageSampler(
                server.pid, [saturation_begin, saturation_begin + windows * saturation_seconds]
            )
            saturation_samples = attack(
                vegeta,
                work,
                port,
                "saturation",
                saturation_warm_up + windows * saturation_seconds,
                "0",
                [f"-workers={CONCURRENCY}", f"-max-workers={CONCURRENCY}"],
            )
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        stalls_file = work / "stalls.json"
        stalls = orjson.loads(stalls_file.read_bytes()) if stalls_file.exists() else None
    open_windows = split(open_samples, warm_up, seconds, windows)
    saturation_windows = [
        len(latencies) / saturation_seconds
        for _, _, latencies in split(saturation_samples, saturation_warm_up, saturation_seconds, windows)
    ]
    # CPU time, not wall time: what one answer costs the server when it is never idle
    saturation_cores = saturation_sampler.per_interval()[0][0]
    # CPU seconds over the windows / answers in them (windows x seconds cancel out)
    saturation_cpu_per_request_ms = saturation_cores * windows / sum(saturation_windows) * 1000.0
    per_window: list[dict[str, float]] = []
    for (start, end, ordered), (cores, waited_ms) in zip(open_windows, usage, strict=True):
        if not ordered:
            raise RuntimeError(f"{NAME}: a window received no answers")
        figures: dict[str, float] = {
            "requests_count": len(ordered),
            "achieved_rps": round(len(ordered) / seconds, 1),
            "p50_ms": round(percentile(ordered, 0.50), 3),
            "p99_ms": round(percentile(ordered, 0.99), 3),
            "p999_ms": round(percentile(ordered, 0.999), 3),
            "max_ms": round(ordered[-1], 3),
            "server_cores": round(cores, 3),
            # time the server's event loop was ready to run but the machine gave it no CPU
            "server_cpu_wait_ms": round(waited_ms, 1),
        }
        if stalls is not None:
            figures.update(_window_stalls(stalls, start, end))
        per_window.append(figures)

    def worst(key: str) -> float:
        return max(w[key] for w in per_window)

    saturation = sorted(saturation_windows)[len(saturation_windows) // 2]
    p99, p999 = worst("p99_ms"), worst("p999_ms")
    result = Result(
        name=NAME,
        params={
            "generator": "vegeta",
            "offered_rps": OFFERED_RPS,
            "open_loop_window_s": seconds,
            "open_loop_warm_up_s": warm_up,
            "windows": per_window,
            "headline_window": "worst: each latency figure is the largest over the windows",
            "saturation_windows_rps": [round(s, 1) for s in saturation_windows],
            "saturation_window_s": saturation_seconds,
            "saturation_concurrency": CONCURRENCY,
            "review_bytes": len(review_body(0)),
            "quick": quick,
        },
        results={
            "p50_ms": worst("p50_ms"),
            "p99_ms": p99,
            "p999_ms": p999,
            "max_ms": worst("max_ms"),
            "achieved_rps": min(w["achieved_rps"] for w in per_window),
            "saturation_rps": round(saturation, 1),
            "server_cores_at_offered_cores": round(max(w["server_cores"] for w in per_window), 3),
            "server_cores_at_saturation_cores": round(saturation_cores, 3),
            "server_cpu_per_request_at_saturation_ms": round(saturation_cpu_per_request_ms, 4),
        },
        ratios={
            "p99_vs_target_ratio": round(p99 / TARGET_P99_MS, 3),
            "p999_vs_target_ratio": round(p999 / TARGET_P999_MS, 3),
            "saturation_vs_target_ratio": round(saturation / TARGET_SATURATION_RPS, 3),
        },
    )
    windows_text = "; ".join(
        f"p50 {w['p50_ms']:.2f} p99 {w['p99_ms']:.2f} p99.9 {w['p999_ms']:.2f} max {w['max_ms']:.2f}"
        for w in per_window
    )
    result.headline = (
        f"webhook_admission: worst window p99 {p99:.2f} ms, p99.9 {p999:.2f} ms at {OFFERED_RPS} req/s "
        f"offered over TLS by vegeta (windows, ms: {windows_text}); saturation "
        f"{result.results['saturation_rps']:.0f} req/s (M1 targets: p99_ms <= {TARGET_P99_MS:g}, "
        f"p999_ms <= {TARGET_P999_MS:g} in every window, saturation_rps >= {TARGET_SATURATION_RPS:g})"
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="webhook server child process of the M1 benchmark")
    parser.add_argument("--serve", required=True, metavar="CERT_DIR")
    _serve(Path(parser.parse_args().serve))
