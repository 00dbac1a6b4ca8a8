"""Golden cases of the recommendation controller's decaying histograms, split and checkpoint.

Bucket ends follow the documented scheme: CPU bucket ``i`` ends at
``0.01 * (1.05**(i+1) - 1) / 0.05`` cores, memory bucket ``i`` at ``1e7 * (1.05**(i+1) - 1) / 0.05``
bytes. 0.1 cores falls in bucket 8 (ends 0.2 * (1.05**9 - 1) = 0.1102656...), 0.5 cores in
bucket 25 (ends 0.2 * (1.05**26 - 1) = 0.5111345...).
"""

from __future__ import annotations

import pytest

from controlplane.manager.controllers.recommendation.histogram import (
    CPU_BUCKETS,
    DecayingHistogram,
    HistogramError,
)
from controlplane.manager.controllers.recommendation.state import (
    RecommendationState,
    checkpoint_name,
    container_shares,
)

HOUR = 3600.0
END_8 = 0.2 * (1.05**9 - 1)
END_25 = 0.2 * (1.05**26 - 1)


def test_bucket_boundaries():
    assert CPU_BUCKETS.index(0.1) == 8
    assert CPU_BUCKETS.index(0.5) == 25
    assert CPU_BUCKETS.index(0.0) == 0
    assert CPU_BUCKETS.index(1e9) == CPU_BUCKETS.count - 1
    assert CPU_BUCKETS.end(8) == pytest.approx(0.11026564, abs=1e-8)
    assert CPU_BUCKETS.end(25) == pytest.approx(0.51113454, abs=1e-8)


def test_newer_samples_outweigh_older_ones_after_decay():
    same_time = DecayingHistogram(CPU_BUCKETS, HOUR)
    same_time.add(0.1, 1.0, 0.0)
    same_time.add(0.5, 1.0, 0.0)
    # equal weights: half the weight is reached in 0.1's bucket
    assert same_time.percentile(0.5) == pytest.approx(END_8)

    decayed = DecayingHistogram(CPU_BUCKETS, HOUR)
    decayed.add(0.1, 1.0, 0.0)
    decayed.add(0.5, 1.0, HOUR)
    # one half-life later the 0.5 sample weighs 2, the 0.1 sample 1: the median moves up
    assert decayed.weights == {8: 1.0, 25: 2.0}
    assert decayed.percentile(0.5) == pytest.approx(END_25)
    assert decayed.percentile(0.3) == pytest.approx(END_8)
    assert decayed.percentile(0.95) == pytest.approx(END_25)


def test_reference_moves_forward_without_changing_ratios():
    histogram = DecayingHistogram(CPU_BUCKETS, HOUR)
    histogram.add(0.1, 1.0, 0.0)
    histogram.add(0.5, 1.0, 100 * HOUR)  # far past the renormalisation horizon
    assert histogram.reference == 100 * HOUR
    # the old sample decayed to 2**-100 of the new one and was dropped
    assert histogram.weights == {25: 1.0}
    assert histogram.samples == 2


def test_empty_histogram_recommends_nothing():
    assert DecayingHistogram(CPU_BUCKETS, HOUR).percentile(0.95) == 0.0


def test_pod_usage_is_split_by_requests_and_evenly_without_them():
    pod = {
        "spec": {
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "750m", "memory": "1Gi"}}},
                {"name": "sidecar", "resources": {"requests": {"cpu": "250m"}}},
            ]
        }
    }
    assert container_shares(pod, "cpu") == {"app": 0.75, "sidecar": 0.25}
    # only one container requests memory: it gets all of it
    assert container_shares(pod, "memory") == {"app": 1.0, "sidecar": 0.0}
    no_requests = {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}
    assert container_shares(no_requests, "cpu") == {"a": 0.5, "b": 0.5}

    state = RecommendationState(HOUR)
    metric = {"podUsage": {"resources": {"cpu": "400m", "memory": "100Mi"}}}
    # the sidecar's memory usage cannot be told apart from the app's: no memory sample for it
    # (a sample of 0 would recommend the smallest bucket), so no recommendation either
    assert state.add_pod(pod, metric, 0.0) == 3
    assert state.containers["app"].cpu.weights == {CPU_BUCKETS.index(0.3): 1.0}
    assert state.containers["sidecar"].cpu.weights == {CPU_BUCKETS.index(0.1): 1.0}
    assert state.containers["sidecar"].memory.samples == 0
    assert state.recommended_names(1) == ["app"]
    assert [s["containerName"] for s in state.recommend(0.95, 0.99, 0.15, 1)] == ["app"]


def test_recommendation_adds_the_safety_margin_and_rounds_up():
    state = RecommendationState(HOUR)
    pod = {"spec": {"containers": [{"name": "app"}]}}
    for at in (0.0, 60.0, 120.0):
        state.add_pod(pod, {"podUsage": {"resources": {"cpu": "200m", "memory": "100Mi"}}}, at)
    # cpu 0.2 -> bucket 14, ends 0.2 * (1.05**15 - 1) = 0.21578564; * 1.15 = 0.24815 -> 249m
    # memory 104857600 B -> bucket 8, ends 2e8 * (1.05**9 - 1) = 110265640.6; * 1.15 / 2**20 = 120.93 -> 121Mi
    assert state.recommend(0.95, 0.99, 0.15, 3) == [
        {"containerName": "app", "resources": {"cpu": "249m", "memory": "121Mi"}}
    ]
    assert state.recommend(0.95, 0.99, 0.15, 4) == []


def test_checkpoint_round_trip_and_bad_checkpoints():
    state = RecommendationState(HOUR, sampled={"n1": "2026-01-01T00:00:00Z"})
    state.add_pod({"spec": {"containers": [{"name": "app"}]}}, {"podUsage": {"resources": {"cpu": "1"}}}, 5.0)
    restored = RecommendationState.from_checkpoint(state.to_checkpoint(), HOUR)
    assert restored.sampled == state.sampled
    assert restored.containers["app"].cpu.weights == state.containers["app"].cpu.weights
    assert restored.containers["app"].cpu.reference == 5.0
    assert restored.containers["app"].cpu.samples == 1
    for bad in ("not json", '{"version": 7}', '{"version": 1, "containers": {"a": {"cpu": {}}}}'):
        with pytest.raises(HistogramError):
            RecommendationState.from_checkpoint(bad, HOUR)


def test_checkpoint_names_fit_the_name_limit():
    assert checkpoint_name("web") == "web-recommendation"
    long = checkpoint_name("x" * 253)
    assert len(long) <= 253
    assert long.endswith("-recommendation")
