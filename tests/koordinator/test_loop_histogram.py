"""LoopHistogram renders as the client library's Histogram does, without _created."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from koordinator.metrics.histogram import LoopHistogram

BUCKETS = (0.001, 0.01, 0.1)


def _lines(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


def test_buckets_count_and_sum_match_the_client_librarys_histogram():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = LoopHistogram("x_seconds", "How long.", ["point", "status"], BUCKETS, registry=ours)
    slow = Histogram("x_seconds", "How long.", ["point", "status"], buckets=BUCKETS, registry=theirs)
    # on a bound (counted in it: le), between bounds, past the last one, in two series
    for value in (0.001, 0.05, 3.0):
        fast.labels("Bind", "Success").observe(value)
        slow.labels("Bind", "Success").observe(value)
    fast.labels("Reserve", "Error").observe(0.0)
    slow.labels("Reserve", "Error").observe(0.0)
    assert _lines(ours) == _lines(theirs)
    text = "\n".join(_lines(ours))
    assert 'x_seconds_bucket{le="0.01",point="Bind",status="Success"} 1.0' in text
    assert 'x_seconds_bucket{le="0.1",point="Bind",status="Success"} 2.0' in text
    assert 'x_seconds_bucket{le="+Inf",point="Bind",status="Success"} 3.0' in text
    assert 'x_seconds_sum{point="Bind",status="Success"} 3.051' in text


def test_no_created_series_and_an_unlabelled_histogram_is_always_rendered():
    registry = CollectorRegistry()
    victims = LoopHistogram("victims", "Victims.", [], (1.0, 2.0), registry=registry)
    text = generate_latest(registry).decode()
    assert 'victims_bucket{le="+Inf"} 0.0' in text
    assert "victims_count 0.0" in text
    victims.observe(2)
    text = generate_latest(registry).decode()
    assert 'victims_bucket{le="1.0"} 0.0' in text
    assert 'victims_bucket{le="2.0"} 1.0' in text
    assert "_created" not in text


def test_wrong_label_count_and_no_buckets_are_refused():
    histogram = LoopHistogram("y", "Y.", ["a"], BUCKETS)
    with pytest.raises(ValueError, match="1 label values expected, got 2"):
        histogram.labels("p", "q")
    with pytest.raises(ValueError, match="at least one finite bucket"):
        LoopHistogram("z", "Z.", [], [float("inf")])
