"""The colocation validity rule (upstream's ``IsColocationStrategyValid``) and what follows from it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlplane.manager.controllers.sloconfig import parse_slo_config
from koordinator.api.sloconfig.config import (
    SLOControllerConfig,
    cluster_colocation_strategy,
    colocation_strategy_for_node,
    default_colocation_strategy,
    default_node_metric_collect_policy,
    node_metric_spec_for_node,
)
from koordinator.api.sloconfig.types import ColocationCfg, ColocationStrategy


def node(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "labels": labels or {}, "annotations": annotations or {}}}


def collect_policy(config: SLOControllerConfig, n: dict[str, Any]) -> Any:
    return node_metric_spec_for_node(config, n).to_dict()["metricCollectPolicy"]


DEFAULT_POLICY = default_node_metric_collect_policy().to_dict()


@pytest.mark.parametrize(
    ("field", "value", "valid"),
    [
        pytest.param("cpuReclaimThresholdPercent", 0, True, id="cpu-reclaim-0"),
        pytest.param("cpuReclaimThresholdPercent", -1, False, id="cpu-reclaim-negative"),
        pytest.param("cpuReclaimThresholdPercent", 150, True, id="cpu-reclaim-above-100"),
        pytest.param("memoryReclaimThresholdPercent", 0, True, id="memory-reclaim-0"),
        pytest.param("memoryReclaimThresholdPercent", -1, False, id="memory-reclaim-negative"),
        pytest.param("midStaticCPUReservedPercent", -1, False, id="mid-static-cpu-negative"),
        pytest.param("midStaticMemoryReservedPercent", 150, True, id="mid-static-memory-above-100"),
        pytest.param("midCPUThresholdPercent", 0, True, id="mid-cpu-0"),
        pytest.param("midCPUThresholdPercent", 100, True, id="mid-cpu-100"),
        pytest.param("midCPUThresholdPercent", 101, False, id="mid-cpu-above-100"),
        pytest.param("midMemoryThresholdPercent", -1, False, id="mid-memory-negative"),
        pytest.param("midUnallocatedPercent", 101, False, id="mid-unallocated-above-100"),
        pytest.param("batchCPUThresholdPercent", 0, True, id="batch-cpu-0"),
        pytest.param("batchCPUThresholdPercent", -1, False, id="batch-cpu-negative"),
        pytest.param("batchMemoryThresholdPercent", -1, False, id="batch-memory-negative"),
        pytest.param("metricMemoryCollectPolicy", "", False, id="memory-collect-policy-empty"),
        pytest.param("metricAggregateDurationSeconds", 0, False, id="aggregate-duration-0"),
        pytest.param("metricReportIntervalSeconds", 0, False, id="report-interval-0"),
        pytest.param("degradeTimeMinutes", 0, False, id="degrade-time-0"),
        pytest.param("updateTimeThresholdSeconds", 0, False, id="update-time-0"),
        pytest.param("resourceDiffThreshold", 0, False, id="resource-diff-0"),
        pytest.param("resourceDiffThreshold", 0.01, True, id="resource-diff-small"),
    ],
)
def test_the_rule_of_each_field(field, value, valid):
    strategy = ColocationStrategy.from_dict({**default_colocation_strategy().to_dict(), field: value})
    assert strategy.is_valid() is valid
    assert strategy.invalid_fields() == ([] if valid else [field])


def test_unset_fields_pass():
    assert ColocationStrategy().is_valid()
    assert ColocationStrategy(enable=True, cpu_reclaim_threshold_percent=0).is_valid()


def test_zero_reclaim_thresholds_in_the_cluster_strategy_are_accepted():
    parsed = parse_slo_config(
        {
            "colocation-config": json.dumps(
                {
                    "enable": True,
                    "cpuReclaimThresholdPercent": 0,
                    "memoryReclaimThresholdPercent": 0,
                    "metricReportIntervalSeconds": 30,
                }
            )
        }
    )
    assert parsed.errors == {}
    strategy = cluster_colocation_strategy(parsed.config)
    assert (
        strategy.enable,
        strategy.cpu_reclaim_threshold_percent,
        strategy.memory_reclaim_threshold_percent,
    ) == (
        True,
        0,
        0,
    )
    assert collect_policy(parsed.config, node()) == {**DEFAULT_POLICY, "reportIntervalSeconds": 30}


def test_a_node_entry_with_a_zero_threshold_applies_to_its_nodes():
    parsed = parse_slo_config(
        {
            "colocation-config": json.dumps(
                {
                    "enable": True,
                    "metricAggregateDurationSeconds": 120,
                    "nodeConfigs": [
                        {
                            "name": "a",
                            "nodeSelector": {"matchLabels": {"pool": "a"}},
                            "cpuReclaimThresholdPercent": 0,
                            "metricReportIntervalSeconds": 30,
                        }
                    ],
                }
            )
        }
    )
    assert parsed.errors == {}
    pool_a = node({"pool": "a"})
    assert colocation_strategy_for_node(parsed.config, pool_a).cpu_reclaim_threshold_percent == 0
    assert collect_policy(parsed.config, pool_a) == {
        **DEFAULT_POLICY,
        "aggregateDurationSeconds": 120,
        "reportIntervalSeconds": 30,
    }
    assert collect_policy(parsed.config, node()) == {**DEFAULT_POLICY, "aggregateDurationSeconds": 120}


def test_a_zero_reclaim_ratio_label_keeps_the_colocation_collect_policy():
    parsed = parse_slo_config(
        {"colocation-config": json.dumps({"enable": True, "metricReportIntervalSeconds": 30})}
    )
    labelled = node(
        {"node.koordinator.sh/cpu-reclaim-ratio": "0", "node.koordinator.sh/memory-reclaim-ratio": "0"}
    )
    strategy = colocation_strategy_for_node(parsed.config, labelled)
    assert (strategy.cpu_reclaim_threshold_percent, strategy.memory_reclaim_threshold_percent) == (0, 0)
    assert collect_policy(parsed.config, labelled) == {**DEFAULT_POLICY, "reportIntervalSeconds": 30}


def test_a_node_annotation_that_breaks_the_rule_gives_the_default_collect_policy():
    parsed = parse_slo_config(
        {"colocation-config": json.dumps({"enable": True, "metricReportIntervalSeconds": 30})}
    )
    annotated = node(
        annotations={"node.koordinator.sh/colocation-strategy": '{"midCPUThresholdPercent": 150}'}
    )
    assert colocation_strategy_for_node(parsed.config, annotated).invalid_fields() == [
        "midCPUThresholdPercent"
    ]
    assert collect_policy(parsed.config, annotated) == DEFAULT_POLICY
    assert collect_policy(parsed.config, node()) == {**DEFAULT_POLICY, "reportIntervalSeconds": 30}


def test_a_node_entry_that_breaks_the_rule_is_ignored_for_its_nodes():
    # the ConfigMap's ranges keep such an entry out; built directly, it shows the fallback
    config = SLOControllerConfig(
        colocation=ColocationCfg.from_dict(
            {
                "enable": True,
                "cpuReclaimThresholdPercent": 70,
                "nodeConfigs": [
                    {
                        "name": "broken",
                        "nodeSelector": {"matchLabels": {"pool": "b"}},
                        "cpuReclaimThresholdPercent": 40,
                        "midUnallocatedPercent": 120,
                    }
                ],
            }
        )
    )
    strategy = colocation_strategy_for_node(config, node({"pool": "b"}))
    assert (strategy.cpu_reclaim_threshold_percent, strategy.mid_unallocated_percent) == (70, 0)
