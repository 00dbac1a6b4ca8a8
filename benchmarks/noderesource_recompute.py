"""M2: the noderesource controller recomputing batch and mid resources of 5000 nodes x 30 pods.

The real :class:`NodeResourceController` (reactor queue, four workers, the calculation,
the update decision, the status patches) runs in this process. Its informer caches are
filled through its own consumers' transforms, exactly as a LIST would fill them, so no
apiserver traffic for reads is measured. Its writes go over HTTP to the fake apiserver,
which runs in a child process holding the 5000 nodes, so the server's work is not counted.

Each node: 16 cores / 64Gi; 30 pods (12 prod LS, 2 prod LSE, 2 prod Pending without a
metric, 4 mid, 10 batch); a NodeMetric reporting every running pod, system usage, node
usage and prod-reclaimable resources; colocation enabled with mid resources on.

* ``cold_recompute_cpu_s`` / ``cold_api_writes_count``: CPU seconds of the first pass after
  start (every node is written: the manager keeps no record of earlier writes);
* ``recompute_cpu_s`` / ``api_writes_count`` (the M2 figure): every koordlet reports again
  -- the NodeMetrics arrive as JSON, are decoded and go through the transform, as from a
  watch -- with a tenth of the nodes' prod pods using twice as much (their batch
  resources move by more than ``resourceDiffThreshold`` and are written) and the rest
  drifting by 1 % (held back by the update hysteresis); CPU seconds until all 5000 are
  reconciled;
* ``full_recompute_cpu_s`` / ``full_api_writes_count``: every node reconciled again with no
  input changed (what a ConfigMap change costs).

Quick mode (the test suite's smoke run): 50 nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks.harness import Result

NAME = "noderesource_recompute"
ROOT = Path(__file__).resolve().parent.parent
PODS_PER_NODE = 30
WORKERS = 4
UPDATE_TIME = "2026-01-01T00:00:00Z"
NOW_EPOCH = 1767225660.0  # one minute after UPDATE_TIME
#: every tenth node's prod pods double their usage in the second report
CHANGED_EVERY = 10

Obj = dict[str, Any]


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def make_node(i: int) -> Obj:
    name = node_name(i)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "m5.4xlarge",
                "topology.kubernetes.io/zone": f"zone-{i % 3}",
            },
        },
        "status": {
            "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "15800m", "memory": "62Gi", "pods": "110", "ephemeral-storage": "95Gi"},
        },
    }


#: (kind, count, priority class label, qos label, phase, has a metric)
POD_MIX = (
    ("ls", 12, "koord-prod", "LS", "Running", True),
    ("lse", 2, "koord-prod", "LSE", "Running", True),
    ("new", 2, "koord-prod", "LS", "Pending", False),
    ("mid", 4, "koord-mid", "LS", "Running", True),
    ("batch", 10, "koord-batch", "BE", "Running", True),
)


def make_pods(i: int) -> list[Obj]:
    pods = []
    node = node_name(i)
    for kind, count, priority, qos, phase, _ in POD_MIX:
        for n in range(count):
            if kind == "batch":
                requests = {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"}
            else:
                requests = {"cpu": "500m", "memory": "1Gi"}
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{node}-{kind}-{n}",
                        "namespace": f"ns-{i % 50}",
                        "labels": {
                            "app": f"app-{kind}",
                            "koordinator.sh/priority-class": priority,
                            "koordinator.sh/qosClass": qos,
                        },
                    },
                    "spec": {
                        "nodeName": node,
                        "containers": [
                            {
                                "name": "main",
                                "image": "registry.example/app:1",
                                "resources": {"requests": requests, "limits": requests},
                            },
                            {
                                "name": "sidecar",
                                "image": "registry.example/proxy:2",
                                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                            },
                        ],
                    },
                    "status": {"phase": phase, "qosClass": "Burstable"},
                }
            )
    return pods


def make_node_metric(i: int, rng: random.Random, update_time: str, prod_factor: float) -> Obj:
    node = node_name(i)
    pods = []
    for kind, count, priority, _, _, has_metric in POD_MIX:
        if not has_metric:
            continue
        for n in range(count):
            factor = prod_factor if priority == "koord-prod" else 1.0
            milli = int(rng.uniform(150, 350) * factor)
            pods.append(
                {
                    "namespace": f"ns-{i % 50}",
                    "name": f"{node}-{kind}-{n}",
                    "priority": priority,
                    "podUsage": {"resources": {"cpu": f"{milli}m", "memory": f"{int(600 * factor)}Mi"}},
                }
            )
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": node, "resourceVersion": "1"},
        "status": {
            "updateTime": update_time,
            "nodeMetric": {
                "nodeUsage": {"resources": {"cpu": "7", "memory": "30Gi"}},
                "systemUsage": {"resources": {"cpu": "600m", "memory": "3Gi"}},
            },
            "podsMetric": pods,
            "prodReclaimableMetric": {"resource": {"resources": {"cpu": "2", "memory": "4Gi"}}},
        },
    }


def config_map() -> Obj:
    colocation = {"enable": True, "midUnallocatedPercent": 20, "cpuCalculatePolicy": "maxUsageRequest"}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
        "data": {"colocation-config": orjson.dumps(colocation).decode()},
    }


# ---- the apiserver child -------------------------------------------------------------------------


def _serve(nodes: int) -> None:
    from koordinator.kube import resources as res
    from testsupport.fake import FakeApiServer

    async def main() -> None:
        fake = FakeApiServer(history_limit=100, track_managed_fields=False)
        await fake.start()
        for i in range(nodes):
            obj = make_node(i)
            status = obj.pop("status")
            del obj["metadata"]["resourceVersion"]
            fake.create(res.NODES, obj)
            stored = fake.get(res.NODES, node_name(i))
            stored["status"] = status
            fake.update(res.NODES, stored, subresource="status")
        sys.stdout.write(f"{fake.port}\n")
        sys.stdout.flush()
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await fake.stop()

    asyncio.run(main())


# ---- the measurement -------------------------------------------------------------------------------


async def _measure(port: int, nodes: int) -> dict[str, float]:
    from controlplane.manager.controllers.context import ControllerContext
    from controlplane.manager.controllers.metrics import SLOControllerMetrics
    from controlplane.manager.controllers.noderesource.controller import NodeResourceController
    from controlplane.manager.controllers.sloconfig import SLOConfigCache
    from controlplane.reactor import ReactorMetrics
    from koordinator.kube import resources as res
    from koordinator.kube.client import ApiClient
    from koordinator.kube.config import ClusterConfig
    from koordinator.kube.events import EventRecorder
    from koordinator.kube.informer import InformerFactory, gcpause
    from testsupport.fake import FakeClock

    rng = random.Random(42)
    clock = FakeClock(epoch=NOW_EPOCH)
    # the client-side rate limit is lifted: it would only stretch the wall time, not the CPU
    async with ApiClient(
        ClusterConfig(server=f"http://127.0.0.1:{port}"), qps=100000.0, burst=100000
    ) as client:
        metrics = SLOControllerMetrics()
        reactor_metrics = ReactorMetrics(metrics.registry)
        factory = InformerFactory(client, freeze_after_sync=False)  # never started: caches are fed below
        config = SLOConfigCache("koordinator-system", "slo-controller-config")
        ctx = ControllerContext(
            client=client,
            factory=factory,
            config=config,
            metrics=metrics,
            reactor_metrics=reactor_metrics,
            recorder=EventRecorder(client, "slo-controller"),
            clock=clock,
            workers=WORKERS,
        )
        controller = NodeResourceController(ctx)
        config.apply(config_map())
        config.mark_synced()

        async def nodes_as_watched() -> None:
            # the Nodes as the apiserver holds them (resourceVersions included: the status
            # patches are conditional on them), as the node informer delivers them; not timed
            listed = await client.list_all(res.NODES)
            for obj in listed["items"]:
                controller.nodes.upsert(obj["metadata"]["name"], obj)

        await nodes_as_watched()
        for i in range(nodes):
            for pod in make_pods(i):
                meta = pod["metadata"]
                controller.pods.upsert(f"{meta['namespace']}/{meta['name']}", pod)
            controller.node_metrics.upsert(node_name(i), make_node_metric(i, rng, UPDATE_TIME, 1.0))
        gcpause.freeze()  # as the controllers' informer factory does after its initial sync

        def reconciles() -> float:
            # read the counter directly: collecting the registry (20000 gauge series) on every
            # poll would bill the benchmark's own polling to the controller
            counter = metrics.node_resource_reconcile
            return counter.value("succeeded", "updated") + counter.value("succeeded", "unchanged")

        def writes() -> float:
            return metrics.node_resource_reconcile.value("succeeded", "updated")

        queue = controller.reactor.queue

        async def drained(target: float) -> None:
            while reconciles() < target or len(queue) or queue.processing:  # noqa: ASYNC110
                await asyncio.sleep(0.02)

        async def caught_up() -> None:
            # the written Nodes delivered to the cache, and what they enqueue done, before the
            # next pass is timed (a cluster between two rounds of reports)
            await nodes_as_watched()
            await drained(0)

        results: dict[str, float] = {}
        task = asyncio.create_task(controller.run())
        try:
            start = time.process_time()
            await drained(nodes)
            results["cold_recompute_cpu_s"] = time.process_time() - start
            results["cold_api_writes_count"] = writes()
            await caught_up()

            clock.advance(60)
            later = "2026-01-01T00:01:00Z"
            reports = [
                orjson.dumps(make_node_metric(i, rng, later, 2.0 if i % CHANGED_EVERY == 0 else 1.01))
                for i in range(nodes)
            ]
            before_writes, before = writes(), reconciles()
            start = time.process_time()
            for i, raw in enumerate(reports):
                controller.node_metrics.upsert(node_name(i), orjson.loads(raw))
            await drained(before + nodes)
            results["recompute_cpu_s"] = time.process_time() - start
            results["api_writes_count"] = writes() - before_writes
            await caught_up()

            before_writes, before = writes(), reconciles()
            start = time.process_time()
            controller.enqueue_all()
            await drained(before + nodes)
            results["full_recompute_cpu_s"] = time.process_time() - start
            results["full_api_writes_count"] = writes() - before_writes
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return results


def run(quick: bool) -> Result:
    nodes = 50 if quick else 5000
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.noderesource_recompute", "--serve", str(nodes)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        figures = asyncio.run(_measure(port, nodes))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    result = Result(
        name=NAME,
        params={
            "nodes": nodes,
            "pods_per_node": PODS_PER_NODE,
            "workers": WORKERS,
            "changed_nodes": len(range(0, nodes, CHANGED_EVERY)),
            "quick": quick,
        },
        results={key: round(value, 3) for key, value in figures.items()},
        ratios={"recompute_vs_target_ratio": round(figures["recompute_cpu_s"] / 1.0, 3)},
    )
    result.headline = (
        f"noderesource_recompute: {nodes} nodes x {PODS_PER_NODE} pods recomputed in "
        f"{figures['recompute_cpu_s']:.2f} CPU s with {figures['api_writes_count']:.0f} API writes "
        f"(cold start {figures['cold_recompute_cpu_s']:.2f} s / "
        f"{figures['cold_api_writes_count']:.0f} writes, "
        f"no-change pass {figures['full_recompute_cpu_s']:.2f} s; M2 target: recompute_cpu_s <= 0.5)"
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="fake apiserver child process of the M2 benchmark")
    parser.add_argument("--serve", required=True, type=int, metavar="NODES")
    _serve(parser.parse_args().serve)
