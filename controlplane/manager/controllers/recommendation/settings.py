"""The recommendation controller's settings (``--recommendation-*`` flags)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RecommendationSettings"]


@dataclass(frozen=True)
class RecommendationSettings:
    #: added to the percentile: 0.15 recommends 115 % of it (``--recommendation-safety-margin-percent``)
    safety_margin: float = 0.15
    #: a sample's weight halves every this many seconds of age (``--recommendation-half-life``)
    half_life_s: float = 24 * 3600.0
    #: samples a container needs before it gets a recommendation (``--recommendation-min-samples``)
    min_samples: int = 3
    #: every Recommendation is reconciled again after this long
    resync_s: float = 60.0
    #: a Recommendation's checkpoint ConfigMap is written at most once in this long
    checkpoint_interval_s: float = 60.0
    cpu_percentile: float = 0.95
    memory_percentile: float = 0.99

    def __post_init__(self) -> None:
        if self.safety_margin < 0:
            raise ValueError(f"safety margin must not be negative, got {self.safety_margin}")
        if self.half_life_s <= 0:
            raise ValueError(f"half-life must be positive, got {self.half_life_s}")
        if self.checkpoint_interval_s < 0:
            raise ValueError(f"checkpoint interval must not be negative, got {self.checkpoint_interval_s}")
        if self.min_samples < 1:
            raise ValueError(f"min samples must be at least 1, got {self.min_samples}")
