"""The ``--prediction-*`` flags: upstream's names and defaults, the checkpoint directory
under the var-run root, and an out-of-range value refused with one line (exit 2)."""

from __future__ import annotations

import pytest

from koordlet.__main__ import agent_config, build_parser, host_root_argv
from koordlet.system.paths import HostPaths


def config_of(tmp_path, *flags: str):
    paths = HostPaths.rooted(tmp_path)
    args = build_parser().parse_args([*host_root_argv(paths), *flags])
    return agent_config(args, {"NODE_NAME": "node-1"}), paths


def test_defaults_are_upstreams(tmp_path):
    config, paths = config_of(tmp_path)
    prediction = config.prediction
    assert prediction is not None
    assert prediction.checkpoint_dir == paths.var_run_root / "prediction-checkpoints"
    assert (prediction.cold_start_seconds, prediction.safety_margin_percent) == (86400.0, 10)
    assert (prediction.memory_half_life_seconds, prediction.cpu_half_life_seconds) == (86400.0, 43200.0)
    assert prediction.training_interval_seconds == 60.0
    assert prediction.model_expiration_seconds == 1800.0
    assert (prediction.checkpoint_interval_seconds, prediction.checkpoint_max_per_step) == (600.0, 12)


def test_flags_set_every_value(tmp_path):
    config, paths = config_of(
        tmp_path,
        "--prediction-checkpoint-filepath=/var/lib/koordlet/models",
        "--prediction-cold-start-duration=30m",
        "--prediction-safety-margin-percent=20",
        "--prediction-memory-histogram-decay-halflife=48h",
        "--prediction-cpu-histogram-decay-halflife=6h",
        "--prediction-training-interval=30s",
        "--prediction-model-expiration-duration=1h",
        "--prediction-model-checkpoint-interval=5m",
        "--prediction-model-checkpoint-max-per-step=3",
    )
    prediction = config.prediction
    assert prediction is not None
    assert prediction.checkpoint_dir == paths.var_run_root / "var" / "lib" / "koordlet" / "models"
    assert prediction.cold_start_seconds == 1800.0
    assert prediction.safety_margin_percent == 20
    assert (prediction.memory_half_life_seconds, prediction.cpu_half_life_seconds) == (172800.0, 21600.0)
    assert prediction.training_interval_seconds == 30.0
    assert prediction.model_expiration_seconds == 3600.0
    assert (prediction.checkpoint_interval_seconds, prediction.checkpoint_max_per_step) == (300.0, 3)


@pytest.mark.parametrize(
    "flag",
    [
        "--prediction-safety-margin-percent=-1",
        "--prediction-training-interval=0s",
        "--prediction-checkpoint-filepath=/",
    ],
)
def test_out_of_range_values_are_one_line_and_exit_2(tmp_path, capsys, flag):
    with pytest.raises(SystemExit) as exit_info:
        config_of(tmp_path, flag)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("koordlet: error: ")
    assert err.count("\n") == 1
