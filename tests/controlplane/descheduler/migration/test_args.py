"""MigrationControllerArgs: upstream's defaults (``v1alpha2/defaults.go``) and every
validation error (``validation_pluginargs.go``)."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.descheduler.args import ArgsError
from controlplane.descheduler.migration.args import IntOrPercent, ObjectLimiter, parse_args


def test_defaults() -> None:
    args = parse_args(None)
    assert args.dry_run is False
    assert args.max_concurrent_reconciles == 1
    assert args.max_migrating_per_node == 2
    assert args.max_migrating_per_namespace is None
    assert args.max_migrating_globally is None
    assert args.max_migrating_per_workload is None
    assert args.max_unavailable_per_workload is None
    assert args.default_job_mode == "ReservationFirst"
    assert args.default_job_ttl_s == 300.0
    assert args.eviction_policy == "Eviction"
    assert args.evict_qps == 10.0
    assert args.evict_burst == 1
    assert args.scheduler_names == ("koord-scheduler",)
    assert dict(args.object_limiters) == {"workload": ObjectLimiter(300.0, None)}
    assert args.arbitration_enabled is True
    assert args.arbitration_interval_s == 0.5
    assert args.skip_check_expected_replicas is False
    assert args.skip_eviction_gates == frozenset()


def test_the_shipped_config_values() -> None:
    """``config/manager/descheduler-config.yaml``: evictQPS is a string there."""
    args = parse_args(
        {
            "evictionPolicy": "Eviction",
            "namespaces": {"exclude": ["kube-system", "koordinator-system"]},
            "evictQPS": "10",
            "evictBurst": 1,
        }
    )
    assert args.evict_qps == 10.0
    assert args.evict_burst == 1
    assert args.exclude_namespaces == ("kube-system", "koordinator-system")
    assert args.include_namespaces == ()


def test_given_values_replace_the_defaults() -> None:
    args = parse_args(
        {
            "dryRun": True,
            "maxConcurrentReconciles": 4,
            "maxMigratingPerNode": 0,
            "maxMigratingPerNamespace": 3,
            "maxMigratingGlobally": 7,
            "maxMigratingPerWorkload": "20%",
            "maxUnavailablePerWorkload": 3,
            "defaultJobMode": "EvictDirectly",
            "defaultJobTTL": "1m30s",
            "evictQPS": 2.5,
            "evictBurst": 3,
            "evictionPolicy": "SoftEviction",
            "schedulerNames": ["a", "b"],
            "objectLimiters": {"workload": {"duration": "10m", "maxMigrating": "25%"}},
            "arbitrationArgs": {"enabled": True, "interval": "2s"},
            "skipEvictionGates": ["NodeFit"],
            "priorityThreshold": {"value": 100},
        }
    )
    assert args.dry_run is True
    assert args.max_concurrent_reconciles == 4
    assert args.max_migrating_per_node == 0
    assert args.max_migrating_per_namespace == 3
    assert args.max_migrating_globally == 7
    assert args.max_migrating_per_workload == IntOrPercent(20, percent=True)
    assert args.max_unavailable_per_workload == IntOrPercent(3)
    assert args.default_job_mode == "EvictDirectly"
    assert args.default_job_ttl_s == 90.0
    assert args.evict_qps == 2.5
    assert args.evict_burst == 3
    assert args.eviction_policy == "SoftEviction"
    assert args.scheduler_names == ("a", "b")
    assert dict(args.object_limiters) == {"workload": ObjectLimiter(600.0, IntOrPercent(25, percent=True))}
    assert args.arbitration_interval_s == 2.0
    assert args.skip_eviction_gates == frozenset({"NodeFit"})
    assert args.priority_threshold == 100


def test_arbitration_interval_defaults_when_only_enabled_is_given() -> None:
    assert parse_args({"arbitrationArgs": {"enabled": True}}).arbitration_interval_s == 0.5


@pytest.mark.parametrize(
    ("arbitration_args", "enabled"),
    [
        pytest.param(None, True, id="absent"),
        # upstream's Enabled is a plain bool: a given block without it is off
        pytest.param({}, False, id="empty"),
        pytest.param({"interval": "1s"}, False, id="interval-only"),
        pytest.param({"enabled": True}, True, id="enabled"),
        pytest.param({"enabled": False, "interval": "1s"}, False, id="disabled"),
    ],
)
def test_arbitration_is_on_by_default_only_without_arbitration_args(
    arbitration_args: dict[str, Any] | None, enabled: bool
) -> None:
    raw = {} if arbitration_args is None else {"arbitrationArgs": arbitration_args}
    assert parse_args(raw).arbitration_enabled is enabled


def test_a_zero_ttl_is_valid() -> None:
    assert parse_args({"defaultJobTTL": "0s"}).default_job_ttl_s == 0.0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"maxConcurrentReconciles": 0},
            "args.maxConcurrentReconciles: Invalid value: 0: "
            "maxConcurrentReconciles should be greater than or equal to 1",
        ),
        (
            {"maxMigratingPerNode": -1},
            "args.maxMigratingPerNode: Invalid value: -1: maxMigratingPerNode should be greater or equal 0",
        ),
        (
            {"maxMigratingPerNamespace": -1},
            "args.maxMigratingPerNamespace: Invalid value: -1: "
            "maxMigratingPerNamespace should be greater or equal 0",
        ),
        (
            {"maxMigratingGlobally": -1},
            "args.maxMigratingGlobally: Invalid value: -1: maxMigratingGlobally should be greater or equal 0",
        ),
        (
            {"namespaces": {"include": ["a"], "exclude": ["b"]}},
            "args.namespaces: Invalid value: only one of Include/Exclude namespaces can be set",
        ),
        (
            {"defaultJobMode": "Migrate"},
            "args.defaultJobMode: Invalid value: 'Migrate': "
            "defaultJobMode must be ReservationFirst or EvictDirectly",
        ),
        (
            {"defaultJobTTL": "-1s"},
            "args.defaultJobTTL: Invalid value: -1s: defaultJobTTL should be positive or zero",
        ),
        ({"evictQPS": 0}, "args.evictQPS: Invalid value: 0: evictQPS must be greater than 0"),
        ({"evictQPS": "0"}, "args.evictQPS: Invalid value: '0': evictQPS must be greater than 0"),
        ({"evictQPS": "fast"}, "args.evictQPS: Invalid value: 'fast': must be a number"),
        ({"evictBurst": 0}, "args.evictBurst: Invalid value: 0: evictBurst must be greater than 0"),
        (
            {"evictionPolicy": "Kill"},
            "args.evictionPolicy: Unsupported value: 'Kill': "
            "supported values: Eviction, Delete, SoftEviction",
        ),
        (
            {"maxMigratingPerWorkload": "x%"},
            "args.maxMigratingPerWorkload: Invalid value: 'x%': "
            "maxMigratingPerWorkload is invalid, err: invalid value for IntOrString: "
            "invalid type: string is not a percentage",
        ),
        (
            {"maxUnavailablePerWorkload": "1.5"},
            "args.maxUnavailablePerWorkload: Invalid value: '1.5': "
            "maxUnavailablePerWorkload is invalid, err: invalid value for IntOrString: "
            "invalid type: string is not a percentage",
        ),
    ],
)
def test_validation_errors(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ArgsError) as err:
        parse_args(raw)
    assert str(err.value) == message


def test_an_unknown_eviction_gate_is_refused() -> None:
    with pytest.raises(ArgsError, match=r"args\.skipEvictionGates: Unsupported value: 'NoSuchGate'"):
        parse_args({"skipEvictionGates": ["NoSuchGate"]})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("20%", IntOrPercent(20, percent=True)),
        ("0%", IntOrPercent(0, percent=True)),
        (3, IntOrPercent(3)),
        # upstream rejects nothing negative here
        (-1, IntOrPercent(-1)),
    ],
)
def test_int_or_string_values(value: object, expected: IntOrPercent) -> None:
    assert parse_args({"maxMigratingPerWorkload": value}).max_migrating_per_workload == expected
    assert parse_args({"maxUnavailablePerWorkload": value}).max_unavailable_per_workload == expected


def test_percent_scales_rounding_down() -> None:
    assert IntOrPercent(20, percent=True).scaled(11) == 2
    assert IntOrPercent(20, percent=True).scaled(4) == 0
    assert IntOrPercent(3).scaled(100) == 3


def test_a_string_that_is_not_a_percentage_is_refused() -> None:
    with pytest.raises(ArgsError, match="maxMigratingPerWorkload is invalid"):
        parse_args({"maxMigratingPerWorkload": "3"})


def test_object_limiters_replace_the_default_and_name_known_kinds_only() -> None:
    args = parse_args({"objectLimiters": {"namespace": {"duration": "1m", "maxMigrating": 4}}})
    assert dict(args.object_limiters) == {"namespace": ObjectLimiter(60.0, IntOrPercent(4))}
    with pytest.raises(ArgsError, match=r"objectLimiters\[node\]"):
        parse_args({"objectLimiters": {"node": {"duration": "1m"}}})
