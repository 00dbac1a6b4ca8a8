"""The koordlet's states-informer flags for devices and pods that upstream's DaemonSets pass
(``pkg/koordlet/statesinformer/impl/config.go``): accepted with upstream's defaults, so a
DaemonSet passing them starts instead of exiting with a usage error."""

from __future__ import annotations

import pytest

from koordlet.__main__ import agent_config, build_parser, host_root_argv
from koordlet.system.paths import HostPaths


@pytest.mark.parametrize(
    ("argv", "enforce", "taskids"),
    [
        pytest.param([], False, False, id="upstream-defaults"),
        pytest.param(["--xpu-enforce-collect-from-device-infos"], True, False, id="enforce-bare"),
        pytest.param(
            ["--xpu-enforce-collect-from-device-infos=true", "--enable-pod-taskids=true"],
            True,
            True,
            id="both",
        ),
        pytest.param(
            ["--xpu-enforce-collect-from-device-infos=false", "--enable-pod-taskids"],
            False,
            True,
            id="taskids",
        ),
    ],
)
def test_upstreams_device_and_task_id_flags_are_accepted(tmp_path, argv, enforce, taskids):
    args = build_parser().parse_args([*host_root_argv(HostPaths.rooted(tmp_path)), *argv])
    assert args.xpu_enforce_collect_from_device_infos is enforce
    assert args.enable_pod_taskids is taskids
    config = agent_config(args, {"NODE_NAME": "n"})
    assert config.node_name == "n"
    assert config.xpu_enforce_collect_from_device_infos is enforce


def test_a_bad_value_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--enable-pod-taskids=perhaps"])
    assert exited.value.code == 2
    assert "--enable-pod-taskids" in capsys.readouterr().err
