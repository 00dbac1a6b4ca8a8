"""Envtest: prediction from the koordlet to the Node. A koordlet started from its command
line (cold start 1 s, training every second) on a fake host with one Prod pod reports a
NodeMetric whose ``prodReclaimableMetric`` is the pod's unused request, and koord-manager's
MidResource plug-in (colocation enabled in ``slo-controller-config``) turns it into
``kubernetes.io/mid-cpu`` and ``mid-memory`` on the Node.

The module runs its own control plane: the slo-controller acts on every node of it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from koordinator.kube.timeutil import format_time
from koordlet.__main__ import agent_config, build_parser, host_root_argv
from tests.controlplane.manager.controllers.harness import controller_set
from tests.controlplane.manager.controllers.objects import CONFIG_NAMESPACE, config_map
from tests.envtest import Envtest, apply_crds, own_envtest
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.clusterenv import StubKubelet, register_node, running_agent
from tests.koordlet.test_agent_envtest import CPUFeeder

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30
MID_CPU = "kubernetes.io/mid-cpu"
MID_MEMORY = "kubernetes.io/mid-memory"


@pytest.fixture(scope="module")
def envtest_prediction(envtest_bin: Path) -> Iterator[Envtest]:
    with own_envtest(envtest_bin) as plane:
        yield plane


def resources(status: dict[str, Any], field: str) -> tuple[int, int]:
    values = status[field]["resource"]["resources"]
    return Quantity.parse(values["cpu"]).milli_value(), Quantity.parse(values["memory"]).value()


async def test_prod_reclaimable_reaches_the_node_as_mid_resources(envtest_prediction, tmp_path):
    client = envtest_prediction.client()
    await apply_crds(client, [ROOT / "crds"])
    await client.ensure_namespace(CONFIG_NAMESPACE)
    await client.create(res.CONFIG_MAPS, config_map({"enable": True}))
    node_name = f"predict-{uuid.uuid4().hex[:8]}"
    host = FakeHost(tmp_path, "v1")
    host.set_cpu_topology(sockets=1, cores_per_socket=4, threads_per_core=1)
    host.set_meminfo(MemTotal=8 * 1024 * 1024, MemFree=6 * 1024 * 1024, MemAvailable=6 * 1024 * 1024)
    host.set_proc_stat([100, 0, 100, 1000, 0, 0, 0, 0], {0: [50, 0, 50, 500, 0, 0, 0, 0]})
    cid = "containerd://" + "b" * 64
    pod = (
        make_pod("api", "prod")
        .qos("LS")
        .priority(9500)
        .kube_qos("Burstable")
        .container("main", cid=cid, requests={"cpu": "2", "memory": "4Gi"})
        .build()
    )
    pod["metadata"]["creationTimestamp"] = format_time(time.time() - 3600)  # past the cold start
    rel = host.add_pod("Burstable", pod["metadata"]["uid"], [cid])
    host.set_memory_stat(rel, inactive_anon=GIB // 2, active_anon=GIB // 2, unevictable=0)
    kubelet = await StubKubelet().start()
    kubelet.pods = [pod]
    feeder = CPUFeeder(host, rel, 0.5)
    feeder.start()
    await register_node(client, node_name, {"cpu": "4", "memory": "8Gi", "pods": "110"})
    await client.create(
        res.NODE_METRICS,
        {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node_name}},
    )
    argv = [
        *host_root_argv(host.paths),
        f"--tsdb-path={host.root / 'metric-data'}",
        "--addr=127.0.0.1:0",
        "--kubelet-insecure-tls=true",
        f"--kubelet-read-only-port={kubelet.port}",
        "--runtime-hooks-addr=",
        "--enable-nri-runtime-hook=false",
        "--prediction-cold-start-duration=1s",
        "--prediction-training-interval=1s",
    ]
    config = agent_config(build_parser().parse_args(argv), {"NODE_NAME": node_name})
    assert config.prediction is not None
    assert config.prediction.checkpoint_dir == host.paths.var_run_root / "prediction-checkpoints"
    try:
        async with running_agent(config, envtest_prediction.client()) as agent:
            reporter, predictor = agent.node_metric_reporter, agent.predict_server
            assert reporter is not None
            assert predictor is not None
            status: dict[str, Any] = {}
            trained = False
            # a report made once the predictor has a model of the pod (before that, the pod
            # counts as unpredicted: nothing of it is reclaimable yet)
            async with asyncio.timeout(60):
                while not trained or "prodReclaimableMetric" not in status:
                    await asyncio.sleep(1)
                    trained = predictor.get_prediction(pod["metadata"]["uid"]) is not None
                    await reporter.report(force=True)
                    status = (await client.get(res.NODE_METRICS, node_name)).get("status") or {}
            async with controller_set(client, ("noderesource",)):

                async def mid_written() -> dict[str, Any] | None:
                    node = await client.get(res.NODES, node_name)
                    allocatable = node["status"].get("allocatable") or {}
                    return node if MID_CPU in allocatable else None

                async with asyncio.timeout(60):
                    while (node := await mid_written()) is None:  # noqa: ASYNC110 - in the apiserver
                        await asyncio.sleep(0.5)
            # the status the plug-in read: the reporter's next periodic report is a minute away
            status = (await client.get(res.NODE_METRICS, node_name))["status"]
            checkpoints = sorted(p.name for p in config.prediction.checkpoint_dir.iterdir())
    finally:
        feeder.stopped.set()
        await kubelet.stop()
        await client.delete(res.NODES, node_name)
    reclaimable_cpu, reclaimable_memory = resources(status, "prodReclaimableMetric")
    peak_cpu, peak_memory = resources(status, "prodPeakMetric")
    # the pod uses about half a core and 1 GiB of its 2 cores and 4 GiB, the system (node
    # usage 2 GiB, no CPU) 1 GiB more: what is reclaimable is the request less 1.1 x the
    # predicted peaks (the priority predictor, counting the system, is the smaller here)
    assert 1000 <= reclaimable_cpu < 2000, reclaimable_cpu
    assert GIB <= reclaimable_memory < 2 * GIB, reclaimable_memory
    assert 0 < peak_cpu <= 1000, peak_cpu
    assert 2 * GIB <= peak_memory <= 3 * GIB, peak_memory
    assert reclaimable_memory == 4 * GIB - peak_memory  # the peak is the priority predictor's
    # mid = min(prodReclaimable, capacity - node usage) (midUnallocatedPercent 0, thresholds 100 %)
    usage = status["nodeMetric"]["nodeUsage"]["resources"]
    unused_cpu = 4000 - Quantity.parse(usage["cpu"]).milli_value()
    unused_memory = 8 * GIB - Quantity.parse(usage["memory"]).value()
    allocatable = node["status"]["allocatable"]
    assert Quantity.parse(allocatable[MID_CPU]).value() == min(reclaimable_cpu, unused_cpu)
    assert Quantity.parse(allocatable[MID_MEMORY]).value() == min(reclaimable_memory, unused_memory)
    # the models were checkpointed under the var-run root of the host
    assert pod["metadata"]["uid"] in checkpoints
    assert "__node-sys__" in checkpoints
