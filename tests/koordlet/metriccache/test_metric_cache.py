"""The metric cache: upstream's aggregation rules, label matching, retention and budget."""

from __future__ import annotations

from array import array

import pytest

from koordlet.metriccache import Aggregation, MetricCache, MetricKind, QueryError, Rows
from koordlet.metriccache.query import AggregateResult

POD_CPU = MetricKind("pod_cpu_usage", ("pod_uid",))
PSI = MetricKind("container_psi", ("container_id", "psi_resource"))


def _filled(values: list[float], start: float = 100.0) -> MetricCache:
    cache = MetricCache(retention_seconds=3600)
    cache.append(POD_CPU.sample(v, start + i, pod_uid="a") for i, v in enumerate(values))
    return cache


@pytest.mark.parametrize(
    ("values", "aggregation", "expected"),
    [
        ([1, 2, 3, 4], Aggregation.AVG, 2.5),
        ([4, 1, 3, 2], Aggregation.P50, 2),  # int(4 * 0.5) - 1 = index 1 of [1, 2, 3, 4]
        ([1, 2], Aggregation.P50, 1),  # lower nearest rank
        ([5], Aggregation.P99, 5),  # int(1 * 0.99) - 1 = -1 -> clamped to 0
        (list(range(1, 11)), Aggregation.P90, 9),
        (list(range(1, 11)), Aggregation.P95, 9),  # int(9.5) - 1 = 8
        (list(range(1, 101)), Aggregation.P99, 99),
        ([7, 3, 9], Aggregation.LAST, 9),
        ([7, 3, 9], Aggregation.COUNT, 3),
    ],
)
def test_aggregations(values, aggregation, expected):
    result = _filled([float(v) for v in values]).query(POD_CPU, 0, 1e9, pod_uid="a")
    assert result.value(aggregation) == expected


def test_last_is_by_timestamp_not_position():
    result = AggregateResult((10.0, 30.0, 20.0), (1.0, 3.0, 2.0))
    assert result.value("last") == 3.0


def test_empty_window():
    result = _filled([1.0]).query(POD_CPU, 500, 600, pod_uid="a")
    assert result.count() == 0
    assert result.value("count") == 0
    with pytest.raises(QueryError):
        result.value("avg")


def test_window_bounds_are_inclusive():
    result = _filled([1.0, 2.0, 3.0, 4.0]).query(POD_CPU, 101, 102, pod_uid="a")
    assert result.values == (2.0, 3.0)
    assert result.time_range() == 1.0


def test_partial_labels_concatenate_matching_series():
    cache = MetricCache()
    cache.append(
        [
            PSI.sample(1.0, 10, container_id="c1", psi_resource="cpu"),
            PSI.sample(2.0, 10, container_id="c1", psi_resource="mem"),
            PSI.sample(3.0, 10, container_id="c2", psi_resource="cpu"),
        ]
    )
    assert sorted(cache.query(PSI, 0, 20, container_id="c1").values) == [1.0, 2.0]
    assert cache.query(PSI, 0, 20, psi_resource="cpu").count() == 2
    assert cache.query(PSI, 0, 20).count() == 3
    with pytest.raises(ValueError, match="unknown labels"):
        cache.query(PSI, 0, 20, pod_uid="x")


def test_samples_must_carry_exactly_their_labels():
    with pytest.raises(ValueError, match="missing labels"):
        POD_CPU.sample(1.0, 1.0)
    with pytest.raises(ValueError, match="unknown labels"):
        POD_CPU.sample(1.0, 1.0, pod_uid="a", node="n")


def test_retention_drops_old_samples_and_empty_series():
    cache = MetricCache(retention_seconds=60)
    cache.append([POD_CPU.sample(1.0, 0, pod_uid="gone")])
    cache.append(POD_CPU.sample(1.0, t, pod_uid="alive") for t in range(0, 200, 10))
    cache.gc(200)
    assert cache.query(POD_CPU, 0, 200, pod_uid="gone").count() == 0
    assert min(cache.query(POD_CPU, 0, 200, pod_uid="alive").timestamps) >= 140
    assert cache.label_values(POD_CPU) == [("alive",)]


def test_byte_budget_keeps_the_newest_samples():
    cache = MetricCache(retention_seconds=1e9, max_bytes=16 * 100)
    for t in range(1000):
        cache.append([POD_CPU.sample(float(t), float(t), pod_uid="a")])
    assert cache.stats()["bytes"] <= 16 * 100
    result = cache.query(POD_CPU, 0, 1e9, pod_uid="a")
    assert result.value("last") == 999.0


def test_offsets_are_rebased_after_weeks_of_uptime():
    cache = MetricCache(retention_seconds=60)
    start = 1_700_000_000.0
    cache.append([POD_CPU.sample(1.0, start, pod_uid="a")])
    later = start + 30 * 86400  # past the int32 range of milliseconds from the first sample
    cache.append(POD_CPU.sample(float(i), later + i, pod_uid="a") for i in range(10))
    result = cache.query(POD_CPU, later, later + 9, pod_uid="a")
    assert result.values == tuple(float(i) for i in range(10))
    assert result.timestamps[0] == pytest.approx(later)
    assert cache.query(POD_CPU, start - 1, start + 1, pod_uid="a").count() == 0  # trimmed


def test_timestamps_keep_their_precision():
    cache = MetricCache()
    cache.append([POD_CPU.sample(1.0, 100.0015, pod_uid="a"), POD_CPU.sample(2.0, 100.25, pod_uid="a")])
    result = cache.query(POD_CPU, 100.25, 100.25, pod_uid="a")
    assert result.values == (2.0,)
    assert cache.stats() == {"series": 1, "samples": 2, "frames": 2, "bytes": 2 * (8 + 96), "refused": 0}


def test_rows_are_stored_as_the_samples_they_stand_for():
    """A collector's tick as Rows ends up exactly as the same samples appended one by one."""

    by_rows, by_samples = MetricCache(), MetricCache()
    for tick in (100.0, 101.0, 102.5):
        rows = Rows(tick)
        rows.extend(POD_CPU, [POD_CPU.key(pod_uid="a"), POD_CPU.key(pod_uid="b")], [tick / 100, tick / 50])
        rows.extend(PSI, [PSI.key(container_id="c", psi_resource="cpu")], [1.5])
        assert len(rows) == 3
        by_rows.append_rows(rows)
        by_samples.append(
            [
                POD_CPU.sample(tick / 100, tick, pod_uid="a"),
                POD_CPU.sample(tick / 50, tick, pod_uid="b"),
                PSI.sample(1.5, tick, container_id="c", psi_resource="cpu"),
            ]
        )
    for kind, labels in (
        (POD_CPU, {"pod_uid": "a"}),
        (POD_CPU, {"pod_uid": "b"}),
        (PSI, {"container_id": "c"}),
    ):
        got, want = by_rows.query(kind, 0, 1e9, **labels), by_samples.query(kind, 0, 1e9, **labels)
        assert (got.timestamps, got.values) == (want.timestamps, want.values)
    assert by_rows.query(POD_CPU, 0, 1e9, pod_uid="a").timestamps == (100.0, 101.0, 102.5)
    assert by_rows.stats()["samples"] == by_samples.stats()["samples"] == 9


def test_rows_trim_to_the_retention_window():

    cache = MetricCache(retention_seconds=10)
    for tick in range(200):
        rows = Rows(1000.0 + tick)
        rows.extend(POD_CPU, [("a",)], [float(tick)])
        cache.append_rows(rows)
    result = cache.query(POD_CPU, 0, 1e9, pod_uid="a")
    assert result.timestamps[-1] == 1199.0
    assert result.timestamps[0] >= 1199.0 - 10 - 64  # trimmed at least every 64 appends


def test_series_coming_and_going_between_ticks():
    """Frames of different key sets (pods came and went) each answer for their own keys."""
    cache = MetricCache(retention_seconds=100)
    keys: list[tuple[str, ...]] = [("a",), ("b",)]
    for tick in range(3):
        rows = Rows(1000.0 + tick)
        rows.extend(POD_CPU, keys, [1.0 + tick, 10.0 + tick])
        cache.append_rows(rows)
    rows = Rows(1003.0)
    rows.extend(POD_CPU, [("b",), ("c",)], [13.0, 20.0])  # a left, c came
    cache.append_rows(rows)
    assert cache.query(POD_CPU, 0, 1e9, pod_uid="a").values == (1.0, 2.0, 3.0)
    assert cache.query(POD_CPU, 0, 1e9, pod_uid="b").values == (10.0, 11.0, 12.0, 13.0)
    assert cache.query(POD_CPU, 1003, 1003, pod_uid="c").values == (20.0,)
    assert cache.query(POD_CPU, 1001, 1003).values == (2.0, 11.0, 3.0, 12.0, 13.0, 20.0)
    assert cache.label_values(POD_CPU) == [("a",), ("b",), ("c",)]
    stats = cache.stats()
    assert (stats["series"], stats["samples"], stats["frames"]) == (3, 8, 4)
    cache.gc(1102.5)  # only the last tick is within 100 s
    assert cache.label_values(POD_CPU) == [("b",), ("c",)]


def test_rows_leave_out_missing_values_and_refuse_uneven_columns():
    rows = Rows(5.0)
    rows.extend(POD_CPU, [("a",), ("b",), ("c",)], [1.0, None, 3.0])
    rows.extend(POD_CPU, [("d",)], [4.0])  # a second batch of the kind is added to the first
    rows.extend(PSI, [("x", "cpu")], [None])
    assert len(rows) == 3
    cache = MetricCache()
    cache.append_rows(rows)
    assert cache.label_values(POD_CPU) == [("a",), ("c",), ("d",)]
    assert cache.label_values(PSI) == []
    with pytest.raises(ValueError, match="2 keys for 1 values"):
        rows.extend(POD_CPU, [("a",), ("b",)], [1.0])


def test_rows_from_columns_leave_out_nan_only_when_the_column_has_some():
    nan = float("nan")
    rows = Rows(5.0)
    whole = array("d", [1.0, 2.0])
    rows.extend_column(POD_CPU, [("a",), ("b",)], whole, 0)
    assert rows.by_kind[POD_CPU][1] is whole  # stored as it is, not copied
    rows.extend_column(PSI, [("x", "cpu"), ("y", "cpu"), ("z", "cpu")], array("d", [nan, 0.5, nan]), 2)
    rows.extend_column(PSI, [("w", "cpu")], array("d", [0.25]), 2)  # a slice of a column with NaN
    assert len(rows) == 4
    cache = MetricCache()
    cache.append_rows(rows)
    assert cache.label_values(PSI) == [("y", "cpu"), ("w", "cpu")]
    assert cache.query(PSI, 0, 10, container_id="y", psi_resource="cpu").value("last") == 0.5
    with pytest.raises(ValueError, match="2 keys for 1 values"):
        rows.extend_column(POD_CPU, [("a",), ("b",)], array("d", [1.0]), 0)


def test_late_samples_are_kept_in_time_order():
    cache = MetricCache()
    cache.append([POD_CPU.sample(3.0, 30.0, pod_uid="a")])
    cache.append([POD_CPU.sample(1.0, 10.0, pod_uid="a"), POD_CPU.sample(2.0, 20.0, pod_uid="a")])
    result = cache.query(POD_CPU, 0, 100, pod_uid="a")
    assert result.timestamps == (10.0, 20.0, 30.0)
    assert result.values == (1.0, 2.0, 3.0)
    assert cache.query(POD_CPU, 15, 25, pod_uid="a").values == (2.0,)


def test_a_series_written_twice_at_one_instant_keeps_both_samples():
    cache = MetricCache()
    cache.append([POD_CPU.sample(1.0, 10.0, pod_uid="a"), POD_CPU.sample(2.0, 10.0, pod_uid="a")])
    assert cache.query(POD_CPU, 0, 100, pod_uid="a").values == (1.0, 2.0)


def test_byte_budget_keeps_the_newest_frame_of_every_kind():
    cache = MetricCache(retention_seconds=1e9, max_bytes=1)
    for t in range(5):
        cache.append(
            [
                POD_CPU.sample(float(t), float(t), pod_uid="a"),
                PSI.sample(1.0, float(t), container_id="c", psi_resource="cpu"),
            ]
        )
    assert cache.query(POD_CPU, 0, 100, pod_uid="a").values == (4.0,)
    assert cache.query(PSI, 0, 100).count() == 1
