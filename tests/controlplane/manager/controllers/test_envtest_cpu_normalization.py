"""envtest tier: CPU normalization, resource amplification and NUMA-level batch on a real kube-apiserver.

A node whose NodeResourceTopology carries the koordlet's ``cpu-basic-info`` (hyper-threading
on, turbo off) and two NUMA zones gets its ``cpu-normalization-ratio`` from the configured
model, the ``resource-amplification-ratio`` (configured cpu ratio x normalization ratio),
a batch-cpu scaled by the ratio, and batch entries in both zones, accepted by the
apiserver's schema for NodeResourceTopology.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.timeutil import format_time
from tests.controlplane.manager.controllers.harness import controller_set
from tests.controlplane.manager.controllers.objects import config_map, node, node_metric
from tests.controlplane.manager.controllers.test_envtest_slo_controller import (
    create_with_status,
    prepared,
    wait_for,
)
from tests.envtest import Envtest, own_envtest

MODEL = "Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz"
NORMALIZATION = "node.koordinator.sh/cpu-normalization-ratio"
AMPLIFICATION = "node.koordinator.sh/resource-amplification-ratio"
BATCH_CPU = "kubernetes.io/batch-cpu"


@pytest.fixture(scope="module")
def envtest_normalization(envtest_bin: Path) -> Iterator[Envtest]:
    """A control plane of this module's own (the controllers act on every node)."""
    with own_envtest(envtest_bin) as plane:
        yield plane


def topology() -> dict[str, Any]:
    def entry(name: str, value: str) -> dict[str, str]:
        return {"name": name, "capacity": value, "allocatable": value, "available": value}

    basic = {"cpuModel": MODEL, "hyperThreadEnabled": True, "turboEnabled": False}
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {
            "name": "node-n",
            "annotations": {"node.koordinator.sh/cpu-basic-info": json.dumps(basic)},
        },
        "topologyPolicies": ["None"],
        "zones": [
            {"name": f"node-{i}", "type": "Node", "resources": [entry("cpu", "8"), entry("memory", "32Gi")]}
            for i in range(2)
        ],
    }


async def test_a_node_with_cpu_basic_info_gets_its_ratios_and_zone_batch(envtest_normalization):
    client: ApiClient = await prepared(envtest_normalization)
    try:
        ratios = {"baseRatio": 1.1, "hyperThreadEnabledRatio": 1.25}
        await client.create(
            res.CONFIG_MAPS,
            config_map(
                {"enable": True},
                cpu_normalization_config={"enable": True, "ratioModel": {MODEL: ratios}},
                resource_amplification_config={"enable": True, "resourceAmplificationRatio": {"cpu": 1.2}},
            ),
        )
        await create_with_status(client, res.NODES, node("node-n"))
        await create_with_status(
            client, res.NODE_METRICS, node_metric("node-n", update_time=format_time(time.time()))
        )
        await client.create(res.NODE_RESOURCE_TOPOLOGIES, topology())

        async with controller_set(client, ("noderesource",)):

            async def annotated() -> bool:
                meta = (await client.get(res.NODES, "node-n"))["metadata"]
                annotations = meta.get("annotations") or {}
                # 1.2 x 1.25 = 1.5
                return (
                    annotations.get(NORMALIZATION) == "1.25"
                    and annotations.get(AMPLIFICATION) == '{"cpu":1.50}'
                )

            await wait_for(annotated)

            async def batch_scaled() -> bool:
                allocatable = (await client.get(res.NODES, "node-n"))["status"]["allocatable"]
                # default thresholds: 16000 - 6400 (margin) - 1000 (kubelet reserved) = 8600, x 1.25
                return BATCH_CPU in allocatable and Quantity.parse(allocatable[BATCH_CPU]).value() == 10750

            await wait_for(batch_scaled)

            async def zones_written() -> bool:
                nrt = await client.get(res.NODE_RESOURCE_TOPOLOGIES, "node-n")
                found = [
                    entry
                    for zone in nrt["zones"]
                    for entry in zone.get("resources") or ()
                    if entry["name"] == BATCH_CPU
                ]
                # per zone: 8000 - 3200 (margin) - max(250 system, 500 reserved) = 4300, x 1.25
                return len(found) == 2 and all(
                    Quantity.parse(e["allocatable"]).value() == 5375 for e in found
                )

            await wait_for(zones_written)
    finally:
        await client.close()
