"""Object keys that differ from a field's name only in case set that field, as with Go's encoding/json."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlplane.manager.controllers.sloconfig import parse_slo_config
from koordinator.api.model import Model, model_fields
from koordinator.api.sloconfig.config import (
    CONFIG_KEYS,
    SLOControllerConfig,
    colocation_strategy_for_node,
    cpu_normalization_strategy_for_node,
    host_applications_for_node,
    match_field_names,
    node_slo_spec_for_node,
    resource_amplification_strategy_for_node,
    validate_config_data,
)
from koordinator.api.sloconfig.types import ColocationStrategy, ResourceThresholdCfg


def node(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "labels": labels or {}, "annotations": annotations or {}}}


def parsed(**keys: Any) -> SLOControllerConfig:
    result = parse_slo_config({k.replace("_", "-"): json.dumps(v) for k, v in keys.items()})
    assert result.errors == {}, result.messages()
    return result.config


def test_the_reviewed_threshold_config_is_not_pruned():
    config = parsed(
        resource_threshold_config={"clusterStrategy": {"Enable": True, "CPUSuppressThresholdPercent": 50}}
    )
    threshold = node_slo_spec_for_node(config, node()).to_dict()["resourceUsedThresholdWithBE"]
    assert (threshold["enable"], threshold["cpuSuppressThresholdPercent"]) == (True, 50)


def test_nested_objects_lists_and_selectors_are_matched_at_every_level():
    config = parsed(
        resource_qos_config={
            "ClusterStrategy": {"BEClass": {"CPUQOS": {"Enable": True, "GroupIdentity": -1}}},
            "NODESTRATEGIES": [
                {
                    "Name": "gpu",
                    "NodeSelector": {"MatchExpressions": [{"Key": "gpu", "Operator": "Exists"}]},
                    "beClass": {"ResctrlQOS": {"catRangeEndPercent": 50}},
                }
            ],
        }
    )
    assert node_slo_spec_for_node(config, node()).to_dict()["resourceQOSStrategy"] == {
        "beClass": {"cpuQOS": {"enable": True, "groupIdentity": -1}}
    }
    assert node_slo_spec_for_node(config, node({"gpu": "a100"})).to_dict()["resourceQOSStrategy"] == {
        "beClass": {"cpuQOS": {"enable": True, "groupIdentity": -1}, "resctrlQOS": {"catRangeEndPercent": 50}}
    }


def test_colocation_fields_and_node_configs():
    config = parsed(
        colocation_config={
            "Enable": True,
            "midCpuThresholdPercent": 50,
            "batchCpuThresholdPercent": 80,
            "NodeConfigs": [
                {"NodeSelector": {"MatchLabels": {"pool": "a"}}, "cpuRECLAIMThresholdPercent": 40},
            ],
        }
    )
    cluster = colocation_strategy_for_node(config, node())
    assert (cluster.enable, cluster.mid_cpu_threshold_percent, cluster.batch_cpu_threshold_percent) == (
        True,
        50,
        80,
    )
    assert colocation_strategy_for_node(config, node({"pool": "a"})).cpu_reclaim_threshold_percent == 40


def test_map_keys_are_data_and_keep_their_case():
    config = parsed(
        system_config={"clusterStrategy": {"SchedFeatures": {"Foo": True}}},
        cpu_normalization_config={"Enable": True, "RatioModel": {"Xeon Gold": {"BaseRatio": 1.5}}},
        resource_amplification_config={"ENABLE": True, "ResourceAmplificationRatio": {"CPU": 1.5}},
    )
    assert node_slo_spec_for_node(config, node()).to_dict()["systemStrategy"]["schedFeatures"] == {
        "Foo": True
    }
    normalization = cpu_normalization_strategy_for_node(config, node())
    assert normalization.enable is True
    assert normalization.to_dict()["ratioModel"] == {"Xeon Gold": {"baseRatio": 1.5}}
    amplification = resource_amplification_strategy_for_node(config, node())
    assert (amplification.enable, amplification.resource_amplification_ratio) == (True, {"CPU": 1.5})


def test_host_applications():
    config = parsed(
        host_application_config={
            "Applications": [{"Name": "nginx", "QoS": "LS", "CgroupPath": {"Base": "CgroupRoot"}}],
        }
    )
    assert [app.to_dict() for app in host_applications_for_node(config, node())] == [
        {"name": "nginx", "qos": "LS", "cgroupPath": {"base": "CgroupRoot"}}
    ]


@pytest.mark.parametrize(
    ("strategy", "enable"),
    [
        pytest.param({"enable": False, "Enable": True}, True, id="later-case-variant-wins"),
        pytest.param({"Enable": True, "enable": False}, False, id="later-exact-name-wins"),
        pytest.param({"ENABLE": False, "enable": True, "Enable": None}, None, id="later-null-unsets"),
    ],
)
def test_keys_naming_one_field_are_taken_in_order_and_the_last_wins(strategy, enable):
    config = parsed(
        resource_threshold_config={"clusterStrategy": {**strategy, "cpuSuppressThresholdPercent": 50}}
    )
    cluster = config.resource_threshold.cluster_strategy
    assert cluster is not None
    assert cluster.enable is enable


def test_the_two_non_ascii_runes_that_fold_into_ascii_match_as_in_go():
    # U+017F LATIN SMALL LETTER LONG S folds to s, U+212A KELVIN SIGN to k; other runes match nothing
    data = {"clusterStrategy": {"cpu\u017fuppressThresholdPercent": 50, "\u212aey": 1, "\u00e9nable": True}}
    assert match_field_names(data, ResourceThresholdCfg) == {
        "clusterStrategy": {"cpuSuppressThresholdPercent": 50, "\u212aey": 1, "\u00e9nable": True}
    }


def test_unknown_keys_are_still_ignored_and_the_input_is_not_changed():
    data = {"clusterStrategy": {"Bogus": 1, "Enable": True}}
    config = parsed(resource_threshold_config=data)
    assert config.resource_threshold.to_dict() == {"clusterStrategy": {"enable": True}}
    assert data == {"clusterStrategy": {"Bogus": 1, "Enable": True}}


def test_errors_name_the_field_by_its_own_name():
    errors = validate_config_data(
        {"resource-threshold-config": json.dumps({"ClusterStrategy": {"CPUSuppressThresholdPercent": 150}})}
    )
    assert [e.field for e in errors] == [
        "resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent"
    ]


def test_the_node_colocation_annotation_is_matched_too():
    config = parsed(colocation_config={"enable": True})
    annotated = node(
        annotations={
            "node.koordinator.sh/colocation-strategy": json.dumps(
                {"CPUReclaimThresholdPercent": 30, "MetricReportIntervalSeconds": 20, "foo": 1}
            )
        }
    )
    problems: list[str] = []
    strategy = colocation_strategy_for_node(config, annotated, problems)
    assert problems == []
    assert (strategy.cpu_reclaim_threshold_percent, strategy.metric_report_interval_seconds) == (30, 20)


def _models(model: type[Model], seen: set[type[Model]]) -> set[type[Model]]:
    if model in seen:
        return seen
    seen.add(model)
    for slot in model_fields(model):
        desc = slot.type
        while desc.item is not None:
            desc = desc.item
        if desc.model is not None:
            _models(desc.model, seen)
    return seen


def test_no_model_has_two_fields_that_differ_only_in_case():
    """Go gives a case-insensitive key to the first such field in struct order, which the
    Python models (base fields first) do not reproduce; none exists, so the order never matters."""
    models: set[type[Model]] = {ColocationStrategy}
    for model in CONFIG_KEYS.values():
        _models(model, models)
    for model in models:
        names = [slot.info.json for slot in model_fields(model)]
        assert len({name.upper() for name in names}) == len(names), model.__name__
