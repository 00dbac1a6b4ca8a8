"""KubeSchedulerConfiguration v1 into profiles: upstream's defaults and multiPoint rules, and
a clear error (exit 2) for what upstream would refuse or what is not built here."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.scheduler.__main__ import build_parser, main, settings
from controlplane.scheduler.config import ConfigError, parse
from controlplane.scheduler.kernel.table import MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO
from koordinator.componentconfig import ClientConnection

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


def test_client_connection_and_leader_election_as_kube_scheduler_resolves_them():
    file = parse(
        {
            **BASE,
            "clientConnection": {"kubeconfig": "/etc/kube/config", "qps": 200, "burst": 400},
            "leaderElection": {"leaderElect": True, "leaseDuration": "30s", "resourceName": "my-scheduler"},
        }
    )
    assert file.client == ClientConnection("/etc/kube/config", 200.0, 400)
    parser = build_parser()
    # with --config: the file's connection (the flags ignored), its leader election under
    # the leader-election flags given
    args = parser.parse_args(
        [
            "--config",
            "f.yaml",
            "--kubeconfig",
            "ignored",
            "--kube-api-qps",
            "1",
            "--leader-elect-retry-period",
            "1s",
        ]
    )
    kubeconfig, qps, burst, options = settings(args, file)
    assert (kubeconfig, qps, burst) == ("/etc/kube/config", 200.0, 400)
    assert (options.leader_elect, options.lease_duration_s, options.lease_name) == (
        True,
        30.0,
        "my-scheduler",
    )
    assert (options.retry_period_s, options.renew_deadline_s) == (1.0, 10.0)
    assert options.lease_namespace == "koordinator-system"
    # without: the flags and the defaults
    args = parser.parse_args(["--kubeconfig", "k", "--kube-api-qps", "7", "--leader-elect", "false"])
    kubeconfig, qps, burst, options = settings(args, parse(None))
    assert (kubeconfig, qps, burst, options.leader_elect) == ("k", 7.0, 100, False)
    assert options.lease_name == "koord-scheduler"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({**BASE, "clientConection": {}}, "unknown field(s) ['clientConection']"),
        ({**BASE, "profiles": [{"schedulerName": "x", "plugin": {}}]}, "profiles[0]: strict decoding error"),
        ({**BASE, "clientConnection": {"qps": -1}}, "clientConnection.qps: Invalid value: -1"),
        ({**BASE, "clientConnection": {"burst": "many"}}, "clientConnection.burst: Invalid value: 'many'"),
        (
            {**BASE, "leaderElection": {"leaseDuration": "soon"}},
            "leaderElection.leaseDuration: Invalid value",
        ),
        (
            {**BASE, "leaderElection": {"leaderElect": "yes"}},
            "leaderElection.leaderElect: Invalid value: 'yes'",
        ),
        ({**BASE, "leaderElection": {"resourceLock": "endpoints"}}, "Unsupported value: 'endpoints'"),
        ({**BASE, "extenders": [{"urlPrefix": "http://x"}]}, "extenders are not supported"),
    ],
)
def test_bad_top_level_fields_are_clear_errors(document, message):
    with pytest.raises(ConfigError) as err:
        parse(document)
    assert message in str(err.value)


def test_volume_binding_args_load_and_are_validated_as_upstream():
    loaded = parse(profile(pluginConfig=[{"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 30}}]))
    assert loaded.profiles[0].args["VolumeBinding"].bind_timeout_seconds == 30
    for args, message in (
        ({"bindTimeoutSeconds": -1}, "bindTimeoutSeconds: Invalid value: -1"),
        ({"shape": [{"utilization": 50, "score": 5}, {"utilization": 20, "score": 1}]}, "not sorted"),
        ({"shape": [{"utilization": 101, "score": 5}]}, "not in valid range [0-100]"),
        ({"bindTimeout": 1}, "unknown field(s) ['bindTimeout']"),
    ):
        with pytest.raises(ConfigError) as err:
            parse(profile(pluginConfig=[{"name": "VolumeBinding", "args": args}]))
        assert message in str(err.value)
