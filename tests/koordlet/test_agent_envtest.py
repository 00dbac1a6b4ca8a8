"""Envtest: a koordlet in cluster mode against a real kube-apiserver, a small test kubelet
serving a PodList and its /configz, and a fake host tree. Its NodeMetric status matches
the tree, its NodeResourceTopology reports the kubelet's configuration, a NodeSLO change
reaches it without a restart, and deleting the NodeSLO puts the defaults back with a
Warning Event on the Node saying so."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from koordinator.kube.errors import NotFoundError
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.clusterenv import KOORDLET_CRDS, StubKubelet, agent_config, register_node, running_agent
from tests.koordlet.statesinformer.test_states_informer import suppress_percent
from tests.polling import eventually

GIB = 1 << 30


class CPUFeeder(threading.Thread):
    """Advances the pod's cpuacct.usage at ``cores`` CPUs' worth per wall second."""

    def __init__(self, host: FakeHost, rel: str, cores: float) -> None:
        super().__init__(daemon=True)
        self.host, self.rel, self.cores = host, rel, cores
        self.start_time = time.time()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.02):
            self.host.set_cpu_usage(self.rel, int((time.time() - self.start_time) * self.cores * 1e9))


async def test_nodemetric_matches_the_tree_and_nodeslo_changes_apply(envtest, envtest_client, tmp_path):
    client = envtest_client
    await envtest.apply_crds(client, KOORDLET_CRDS)
    node_name = f"koordlet-{uuid.uuid4().hex[:8]}"
    host = FakeHost(tmp_path, "v1")
    host.set_cpu_topology(sockets=1, cores_per_socket=2, threads_per_core=1)
    host.set_meminfo(MemTotal=8_000_000, MemFree=2_000_000, MemAvailable=6_000_000)
    host.set_proc_stat([100, 0, 100, 1000, 0, 0, 0, 0], {0: [50, 0, 50, 500, 0, 0, 0, 0]})
    cid = "containerd://" + "a" * 64
    pod = make_pod("web", "prod").qos("LS").kube_qos("Burstable").container("main", cid=cid).build()
    rel = host.add_pod("Burstable", pod["metadata"]["uid"], [cid])
    host.set_memory_stat(rel, inactive_anon=GIB, active_anon=GIB, unevictable=0)
    kubelet = await StubKubelet().start()
    kubelet.pods = [pod]
    kubelet.config.update(
        cpuManagerPolicy="static",
        reservedSystemCPUs="1",
        topologyManagerPolicy="best-effort",
        topologyManagerScope="pod",
    )
    feeder = CPUFeeder(host, rel, 0.5)
    feeder.start()
    await register_node(client, node_name)
    await client.create(
        res.NODE_METRICS,
        {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node_name}},
    )
    await client.create(
        res.NODE_SLOS,
        {
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeSLO",
            "metadata": {"name": node_name},
            "spec": {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 60}},
        },
    )
    try:
        async with running_agent(agent_config(node_name, host, kubelet), envtest.client()) as agent:
            assert agent.states is not None
            assert suppress_percent(agent.states) == 60
            await asyncio.sleep(3)  # a few collection ticks
            assert agent.node_metric_reporter is not None
            assert await agent.node_metric_reporter.report(force=True)
            status = (await client.get(res.NODE_METRICS, node_name))["status"]
            # the NodeSLO changes while the koordlet runs
            current = await client.get(res.NODE_SLOS, node_name)
            current["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] = 45
            await client.replace(res.NODE_SLOS, current)
            states = agent.states
            await eventually(lambda: suppress_percent(states) == 45)
            # the NodeSLO is deleted: the defaults, and an Event on the Node saying so
            await client.delete(res.NODE_SLOS, node_name)
            await eventually(lambda: suppress_percent(states) == 65)

            async def deleted_events() -> list[dict[str, Any]]:
                events = (await client.list(res.EVENTS, "default"))["items"]
                return [
                    e
                    for e in events
                    if e["reason"] == "NodeSLODeleted" and e["involvedObject"]["name"] == node_name
                ]

            async with asyncio.timeout(10):
                while not (deleted := await deleted_events()):  # noqa: ASYNC110 - in the apiserver
                    await asyncio.sleep(0.2)
            nrt = None
            while nrt is None:
                try:
                    nrt = await client.get(res.NODE_RESOURCE_TOPOLOGIES, node_name)
                except NotFoundError:
                    await asyncio.sleep(0.2)
    finally:
        feeder.stopped.set()
        await kubelet.stop()
        await client.delete(res.NODES, node_name)
    node_usage = status["nodeMetric"]["nodeUsage"]["resources"]
    assert Quantity.parse(node_usage["memory"]).value() == 2_000_000 * 1024  # MemTotal - MemAvailable
    [pod_metric] = status["podsMetric"]
    assert (pod_metric["namespace"], pod_metric["name"], pod_metric["qos"]) == ("prod", "web", "LS")
    assert Quantity.parse(pod_metric["podUsage"]["resources"]["memory"]).value() == 2 * GIB
    cpu_milli = Quantity.parse(pod_metric["podUsage"]["resources"]["cpu"]).milli_value()
    assert 400 <= cpu_milli <= 600, cpu_milli  # fed at 0.5 cores
    assert nrt["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Koordinator"
    assert nrt["zones"][0]["name"] == "node-0"
    assert "node.koordinator.sh/cpu-topology" in nrt["metadata"]["annotations"]
    # the kubelet's /configz, as the scheduler reads it from the NRT
    policy = nrt["metadata"]["annotations"]["kubelet.koordinator.sh/cpu-manager-policy"]
    assert policy == '{"policy":"static","reservedCPUs":"1"}'
    assert nrt["topologyPolicies"] == ["BestEffortPodLevel"]
    [event] = deleted
    assert (event["type"], event["involvedObject"]["kind"]) == ("Warning", "Node")
    assert event["message"].startswith(
        f"NodeSLO {node_name} was deleted: the koordlet reverted to the default NodeSLO spec"
    )
