"""S1 (in-process part): koord-scheduler's throughput on scheduler_perf's SchedulingBasic,
Unschedulable and PreemptionBasic workloads.

Nodes of 4 CPU, 32 Gi and 110 pods, at 1000 and at 5000 nodes. The API is the project's
fake apiserver serving real JSON over loopback HTTP from a process of its own (its CPU is
not the scheduler's, but both share the machine's cores); every object is created there
before the scheduler starts, and the fake runs as the components do (uvloop, its start-up
heap frozen). The
scheduler runs in this process with its real informers, queue, framework, kernel and
asynchronous binding (client QPS 5000, as scheduler_perf runs; uvloop when installed, as
the process runs).

* **SchedulingBasic**: 5000 pending pods of 100m / 500 Mi (500 in quick mode).
* **Unschedulable**: the same, with 200 pods of 9 CPU (no node fits them) pending first;
  they fail, stay unschedulable and must not slow the others.
* **PreemptionBasic**: four pods of priority 10 and 900m already bound on every node (as
  scheduler_perf's ``initPods``, bound here rather than scheduled), then 500 pods of
  priority 10000 and 3 CPU (100 in quick mode): each preempts three low pods (deleted at
  once: their grace period is 0, as no kubelet runs) and binds after its backoff.

Figures, per workload (``basic``, ``unschedulable``, ``preemption``) and node count:

* ``<workload>_nodes_<N>_pods_per_s``: measured pods bound / seconds from the scheduler's
  informers being synced to the last binding answered (SchedulingBasic: the median of three
  runs) (each pod also gets its
  ``Scheduled`` Event, as in the process); ``nodes_<N>_pods_per_s`` is SchedulingBasic's,
  the S1 target;
* ``<workload>_nodes_<N>_cpu_per_pod_ms``: this process's CPU over the same span, per pod;
* ``rss_mib``: this process's peak resident memory.

The end-to-end run beside upstream's kube-scheduler on the envtest apiserver is
``benchmarks/scheduler_e2e.py``.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import subprocess
import sys
import textwrap
import time

from benchmarks.harness import Result, cpu_seconds
from controlplane.scheduler.config import SchedulerConfig, parse
from controlplane.scheduler.scheduler import Scheduler
from koordinator.cli import run_loop
from koordinator.kube.client import ApiClient
from koordinator.kube.config import ClusterConfig
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer.factory import InformerFactory

NAME = "scheduler_basic"
TARGET_PODS_PER_S = 3000.0

SERVER = textwrap.dedent(
    """
    import asyncio, sys
    from koordinator.cli import run_loop
    from koordinator.heap import freeze_startup_heap
    from koordinator.kube import resources as res
    from testsupport.fake import FakeApiServer

    workload, nodes, pods = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def pod(name, cpu, priority=0, node=""):
        spec = {"schedulerName": "koord-scheduler", "priority": priority, "containers": [{"name": "c",
            "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": "500Mi"}}}]}
        if node:
            spec["nodeName"] = node
            spec["terminationGracePeriodSeconds"] = 0
        return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}

    async def main():
        low = 4 * nodes if workload == "preemption" else 0
        fake = FakeApiServer(track_managed_fields=False, history_limit=8 * (pods + low) + 10)
        for i in range(nodes):
            fake.create(res.NODES, {"metadata": {"name": f"node-{i}"}, "status": {"allocatable": {
                "cpu": "4", "memory": "32Gi", "pods": "110"}, "capacity": {"cpu": "4", "memory": "32Gi",
                "pods": "110"}}})
        if workload == "unschedulable":
            for i in range(200):
                fake.create(res.PODS, pod(f"large-{i}", "9"))
        for i in range(low):
            fake.create(res.PODS, pod(f"low-{i}", "900m", 10, f"node-{i % nodes}"))
        for i in range(pods):
            if workload == "preemption":
                fake.create(res.PODS, pod(f"high-{i}", "3", 10000))
            else:
                fake.create(res.PODS, pod(f"pod-{i}", "100m"))
        freeze_startup_heap(rarer_full_collections=True)  # the stored objects live as long as the server
        await fake.start()
        print(fake.url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await fake.stop()

    run_loop(main())
    """
)
WORKLOADS = ("basic", "unschedulable", "preemption")


async def schedule(url: str, pods: int, config: SchedulerConfig | None = None) -> tuple[float, float, float]:
    """Run a scheduler (``config``; default: kube-scheduler's default profile) against the
    fake at ``url`` until ``pods`` bindings were answered: (wall seconds, CPU seconds), and
    the wall seconds after the last binding until every Scheduled Event was written (the
    scheduler writes them in the background, as kube-scheduler's event broadcaster does)."""
    async with ApiClient(ClusterConfig(server=url), qps=5000.0, burst=5000, fast_unary=True) as client:
        factory = InformerFactory(client)
        # as the process runs it: a Scheduled Event per pod, as kube-scheduler writes one
        scheduler = Scheduler(
            client, config or parse(None), recorder=EventRecorder(client, "koord-scheduler"), seed=1
        )
        scheduler.attach(factory)
        factory.start()
        await factory.wait_for_sync()
        started, cpu = time.perf_counter(), cpu_seconds()
        task = asyncio.create_task(scheduler.run())
        try:
            async with asyncio.timeout(600):
                while scheduler.bound + scheduler.bind_failures < pods:  # noqa: ASYNC110 - polls its counters
                    await asyncio.sleep(0.01)
            wall_s, cpu_s = time.perf_counter() - started, cpu_seconds() - cpu
            assert scheduler.events is not None
            async with asyncio.timeout(600):
                await scheduler.events.flush()
            events_s = time.perf_counter() - started - wall_s
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await factory.stop()
        if scheduler.bind_failures:
            raise RuntimeError(f"{scheduler.bind_failures} bindings failed")
        return wall_s, cpu_s, events_s


def release_heap() -> None:
    """Free what a run left: the informers froze their synced heap (as the process does),
    and a scheduler's cycles outlive it there; later runs of this process would carry it."""
    gc.unfreeze()
    gc.collect()


def against_fake(
    server_source: str, server_args: list[str], pods: int, config: SchedulerConfig | None = None
) -> tuple[float, float, float]:
    """Start the fake apiserver program ``server_source`` (it prints its URL, then serves
    until its stdin closes) and :func:`schedule` its ``pods`` with ``config``."""
    server = subprocess.Popen(
        [sys.executable, "-c", server_source, *server_args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError("the fake apiserver did not start")
        return run_loop(schedule(url, pods, config))
    finally:
        release_heap()
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)


def _run_one(workload: str, nodes: int, pods: int) -> tuple[float, float, float]:
    return against_fake(SERVER, [workload, str(nodes), str(pods)], pods)


def run(quick: bool) -> Result:
    results: dict[str, float] = {}
    ratios: dict[str, float] = {}
    headline = []
    counts = {"basic": 500 if quick else 5000, "unschedulable": 500 if quick else 5000}
    counts["preemption"] = 100 if quick else 500
    for workload in WORKLOADS:
        pods = counts[workload]
        for nodes in (1000, 5000):
            # the S1 figure: the median of three runs (one run in quick mode and for the
            # others), as the machine's noise moves single runs by a tenth
            repeats = 3 if workload == "basic" and not quick else 1
            runs = sorted((_run_one(workload, nodes, pods) for _ in range(repeats)), key=lambda run: run[0])
            wall_s, cpu_s, _ = runs[len(runs) // 2]
            rate = pods / wall_s
            results[f"{workload}_nodes_{nodes}_pods_per_s"] = round(rate, 1)
            results[f"{workload}_nodes_{nodes}_cpu_per_pod_ms"] = round(cpu_s * 1000 / pods, 3)
            if workload == "basic":
                results[f"nodes_{nodes}_pods_per_s"] = round(rate, 1)
                ratios[f"nodes_{nodes}_vs_target_ratio"] = round(rate / TARGET_PODS_PER_S, 3)
            headline.append(
                f"{workload} {nodes} nodes: {rate:.0f} pods/s ({cpu_s * 1000 / pods:.2f} ms CPU/pod)"
            )
    results["rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return Result(
        name=NAME,
        params={
            "workloads": "SchedulingBasic, Unschedulable (200 pods of 9 CPU pending), PreemptionBasic "
            "(4 x 900m priority-10 pods bound per node; measured pods 3 CPU, priority 10000)",
            "measured_pods": counts,
            "node": "4 CPU, 32Gi, 110 pods",
            "pod": "100m, 500Mi",
            "api": "fake apiserver over loopback HTTP, own process",
            "quick": quick,
        },
        results=results,
        ratios=ratios,
        headline=f"scheduler_basic: {'; '.join(headline)}; peak RSS {results['rss_mib']} MiB "
        f"(S1 target: {TARGET_PODS_PER_S:.0f} pods/s in process)",
    )
