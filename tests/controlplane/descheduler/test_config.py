"""DeschedulerConfiguration and LowNodeLoadArgs: upstream's defaults, node-pool inheritance
(``v1alpha2/defaults_test.go``) and validation messages."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.descheduler.args import ArgsError
from controlplane.descheduler.config import ConfigError, load, parse
from controlplane.descheduler.lownodeload.anomaly import AnomalyCondition
from controlplane.descheduler.lownodeload.args import parse_args
from controlplane.descheduler.profiles import KOORDINATOR


def test_defaults_run_migration_controller_only() -> None:
    config = parse(None)
    assert [p.name for p in config.profiles] == ["koord-descheduler"]
    assert config.profiles[0].plugins == {
        "deschedule": [],
        "balance": [],
        "evict": ["MigrationController"],
        "filter": ["MigrationController"],
    }
    assert config.descheduling_interval_s == 0.0
    assert (config.healthz_bind_address, config.metrics_bind_address) == ("0.0.0.0:10251", "0.0.0.0:10251")
    assert (config.client.qps, config.client.burst) == (50.0, 100)


def test_the_shipped_configuration() -> None:
    config = load(str(KOORDINATOR))
    assert config.descheduling_interval_s == 10.0
    assert config.leader_election == {
        "lease_name": "koord-descheduler",
        "lease_namespace": "koordinator-system",
    }
    profile = config.profiles[0]
    assert profile.plugins["evict"] == ["MigrationController"]
    assert profile.plugins["balance"] == []
    migration = profile.args["MigrationController"]
    assert (migration.evict_qps, migration.evict_burst, migration.exclude_namespaces) == (
        10.0,
        1,
        ("kube-system", "koordinator-system"),
    )
    low = profile.args["LowNodeLoad"].node_pools[0]
    assert (dict(low.low_thresholds), dict(low.high_thresholds)) == (
        {"cpu": 45, "memory": 55},
        {"cpu": 75, "memory": 80},
    )


def test_enabling_low_node_load_and_disabling_defaults() -> None:
    config = parse(
        {
            "profiles": [
                {
                    "name": "p",
                    "plugins": {
                        "balance": {"enabled": [{"name": "LowNodeLoad"}]},
                        "filter": {"disabled": [{"name": "*"}]},
                    },
                }
            ]
        }
    )
    assert config.profiles[0].plugins["balance"] == ["LowNodeLoad"]
    assert config.profiles[0].plugins["filter"] == []
    assert config.profiles[0].args["LowNodeLoad"].node_fit is True


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"apiVersion": "descheduler/v1alpha1"}, "apiVersion: Unsupported value"),
        ({"profile": []}, "strict decoding error: unknown field(s) ['profile']"),
        ({"deschedulingInterval": "ten"}, "deschedulingInterval: Invalid value"),
        ({"maxNoOfPodsToEvictPerNode": -1}, "maxNoOfPodsToEvictPerNode: Invalid value: -1"),
        (
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Foo"}]}},
            "nodeSelector: Invalid value",
        ),
        ({"profiles": [{"name": "a"}, {"name": "a"}]}, "profiles[1].name: Duplicate value: 'a'"),
        ({"profiles": [{"name": "a"}, {}]}, "profiles[1].name: Required value"),
        (
            {"profiles": [{"plugins": {"evict": {"disabled": [{"name": "*"}]}}}]},
            "profiles[0].plugins.evict: no evict plugin is enabled",
        ),
        (
            {"profiles": [{"plugins": {"balance": {"enabled": [{"name": "RemoveDuplicates"}]}}}]},
            "plug-in 'RemoveDuplicates' is not registered in koord-descheduler",
        ),
        (
            {"profiles": [{"plugins": {"evict": {"enabled": [{"name": "LowNodeLoad"}]}}}]},
            "plug-in 'LowNodeLoad' does not implement the evict extension point",
        ),
        (
            {"profiles": [{"pluginConfig": [{"name": "LowNodeLoad", "args": {"numberOfNodes": -1}}]}]},
            "numberOfNodes: Invalid value: -1: must be greater than or equal to 0",
        ),
        ({"healthzBindAddress": "0.0.0.0:99999"}, "healthzBindAddress: Invalid value"),
    ],
)
def test_configurations_upstream_refuses(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(data)
    assert message in str(err.value)


def test_low_node_load_defaults() -> None:
    args = parse_args(None)
    assert (args.node_fit, args.node_metric_expiration_seconds, args.detector_cache_timeout_s) == (
        True,
        180,
        300.0,
    )
    (pool,) = args.node_pools
    assert pool.anomaly_condition == AnomalyCondition(60.0, 5, 3)
    assert dict(pool.resource_weights) == {"cpu": 1, "memory": 1}


def test_weights_default_to_one_for_thresholded_resources() -> None:
    args = parse_args(
        {"lowThresholds": {"cpu": 30, "memory": 30, "pods": 10}, "resourceWeights": {"cpu": 10, "memory": 5}}
    )
    assert dict(args.node_pools[0].resource_weights) == {"cpu": 10, "memory": 5, "pods": 1}


def test_a_zero_consecutive_abnormalities_takes_the_default() -> None:
    args = parse_args(
        {"anomalyCondition": {"timeout": "10s", "consecutiveAbnormalities": 0, "consecutiveNormalities": 3}}
    )
    assert args.node_pools[0].anomaly_condition == AnomalyCondition(10.0, 5, 3)


def test_node_pools_inherit_what_they_do_not_set() -> None:
    args = parse_args(
        {
            "highThresholds": {"cpu": 80, "memory": 80},
            "lowThresholds": {"cpu": 20, "memory": 20},
            "prodHighThresholds": {"cpu": 90},
            "prodLowThresholds": {"cpu": 10},
            "resourceWeights": {"cpu": 2},
            "anomalyCondition": {
                "timeout": "2m",
                "consecutiveAbnormalities": 10,
                "consecutiveNormalities": 5,
            },
            "nodePools": [
                {"name": "inherits"},
                {"name": "own", "highThresholds": {"cpu": 70}, "anomalyCondition": {"timeout": "1m"}},
            ],
        }
    )
    inherits, own = args.node_pools
    assert dict(inherits.high_thresholds) == {"cpu": 80, "memory": 80}
    assert dict(inherits.prod_high_thresholds) == {"cpu": 90}
    assert dict(inherits.prod_low_thresholds) == {"cpu": 10}
    assert dict(inherits.resource_weights) == {"cpu": 2, "memory": 1}
    assert inherits.anomaly_condition == AnomalyCondition(120.0, 10, 5)
    assert dict(own.high_thresholds) == {"cpu": 70}
    assert dict(own.low_thresholds) == {"cpu": 20, "memory": 20}
    # zero counts inherit, the pool's timeout stays
    assert own.anomaly_condition == AnomalyCondition(60.0, 10, 5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"nodeMetricExpirationSeconds": 0}, "nodeMetricExpiredSeconds should be a positive value"),
        (
            {"evictableNamespaces": {"include": ["a"], "exclude": ["b"]}},
            "only one of Include/Exclude namespaces can be set",
        ),
        ({"lowThresholds": {"cpu": -1}}, "percentage must be greater than or equal to 0"),
        (
            {"lowThresholds": {"cpu": 80}, "highThresholds": {"cpu": 70}},
            "low percentage must be less than or equal to highThresholds",
        ),
        (
            {
                "podSelectors": [
                    {"name": "x", "selector": {"matchExpressions": [{"key": "a", "operator": "Bad"}]}}
                ]
            },
            "podSelectors[0].selector",
        ),
        (
            {"nodePools": [{"name": "p", "nodeSelector": {"matchLabels": {"a b": "c"}}}]},
            "nodePools[0].nodeSelector",
        ),
    ],
)
def test_low_node_load_validation(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ArgsError) as err:
        parse_args(args)
    assert message in str(err.value)
