"""The slo-controller-config cache: defaults when absent, last good value per key, availability."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from controlplane.manager.controllers.sloconfig import SLOConfigCache, parse_slo_config
from koordinator.api.sloconfig.config import (
    CONFIG_KEYS,
    cluster_colocation_strategy,
    cpu_burst_strategy_for_node,
    resource_threshold_strategy_for_node,
)
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


# ---- what the Warning Events say -------------------------------------------------------------------


class Recorder:
    """Collects the Events the cache records, as ``(type, reason, message)``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    async def record(
        self, obj: Any, event_type: str, reason: str, message: str, *, kind: str = "Pod"
    ) -> None:
        self.events.append((event_type, reason, message))


def recording_cache() -> tuple[SLOConfigCache, Recorder]:
    recorder = Recorder()
    config = SLOConfigCache("koordinator-system", "slo-controller-config", recorder=recorder)  # type: ignore[arg-type]
    return config, recorder


def with_data(**data: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "slo-controller-config"},
        "data": {k.replace("_", "-"): v for k, v in data.items()},
    }


THRESHOLD_45 = json.dumps({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 45}})
THRESHOLD_50 = json.dumps({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 50}})
BURST_AUTO = json.dumps({"clusterStrategy": {"policy": "auto"}})
BURST_BROKEN = json.dumps({"clusterStrategy": {"policy": "sometimes"}})
BURST_ERROR = (
    'cpu-burst-config.clusterStrategy.policy: Unsupported value: "sometimes": supported values: '
    '"none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"'
)


async def test_a_mixed_change_tells_exactly_which_key_was_kept_and_applies_the_others():
    """Thresholds changed (good) and cpu-burst-config broken in one update: one Event, for cpu-burst-config
    only, saying it was kept; the thresholds' new value is applied and never called kept."""
    config, recorder = recording_cache()
    config.apply(with_data(resource_threshold_config=THRESHOLD_45, cpu_burst_config=BURST_AUTO))
    config.mark_synced()
    changed = config.apply(with_data(resource_threshold_config=THRESHOLD_50, cpu_burst_config=BURST_BROKEN))
    await asyncio.sleep(0)
    assert changed == {"resource-threshold-config"}
    assert resource_threshold_strategy_for_node(config.config, None).cpu_suppress_threshold_percent == 50
    assert cpu_burst_strategy_for_node(config.config, None).policy == "auto"
    assert recorder.events == [
        (
            "Warning",
            "SLOCfgUnmarshalFailed",
            f"failed to unmarshal CPUBurstCfg, err: {BURST_ERROR}; "
            "kept the last good value of cpu-burst-config",
        )
    ]
    assert config.last_good() == {
        **dict.fromkeys(CONFIG_KEYS, ""),
        "resource-threshold-config": THRESHOLD_50,
        "cpu-burst-config": BURST_AUTO,
    }


async def test_a_key_that_had_no_value_says_its_defaults_were_kept():
    config, recorder = recording_cache()
    config.apply(with_data(resource_threshold_config=THRESHOLD_45))
    config.mark_synced()
    config.apply(with_data(resource_threshold_config=THRESHOLD_45, cpu_burst_config=BURST_BROKEN))
    await asyncio.sleep(0)
    assert [message for _, _, message in recorder.events] == [
        f"failed to unmarshal CPUBurstCfg, err: {BURST_ERROR}; "
        "kept the last good value of cpu-burst-config (it had no value: the defaults)"
    ]


@pytest.mark.parametrize(
    ("key", "reason", "outcome"),
    [
        pytest.param(
            "resource-threshold-config",
            "SLOCfgUnmarshalFailed",
            "no good value of resource-threshold-config known: spec.resourceUsedThresholdWithBE of every "
            "NodeSLO is left as it is until it is fixed, not reset to the defaults",
            id="nodeslo-key",
        ),
        pytest.param(
            "colocation-config",
            "ColocationCfgUnmarshalFailed",
            "no good value of colocation-config known: the batch and mid resources of the nodes and their "
            "NodeMetrics are left as they are until it is fixed, not reset to the defaults",
            id="colocation-config",
        ),
    ],
)
async def test_a_key_broken_since_start_says_that_no_good_value_is_known(key, reason, outcome):
    config, recorder = recording_cache()
    config.apply({"metadata": {"name": "slo-controller-config"}, "data": {key: '{"broken": '}})
    config.mark_synced()
    await asyncio.sleep(0)
    assert config.is_unavailable(key)
    assert [(r, m.rsplit("; ", 1)[1]) for _, r, m in recorder.events] == [(reason, outcome)]
    assert key not in config.last_good()
    # fixed: available again, and told to the controllers
    seen: list[set[str]] = []
    config.subscribe(seen.append)
    config.apply({"metadata": {"name": "slo-controller-config"}, "data": {key: "{}"}})
    assert not config.is_unavailable(key)
    assert seen == [{key}]


# ---- node entries without a usable selector ----------------------------------------------------------


def test_an_entry_without_a_usable_selector_is_skipped_and_logged_once(caplog):
    caplog.set_level(logging.WARNING, "controlplane.manager.controllers.sloconfig")
    config, _ = cache()
    strategies = [
        {"name": "no-selector", "cpuSuppressThresholdPercent": 10},
        {"name": "b", "nodeSelector": {"matchLabels": {"pool": "b"}}, "cpuSuppressThresholdPercent": 40},
    ]
    thresholds = {
        "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 50},
        "nodeStrategies": strategies,
    }
    config.apply(config_map(resource_threshold_config=thresholds))
    config.mark_synced()
    assert config.errors == {}
    assert [str(n) for n in config.notes["resource-threshold-config"]] == [
        "resource-threshold-config.nodeStrategies[0].nodeSelector: Required value: "
        "without one the entry selects no node: skipped"
    ]
    plain = {"metadata": {"name": "a", "labels": {}}}
    pool_b = {"metadata": {"name": "b", "labels": {"pool": "b"}}}
    assert resource_threshold_strategy_for_node(config.config, plain).cpu_suppress_threshold_percent == 50
    assert resource_threshold_strategy_for_node(config.config, pool_b).cpu_suppress_threshold_percent == 40

    def skipped_warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if "selects no node" in r.getMessage()]

    assert len(skipped_warnings()) == 1
    # the same ConfigMap again, then another key changed: nothing new to say about the entry
    config.apply(config_map(resource_threshold_config=thresholds))
    config.apply(config_map(resource_threshold_config=thresholds, cpu_burst_config={"clusterStrategy": {}}))
    assert len(skipped_warnings()) == 1
    # a second such entry is logged (once); the first is not logged again
    strategies.append(
        {"name": "bad", "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Near"}]}}
    )
    config.apply(config_map(resource_threshold_config=thresholds))
    config.apply(config_map(resource_threshold_config=thresholds))
    assert len(skipped_warnings()) == 2
    assert "nodeStrategies[2].nodeSelector" in skipped_warnings()[1]
    assert config.errors == {}
