"""Decaying exponential histograms: the peak predictor's model of one usage series.

Upstream's ``pkg/util/histogram`` (the Vertical Pod Autoscaler's): the buckets grow
exponentially, bucket 0 covering ``[0, first_bucket_size)`` and bucket ``n >= 1`` starting at
``first_bucket_size * (ratio**n - 1) / (ratio - 1)``, the last one starting at or above
``max_value`` and open-ended. A percentile is the *end* of the bucket where the cumulative
weight first reaches ``p x total`` (the start of the last bucket when it falls there); a
bucket lighter than ``epsilon`` counts as empty.

Decay: a sample added at time ``t`` weighs ``2 ** ((t - reference) / half_life)``, so a sample
loses half its importance with each half-life relative to newer ones. When that exponent
would pass 100 the reference moves forward to ``t`` rounded to a multiple of the half-life
(counted, as Go's ``time.Round``, from Go's zero time, year 1) and every weight is scaled
down by the same power of two. A fresh histogram's reference is Go's zero time, so the
first sample always moves it.

Checkpoints keep upstream's JSON shape (``HistogramCheckpoint``): ``referenceTimestamp``
(RFC 3339), ``bucketWeights`` (bucket index as a string -> integer weight, the heaviest
bucket scaled to 10000, weights rounding to 0 dropped) and ``totalWeight``. Loading spreads
``totalWeight`` over the buckets in proportion to their integer weights, so the
percentiles survive a save and load exactly, unless a bucket rounded to 0.

Times are seconds since the Unix epoch (floats). As upstream's, a histogram trusts them: a
sample stamped far ahead of the others outweighs them until real time catches up, and one
over 100 half-lives ahead moves the reference past every later sample. The predict server
therefore stamps its samples from the monotonic clock (``PeakPredictServer.sample_time``).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Go's zero ``time.Time`` (0001-01-01T00:00:00Z) in Unix seconds
GO_ZERO_TIME = -62135596800.0
#: when the decay exponent would exceed this, the reference timestamp moves forward
MAX_DECAY_EXPONENT = 100
#: the heaviest bucket's weight in a checkpoint
MAX_CHECKPOINT_WEIGHT = 10000


class CheckpointError(ValueError):
    """A histogram checkpoint that cannot be loaded (bad shape, bucket out of range)."""


@dataclass(frozen=True, slots=True)
class ExponentialOptions:
    """Bucket boundaries growing by ``ratio``; ``num_buckets`` as upstream computes it."""

    max_value: float
    first_bucket_size: float
    ratio: float
    epsilon: float

    def __post_init__(self) -> None:
        if self.max_value <= 0 or self.first_bucket_size <= 0 or self.epsilon <= 0 or self.ratio <= 1:
            raise ValueError("max_value, first_bucket_size and epsilon must be > 0, ratio must be > 1")

    @property
    def num_buckets(self) -> int:
        return math.ceil(_log(self.ratio, self.max_value * (self.ratio - 1) / self.first_bucket_size + 1)) + 1

    def find_bucket(self, value: float) -> int:
        if value < self.first_bucket_size:
            return 0
        bucket = int(_log(self.ratio, value * (self.ratio - 1) / self.first_bucket_size + 1))
        return min(bucket, self.num_buckets - 1)

    def bucket_start(self, bucket: int) -> float:
        if not 0 <= bucket < self.num_buckets:
            raise IndexError(f"bucket {bucket} out of range [0..{self.num_buckets - 1}]")
        if bucket == 0:
            return 0.0
        return self.first_bucket_size * (self.ratio**bucket - 1) / (self.ratio - 1)


def _log(base: float, x: float) -> float:
    return math.log(x) / math.log(base)


def _round_half_up(x: float) -> int:
    """Upstream's ``round``: floor(x + 0.5)."""
    return math.floor(x + 0.5)


def format_go_time(epoch_s: float) -> str:
    """RFC 3339 in UTC with Go's ``time.Time`` JSON precision (nanoseconds, zeros trimmed)."""
    whole = math.floor(epoch_s)
    nanos = round((epoch_s - whole) * 1e9)
    if nanos >= 1_000_000_000:
        whole, nanos = whole + 1, nanos - 1_000_000_000
    moment = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=whole)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if len(text) < 19:  # strftime drops the zero padding of years before 1000 on some platforms
        text = f"{moment.year:04d}" + text[text.index("-") :]
    fraction = f".{nanos:09d}".rstrip("0") if nanos else ""
    return f"{text}{fraction}Z"


def parse_go_time(text: str) -> float:
    """Unix seconds of an RFC 3339 timestamp (any offset, any fraction), year 1 included."""
    if not isinstance(text, str):
        raise CheckpointError(f"timestamp {text!r} is not a string")
    body = text.strip()
    if body.endswith(("Z", "z")):
        body = body[:-1] + "+00:00"
    fraction = 0.0
    if "." in body:
        head, _, rest = body.partition(".")
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        fraction = int(digits) / 10 ** len(digits) if digits else 0.0
        body = head + rest
    try:
        moment = datetime.datetime.fromisoformat(body)
    except ValueError:
        raise CheckpointError(f"not an RFC 3339 timestamp: {text!r}") from None
    if moment.tzinfo is None:
        raise CheckpointError(f"timestamp without an offset: {text!r}")
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return delta.days * 86400 + delta.seconds + fraction


class DecayingHistogram:
    """Weighted samples in exponential buckets, older samples decaying with ``half_life``."""

    __slots__ = ("_weights", "half_life", "max_bucket", "min_bucket", "options", "reference", "total_weight")

    def __init__(self, options: ExponentialOptions, half_life: float) -> None:
        if half_life <= 0:
            raise ValueError("the half-life must be positive")
        self.options = options
        self.half_life = half_life
        n = options.num_buckets
        self._weights = [0.0] * n
        self.total_weight = 0.0
        #: first non-empty bucket (the last bucket while empty), last non-empty (0 while empty)
        self.min_bucket = n - 1
        self.max_bucket = 0
        self.reference = GO_ZERO_TIME

    # --- samples and percentiles ---------------------------------------------------------

    def add_sample(self, value: float, weight: float, timestamp: float) -> None:
        if weight < 0:
            raise ValueError("sample weight must be non-negative")
        weight *= self._decay_factor(timestamp)
        bucket = self.options.find_bucket(value)
        self._weights[bucket] += weight
        self.total_weight += weight
        epsilon = self.options.epsilon
        if bucket < self.min_bucket and self._weights[bucket] >= epsilon:
            self.min_bucket = bucket
        if bucket > self.max_bucket and self._weights[bucket] >= epsilon:
            self.max_bucket = bucket

    def is_empty(self) -> bool:
        return self._weights[self.min_bucket] < self.options.epsilon

    def percentile(self, p: float) -> float:
        """The end of the bucket where the cumulative weight reaches ``p`` of the total (0
        when empty; the start of the last bucket when it is reached there)."""
        if self.is_empty():
            return 0.0
        threshold = p * self.total_weight
        partial = 0.0
        bucket = self.min_bucket
        while bucket < self.max_bucket:
            partial += self._weights[bucket]
            if partial >= threshold:
                break
            bucket += 1
        if bucket < self.options.num_buckets - 1:
            return self.options.bucket_start(bucket + 1)
        return self.options.bucket_start(bucket)

    def bucket_weights(self) -> dict[int, float]:
        """The weight of every bucket that holds any (for inspection and tests)."""
        return {b: w for b, w in enumerate(self._weights) if w > 0}

    # --- decay ---------------------------------------------------------------------------

    def _decay_factor(self, timestamp: float) -> float:
        if timestamp > self.reference + self.half_life * MAX_DECAY_EXPONENT:
            self._shift_reference(timestamp)
        return float(2.0 ** ((timestamp - self.reference) / self.half_life))

    def _shift_reference(self, timestamp: float) -> None:
        # a multiple of the half-life counted from Go's zero time, as time.Round does
        steps = _round_half_up((timestamp - GO_ZERO_TIME) / self.half_life)
        new_reference = GO_ZERO_TIME + steps * self.half_life
        exponent = _round_half_up((self.reference - new_reference) / self.half_life)
        self._scale(math.ldexp(1.0, exponent))
        self.reference = new_reference

    def _scale(self, factor: float) -> None:
        for bucket in range(self.min_bucket, self.max_bucket + 1):
            self._weights[bucket] *= factor
        self.total_weight *= factor
        self._update_min_max()

    def _update_min_max(self) -> None:
        epsilon = self.options.epsilon
        last = self.options.num_buckets - 1
        while self._weights[self.min_bucket] < epsilon and self.min_bucket < last:
            self.min_bucket += 1
        while self._weights[self.max_bucket] < epsilon and self.max_bucket > 0:
            self.max_bucket -= 1

    # --- checkpoints ---------------------------------------------------------------------

    def save(self) -> dict[str, Any]:
        """Upstream's ``HistogramCheckpoint`` JSON object."""
        heaviest = max(self._weights[self.min_bucket : self.max_bucket + 1], default=0.0)
        weights: dict[str, int] = {}
        # upstream divides by the heaviest weight even when it is 0 (an empty histogram);
        # an empty one here simply has no buckets
        if heaviest > 0:
            ratio = MAX_CHECKPOINT_WEIGHT / heaviest
            for bucket in range(self.min_bucket, self.max_bucket + 1):
                weight = _round_half_up(self._weights[bucket] * ratio)
                if weight > 0:
                    weights[str(bucket)] = weight
        out: dict[str, Any] = {"referenceTimestamp": format_go_time(self.reference)}
        if weights:
            out["bucketWeights"] = weights
        if self.total_weight:
            out["totalWeight"] = self.total_weight
        return out

    def load(self, checkpoint: Mapping[str, Any]) -> None:
        """Add a checkpoint's weights and take its reference timestamp; a
        :class:`CheckpointError` (and the histogram unchanged) when it cannot be read."""
        if not isinstance(checkpoint, Mapping):
            raise CheckpointError("a histogram checkpoint must be an object")
        total = checkpoint.get("totalWeight", 0.0) or 0.0
        if not isinstance(total, int | float) or isinstance(total, bool) or total < 0:
            raise CheckpointError(f"totalWeight {total!r} is not a non-negative number")
        raw = checkpoint.get("bucketWeights") or {}
        if not isinstance(raw, Mapping):
            raise CheckpointError("bucketWeights must be an object")
        weights: dict[int, int] = {}
        for key, weight in raw.items():
            try:
                bucket = int(key)
            except (TypeError, ValueError):
                raise CheckpointError(f"bucket {key!r} is not an integer") from None
            if not 0 <= bucket < self.options.num_buckets:
                raise CheckpointError(
                    f"bucket {bucket} is outside the histogram's {self.options.num_buckets} buckets"
                )
            if not isinstance(weight, int) or isinstance(weight, bool) or weight < 0:
                raise CheckpointError(f"bucket {bucket}: weight {weight!r} is not a non-negative integer")
            weights[bucket] = weight
        reference = checkpoint.get("referenceTimestamp")
        new_reference = parse_go_time(reference) if reference is not None else GO_ZERO_TIME
        total_units = sum(weights.values())
        if total_units:
            ratio = float(total) / total_units
            for bucket, weight in weights.items():
                self.min_bucket = min(self.min_bucket, bucket)
                self.max_bucket = max(self.max_bucket, bucket)
                self._weights[bucket] += weight * ratio
            self.total_weight += float(total)
        self.reference = new_reference
