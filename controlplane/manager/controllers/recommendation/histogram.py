"""Decaying histograms of usage samples: the recommendation controller's memory of the past.

A sample's weight doubles every ``half_life`` seconds of sample time, so a sample one
half-life older than another counts half as much -- the same model as the Vertical Pod
Autoscaler's decaying histogram. Weights are stored relative to a reference time; when the
newest sample is more than :data:`_RENORMALIZE_HALF_LIVES` half-lives past it, the reference
moves forward and every weight is scaled down, so weights stay finite however long the
controller runs.

Buckets grow exponentially: bucket 0 is ``[0, first)``, bucket ``i`` ends at
``first * (ratio**(i+1) - 1) / (ratio - 1)``, each bucket ``ratio`` times as wide as the one
before; values past the last bucket land in it. :meth:`DecayingHistogram.percentile`
returns the *end* of the bucket in which the cumulative weight reaches the percentile --
an estimate never below the samples that fell in that bucket.

Only buckets holding weight are stored (a dict), which keeps checkpoints small.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CPU_BUCKETS", "MEMORY_BUCKETS", "BucketScheme", "DecayingHistogram", "HistogramError"]

#: weights below this are dropped (a bucket that decayed to nothing)
_EPSILON = 1e-10
#: move the reference time forward once the newest sample is this many half-lives past it
_RENORMALIZE_HALF_LIVES = 50.0


class HistogramError(ValueError):
    """A checkpointed histogram that cannot be restored."""


@dataclass(frozen=True)
class BucketScheme:
    """Exponentially growing buckets: the first ``first`` wide, each next ``ratio`` times wider."""

    first: float
    ratio: float
    count: int

    def __post_init__(self) -> None:
        if self.first <= 0 or self.ratio <= 1 or self.count < 1:
            raise ValueError(f"invalid bucket scheme {self}")

    def end(self, index: int) -> float:
        """The upper bound of bucket ``index``."""
        return self.first * (self.ratio ** (index + 1) - 1) / (self.ratio - 1)

    def index(self, value: float) -> int:
        """The bucket ``value`` falls in (clamped to the first and last)."""
        if value < self.first:
            return 0
        index = math.floor(math.log(value * (self.ratio - 1) / self.first + 1, self.ratio))
        # log() rounding can put a value on a bucket's boundary one bucket off
        if index > 0 and value < self.end(index - 1):
            index -= 1
        elif value >= self.end(index):
            index += 1
        return min(index, self.count - 1)


#: CPU in cores: 10 milli-cores first, 5 % growth, up to about 1000 cores
CPU_BUCKETS = BucketScheme(first=0.01, ratio=1.05, count=176)
#: memory in bytes: 10 MB first, 5 % growth, up to about 1 TB
MEMORY_BUCKETS = BucketScheme(first=1e7, ratio=1.05, count=176)


@dataclass
class DecayingHistogram:
    scheme: BucketScheme
    half_life: float
    #: sample time (epoch seconds) at which a sample weighs its plain weight
    reference: float = 0.0
    weights: dict[int, float] = field(default_factory=dict)
    #: how many samples were ever added (not decayed: the "enough samples" rule reads it)
    samples: int = 0

    def add(self, value: float, weight: float, at: float) -> None:
        """Add ``value`` with ``weight`` as of sample time ``at`` (epoch seconds)."""
        if weight <= 0 or math.isnan(value) or value < 0:
            return
        if not self.weights:
            self.reference = at
        elif at - self.reference > _RENORMALIZE_HALF_LIVES * self.half_life:
            self._move_reference(at)
        index = self.scheme.index(value)
        self.weights[index] = self.weights.get(index, 0.0) + weight * self._factor(at)
        self.samples += 1

    def _factor(self, at: float) -> float:
        return float(2.0 ** ((at - self.reference) / self.half_life))

    def _move_reference(self, at: float) -> None:
        scale = 2.0 ** ((self.reference - at) / self.half_life)
        self.weights = {i: w * scale for i, w in self.weights.items() if w * scale > _EPSILON}
        self.reference = at

    @property
    def total(self) -> float:
        return sum(self.weights.values())

    def percentile(self, fraction: float) -> float:
        """End of the bucket where the cumulative weight reaches ``fraction`` of the total; 0 when empty."""
        total = self.total
        if total <= 0:
            return 0.0
        threshold = fraction * total
        cumulative = 0.0
        last = 0
        for index in sorted(self.weights):
            cumulative += self.weights[index]
            last = index
            if cumulative >= threshold:
                break
        return self.scheme.end(last)

    def to_checkpoint(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "samples": self.samples,
            "buckets": {str(i): w for i, w in sorted(self.weights.items())},
        }

    @classmethod
    def from_checkpoint(
        cls, data: Mapping[str, Any], scheme: BucketScheme, half_life: float
    ) -> DecayingHistogram:
        try:
            reference = float(data["reference"])
            samples = int(data["samples"])
            weights = {int(i): float(w) for i, w in dict(data["buckets"]).items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise HistogramError(f"invalid histogram checkpoint: {exc!r}") from None
        if any(not 0 <= i < scheme.count or not w >= 0 for i, w in weights.items()):
            raise HistogramError("invalid histogram checkpoint: bucket out of range or negative weight")
        return cls(scheme, half_life, reference, weights, samples)
