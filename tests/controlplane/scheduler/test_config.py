"""KubeSchedulerConfiguration v1 into profiles: upstream's defaults and multiPoint rules, and
a clear error (exit 2) for what upstream would refuse or what is not built here."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.scheduler.__main__ import main
from controlplane.scheduler.config import ConfigError, parse
from controlplane.scheduler.kernel.table import MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO

BASE = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}


def profile(**fields: Any) -> dict[str, Any]:
    return {**BASE, "profiles": [{"schedulerName": "koord-scheduler", **fields}]}


def test_no_config_is_the_default_profile():
    (only,) = parse(None).profiles
    assert only.scheduler_name == "koord-scheduler"
    assert only.filters == [
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "NodeVolumeLimits",
        "VolumeBinding",
        "PodTopologySpread",
        "InterPodAffinity",
    ]
    assert only.scores == {
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "NodeResourcesFit": 1,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "NodeResourcesBalancedAllocation": 1,
        "ImageLocality": 1,
    }


def test_plugins_and_args_as_upstream_reads_them():
    config = parse(
        {
            **profile(
                percentageOfNodesToScore=30,
                plugins={
                    "score": {
                        "disabled": [
                            {"name": "NodeResourcesBalancedAllocation"},
                            {"name": "TaintToleration"},
                            {"name": "NodeAffinity"},
                        ],
                        "enabled": [{"name": "NodeResourcesFit", "weight": 5}],
                    },
                    "filter": {"disabled": [{"name": "TaintToleration"}]},
                },
                pluginConfig=[
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {
                                "type": "MostAllocated",
                                "resources": [
                                    {"name": "cpu", "weight": 2},
                                    {"name": "nvidia.com/gpu", "weight": 3},
                                ],
                            },
                            "ignoredResourceGroups": ["example.com"],
                        },
                    }
                ],
            ),
            "percentageOfNodesToScore": 10,
        }
    )
    (only,) = config.profiles
    assert config.percentage_of_nodes_to_score == 10
    assert only.percentage_of_nodes_to_score == 30
    assert only.filters == [
        "NodeUnschedulable",
        "NodeName",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "NodeVolumeLimits",
        "VolumeBinding",
        "PodTopologySpread",
        "InterPodAffinity",
    ]
    assert only.scores == {
        "NodeResourcesFit": 5,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "ImageLocality": 1,
    }
    assert only.fit.strategy == MOST_ALLOCATED
    assert only.fit.resources == {"cpu": 2, "nvidia.com/gpu": 3}
    assert only.fit.ignores("example.com/foo")
    assert not only.fit.ignores("cpu")


def test_multipoint_star_disables_every_default():
    config = parse(
        profile(
            plugins={
                "multiPoint": {
                    "disabled": [{"name": "*"}],
                    "enabled": [{"name": "NodeResourcesFit"}, {"name": "DefaultBinder"}],
                }
            }
        )
    )
    (only,) = config.profiles
    assert only.filters == ["NodeResourcesFit"]
    assert only.scores == {"NodeResourcesFit": 1}
    assert only.points["bind"] == ["DefaultBinder"]
    assert only.points["preEnqueue"] == []


def test_every_ordered_point_merges_multipoint_with_its_own_section():
    config = parse(
        profile(
            plugins={
                "preEnqueue": {"disabled": [{"name": "SchedulingGates"}]},
                "bind": {"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultBinder"}]},
            }
        )
    )
    (only,) = config.profiles
    assert only.points["preEnqueue"] == []
    assert only.points["bind"] == ["DefaultBinder"]
    assert parse(None).profiles[0].points["preEnqueue"] == ["SchedulingGates"]


def test_a_profile_without_a_bind_plugin_is_refused():
    with pytest.raises(ConfigError, match=r"plugins.bind: at least one bind plug-in is needed"):
        parse(profile(plugins={"bind": {"disabled": [{"name": "*"}]}}))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"plugins": {"filter": {"enabled": [{"name": "NodeAffinty"}]}}}, "'NodeAffinty' is not registered"),
        ({"plugins": {"filtr": {}}}, "unknown extension point(s) ['filtr']"),
        ({"plugins": {"score": {"enabled": [{"name": "NodeName"}]}}}, "'NodeName' is not a score plug-in"),
        ({"plugins": {"filter": {"disabled": [{"name": "NodeResourcesFit"}]}}}, "cannot be disabled"),
        (
            {"pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Random"}}}]},
            "scoringStrategy.type: Unsupported value: 'Random'",
        ),
        (
            {
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 101}]}},
                    }
                ]
            },
            "resource weight of cpu not in range [1-100]",
        ),
        (
            {
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
                    }
                ]
            },
            "requestedToCapacityRatio.shape: Required value",
        ),
        ({"percentageOfNodesToScore": 101}, "percentageOfNodesToScore: Invalid value: 101"),
        ({"pluginConfig": [{"name": "NodeName", "args": {"x": 1}}]}, "NodeName takes no args"),
    ],
)
def test_bad_configurations_are_clear_errors(fields, message):
    with pytest.raises(ConfigError) as err:
        parse(profile(**fields))
    assert message in str(err.value)


def test_requested_to_capacity_ratio_shape():
    args = {
        "scoringStrategy": {
            "type": "RequestedToCapacityRatio",
            "requestedToCapacityRatio": {
                "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
            },
        }
    }
    (only,) = parse(profile(pluginConfig=[{"name": "NodeResourcesFit", "args": args}])).profiles
    assert only.fit.strategy == REQUESTED_TO_CAPACITY_RATIO
    assert only.fit.shape == [(0, 0), (100, 10)]


def test_a_bad_config_file_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles: [{plugins: {filter: {enabled: [{name: Nope}]}}}]\n"
    )
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--config", str(path), "--nodes", "n.yaml", "--pods", "p.yaml"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "koord-scheduler: error: profiles[0].plugins.filter.enabled[0].name: plug-in 'Nope'"
    )
    assert err.count("\n") == 1
