"""Decaying exponential histograms, hand-computed from upstream's rules: bucket indexes,
percentiles as bucket ends, the decay of older samples, the reference timestamp rounded to
the half-life, and the checkpoint JSON (heaviest bucket 10000) loading back to the same
percentiles."""

from __future__ import annotations

import math

import pytest

from koordlet.prediction.histogram import (
    CheckpointError,
    DecayingHistogram,
    format_go_time,
    parse_go_time,
)
from koordlet.prediction.server import CPU_OPTIONS, MEMORY_OPTIONS

HOUR = 3600.0
HALF_LIFE = 12 * HOUR
#: 2024-01-01T05:00:00Z: 5 h past a multiple of 12 h, so the reference rounds down to midnight
T0 = parse_go_time("2024-01-01T05:00:00Z")
MIDNIGHT = parse_go_time("2024-01-01T00:00:00Z")
MIB = 1 << 20


def cpu_bucket_end(bucket: int) -> float:
    """The start of bucket ``bucket + 1``: 0.025 x (1.05^(b+1) - 1) / 0.05."""
    return 0.025 * (1.05 ** (bucket + 1) - 1) / 0.05


def test_bucket_layout_is_upstreams():
    # ceil(log(1024 x 0.05 / 0.025 + 1) / log(1.05)) + 1 = ceil(156.3) + 1
    assert CPU_OPTIONS.num_buckets == 158
    # ceil(log(2^41 x 0.05 / 5 MiB + 1) / log(1.05)) + 1 = ceil(203.96) + 1
    assert MEMORY_OPTIONS.num_buckets == 205
    assert CPU_OPTIONS.find_bucket(0.01) == 0  # below the first bucket size
    assert CPU_OPTIONS.find_bucket(1.0) == 22  # log(3) / log(1.05) = 22.5
    assert CPU_OPTIONS.find_bucket(2.0) == 32  # log(5) / log(1.05) = 32.99
    assert CPU_OPTIONS.find_bucket(5000.0) == 157  # past the maximum: the last bucket
    assert MEMORY_OPTIONS.find_bucket(1 << 30) == 49  # log(1 GiB x 0.05 / 5 MiB + 1) / log(1.05) = 49.6
    assert CPU_OPTIONS.bucket_start(0) == 0.0
    assert CPU_OPTIONS.bucket_start(1) == pytest.approx(0.025)


def test_percentiles_are_bucket_ends_and_empty_is_zero():
    h = DecayingHistogram(CPU_OPTIONS, HALF_LIFE)
    assert h.is_empty()
    assert h.percentile(0.95) == 0.0
    for _ in range(9):
        h.add_sample(1.0, 1.0, T0)
    h.add_sample(2.0, 1.0, T0)
    # 90 % of the weight is in bucket 22: p60 and p90 end there, p95 and max in bucket 32
    assert h.percentile(0.6) == pytest.approx(cpu_bucket_end(22))
    assert h.percentile(0.9) == pytest.approx(cpu_bucket_end(22))
    assert h.percentile(0.95) == pytest.approx(cpu_bucket_end(32))
    assert h.percentile(1.0) == pytest.approx(cpu_bucket_end(32))
    assert h.percentile(1.0) == pytest.approx(2.0016, abs=1e-4)


def test_an_older_sample_weighs_half_per_half_life():
    h = DecayingHistogram(CPU_OPTIONS, HALF_LIFE)
    h.add_sample(1.0, 1.0, T0)  # weight 2^(5/12): the reference moved to midnight
    h.add_sample(2.0, 1.0, T0 + HALF_LIFE)  # twice that
    assert h.reference == MIDNIGHT
    first = 2 ** (5 / 12)
    assert h.bucket_weights() == {22: pytest.approx(first), 32: pytest.approx(2 * first)}
    assert h.total_weight == pytest.approx(3 * first)
    # the older sample holds a third of the weight: p30 ends in its bucket, p50 in the newer's
    assert h.percentile(0.3) == pytest.approx(cpu_bucket_end(22))
    assert h.percentile(0.5) == pytest.approx(cpu_bucket_end(32))
    # without the half-life between them, the median would be the first sample's bucket
    same_time = DecayingHistogram(CPU_OPTIONS, HALF_LIFE)
    same_time.add_sample(1.0, 1.0, T0)
    same_time.add_sample(2.0, 1.0, T0)
    assert same_time.percentile(0.5) == pytest.approx(cpu_bucket_end(22))


def test_reference_moves_forward_after_a_hundred_half_lives():
    h = DecayingHistogram(CPU_OPTIONS, HALF_LIFE)
    h.add_sample(1.0, 1.0, T0)
    later = T0 + 101 * HALF_LIFE  # past 100 half-lives: renormalized to the new reference
    h.add_sample(2.0, 1.0, later)
    assert h.reference == MIDNIGHT + 101 * HALF_LIFE
    # the old sample, 101 half-lives older, weighs 2^-101 of the new one: under epsilon
    assert h.percentile(0.0) == pytest.approx(cpu_bucket_end(32))
    assert h.min_bucket == 32


def test_checkpoint_json_is_upstreams_and_loads_back_to_the_same_percentiles():
    h = DecayingHistogram(CPU_OPTIONS, HALF_LIFE)
    h.add_sample(1.0, 1.0, T0)
    h.add_sample(2.0, 1.0, T0 + HALF_LIFE)
    saved = h.save()
    assert saved == {
        "referenceTimestamp": "2024-01-01T00:00:00Z",
        "bucketWeights": {"22": 5000, "32": 10000},
        "totalWeight": pytest.approx(3 * 2 ** (5 / 12)),
    }
    restored = DecayingHistogram(CPU_OPTIONS, HALF_LIFE)
    restored.load(saved)
    assert restored.reference == MIDNIGHT
    for p in (0.3, 0.5, 0.6, 0.9, 0.95, 0.98, 1.0):
        assert restored.percentile(p) == h.percentile(p)
    # training goes on from the restored weights as it would have from the original
    h.add_sample(1.0, 1.0, T0 + 2 * HALF_LIFE)
    restored.add_sample(1.0, 1.0, T0 + 2 * HALF_LIFE)
    assert restored.percentile(0.5) == h.percentile(0.5)


def test_empty_histogram_checkpoint():
    h = DecayingHistogram(MEMORY_OPTIONS, 24 * HOUR)
    assert h.save() == {"referenceTimestamp": "0001-01-01T00:00:00Z"}
    h.load({"referenceTimestamp": "0001-01-01T00:00:00Z"})
    assert h.is_empty()


@pytest.mark.parametrize(
    ("checkpoint", "reason"),
    [
        ({"bucketWeights": {"205": 1}, "totalWeight": 1.0}, "outside"),
        ({"bucketWeights": {"-1": 1}, "totalWeight": 1.0}, "outside"),
        ({"bucketWeights": {"x": 1}, "totalWeight": 1.0}, "not an integer"),
        ({"bucketWeights": {"3": -2}, "totalWeight": 1.0}, "non-negative integer"),
        ({"bucketWeights": {"3": 2}, "totalWeight": -1.0}, "non-negative number"),
        ({"referenceTimestamp": "yesterday"}, "RFC 3339"),
    ],
    ids=[
        "bucket-too-high",
        "bucket-negative",
        "bucket-not-int",
        "negative-weight",
        "negative-total",
        "bad-time",
    ],
)
def test_bad_checkpoints_are_refused_and_change_nothing(checkpoint, reason):
    h = DecayingHistogram(MEMORY_OPTIONS, 24 * HOUR)
    h.add_sample(float(64 * MIB), 1.0, T0)
    before = (h.bucket_weights(), h.total_weight, h.reference)
    with pytest.raises(CheckpointError, match=reason):
        h.load(checkpoint)
    assert (h.bucket_weights(), h.total_weight, h.reference) == before


def test_go_time_round_trip():
    assert format_go_time(GO_ZERO := parse_go_time("0001-01-01T00:00:00Z")) == "0001-01-01T00:00:00Z"
    assert GO_ZERO == -62135596800.0
    assert format_go_time(T0 + 0.25) == "2024-01-01T05:00:00.25Z"
    assert parse_go_time("2024-01-01T07:00:00+02:00") == T0
    assert math.isclose(parse_go_time("2024-01-01T05:00:00.123456789Z") - T0, 0.123456789, abs_tol=1e-6)
