"""The noderesource controller: when node status is written, and what it holds afterwards.

Against the fake apiserver on a fake clock. Writes are counted from the requests the fake
received (``PATCH .../nodes/<name>/status``), not from mocks.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from koordinator.kube.timeutil import format_time, parse_time
from koordinator.metrics.exposition import render_python_client as render
from tests.controlplane.manager.controllers.golden import NOW, base_metrics, base_pods
from tests.controlplane.manager.controllers.harness import SLOHarness, running
from tests.controlplane.manager.controllers.objects import GI, config_map, node, node_metric, pod_metric
from tests.polling import eventually
from testsupport.fake import Fault

STATUS_PATH = "/api/v1/nodes/node-1/status"
T0 = parse_time("2026-01-01T00:00:00Z")
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
MID_CPU = "kubernetes.io/mid-cpu"


def objects(**config: Any) -> list[dict[str, Any]]:
    return [
        node(),
        *base_pods(),
        node_metric(pods=base_metrics()),
        config_map({"enable": True, **config}),
    ]


def status_writes(harness: SLOHarness) -> int:
    return sum(1 for r in harness.fake.requests if r.method == "PATCH" and r.path == STATUS_PATH)


def batch_of(harness: SLOHarness) -> tuple[int, int] | None:
    status = harness.fake.get(res.NODES, "node-1")["status"]
    allocatable, capacity = status["allocatable"], status["capacity"]
    if BATCH_CPU not in allocatable:
        assert BATCH_CPU not in capacity
        return None
    assert capacity[BATCH_CPU] == allocatable[BATCH_CPU]
    assert capacity[BATCH_MEMORY] == allocatable[BATCH_MEMORY]
    return Quantity.parse(allocatable[BATCH_CPU]).value(), Quantity.parse(allocatable[BATCH_MEMORY]).value()


async def report(harness: SLOHarness, after: float, prod_a_cpu: str, *, advance: bool = True) -> None:
    """The koordlet reports again ``after`` seconds past T0 with prod-a using ``prod_a_cpu``."""
    metric = harness.fake.get(res.NODE_METRICS, "node-1")
    metric["status"]["updateTime"] = format_time(T0 + after)
    metric["status"]["podsMetric"] = [
        pod_metric("prod-a", prod_a_cpu, "10Gi"),
        pod_metric("batch-b", "1", "2Gi", priority="koord-batch"),
    ]
    before = harness.reconciles("noderesource")
    if advance:
        harness.clock.advance(T0 + after + 60 - harness.clock.time())
    harness.fake.update(res.NODE_METRICS, metric, subresource="status")
    await harness.settle("noderesource", at_least=before + 1)


@pytest.fixture
async def harness():
    async with running(objects(), NOW) as started:
        started.fake.record_requests = True
        yield started


async def first_write(harness: SLOHarness) -> None:
    await eventually(lambda: batch_of(harness) is not None)
    await harness.settle("noderesource")


async def test_small_changes_wait_large_changes_are_written_at_once(harness):
    await first_write(harness)
    assert batch_of(harness) == (4600, 28561532519)
    harness.fake.requests.clear()
    # prod-a 3 -> 3.2 cores: batch-cpu 4600 -> 4400, 4.3 % < resourceDiffThreshold 10 %
    await report(harness, 60, "3200m")
    assert status_writes(harness) == 0
    assert batch_of(harness) == (4600, 28561532519)
    # prod-a -> 5 cores: batch-cpu 2600, 43 % off: written at once
    await report(harness, 120, "5")
    assert status_writes(harness) == 1
    assert batch_of(harness) == (2600, 28561532519)


async def test_a_small_change_is_written_once_updateTimeThresholdSeconds_pass(harness):
    await first_write(harness)
    harness.fake.requests.clear()
    await report(harness, 60, "3200m")
    assert status_writes(harness) == 0
    # no further report: the controller comes back by itself 300 s after its last write,
    # and not before
    harness.clock.advance(225)  # 285 s after it
    await asyncio.sleep(0.1)
    assert status_writes(harness) == 0
    harness.clock.advance(75)
    await eventually(lambda: batch_of(harness) == (4400, 28561532519))
    assert status_writes(harness) == 1


async def test_an_unchanged_result_is_never_written_again(harness):
    await first_write(harness)
    harness.fake.requests.clear()
    for minute in range(1, 8):
        await report(harness, 60 * minute, "3")
    assert status_writes(harness) == 0, "same values, even past updateTimeThresholdSeconds"


async def test_a_silent_koordlet_degrades_the_node_after_degradeTimeMinutes(harness):
    await first_write(harness)
    harness.fake.requests.clear()
    harness.clock.advance(14 * 60)  # 15 min after the report: still fresh
    await asyncio.sleep(0.05)
    assert batch_of(harness) is not None
    harness.clock.advance(62)  # now more than 15 minutes after updateTime
    await eventually(lambda: batch_of(harness) is None)
    status = harness.fake.get(res.NODES, "node-1")["status"]
    assert MID_CPU not in status["allocatable"]
    assert status_writes(harness) == 1
    await eventually(lambda: bool(harness.fake.list_objects(res.EVENTS, "default")))
    event = harness.fake.list_objects(res.EVENTS, "default")[0]
    assert (event["reason"], event["type"], event["involvedObject"]["name"]) == (
        "NodeResourceReset",
        "Warning",
        "node-1",
    )
    assert "degradeTimeMinutes=15" in event["message"]
    # the koordlet reports again: batch resources come back
    await report(harness, 17 * 60, "3", advance=False)
    await eventually(lambda: batch_of(harness) == (4600, 28561532519))


async def test_a_deleted_nodemetric_removes_batch_resources(harness):
    await first_write(harness)
    harness.fake.delete(res.NODE_METRICS, "node-1")
    await eventually(lambda: batch_of(harness) is None)


async def test_disabling_colocation_in_the_configmap_resets_every_node(harness):
    await first_write(harness)
    cm = harness.fake.get(res.CONFIG_MAPS, "slo-controller-config", "koordinator-system")
    cm["data"]["colocation-config"] = json.dumps({"enable": False})
    harness.fake.update(res.CONFIG_MAPS, cm)
    await eventually(lambda: batch_of(harness) is None)
    cm = harness.fake.get(res.CONFIG_MAPS, "slo-controller-config", "koordinator-system")
    cm["data"]["colocation-config"] = json.dumps({"enable": True, "cpuReclaimThresholdPercent": 50})
    harness.fake.update(res.CONFIG_MAPS, cm)
    await eventually(lambda: batch_of(harness) == (16000 - 8000 - 1000 - 4000, 28561532519))


async def test_a_broken_config_keeps_its_last_good_value_and_says_so(harness):
    await first_write(harness)
    cm = harness.fake.get(res.CONFIG_MAPS, "slo-controller-config", "koordinator-system")
    cm["data"]["colocation-config"] = '{"enable": true, "cpuReclaimThresholdPercent": "sixty"'
    harness.fake.update(res.CONFIG_MAPS, cm)
    await eventually(
        lambda: any(
            e["reason"] == "ColocationCfgUnmarshalFailed"
            and e["message"].startswith("failed to unmarshal colocation config, err: ")
            for e in harness.fake.list_objects(res.EVENTS, "koordinator-system")
        )
    )
    await harness.settle("noderesource")
    assert batch_of(harness) == (4600, 28561532519)
    assert harness.set.config is not None
    assert harness.set.config.in_error("colocation-config")


async def test_a_config_broken_since_start_leaves_nodes_alone():
    broken = config_map()
    broken["data"]["colocation-config"] = '{"enable": true, "resourceDiffThreshold": 2}'
    extended = {BATCH_CPU: "1234", BATCH_MEMORY: "1Gi"}
    async with running([node(extended=extended), node_metric(pods=base_metrics()), broken], NOW) as harness:
        harness.fake.record_requests = True
        await harness.settle("noderesource")
        assert status_writes(harness) == 0
        assert batch_of(harness) == (1234, GI)
        cm = harness.fake.get(res.CONFIG_MAPS, "slo-controller-config", "koordinator-system")
        cm["data"]["colocation-config"] = json.dumps({"enable": True})
        harness.fake.update(res.CONFIG_MAPS, cm)
        # no pods this time: 16000 - 6400 - 1000 - prod-a's metric... it is dangling (not listed): 3000
        await eventually(
            lambda: (
                batch_of(harness) == (16000 - 6400 - 1000 - 3000, 64 * GI - 24051816857 - 4 * GI - 10 * GI)
            )
        )


async def test_third_party_batch_allocations_are_taken_off_and_the_origin_recorded():
    allocations = {
        "allocations": [
            {
                "name": "yarn",
                "priority": "koord-batch",
                "resources": {BATCH_CPU: "1000", BATCH_MEMORY: "2Gi"},
            },
            {"name": "other", "priority": "koord-prod", "resources": {BATCH_CPU: "5000"}},
        ]
    }
    annotated = node(annotations={"node.koordinator.sh/thirdPartyAllocations": json.dumps(allocations)})
    async with running(
        [annotated, *base_pods(), node_metric(pods=base_metrics()), config_map({"enable": True})], NOW
    ) as harness:
        await eventually(lambda: batch_of(harness) is not None)
        assert batch_of(harness) == (3600, 28561532519 - 2 * GI)
        origin = json.loads(
            harness.fake.get(res.NODES, "node-1")["metadata"]["annotations"][
                "node.koordinator.sh/originExtendedAllocatable"
            ]
        )
        assert {k: Quantity.parse(v).value() for k, v in origin["resources"].items()} == {
            BATCH_CPU: 4600,
            BATCH_MEMORY: 28561532519,
        }


async def test_a_conflict_is_retried_with_backoff(harness):
    await first_write(harness)
    harness.fake.inject(Fault(status=409, reason="Conflict", method="PATCH", path=STATUS_PATH, times=1))
    harness.fake.requests.clear()
    await report(harness, 60, "5")
    assert batch_of(harness) == (4600, 28561532519)
    harness.clock.advance(1)  # past the first backoff
    await eventually(lambda: batch_of(harness) == (2600, 28561532519))
    assert [r.status for r in harness.fake.requests if r.path == STATUS_PATH] == [409, 200]


async def test_a_write_decided_on_an_old_version_of_the_node_is_refused_and_redone(harness, monkeypatch):
    """The status patch carries the resourceVersion the decision was made on: when the node moved
    on meanwhile (a former leader's write, a kubelet update) the apiserver answers 409 and the
    newer values stay; the retry decides again on the newer version."""
    await first_write(harness)
    controller = harness.set.controllers["noderesource"]
    stale = controller.nodes.store.get("node-1")
    assert stale is not None
    fresh_get = controller.nodes.store.get
    monkeypatch.setattr(controller.nodes.store, "get", lambda name: stale)  # the cache lags behind
    newer = harness.fake.get(res.NODES, "node-1")  # another writer moves the node on
    newer["status"]["allocatable"][BATCH_CPU] = newer["status"]["capacity"][BATCH_CPU] = "1234"
    harness.fake.update(res.NODES, newer, subresource="status")
    harness.fake.requests.clear()
    await report(harness, 60, "5")  # batch-cpu 4600 -> 2600, decided on the old version
    assert [r.status for r in harness.fake.requests if r.path == STATUS_PATH] == [409]
    assert batch_of(harness) == (1234, 28561532519), "the newer write is not overwritten"
    monkeypatch.setattr(controller.nodes.store, "get", fresh_get)
    harness.clock.advance(1)  # past the first backoff
    await eventually(lambda: batch_of(harness) == (2600, 28561532519))
    assert [r.status for r in harness.fake.requests if r.path == STATUS_PATH] == [409, 200]


async def test_a_refused_write_is_not_retried_until_something_changes(harness):
    await first_write(harness)
    harness.fake.inject(Fault(status=422, reason="Invalid", method="PATCH", path=STATUS_PATH, times=1))
    harness.fake.requests.clear()
    await report(harness, 60, "5")
    harness.clock.advance(10)
    await asyncio.sleep(0.05)
    assert [r.status for r in harness.fake.requests if r.path == STATUS_PATH] == [422]
    assert batch_of(harness) == (4600, 28561532519)
    await report(harness, 120, "5")  # the next report tries again
    assert batch_of(harness) == (2600, 28561532519)


async def test_metrics_keep_upstream_names(harness):
    await first_write(harness)
    text = render(harness.metrics.registry).decode()
    assert 'slo_controller_node_resource_reconcile_count{reason="updated",status="succeeded"} 1.0' in text
    assert "slo_controller_node_resource_reconcile_count_total" not in text
    assert "# TYPE slo_controller_node_resource_reconcile_count counter" in text
    assert (
        'slo_controller_node_extended_resource_allocatable_internal{node="node-1",'
        'resource="kubernetes.io/batch-cpu",unit="integer"} 4.6'
    ) in text
    assert 'controller_runtime_reconcile_total{controller="noderesource",result="requeue_after"}' in text
    harness.fake.delete(res.NODES, "node-1")
    await eventually(lambda: 'node="node-1"' not in render(harness.metrics.registry).decode())


async def test_pods_changing_node_arrive_with_the_next_report(harness):
    await first_write(harness)
    extra = copy.deepcopy(base_pods()[0])
    extra["metadata"]["name"] = "prod-new"
    harness.fake.create(res.PODS, extra)
    # not reported yet: counts with its request 4 cores / 8Gi at the next NodeMetric update
    await report(harness, 60, "3")
    assert batch_of(harness) == (600, 28561532519 - 8 * GI)


async def test_first_pass_covers_nodes_beyond_the_first_list_page():
    """More NodeMetrics than one LIST page (500): every node gets batch resources in the first pass,
    without waiting for its NodeMetric to change (the controller starts only on complete caches)."""
    count = 510
    seeded = [config_map({"enable": True})]
    for i in range(count):
        name = f"node-{i:04d}"
        seeded += [node(name), node_metric(name)]
    async with running(seeded, NOW) as started:
        await started.settle("noderesource", at_least=count, within=60)
        missing = [
            n["metadata"]["name"]
            for n in started.fake.list_objects(res.NODES)
            if BATCH_CPU not in n["status"]["allocatable"]
        ]
        assert missing == []
