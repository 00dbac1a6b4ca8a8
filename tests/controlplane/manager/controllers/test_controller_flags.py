"""koord-manager's controller and leader-election flags."""

from __future__ import annotations

import pytest

from controlplane.manager.__main__ import build_parser
from controlplane.manager.options import (
    OptionsError,
    enabled_controllers,
    enabled_noderesource_plugins,
    options_from_args,
)

ALL = ("colocationprofile", "nodemetric", "noderesource", "nodeslo", "quotaprofile")
PLUGINS = (
    "CPUNormalization",
    "ResourceAmplification",
    "MidResource",
    "BatchResource",
    "GPUDeviceResource",
    "RDMADeviceResource",
)
NO_GPU = tuple(name for name in PLUGINS if name != "GPUDeviceResource")


def parse(argv: list[str]):
    return options_from_args(build_parser().parse_args(argv))


@pytest.mark.parametrize(
    ("spec", "enabled"),
    [
        pytest.param("colocationprofile,nodemetric,noderesource,nodeslo,quotaprofile", (*ALL,), id="default"),
        pytest.param("*", ALL, id="star"),
        pytest.param(
            "*,-noderesource",
            ("colocationprofile", "nodemetric", "nodeslo", "quotaprofile"),
            id="all-but-one",
        ),
        pytest.param("*,recommendation", (*ALL, "recommendation"), id="off-by-default-named"),
        pytest.param("quotaprofile", ("quotaprofile",), id="quotaprofile"),
        pytest.param("noderesource", ("noderesource",), id="one"),
        pytest.param("noderesource,-noderesource", ("noderesource",), id="first-mention-wins"),
        pytest.param("-colocationprofile,*", ALL[1:], id="left-out"),
        pytest.param("", (), id="none"),
    ],
)
def test_controllers_follow_upstreams_rule(spec, enabled):
    assert enabled_controllers(spec) == enabled


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("nodes", "unknown controller 'nodes'", id="unknown"),
    ],
)
def test_controllers_that_cannot_run_are_refused(spec, message):
    with pytest.raises(OptionsError, match=message):
        enabled_controllers(spec)


@pytest.mark.parametrize(
    ("spec", "enabled"),
    [
        pytest.param("*", PLUGINS, id="star"),
        pytest.param("*,-GPUDeviceResource", NO_GPU, id="no-gpu"),
        pytest.param("-GPUDeviceResource,*", NO_GPU, id="no-gpu-first"),
        pytest.param("BatchResource", ("BatchResource",), id="only-batch"),
        pytest.param(
            "RDMADeviceResource,MidResource", ("MidResource", "RDMADeviceResource"), id="upstream-order"
        ),
        pytest.param("-CPUNormalization,-ResourceAmplification,*", PLUGINS[2:], id="left-out"),
        pytest.param("", (), id="none"),
    ],
)
def test_noderesource_plugins_follow_upstreams_rule(spec, enabled):
    assert enabled_noderesource_plugins(spec) == enabled
    assert parse([f"--noderesource-plugins={spec}"]).noderesource_plugins == enabled


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("GPUDevice", "unknown plug-in 'GPUDevice'", id="unknown"),
    ],
)
def test_noderesource_plugins_that_cannot_run_are_refused(spec, message):
    with pytest.raises(OptionsError, match=f"--noderesource-plugins: {message}"):
        parse([f"--noderesource-plugins={spec}"])


def test_defaults_are_upstreams():
    options = parse([])
    assert options.controllers == ALL
    assert options.noderesource_plugins == PLUGINS
    assert options.gates.enabled("EnableSyncGPUSharedResource")
    assert options.leader_election is True
    assert (options.leader_election_namespace, options.leader_election_id) == (
        "koordinator-system",
        "koordinator-manager",
    )
    assert (options.lease_duration_s, options.renew_deadline_s, options.retry_period_s) == (15.0, 10.0, 2.0)


def test_leader_election_can_be_turned_off_go_style():
    assert parse(["--enable-leader-election=false"]).leader_election is False
    assert parse(["--enable-leader-election"]).leader_election is True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--leader-elect-resource-lock", "configmaps"], "only leases", id="lock"),
        pytest.param(
            ["--leader-elect-lease-duration", "5s", "--leader-elect-renew-deadline", "10s"],
            "must be longer than --leader-elect-renew-deadline",
            id="lease-shorter-than-renew",
        ),
        pytest.param(["--leader-elect-retry-period", "9s"], "1.2 x --leader-elect-retry-period", id="retry"),
        pytest.param(["--controller-workers", "0"], "at least 1", id="workers"),
    ],
)
def test_impossible_leader_election_settings_are_refused(argv, message):
    with pytest.raises(OptionsError, match=message):
        parse(argv)


def test_the_recommendation_checkpoint_interval():
    assert parse([]).recommendation.checkpoint_interval_s == 60.0
    assert parse(["--recommendation-checkpoint-interval=0s"]).recommendation.checkpoint_interval_s == 0.0
    assert parse(["--recommendation-checkpoint-interval=5m"]).recommendation.checkpoint_interval_s == 300.0
    with pytest.raises(OptionsError, match="--recommendation-checkpoint-interval: must not be negative"):
        parse(["--recommendation-checkpoint-interval=-1s"])
