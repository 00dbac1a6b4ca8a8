"""Node entries without a usable nodeSelector: skipped by the controllers, refused by the webhook's rule."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordinator.api.schema.errors import FieldError
from koordinator.api.sloconfig.config import (
    SLOControllerConfig,
    colocation_strategy_for_node,
    host_applications_for_node,
    parse_config,
    resource_amplification_strategy_for_node,
    resource_threshold_strategy_for_node,
    validate_config_data,
)

POOL_A = {"matchLabels": {"pool": "a"}}
MISSING = object()

#: nodeSelector values that select no node (``LabelSelectorAsSelector`` gives nothing or fails)
UNUSABLE = [
    pytest.param(MISSING, id="missing"),
    pytest.param(None, id="null"),
    pytest.param(
        {"matchExpressions": [{"key": "pool", "operator": "Near", "values": ["a"]}]}, id="bad-operator"
    ),
    pytest.param({"matchExpressions": [{"key": "pool", "operator": "In"}]}, id="in-without-values"),
    pytest.param({"matchExpressions": [{"key": "pool"}]}, id="no-operator"),
    pytest.param({"matchExpressions": [{"operator": "Exists"}]}, id="no-key"),
    pytest.param({"matchLabels": {"not a key": "a"}}, id="bad-label-key"),
    pytest.param({"matchLabels": {"pool": "not a value!"}}, id="bad-label-value"),
]


def node(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "labels": labels or {}}}


def entry(selector: Any, **fields: Any) -> dict[str, Any]:
    out = {"name": "broken", **fields}
    if selector is not MISSING:
        out["nodeSelector"] = selector
    return out


def parse(notes: list[FieldError] | None = None, **keys: Any) -> SLOControllerConfig:
    config, errors = parse_config({k.replace("_", "-"): json.dumps(v) for k, v in keys.items()}, notes=notes)
    assert errors == [], [str(e) for e in errors]
    return config


@pytest.mark.parametrize("selector", UNUSABLE)
def test_a_threshold_entry_without_a_usable_selector_is_skipped(selector):
    notes: list[FieldError] = []
    config = parse(
        notes,
        resource_threshold_config={
            "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 60},
            "nodeStrategies": [
                entry(selector, cpuSuppressThresholdPercent=10),
                {"name": "a", "nodeSelector": POOL_A, "cpuSuppressThresholdPercent": 50},
            ],
        },
    )
    assert [n.field for n in notes] == ["resource-threshold-config.nodeStrategies[0].nodeSelector"]
    assert "the entry selects no node" in str(notes[0])
    for labels in ({}, {"pool": "b"}, {"pool": "not a value!"}):
        strategy = resource_threshold_strategy_for_node(config, node(labels))
        assert (strategy.enable, strategy.cpu_suppress_threshold_percent) == (True, 60), labels
    assert (
        resource_threshold_strategy_for_node(config, node({"pool": "a"})).cpu_suppress_threshold_percent == 50
    )


@pytest.mark.parametrize("selector", UNUSABLE)
def test_a_colocation_entry_without_a_usable_selector_leaves_the_cluster_enable(selector):
    config = parse(
        colocation_config={
            "enable": True,
            "nodeConfigs": [
                entry(selector, enable=False),
                {"name": "a", "nodeSelector": POOL_A, "enable": False},
            ],
        }
    )
    assert colocation_strategy_for_node(config, node()).enable is True
    assert colocation_strategy_for_node(config, node({"pool": "a"})).enable is False


def test_every_key_with_node_entries_skips_them():
    notes: list[FieldError] = []
    config = parse(
        notes,
        host_application_config={
            "applications": [{"name": "nginx"}],
            "nodeConfigs": [{"name": "x", "applications": []}],
        },
        resource_amplification_config={
            "enable": True,
            "resourceAmplificationRatio": {"cpu": 1.5},
            "nodeConfigs": [{"name": "x", "nodeSelector": None, "resourceAmplificationRatio": {"cpu": 2}}],
        },
    )
    assert sorted(n.field for n in notes) == [
        "host-application-config.nodeConfigs[0].nodeSelector",
        "resource-amplification-config.nodeConfigs[0].nodeSelector",
    ]
    assert [app.name for app in host_applications_for_node(config, node())] == ["nginx"]
    assert resource_amplification_strategy_for_node(config, node()).resource_amplification_ratio == {
        "cpu": 1.5
    }


@pytest.mark.parametrize(
    "selector", [{}, {"matchLabels": {}, "matchExpressions": []}], ids=["braces", "empty-lists"]
)
def test_an_empty_selector_selects_every_node_as_in_go(selector):
    notes: list[FieldError] = []
    config = parse(
        notes,
        resource_threshold_config={
            "clusterStrategy": {"cpuSuppressThresholdPercent": 60},
            "nodeStrategies": [
                {"name": "all", "nodeSelector": selector, "cpuSuppressThresholdPercent": 30},
                {"name": "a", "nodeSelector": POOL_A, "cpuSuppressThresholdPercent": 50},
            ],
        },
    )
    for labels in ({}, {"pool": "a"}):
        assert resource_threshold_strategy_for_node(config, node(labels)).cpu_suppress_threshold_percent == 30
    assert [n.field for n in notes] == ["resource-threshold-config.nodeStrategies[0].nodeSelector"]
    assert "selects every node" in str(notes[0])


@pytest.mark.parametrize(
    ("selector", "field"),
    [
        pytest.param("pool=a", "cpu-burst-config.nodeStrategies[0].nodeSelector", id="a-string"),
        pytest.param(
            {"matchLabels": {"pool": 1}},
            "cpu-burst-config.nodeStrategies[0].nodeSelector.matchLabels.pool",
            id="a-number-label",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": "a"}]},
            "cpu-burst-config.nodeStrategies[0].nodeSelector.matchExpressions[0].values",
            id="values-not-a-list",
        ),
    ],
)
def test_a_selector_go_cannot_decode_fails_the_key(selector, field):
    data = {"cpu-burst-config": json.dumps({"nodeStrategies": [entry(selector, policy="auto")]})}
    previous = parse(cpu_burst_config={"clusterStrategy": {"policy": "cfsQuotaBurstOnly"}})
    notes: list[FieldError] = []
    config, errors = parse_config(data, previous, notes=notes)
    assert field in [e.field for e in errors]
    assert notes == []
    assert config.cpu_burst.to_dict() == previous.cpu_burst.to_dict(), "the key keeps its last good value"


def test_the_values_of_a_skipped_entry_are_still_checked():
    _, errors = parse_config(
        {
            "resource-threshold-config": json.dumps(
                {"nodeStrategies": [entry(MISSING, cpuSuppressThresholdPercent=150)]}
            )
        }
    )
    assert [e.field for e in errors] == [
        "resource-threshold-config.nodeStrategies[0].cpuSuppressThresholdPercent"
    ]


def test_names_are_still_checked_on_request():
    data = {
        "system-config": json.dumps({"nodeStrategies": [{"nodeSelector": None}, {"nodeSelector": POOL_A}]})
    }
    assert parse_config(data)[1] == []
    _, errors = parse_config(data, require_names=True)
    assert [e.field for e in errors] == [
        "system-config.nodeStrategies[0].name",
        "system-config.nodeStrategies[1].name",
    ]


@pytest.mark.parametrize(
    "selector",
    [*UNUSABLE, pytest.param({}, id="braces"), pytest.param({"matchLabels": {}}, id="empty-labels")],
)
def test_the_webhook_rule_refuses_every_entry_without_a_non_empty_valid_selector(selector):
    data = {"resource-qos-config": json.dumps({"nodeStrategies": [entry(selector)]})}
    errors = validate_config_data(data)
    assert "resource-qos-config.nodeStrategies[0].nodeSelector" in [e.field for e in errors]
    assert parse_config(data)[1] == [], "the controller keeps the key"
