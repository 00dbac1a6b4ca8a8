"""NodeMetric and NodeSLO controllers: one object per node, specs from the slo-controller-config."""

from __future__ import annotations

import json
from typing import Any

from controlplane.manager.controllers.nodeslo import NodeSLOController
from koordinator.kube import resources as res
from tests.controlplane.manager.controllers.harness import SLOHarness, running
from tests.controlplane.manager.controllers.objects import config_map, node
from tests.polling import eventually

NOW = "2026-01-01T00:00:00Z"
DEFAULT_POLICY = {
    "aggregateDurationSeconds": 300,
    "reportIntervalSeconds": 60,
    "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
    "nodeMemoryCollectPolicy": "usageWithoutPageCache",
}
DEFAULT_THRESHOLD = {
    "enable": False,
    "cpuSuppressThresholdPercent": 65,
    "memoryEvictThresholdPercent": 70,
    "cpuSuppressPolicy": "cpuset",
    "cpuEvictPolicy": "evictByRealLimit",
}


def spec_of(harness: SLOHarness, resource: res.Resource, name: str) -> Any:
    found = [o for o in harness.fake.list_objects(resource) if o["metadata"]["name"] == name]
    return found[0].get("spec") if found else None


def writes(harness: SLOHarness, plural: str) -> list[str]:
    return [
        f"{r.method} {r.path}"
        for r in harness.fake.requests
        if r.method in ("POST", "PUT", "PATCH", "DELETE") and f"/{plural}" in r.path
    ]


def set_config(harness: SLOHarness, key: str, value: Any) -> None:
    cm = harness.fake.get(res.CONFIG_MAPS, "slo-controller-config", "koordinator-system")
    cm.setdefault("data", {})[key] = value if isinstance(value, str) else json.dumps(value)
    harness.fake.update(res.CONFIG_MAPS, cm)


# ---- NodeMetric ------------------------------------------------------------------------------------


async def test_every_node_gets_a_nodemetric_with_the_default_policy_while_colocation_is_off():
    async with running([node("a"), node("b")], NOW, ["nodemetric"]) as harness:
        await eventually(lambda: len(harness.fake.list_objects(res.NODE_METRICS)) == 2)
        for name in ("a", "b"):
            assert spec_of(harness, res.NODE_METRICS, name) == {"metricCollectPolicy": DEFAULT_POLICY}


async def test_the_policy_follows_the_node_colocation_strategy_and_the_node_lifecycle():
    colocation = {
        "enable": True,
        "metricAggregateDurationSeconds": 120,
        "nodeConfigs": [
            {
                "name": "fast",
                "nodeSelector": {"matchLabels": {"pool": "fast"}},
                "metricReportIntervalSeconds": 20,
            }
        ],
    }
    objects = [node("a"), node("b", labels={"pool": "fast"}), config_map(colocation)]
    async with running(objects, NOW, ["nodemetric"]) as harness:
        await eventually(lambda: len(harness.fake.list_objects(res.NODE_METRICS)) == 2)
        await harness.settle("nodemetric", at_least=2)
        assert spec_of(harness, res.NODE_METRICS, "a") == {
            "metricCollectPolicy": {**DEFAULT_POLICY, "aggregateDurationSeconds": 120}
        }
        assert spec_of(harness, res.NODE_METRICS, "b") == {
            "metricCollectPolicy": {
                **DEFAULT_POLICY,
                "aggregateDurationSeconds": 120,
                "reportIntervalSeconds": 20,
            }
        }
        # someone edits the spec: it is put back
        metric = harness.fake.get(res.NODE_METRICS, "a")
        metric["spec"]["metricCollectPolicy"]["reportIntervalSeconds"] = 1
        harness.fake.update(res.NODE_METRICS, metric)
        await eventually(
            lambda: (
                spec_of(harness, res.NODE_METRICS, "a")["metricCollectPolicy"]["reportIntervalSeconds"] == 60
            )
        )
        # the node leaves the pool: its policy changes
        moved = harness.fake.get(res.NODES, "b")
        del moved["metadata"]["labels"]["pool"]
        harness.fake.update(res.NODES, moved)
        await eventually(
            lambda: (
                spec_of(harness, res.NODE_METRICS, "b")["metricCollectPolicy"]["reportIntervalSeconds"] == 60
            )
        )
        # deleted node, deleted NodeMetric; deleted NodeMetric of a live node, recreated
        harness.fake.delete(res.NODES, "b")
        await eventually(lambda: spec_of(harness, res.NODE_METRICS, "b") is None)
        harness.fake.delete(res.NODE_METRICS, "a")
        await eventually(lambda: spec_of(harness, res.NODE_METRICS, "a") is not None)


async def test_colocation_turned_off_returns_nodemetrics_to_the_default_policy():
    objects = [node("a"), config_map({"enable": True, "metricReportIntervalSeconds": 10})]
    async with running(objects, NOW, ["nodemetric"]) as harness:
        await eventually(
            lambda: (
                (spec_of(harness, res.NODE_METRICS, "a") or {})
                .get("metricCollectPolicy", {})
                .get("reportIntervalSeconds")
                == 10
            )
        )
        set_config(harness, "colocation-config", {"enable": False, "metricReportIntervalSeconds": 10})
        await eventually(
            lambda: spec_of(harness, res.NODE_METRICS, "a") == {"metricCollectPolicy": DEFAULT_POLICY}
        )


# ---- NodeSLO ---------------------------------------------------------------------------------------


async def test_a_configmap_change_reaches_every_nodeslo():
    async with running([node("a"), node("b")], NOW, ["nodeslo"]) as harness:
        harness.fake.record_requests = True
        await eventually(lambda: len(harness.fake.list_objects(res.NODE_SLOS)) == 2)
        assert spec_of(harness, res.NODE_SLOS, "a") == {
            "resourceUsedThresholdWithBE": DEFAULT_THRESHOLD,
            "resourceQOSStrategy": {},
            "cpuBurstStrategy": {
                "policy": "none",
                "cpuBurstPercent": 1000,
                "cfsQuotaBurstPercent": 300,
                "cfsQuotaBurstPeriodSeconds": -1,
                "sharePoolThresholdPercent": 50,
            },
            "systemStrategy": {"totalNetworkBandwidth": "0"},
        }
        harness.fake.create(
            res.CONFIG_MAPS,
            config_map(
                resource_threshold_config={
                    "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 50},
                    "nodeStrategies": [
                        {
                            "name": "b-only",
                            "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": "b"}},
                            "cpuSuppressThresholdPercent": 40,
                        }
                    ],
                }
            ),
        )

        def threshold(name: str) -> Any:
            return (spec_of(harness, res.NODE_SLOS, name) or {})["resourceUsedThresholdWithBE"]

        await eventually(lambda: threshold("a")["cpuSuppressThresholdPercent"] == 50)
        await eventually(lambda: threshold("b")["cpuSuppressThresholdPercent"] == 40)
        assert threshold("a") == {**DEFAULT_THRESHOLD, "enable": True, "cpuSuppressThresholdPercent": 50}
        assert threshold("b")["enable"] is True, "node strategies merge onto the cluster strategy"


async def test_one_broken_key_keeps_its_last_good_value_and_leaves_the_others_alone():
    objects = [
        node("a"),
        config_map(
            resource_threshold_config={"clusterStrategy": {"enable": True}},
            cpu_burst_config={"clusterStrategy": {"policy": "auto"}},
        ),
    ]
    async with running(objects, NOW, ["nodeslo"]) as harness:
        await eventually(
            lambda: (
                (spec_of(harness, res.NODE_SLOS, "a") or {}).get("cpuBurstStrategy", {}).get("policy")
                == "auto"
            )
        )
        set_config(harness, "cpu-burst-config", '{"clusterStrategy": {"policy": "sometimes"}}')
        set_config(harness, "resource-threshold-config", {"clusterStrategy": {"enable": False}})
        await eventually(
            lambda: spec_of(harness, res.NODE_SLOS, "a")["resourceUsedThresholdWithBE"]["enable"] is False
        )
        assert spec_of(harness, res.NODE_SLOS, "a")["cpuBurstStrategy"]["policy"] == "auto"
        events = harness.fake.list_objects(res.EVENTS, "koordinator-system")
        assert any(
            e["reason"] == "SLOCfgUnmarshalFailed"
            and e["message"].startswith("failed to unmarshal CPUBurstCfg, err: cpu-burst-config.")
            for e in events
        )


async def test_the_network_bandwidth_annotation_and_node_deletion():
    annotated = node("a", annotations={"node.koordinator.sh/network-bandwidth": "10G"})
    async with running([annotated], NOW, ["nodeslo"]) as harness:
        await eventually(
            lambda: (
                (spec_of(harness, res.NODE_SLOS, "a") or {}).get("systemStrategy")
                == {"totalNetworkBandwidth": "10G"}
            )
        )
        harness.fake.delete(res.NODES, "a")
        await eventually(lambda: spec_of(harness, res.NODE_SLOS, "a") is None)


async def test_an_unchanged_nodeslo_is_never_rewritten_even_with_crd_defaults():
    qos = {"clusterStrategy": {"lsClass": {"networkQOS": {"enable": True, "ingressLimit": "50M"}}}}
    async with running(
        [node("a"), config_map(resource_qos_config=qos)], NOW, ["nodeslo", "nodemetric"]
    ) as harness:
        await eventually(lambda: spec_of(harness, res.NODE_SLOS, "a") is not None)
        await eventually(lambda: spec_of(harness, res.NODE_METRICS, "a") is not None)
        stored = spec_of(harness, res.NODE_SLOS, "a")
        assert stored is not None
        assert stored["resourceQOSStrategy"]["lsClass"]["networkQOS"]["egressLimit"] == 100, "CRD default"
        harness.fake.record_requests = True
        for name in ("nodeslo", "nodemetric"):
            before = harness.reconciles(name)
            harness.set.controllers[name].enqueue_all()
            await harness.settle(name, at_least=before + 1)
        assert writes(harness, "nodeslos") == []
        assert writes(harness, "nodemetrics") == []


async def test_a_spec_write_decided_on_an_old_version_is_refused_and_redone(monkeypatch):
    """The spec patch carries the resourceVersion the cache showed: a NodeSLO that moved on
    meanwhile gets a 409 instead of being overwritten on the strength of what it used to be."""
    async with running([node("a")], NOW, ["nodeslo"]) as harness:
        await eventually(lambda: spec_of(harness, res.NODE_SLOS, "a") is not None)
        await harness.settle("nodeslo")
        controller = harness.set.controllers["nodeslo"]
        assert isinstance(controller, NodeSLOController)
        stale = controller.node_slos.store.get("a")
        assert stale is not None
        fresh_get = controller.node_slos.store.get
        monkeypatch.setattr(controller.node_slos.store, "get", lambda name: stale)  # the cache lags
        moved_on = harness.fake.get(res.NODE_SLOS, "a")  # another writer moves the NodeSLO on
        moved_on["spec"]["systemStrategy"] = {"totalNetworkBandwidth": "10G"}
        harness.fake.update(res.NODE_SLOS, moved_on)
        harness.fake.record_requests = True
        harness.fake.create(
            res.CONFIG_MAPS,
            config_map(resource_threshold_config={"clusterStrategy": {"cpuSuppressThresholdPercent": 50}}),
        )
        await eventually(lambda: writes(harness, "nodeslos") != [])
        await harness.settle("nodeslo")
        assert [r.status for r in harness.fake.requests if "/nodeslos/" in r.path] == [409]
        assert spec_of(harness, res.NODE_SLOS, "a")["systemStrategy"] == {"totalNetworkBandwidth": "10G"}
        monkeypatch.setattr(controller.node_slos.store, "get", fresh_get)
        harness.clock.advance(1)  # past the first backoff: decided again on the newer version

        def threshold() -> Any:
            return spec_of(harness, res.NODE_SLOS, "a")["resourceUsedThresholdWithBE"]

        await eventually(lambda: threshold()["cpuSuppressThresholdPercent"] == 50)
        assert [r.status for r in harness.fake.requests if "/nodeslos/" in r.path] == [409, 200]


# ---- node entries and thresholds the config used to refuse ------------------------------------------


async def test_colocation_with_zero_thresholds_and_an_entry_without_selector_reaches_the_nodemetrics():
    """0 is a valid reclaim threshold, and an entry without nodeSelector selects no node:
    neither refuses colocation-config, so the NodeMetrics follow its cluster strategy."""
    colocation = {
        "enable": True,
        "cpuReclaimThresholdPercent": 0,
        "memoryReclaimThresholdPercent": 0,
        "metricReportIntervalSeconds": 30,
        "nodeConfigs": [
            {"name": "no-selector", "enable": False, "metricReportIntervalSeconds": 10},
            {
                "name": "fast",
                "nodeSelector": {"matchLabels": {"pool": "fast"}},
                "cpuReclaimThresholdPercent": 0,
                "metricReportIntervalSeconds": 20,
            },
        ],
    }
    objects = [
        node("a"),
        node("b", labels={"pool": "fast"}),
        node("c", labels={"node.koordinator.sh/cpu-reclaim-ratio": "0"}),
        config_map(colocation),
    ]
    async with running(objects, NOW, ["nodemetric"]) as harness:
        await eventually(lambda: len(harness.fake.list_objects(res.NODE_METRICS)) == 3)
        await harness.settle("nodemetric", at_least=3)
        for name, interval in (("a", 30), ("b", 20), ("c", 30)):
            assert spec_of(harness, res.NODE_METRICS, name) == {
                "metricCollectPolicy": {**DEFAULT_POLICY, "reportIntervalSeconds": interval}
            }, name
        events = harness.fake.list_objects(res.EVENTS, "koordinator-system")
        assert [e["reason"] for e in events] == []


async def test_node_strategies_without_a_usable_selector_are_skipped_and_the_others_reach_the_nodeslos():
    thresholds = {
        "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 50},
        "NodeStrategies": [  # a key differing only in case names the field, as in Go
            {"name": "no-selector", "cpuSuppressThresholdPercent": 10},
            {
                "name": "in-without-values",
                "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In"}]},
                "cpuSuppressThresholdPercent": 20,
            },
            {
                "name": "b",
                "NodeSelector": {"MatchLabels": {"pool": "b"}},
                "CPUSuppressThresholdPercent": 40,
            },
        ],
    }
    objects = [node("a"), node("b", labels={"pool": "b"}), config_map(resource_threshold_config=thresholds)]
    async with running(objects, NOW, ["nodeslo"]) as harness:

        def threshold(name: str) -> Any:
            return (
                (spec_of(harness, res.NODE_SLOS, name) or {}).get("resourceUsedThresholdWithBE") or {}
            ).get("cpuSuppressThresholdPercent")

        await eventually(lambda: (threshold("a"), threshold("b")) == (50, 40))
        assert spec_of(harness, res.NODE_SLOS, "a")["resourceUsedThresholdWithBE"] == {
            **DEFAULT_THRESHOLD,
            "enable": True,
            "cpuSuppressThresholdPercent": 50,
        }
        events = harness.fake.list_objects(res.EVENTS, "koordinator-system")
        assert [e["reason"] for e in events] == []
