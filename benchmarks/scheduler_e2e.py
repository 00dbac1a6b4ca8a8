"""S1 (end-to-end part): koord-scheduler beside upstream's kube-scheduler on the envtest apiserver.

Both schedulers run as separate processes against a real kube-apiserver and etcd
(``hack/envtest.sh``, Kubernetes v1.34.4); upstream's kube-scheduler is the same version,
built from its Go module by ``hack/kube-scheduler.sh`` (``KOORD_KUBE_SCHEDULER`` names a
binary to use instead). Each run of each scheduler gets a fresh etcd and apiserver, so both
see the same empty cluster: the workload is scheduler_perf's ``SchedulingBasic`` (its
``node-default.yaml`` and ``pod-default.yaml`` templates: nodes of 4 CPU, 32 Gi and 110
pods, Ready; pods of one container requesting and limited to 100m and 500 Mi), 1000 nodes
and 5000 pending pods created through the API before the scheduler starts. The apiserver
runs with ``TaintNodesByCondition`` admission off, as scheduler_perf's does (no node
lifecycle controller runs to lift the not-ready taint it would add).

* koord-scheduler: ``python -m controlplane.scheduler`` with its default profile (pods
  name ``schedulerName: koord-scheduler``), ``--leader-elect=false --secure-port=0
  --kube-api-qps=5000 --kube-api-burst=5000``;
* kube-scheduler: a KubeSchedulerConfiguration with one ``default-scheduler`` profile
  (the pods leave ``schedulerName`` unset), ``clientConnection`` qps 5000 and burst 5000
  (as scheduler_perf runs it), ``leaderElection.leaderElect: false``; ``--secure-port=0``.

Both write a ``Scheduled`` Event per pod. A watch on the namespace's bound pods
(``spec.nodeName!=``), opened before the scheduler starts, notes when each binding
arrives. Figures (koord-scheduler's unprefixed or ``e2e_``, kube-scheduler's ``upstream_``):

* ``pods_per_s`` / ``upstream_pods_per_s``: pods bound per second from the first binding
  seen to the last (``(pods - 1) / span``), the same definition for both; the median of
  the runs. ``vs_upstream_ratio`` is the ratio of the two medians;
* ``e2e_start_to_bound_s`` / ``upstream_start_to_bound_s``: from starting the process to
  the last binding (start-up and the initial LIST included);
* ``e2e_cpu_per_pod_ms`` / ``upstream_cpu_per_pod_ms``: the scheduler process's CPU
  (user + system, ``/proc/<pid>/stat``, all threads) over that span, per pod bound in it;
* ``e2e_rss_mib`` / ``upstream_rss_mib``: the scheduler process's peak resident set
  (``VmHWM``) once every pod is bound and its Events written (largest over the runs);
* ``apiserver_cpu_s`` / ``upstream_apiserver_cpu_s``, ``etcd_cpu_s`` /
  ``upstream_etcd_cpu_s``: CPU seconds the apiserver and etcd spent over the span;
* ``e2e_scheduled_events_count`` / ``upstream_scheduled_events_count``: ``Scheduled``
  Events found once none arrived for a while (kube-scheduler's event broadcaster drops
  events when its queue of 1000 is full; each is checked, never assumed).

Each run's figures are in ``params`` too, with its 1-second throughput samples
(scheduler_perf's) and the write requests the apiserver served from the scheduler's start
until its Events were found, per verb and resource with their mean latency (from the
apiserver's ``/metrics``; its own lease and endpoints writes included).

The runs alternate which scheduler goes first. The benchmark process (watch, creation)
shares the machine's cores with the apiserver, etcd and the scheduler under test; on a
2-core machine the apiserver and etcd take most of the CPU, so read the throughput next to
the CPU figures.

Without the envtest binaries the result says ``params["skipped"]`` (why) and has no
figures; without kube-scheduler only its half is missing (``params["upstream_skipped"]``).
Quick mode (the test suite's smoke run: 100 nodes, 300 pods, one run) never builds
kube-scheduler; it uses the binary only when ``hack/kube-scheduler.sh`` has cached it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import Result, median
from benchmarks.informer_sync import _cpu_seconds_of, _etcd_pid, _settle
from controlplane.scheduler.config import parse
from controlplane.scheduler.kernel import backend
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.config import load_config
from koordinator.kube.errors import ApiConnectionError, GoneError
from koordinator.kube.watch import BOOKMARK, DELETED
from testsupport.envtest import ControlPlane, ControlPlaneError, provision_binaries

NAME = "scheduler_e2e"
ROOT = Path(__file__).resolve().parent.parent
KUBE_SCHEDULER_SCRIPT = ROOT / "hack" / "kube-scheduler.sh"
ENV_KUBE_SCHEDULER = "KOORD_KUBE_SCHEDULER"
NAMESPACE = "bench"
KOORD = "koord-scheduler"
UPSTREAM = "default-scheduler"
CLIENT_QPS = 5000
CREATE_CONCURRENCY = 48
#: scheduler_perf's apiserver runs without it; nothing here would lift its not-ready taint
APISERVER_ARGS = ("--disable-admission-plugins=TaintNodesByCondition",)
EVENTS_QUIET_S = 5.0
EVENTS_LIMIT_S = 120.0
STOP_TIMEOUT_S = 15.0


class SkipError(RuntimeError):
    """A Go binary the benchmark needs cannot be found or built."""


# --- workload (scheduler_perf's templates) ---------------------------------------------


def make_node(i: int, name: str = "") -> dict[str, Any]:
    """scheduler_perf's node (``name``: another than its ``scheduler-perf-NNNNN``)."""
    resources = {"pods": "110", "cpu": "4", "memory": "32Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name or f"scheduler-perf-{i:05d}"},
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"status": "True", "type": "Ready"}],
            "phase": "Running",
        },
    }


def make_pod(i: int, scheduler_name: str) -> dict[str, Any]:
    resources = {"cpu": "100m", "memory": "500Mi"}
    spec: dict[str, Any] = {
        "containers": [
            {
                "image": "registry.k8s.io/pause:3.10.1",
                "name": "pause",
                "ports": [{"containerPort": 80}],
                "resources": {"limits": resources, "requests": resources},
            }
        ]
    }
    if scheduler_name != UPSTREAM:
        spec["schedulerName"] = scheduler_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i:06d}", "namespace": NAMESPACE},
        "spec": spec,
    }


# --- the binaries ------------------------------------------------------------------------


def envtest_binaries() -> Path:
    try:
        return provision_binaries()
    except ControlPlaneError as err:
        raise SkipError(f"no envtest kube-apiserver/etcd: {err}") from None


def kube_scheduler_binary(build: bool) -> Path:
    """``$KOORD_KUBE_SCHEDULER``, else ``hack/kube-scheduler.sh``'s (built only when ``build``)."""
    explicit = os.environ.get(ENV_KUBE_SCHEDULER)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise SkipError(f"{ENV_KUBE_SCHEDULER}={explicit} is not an executable")
        return Path(explicit)
    argv = ["bash", str(KUBE_SCHEDULER_SCRIPT), *(() if build else ("--cached",))]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SkipError(f"hack/kube-scheduler.sh could not run: {err}") from None
    lines = done.stdout.strip().splitlines()
    binary = Path(lines[-1]) / "kube-scheduler" if lines else None
    if done.returncode != 0 or binary is None or not os.access(binary, os.X_OK):
        raise SkipError(
            f"hack/kube-scheduler.sh{'' if build else ' --cached'} failed ({done.returncode}): "
            f"{done.stderr.strip()[-2000:]}"
        )
    return binary


# --- one run -------------------------------------------------------------------------------


@dataclass
class RunFigures:
    scheduler: str
    pods: int
    create_s: float = 0.0
    span_s: float = 0.0
    start_to_bound_s: float = 0.0
    scheduler_cpu_s: float = 0.0
    apiserver_cpu_s: float = 0.0
    etcd_cpu_s: float = 0.0
    peak_rss_mib: float = 0.0
    events: int = 0
    samples: list[int] = field(default_factory=list)
    #: the scheduler's writes the apiserver served: "VERB resource[/subresource]" -> (count, mean ms)
    writes: dict[str, tuple[int, float]] = field(default_factory=dict)

    @property
    def pods_per_s(self) -> float:
        return (self.pods - 1) / self.span_s if self.span_s > 0 else math.inf

    @property
    def cpu_per_pod_ms(self) -> float:
        return self.scheduler_cpu_s * 1000.0 / max(1, self.pods - 1)


def _peak_rss_mib(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


_LABEL = re.compile(r'(\w+)="([^"]*)"')
_WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


async def _apiserver_writes(client: ApiClient) -> dict[str, tuple[int, float]]:
    """Write requests the apiserver has served so far (from its /metrics): count and seconds."""
    response = await client.open_stream("/metrics", {})
    try:
        text = (await response.read()).decode()
    finally:
        response.release()
    totals: dict[str, tuple[int, float]] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name not in ("apiserver_request_duration_seconds_count", "apiserver_request_duration_seconds_sum"):
            continue
        labels_text, _, value = rest.rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        if labels.get("verb") not in _WRITE_VERBS:
            continue
        key = f"{labels['verb']} {labels.get('resource', '')}"
        if labels.get("subresource"):
            key += f"/{labels['subresource']}"
        count, seconds = totals.get(key, (0, 0.0))
        if name.endswith("_count"):
            count += int(float(value))
        else:
            seconds += float(value)
        totals[key] = (count, seconds)
    return totals


def _writes_between(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]]
) -> dict[str, tuple[int, float]]:
    """Requests served between two snapshots: count and mean milliseconds, per kind."""
    served = {}
    for key, (count, seconds) in after.items():
        count0, seconds0 = before.get(key, (0, 0.0))
        if count > count0:
            served[key] = (count - count0, (seconds - seconds0) * 1000.0 / (count - count0))
    return served


def _log_tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def koord_argv(plane: ControlPlane, config: Path | None = None) -> list[str]:
    """koord-scheduler's command line: its default profile, or ``--config`` (whose
    clientConnection then names the kubeconfig, QPS and burst, as upstream's does)."""
    if config is not None:
        connection = [f"--config={config}"]
    else:
        connection = [
            f"--kubeconfig={plane.kubeconfig}",
            f"--kube-api-qps={CLIENT_QPS}",
            f"--kube-api-burst={CLIENT_QPS}",
        ]
    return [
        sys.executable,
        "-m",
        "controlplane.scheduler",
        *connection,
        "--leader-elect=false",
        "--secure-port=0",
    ]


def upstream_argv(plane: ControlPlane, binary: Path) -> list[str]:
    config = plane.workdir / "kube-scheduler.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "clientConnection:\n"
        f"  kubeconfig: {plane.kubeconfig}\n"
        f"  qps: {CLIENT_QPS}\n"
        f"  burst: {CLIENT_QPS}\n"
        "leaderElection:\n"
        "  leaderElect: false\n"
        "profiles:\n"
        f"- schedulerName: {UPSTREAM}\n"
    )
    return [str(binary), f"--config={config}", "--secure-port=0"]


async def create_all(client: ApiClient, resource: res.Resource, bodies: Iterable[dict[str, Any]]) -> None:
    """Create every object, ``CREATE_CONCURRENCY`` requests at a time."""
    limit = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def create(body: dict[str, Any]) -> None:
        async with limit:
            await client.create(resource, body)

    await asyncio.gather(*(create(body) for body in bodies))


async def check_untainted(client: ApiClient) -> None:
    tainted = [
        n["metadata"]["name"]
        for n in (await client.list_all(res.NODES, strip_managed_fields=True))["items"]
        if (n.get("spec") or {}).get("taints")
    ]
    if tainted:
        raise RuntimeError(f"{len(tainted)} nodes carry taints (first: {tainted[0]})")


async def _populate(client: ApiClient, nodes: int, pods: int, scheduler_name: str) -> float:
    await client.ensure_namespace(NAMESPACE)
    start = time.perf_counter()
    await create_all(client, res.NODES, (make_node(i) for i in range(nodes)))
    await create_all(client, res.PODS, (make_pod(i, scheduler_name) for i in range(pods)))
    created_s = time.perf_counter() - start
    await check_untainted(client)
    return created_s


class _Bindings:
    """Pods seen bound (through a watch of ``spec.nodeName!=``), with the time each was seen."""

    def __init__(
        self, client: ApiClient, resource_version: str, pods: int, on_first: Callable[[], None]
    ) -> None:
        self.client = client
        self.resource_version = resource_version
        self.pods = pods
        self.on_first = on_first
        self.seen: set[str] = set()
        self.times: list[float] = []

    def _note(self, name: str) -> None:
        if name not in self.seen:
            self.seen.add(name)
            self.times.append(time.perf_counter())
            if len(self.seen) == 1:
                self.on_first()

    async def _relist(self) -> None:
        """After a too-old resourceVersion: count the bound pods the watch missed (seen now)."""
        listed = await self.client.list_all(
            res.PODS, NAMESPACE, field_selector="spec.nodeName!=", strip_managed_fields=True
        )
        for pod in listed["items"]:
            self._note(pod["metadata"]["name"])
        self.resource_version = listed["metadata"]["resourceVersion"]

    async def wait_all(self) -> None:
        """Until every pod is seen bound; a dropped watch resumes from its last resourceVersion."""
        while len(self.seen) < self.pods:
            try:
                stream = await self.client.watch(
                    res.PODS,
                    NAMESPACE,
                    resource_version=self.resource_version,
                    field_selector="spec.nodeName!=",
                    strip_managed_fields=True,
                )
                async with stream:
                    async for event in stream:
                        if event.resource_version:
                            self.resource_version = event.resource_version
                        if event.type not in (BOOKMARK, DELETED):
                            self._note(event.object["metadata"]["name"])
                            if len(self.seen) >= self.pods:
                                return
            except GoneError:
                await self._relist()
            except ApiConnectionError:
                await asyncio.sleep(0.1)


async def _scheduled_events(client: ApiClient, expected: int) -> int:
    """``Scheduled`` Events in the namespace once all are there or none came for a while."""
    count, last_change, deadline = -1, time.monotonic(), time.monotonic() + EVENTS_LIMIT_S
    while True:
        listed = await client.list_all(
            res.EVENTS, NAMESPACE, field_selector="reason=Scheduled", strip_managed_fields=True
        )
        now = len({e["involvedObject"]["name"] for e in listed["items"]})
        if now != count:
            count, last_change = now, time.monotonic()
        if (
            count >= expected
            or time.monotonic() - last_change > EVENTS_QUIET_S
            or time.monotonic() > deadline
        ):
            return count
        await asyncio.sleep(0.5)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


def _throughput_samples(times: list[float]) -> list[int]:
    """Pods bound in each whole second from the first binding (scheduler_perf's 1 s samples)."""
    if not times:
        return []
    first = times[0]
    counts = [0] * (int(times[-1] - first) + 1)
    for t in times:
        counts[int(t - first)] += 1
    return counts[:-1] if len(counts) > 1 else counts


async def measure(
    plane: ControlPlane,
    scheduler: str,
    argv: Sequence[str],
    nodes: int,
    pods: int,
    timeout_s: float,
    populate: Callable[[ApiClient], Awaitable[float]] | None = None,
) -> RunFigures:
    """One scheduler's run on ``plane``: ``populate`` (default: the SchedulingBasic workload)
    creates the objects and answers the seconds it took; then the scheduler starts."""
    figures = RunFigures(scheduler, pods)
    apiserver_pid = plane.apiserver.pid if plane.apiserver is not None else 0
    etcd_pid = _etcd_pid(plane.workdir)
    async with ApiClient(load_config(str(plane.kubeconfig)), qps=CLIENT_QPS, burst=CLIENT_QPS) as client:
        if populate is None:
            figures.create_s = await _populate(client, nodes, pods, scheduler)
        else:
            figures.create_s = await populate(client)
        listed = await client.list(res.PODS, NAMESPACE, limit=1)
        await asyncio.to_thread(_settle, apiserver_pid)
        writes_before = await _apiserver_writes(client)
        log = plane.workdir / f"{scheduler}.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                start_new_session=True,
            )
        started = time.perf_counter()
        first: dict[str, float] = {}

        def on_first() -> None:
            first.update(
                scheduler=_cpu_seconds_of(proc.pid),
                apiserver=_cpu_seconds_of(apiserver_pid),
                etcd=_cpu_seconds_of(etcd_pid),
            )

        bindings = _Bindings(client, listed["metadata"]["resourceVersion"], pods, on_first)
        try:
            waiting = asyncio.ensure_future(bindings.wait_all())
            exited = asyncio.ensure_future(proc.wait())
            done, _ = await asyncio.wait(
                {waiting, exited}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            for task in (waiting, exited):
                task.cancel()
            await asyncio.gather(waiting, exited, return_exceptions=True)
            error = waiting.exception() if waiting in done else None
            if waiting not in done or error is not None:
                if proc.returncode is not None:
                    reason = f"{scheduler} exited with status {proc.returncode}"
                elif error is not None:
                    reason = f"watching {scheduler}'s bindings failed: {error!r}"
                else:
                    reason = f"{scheduler} bound {len(bindings.seen)} of {pods} pods in {timeout_s:.0f}s"
                raise RuntimeError(f"{reason}; its log's tail:\n{_log_tail(log)}") from error
            figures.scheduler_cpu_s = _cpu_seconds_of(proc.pid) - first["scheduler"]
            figures.apiserver_cpu_s = _cpu_seconds_of(apiserver_pid) - first["apiserver"]
            figures.etcd_cpu_s = _cpu_seconds_of(etcd_pid) - first["etcd"]
            figures.span_s = bindings.times[-1] - bindings.times[0]
            figures.start_to_bound_s = bindings.times[-1] - started
            figures.samples = _throughput_samples(bindings.times)
            figures.events = await _scheduled_events(client, pods)
            figures.writes = _writes_between(writes_before, await _apiserver_writes(client))
            figures.peak_rss_mib = _peak_rss_mib(proc.pid)
        finally:
            await _stop(proc)
    return figures


def run_once(
    envtest: Path, scheduler: str, upstream: Path | None, nodes: int, pods: int, timeout_s: float
) -> RunFigures:
    with ControlPlane(envtest, apiserver_args=APISERVER_ARGS) as plane:
        argv = koord_argv(plane) if scheduler == KOORD else upstream_argv(plane, upstream or Path())
        return asyncio.run(measure(plane, scheduler, argv, nodes, pods, timeout_s))


# --- the benchmark ---------------------------------------------------------------------------


def _koord_plugins() -> dict[str, object]:
    """The filter and score plug-ins of koord-scheduler's default profile (no ``--config``)."""
    profile = parse(None).profiles[0]
    return {"filter": list(profile.filters), "score": dict(profile.scores), "postFilter": profile.preemption}


def summary(runs: list[RunFigures]) -> dict[str, float]:
    return {
        "pods_per_s": median([r.pods_per_s for r in runs]),
        "start_to_bound_s": median([r.start_to_bound_s for r in runs]),
        "cpu_per_pod_ms": median([r.cpu_per_pod_ms for r in runs]),
        "rss_mib": max(r.peak_rss_mib for r in runs),
        "apiserver_cpu_s": median([r.apiserver_cpu_s for r in runs]),
        "etcd_cpu_s": median([r.etcd_cpu_s for r in runs]),
        "events": min(r.events for r in runs),
    }


def run_params(runs: list[RunFigures]) -> list[dict[str, object]]:
    return [
        {
            "pods_per_s": round(r.pods_per_s, 1),
            "span_s": round(r.span_s, 2),
            "start_to_bound_s": round(r.start_to_bound_s, 2),
            "scheduler_cpu_s": round(r.scheduler_cpu_s, 2),
            "apiserver_cpu_s": round(r.apiserver_cpu_s, 2),
            "etcd_cpu_s": round(r.etcd_cpu_s, 2),
            "peak_rss_mib": round(r.peak_rss_mib, 1),
            "scheduled_events": r.events,
            "create_s": round(r.create_s, 1),
            "apiserver_writes": {k: {"count": n, "mean_ms": round(ms, 2)} for k, (n, ms) in r.writes.items()},
            "throughput_1s_samples": r.samples,
        }
        for r in runs
    ]


def run(quick: bool) -> Result:
    nodes, pods, repeats = (100, 300, 1) if quick else (1000, 5000, 3)
    timeout_s = 120.0 if quick else 900.0
    params: dict[str, object] = {
        "workload": "SchedulingBasic (scheduler_perf templates)",
        "nodes": nodes,
        "pods": pods,
        "runs": repeats,
        "node": "4 CPU, 32Gi, 110 pods, Ready",
        "pod": "100m, 500Mi (requests = limits)",
        "api": "envtest kube-apiserver v1.34.4 + etcd v3.6.4, fresh per run, TaintNodesByCondition off",
        "throughput": "(pods - 1) / (last binding seen - first binding seen), median of runs",
        "client_qps": CLIENT_QPS,
        "kernel": backend(),
        "koord_plugins": _koord_plugins(),
        "upstream_plugins": "kube-scheduler's default profile",
        "cores": os.cpu_count() or 0,
        "quick": quick,
    }
    try:
        envtest = envtest_binaries()
    except SkipError as err:
        params["skipped"] = str(err)
        return Result(name=NAME, params=params, headline=f"{NAME}: skipped: {err}")
    upstream: Path | None
    try:
        upstream = kube_scheduler_binary(build=not quick)
    except SkipError as err:
        upstream = None
        params["upstream_skipped"] = str(err)

    runs: dict[str, list[RunFigures]] = {KOORD: [], UPSTREAM: []}
    for i in range(repeats):
        order = [KOORD, UPSTREAM] if upstream is not None else [KOORD]
        for scheduler in order if i % 2 == 0 else reversed(order):
            runs[scheduler].append(run_once(envtest, scheduler, upstream, nodes, pods, timeout_s))

    ours = summary(runs[KOORD])
    params["koord_runs"] = run_params(runs[KOORD])
    results = {
        "pods_per_s": round(ours["pods_per_s"], 1),
        "e2e_start_to_bound_s": round(ours["start_to_bound_s"], 2),
        "e2e_cpu_per_pod_ms": round(ours["cpu_per_pod_ms"], 3),
        "e2e_rss_mib": round(ours["rss_mib"], 1),
        "apiserver_cpu_s": round(ours["apiserver_cpu_s"], 2),
        "etcd_cpu_s": round(ours["etcd_cpu_s"], 2),
        "e2e_scheduled_events_count": ours["events"],
    }
    ratios: dict[str, float] = {}
    headline = (
        f"{NAME}: {nodes} nodes, {pods} pods on the envtest apiserver: koord-scheduler "
        f"{ours['pods_per_s']:.0f} pods/s ({ours['cpu_per_pod_ms']:.2f} ms CPU/pod, "
        f"{ours['rss_mib']:.0f} MiB)"
    )
    if runs[UPSTREAM]:
        theirs = summary(runs[UPSTREAM])
        params["upstream_runs"] = run_params(runs[UPSTREAM])
        results.update(
            {
                "upstream_pods_per_s": round(theirs["pods_per_s"], 1),
                "upstream_start_to_bound_s": round(theirs["start_to_bound_s"], 2),
                "upstream_cpu_per_pod_ms": round(theirs["cpu_per_pod_ms"], 3),
                "upstream_rss_mib": round(theirs["rss_mib"], 1),
                "upstream_apiserver_cpu_s": round(theirs["apiserver_cpu_s"], 2),
                "upstream_etcd_cpu_s": round(theirs["etcd_cpu_s"], 2),
                "upstream_scheduled_events_count": theirs["events"],
            }
        )
        ratios = {
            "vs_upstream_ratio": round(ours["pods_per_s"] / theirs["pods_per_s"], 3),
            "cpu_per_pod_vs_upstream_ratio": round(ours["cpu_per_pod_ms"] / theirs["cpu_per_pod_ms"], 3),
            "rss_vs_upstream_ratio": round(ours["rss_mib"] / theirs["rss_mib"], 3),
        }
        headline += (
            f"; kube-scheduler {theirs['pods_per_s']:.0f} pods/s "
            f"({theirs['cpu_per_pod_ms']:.2f} ms CPU/pod, {theirs['rss_mib']:.0f} MiB); "
            f"vs_upstream_ratio {ratios['vs_upstream_ratio']:.2f} (S1 target: >= 1)"
        )
    else:
        headline += f"; kube-scheduler skipped: {params['upstream_skipped']}"
    return Result(name=NAME, params=params, results=results, ratios=ratios, headline=headline)
