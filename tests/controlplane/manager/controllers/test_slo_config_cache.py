"""The slo-controller-config cache: defaults when absent, last good value per key, availability."""

from __future__ import annotations

import json

from controlplane.manager.controllers.sloconfig import SLOConfigCache, parse_slo_config
from koordinator.api.sloconfig.config import cluster_colocation_strategy
from tests.controlplane.manager.controllers.objects import config_map


def available(config: SLOConfigCache) -> bool:
    return config.colocation_available


def cache() -> tuple[SLOConfigCache, list[set[str]]]:
    seen: list[set[str]] = []
    config = SLOConfigCache("koordinator-system", "slo-controller-config")
    config.subscribe(seen.append)
    return config, seen


def test_no_configmap_means_defaults_and_an_available_colocation_config():
    config, seen = cache()
    assert not available(config), "nothing is known before the informer synced"
    config.mark_synced()
    assert available(config)
    strategy = cluster_colocation_strategy(config.config)
    assert (strategy.enable, strategy.cpu_reclaim_threshold_percent, strategy.degrade_time_minutes) == (
        False,
        60,
        15,
    )
    assert seen == []


def test_a_broken_key_keeps_its_last_good_value_and_the_others_follow_the_configmap():
    config, seen = cache()
    config.apply(config_map({"enable": True}, cpu_burst_config={"clusterStrategy": {"policy": "auto"}}))
    config.mark_synced()
    assert seen == [{"colocation-config", "cpu-burst-config"}]
    broken = config_map({"enable": True, "cpuReclaimThresholdPercent": 50})
    broken["data"]["cpu-burst-config"] = json.dumps({"clusterStrategy": {"cpuBurstPercent": 0}})
    changed = config.apply(broken)
    assert changed == {"colocation-config"}
    assert config.in_error("cpu-burst-config")
    assert config.config.cpu_burst.cluster_strategy is not None
    assert config.config.cpu_burst.cluster_strategy.policy == "auto"
    assert cluster_colocation_strategy(config.config).cpu_reclaim_threshold_percent == 50
    # a deleted key goes back to its default
    assert config.apply(config_map({"enable": True, "cpuReclaimThresholdPercent": 50})) == {
        "cpu-burst-config"
    }
    assert not config.errors


def test_a_colocation_config_broken_since_start_is_unavailable_until_fixed():
    config, _ = cache()
    broken = config_map()
    broken["data"]["colocation-config"] = '{"enable": true'
    config.apply(broken)
    config.mark_synced()
    assert not available(config)
    config.apply(config_map({"enable": True}))
    assert available(config)
    config.apply(broken)
    assert available(config), "once good, the last good value stays in use"
    assert cluster_colocation_strategy(config.config).enable is True


def test_a_cluster_strategy_that_merges_into_an_invalid_one_is_an_error():
    parsed = parse_slo_config({"colocation-config": json.dumps({"enable": True, "degradeTimeMinutes": 0})})
    assert "colocation-config" in parsed.errors
    assert cluster_colocation_strategy(parsed.config).degrade_time_minutes == 15


def test_node_strategy_names_are_checked_on_request():
    data = {
        "colocation-config": json.dumps(
            {"enable": True, "nodeConfigs": [{"nodeSelector": {"matchLabels": {"a": "b"}}, "enable": False}]}
        )
    }
    assert not parse_slo_config(data).errors
    errors = parse_slo_config(data, require_names=True).errors
    assert [str(e) for e in errors["colocation-config"]] == [
        "colocation-config.nodeConfigs[0].name: Required value"
    ]


def test_an_error_in_one_key_is_never_blamed_on_colocation_config():
    """A value of the wrong kind used to add a field-less note that was filed under colocation-config,
    leaving the batch-resource controllers idle while only the thresholds were broken."""
    data = {
        "colocation-config": json.dumps({"enable": True}),
        "resource-threshold-config": json.dumps({"clusterStrategy": {"cpuSuppressPolicy": "bogus"}}),
    }
    parsed = parse_slo_config(data)
    assert list(parsed.errors) == ["resource-threshold-config"]
    assert all(
        str(e).startswith("resource-threshold-config.") for e in parsed.errors["resource-threshold-config"]
    )
    config, _ = cache()
    config.apply({"metadata": {"name": "slo-controller-config"}, "data": data})
    config.mark_synced()
    assert available(config)
