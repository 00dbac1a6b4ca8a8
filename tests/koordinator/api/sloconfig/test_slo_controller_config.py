"""slo-controller-config parsing, validation and per-node resolution."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordinator.api.sloconfig.config import (
    SLOControllerConfig,
    cluster_colocation_strategy,
    colocation_strategy_for_node,
    cpu_burst_strategy_for_node,
    host_applications_for_node,
    node_metric_spec_for_node,
    node_slo_spec_for_node,
    parse_config,
    resource_amplification_strategy_for_node,
    resource_qos_strategy_for_node,
    resource_threshold_strategy_for_node,
    system_strategy_for_node,
    validate_config_data,
)


def node(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "labels": labels or {}, "annotations": annotations or {}}}


def config(**keys: Any) -> SLOControllerConfig:
    parsed, errors = parse_config({k.replace("_", "-"): json.dumps(v) for k, v in keys.items()})
    assert errors == [], [str(e) for e in errors]
    return parsed


def test_missing_configmap_gives_defaults():
    cfg, errors = parse_config(None)
    assert errors == []
    strategy = cluster_colocation_strategy(cfg).to_dict()
    assert strategy == {
        "enable": False,
        "metricAggregateDurationSeconds": 300,
        "metricReportIntervalSeconds": 60,
        "metricAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
        "metricMemoryCollectPolicy": "usageWithoutPageCache",
        "cpuReclaimThresholdPercent": 60,
        "cpuCalculatePolicy": "usage",
        "memoryReclaimThresholdPercent": 65,
        "memoryCalculatePolicy": "usage",
        "degradeTimeMinutes": 15,
        "updateTimeThresholdSeconds": 300,
        "resourceDiffThreshold": 0.1,
        "midCPUThresholdPercent": 100,
        "midMemoryThresholdPercent": 100,
        "midUnallocatedPercent": 0,
        "midStaticCPUReservedPercent": 0,
        "midStaticMemoryReservedPercent": 0,
    }
    assert resource_qos_strategy_for_node(cfg, node()).to_dict() == {}
    assert system_strategy_for_node(cfg, node()).to_dict() == {"totalNetworkBandwidth": "0"}
    assert cpu_burst_strategy_for_node(cfg, node()).policy == "none"
    assert resource_threshold_strategy_for_node(cfg, node()).cpu_suppress_threshold_percent == 65


def test_cluster_strategy_overlays_defaults_and_first_matching_node_entry_wins():
    cfg = config(
        resource_threshold_config={
            "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 60},
            "nodeStrategies": [
                {
                    "name": "gpu",
                    "nodeSelector": {"matchLabels": {"gpu": "true"}},
                    "cpuSuppressThresholdPercent": 50,
                },
                {
                    "name": "all",
                    "nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                    "cpuSuppressThresholdPercent": 40,
                },
            ],
        }
    )
    plain = resource_threshold_strategy_for_node(cfg, node())
    assert (plain.enable, plain.cpu_suppress_threshold_percent, plain.memory_evict_threshold_percent) == (
        True,
        60,
        70,
    )
    gpu = resource_threshold_strategy_for_node(cfg, node({"gpu": "true"}))
    assert (gpu.enable, gpu.cpu_suppress_threshold_percent) == (True, 50)
    other = resource_threshold_strategy_for_node(cfg, node({"gpu": "false"}))
    assert other.cpu_suppress_threshold_percent == 40


def test_colocation_node_config_and_node_overrides():
    cfg = config(
        colocation_config={
            "enable": True,
            "cpuReclaimThresholdPercent": 70,
            "nodeConfigs": [
                {
                    "name": "a",
                    "nodeSelector": {"matchLabels": {"pool": "a"}},
                    "memoryReclaimThresholdPercent": 50,
                },
                {
                    "name": "no-batch-cpu",
                    "nodeSelector": {"matchLabels": {"pool": "b"}},
                    "cpuReclaimThresholdPercent": 0,
                },
            ],
        }
    )
    a = colocation_strategy_for_node(cfg, node({"pool": "a"}))
    assert (a.enable, a.cpu_reclaim_threshold_percent, a.memory_reclaim_threshold_percent) == (True, 70, 50)
    # 0 is a valid threshold (upstream's rule is >= 0): the entry applies
    b = colocation_strategy_for_node(cfg, node({"pool": "b"}))
    assert b.cpu_reclaim_threshold_percent == 0
    problems: list[str] = []
    overridden = colocation_strategy_for_node(
        cfg,
        node(
            {
                "pool": "a",
                "node.koordinator.sh/cpu-reclaim-ratio": "0.55",
                "node.koordinator.sh/memory-reclaim-ratio": "-1",
                "node.koordinator.sh/mid-static-cpu-reserved-ratio": "oops",
            },
            {
                "node.koordinator.sh/colocation-strategy": json.dumps(
                    {"degradeTimeMinutes": 20, "cpuReclaimThresholdPercent": 10}
                )
            },
        ),
        problems,
    )
    assert overridden.degrade_time_minutes == 20
    assert overridden.cpu_reclaim_threshold_percent == 55  # labels apply after the annotation
    assert overridden.memory_reclaim_threshold_percent == 50  # negative ratio ignored
    assert overridden.mid_static_cpu_reserved_percent == 0
    assert len(problems) == 2


def test_malformed_colocation_annotation_is_reported_and_skipped():
    cfg = config(colocation_config={"enable": True})
    problems: list[str] = []
    strategy = colocation_strategy_for_node(
        cfg, node(annotations={"node.koordinator.sh/colocation-strategy": "{"}), problems
    )
    assert strategy.enable is True
    assert len(problems) == 1
    assert "colocation-strategy" in problems[0]


def test_node_slo_spec_assembly():
    cfg = config(
        resource_qos_config={"clusterStrategy": {"beClass": {"cpuQOS": {"enable": True}}}},
        cpu_burst_config={"clusterStrategy": {"policy": "auto"}},
        system_config={"clusterStrategy": {"watermarkScaleFactor": 150}},
        host_application_config={
            "applications": [{"name": "nginx", "qos": "LS"}],
            "nodeConfigs": [{"name": "x", "nodeSelector": {"matchLabels": {"x": "y"}}, "applications": []}],
        },
    )
    spec = node_slo_spec_for_node(
        cfg, node(annotations={"node.koordinator.sh/network-bandwidth": "25G"})
    ).to_dict()
    assert spec["resourceQOSStrategy"] == {"beClass": {"cpuQOS": {"enable": True}}}
    assert spec["cpuBurstStrategy"]["policy"] == "auto"
    assert spec["cpuBurstStrategy"]["cpuBurstPercent"] == 1000
    assert spec["systemStrategy"] == {"watermarkScaleFactor": 150, "totalNetworkBandwidth": "25G"}
    assert spec["hostApplications"] == [{"name": "nginx", "qos": "LS"}]
    assert host_applications_for_node(cfg, node({"x": "y"})) == []


def test_node_metric_spec_follows_colocation_only_when_enabled():
    disabled = config(colocation_config={"metricAggregateDurationSeconds": 120})
    assert (
        node_metric_spec_for_node(disabled, node()).to_dict()["metricCollectPolicy"][
            "aggregateDurationSeconds"
        ]
        == 300
    )
    enabled = config(
        colocation_config={
            "enable": True,
            "metricAggregateDurationSeconds": 120,
            "metricReportIntervalSeconds": 30,
        }
    )
    policy = node_metric_spec_for_node(enabled, node()).to_dict()["metricCollectPolicy"]
    assert (policy["aggregateDurationSeconds"], policy["reportIntervalSeconds"]) == (120, 30)


def test_amplification_strategy_per_node():
    cfg = config(
        resource_amplification_config={
            "enable": True,
            "resourceAmplificationRatio": {"cpu": 1.5},
            "nodeConfigs": [
                {
                    "name": "a",
                    "nodeSelector": {"matchLabels": {"a": "b"}},
                    "resourceAmplificationRatio": {"memory": 1.2},
                }
            ],
        }
    )
    assert resource_amplification_strategy_for_node(cfg, node({"a": "b"})).resource_amplification_ratio == {
        "cpu": 1.5,
        "memory": 1.2,
    }


def test_failed_key_keeps_the_previous_value():
    good = config(cpu_burst_config={"clusterStrategy": {"policy": "auto"}})
    updated, errors = parse_config(
        {
            "cpu-burst-config": '{"clusterStrategy": {"policy": "sometimes"}}',
            "system-config": '{"clusterStrategy": {"watermarkScaleFactor": 100}}',
        },
        previous=good,
    )
    assert [e.field for e in errors] == ["cpu-burst-config.clusterStrategy.policy"]
    assert updated.cpu_burst.cluster_strategy is not None
    assert updated.cpu_burst.cluster_strategy.policy == "auto"
    assert updated.system.cluster_strategy is not None
    assert updated.system.cluster_strategy.watermark_scale_factor == 100


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        (
            "colocation-config",
            {"metricAggregateDurationSeconds": 0},
            "colocation-config.metricAggregateDurationSeconds",
        ),
        ("colocation-config", {"resourceDiffThreshold": 0}, "colocation-config.resourceDiffThreshold"),
        ("colocation-config", {"resourceDiffThreshold": 1.5}, "colocation-config.resourceDiffThreshold"),
        ("colocation-config", {"midCPUThresholdPercent": 101}, "colocation-config.midCPUThresholdPercent"),
        ("colocation-config", {"cpuCalculatePolicy": "request"}, "colocation-config.cpuCalculatePolicy"),
        (
            "colocation-config",
            {"memoryReclaimThresholdPercent": -1},
            "colocation-config.memoryReclaimThresholdPercent",
        ),
        (
            "colocation-config",
            {"nodeConfigs": [{"name": "x"}]},
            "colocation-config.nodeConfigs[0].nodeSelector",
        ),
        (
            "resource-threshold-config",
            {"clusterStrategy": {"memoryEvictThresholdPercent": 60, "memoryEvictLowerPercent": 65}},
            "resource-threshold-config.clusterStrategy",
        ),
        (
            "resource-qos-config",
            {"clusterStrategy": {"lsClass": {"cpuQOS": {"groupIdentity": -2}}}},
            "resource-qos-config.clusterStrategy.lsClass.cpuQOS.groupIdentity",
        ),
        (
            "resource-qos-config",
            {"nodeStrategies": [{"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]},
            "resource-qos-config.nodeStrategies[0].nodeSelector",
        ),
        (
            "cpu-burst-config",
            {"clusterStrategy": {"cfsQuotaBurstPercent": 99}},
            "cpu-burst-config.clusterStrategy.cfsQuotaBurstPercent",
        ),
        (
            "system-config",
            {"clusterStrategy": {"watermarkScaleFactor": 401}},
            "system-config.clusterStrategy.watermarkScaleFactor",
        ),
        (
            "host-application-config",
            {"applications": [{"name": "a", "qos": "X"}]},
            "host-application-config.applications[0].qos",
        ),
        (
            "cpu-normalization-config",
            {"ratioModel": {"Xeon": {"baseRatio": 0}}},
            "cpu-normalization-config.ratioModel.Xeon.baseRatio",
        ),
        (
            "resource-amplification-config",
            {"resourceAmplificationRatio": {"cpu": 0.5}},
            "resource-amplification-config.resourceAmplificationRatio.cpu",
        ),
        (
            "system-config",
            {"clusterStrategy": {"totalNetworkBandwidth": "fast"}},
            "system-config.clusterStrategy.totalNetworkBandwidth",
        ),
        ("colocation-config", "[1]", "colocation-config"),
    ],
)
def test_validation_names_the_bad_field(key, value, field):
    text = value if isinstance(value, str) else json.dumps(value)
    errors = validate_config_data({key: text})
    assert field in [e.field for e in errors], [str(e) for e in errors]


def test_bad_json_is_reported_on_the_key():
    errors = validate_config_data({"colocation-config": "{not json"})
    assert [e.field for e in errors] == ["colocation-config"]
    assert "invalid JSON" in str(errors[0])


def test_names_required_and_unique_only_when_asked():
    data = {
        "cpu-burst-config": json.dumps(
            {
                "nodeStrategies": [
                    {"nodeSelector": {"matchLabels": {"a": "b"}}},
                    {"name": "x", "nodeSelector": {"matchLabels": {"a": "c"}}},
                    {"name": "x", "nodeSelector": {"matchLabels": {"a": "d"}}},
                ]
            }
        )
    }
    assert validate_config_data(data) == []
    fields = sorted((e.reason, e.field) for e in validate_config_data(data, require_names=True))
    assert fields == [
        ("FieldValueDuplicate", "cpu-burst-config.nodeStrategies[2].name"),
        ("FieldValueRequired", "cpu-burst-config.nodeStrategies[0].name"),
    ]
