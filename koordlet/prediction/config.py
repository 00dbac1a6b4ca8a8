"""The prediction settings: upstream's ``prediction.Config`` flags and defaults.

| flag | default |
|---|---|
| ``--prediction-checkpoint-filepath`` | ``/prediction-checkpoints`` (under ``--var-run-root-dir``) |
| ``--prediction-cold-start-duration`` | ``24h`` |
| ``--prediction-safety-margin-percent`` | ``10`` |
| ``--prediction-memory-histogram-decay-halflife`` | ``24h`` |
| ``--prediction-cpu-histogram-decay-halflife`` | ``12h`` |
| ``--prediction-training-interval`` | ``1m`` |
| ``--prediction-model-expiration-duration`` | ``30m`` |
| ``--prediction-model-checkpoint-interval`` | ``10m`` |
| ``--prediction-model-checkpoint-max-per-step`` | ``12`` |

Durations are in seconds here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_CHECKPOINT_FILEPATH = "/prediction-checkpoints"


@dataclass(frozen=True, slots=True)
class PredictionConfig:
    checkpoint_dir: Path = Path(DEFAULT_CHECKPOINT_FILEPATH)
    cold_start_seconds: float = 24 * 3600.0
    safety_margin_percent: int = 10
    memory_half_life_seconds: float = 24 * 3600.0
    cpu_half_life_seconds: float = 12 * 3600.0
    training_interval_seconds: float = 60.0
    model_expiration_seconds: float = 30 * 60.0
    checkpoint_interval_seconds: float = 10 * 60.0
    checkpoint_max_per_step: int = 12

    def __post_init__(self) -> None:
        for name in (
            "memory_half_life_seconds",
            "cpu_half_life_seconds",
            "training_interval_seconds",
            "model_expiration_seconds",
            "checkpoint_interval_seconds",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"prediction {name.replace('_', ' ')} must be positive")
        if self.cold_start_seconds < 0:
            raise ValueError("prediction cold start duration must not be negative")
        if self.safety_margin_percent < 0:
            raise ValueError("prediction safety margin percent must not be negative")
        if self.checkpoint_max_per_step < 0:
            raise ValueError("prediction checkpoints per step must not be negative")


def checkpoint_dir_under(var_run_root: Path, filepath: str) -> Path:
    """The checkpoint directory of ``--prediction-checkpoint-filepath`` on this host: the
    flag's path taken under the var-run root (``/host-var-run/`` in a DaemonSet, ``/var/run/``
    on the host, a test's tree in tests), as the koordlet's other host paths are."""
    relative = filepath.lstrip("/")
    if not relative:
        raise ValueError("--prediction-checkpoint-filepath must name a directory")
    return var_run_root / relative
