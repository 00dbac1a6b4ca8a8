"""The ProdReclaimable predictor, hand-computed from upstream's rules (safety margin 10 %):
per-pod peaks p95 CPU x 1.1 and p98 memory x 1.1, pods in cold start or without a model
counted at their request in the peak, the priority predictor over the sys + prod + none
models, the minimum of the two, and the node's raw-allocatable annotation over its
allocatable."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from koordinator.kube.timeutil import format_time
from koordlet.metrics import KoordletMetrics
from koordlet.prediction.predictor import node_allocatable, prod_reclaimable_factory
from koordlet.prediction.server import SYSTEM_UID, Usage, node_item_uid
from tests.fakes.pods import make_pod

GI = 1 << 30
MI = 1 << 20
NOW = 1_700_000_000.0
DAY = 86400.0
COLD_START = DAY


def prediction(cpu_milli: int, memory: int) -> dict[str, Usage]:
    """A model's answer whose p95 CPU and p98 memory are the given values (the other
    percentiles differ, so a predictor reading the wrong one would be caught)."""
    return {
        "p60": Usage(1, 1),
        "p90": Usage(2, 2),
        "p95": Usage(cpu_milli, 3),
        "p98": Usage(4, memory),
        "max": Usage(10 * cpu_milli + 5, 10 * memory + 5),
    }


class Models:
    """Predictions by UID (what the predict server answers)."""

    def __init__(self, predictions: Mapping[str, dict[str, Usage]]) -> None:
        self.predictions = dict(predictions)

    def get_prediction(self, uid: str) -> dict[str, Usage] | None:
        return self.predictions.get(uid)


def pod(
    name: str, cpu: str, memory: str, *, age: float, priority: int | None = 9500, phase: str = "Running"
) -> dict[str, Any]:
    builder = make_pod(name).container("main", requests={"cpu": cpu, "memory": memory}).phase(phase)
    if priority is not None:
        builder.priority(priority)
    built = builder.build()
    built["metadata"]["creationTimestamp"] = format_time(NOW - age)
    return built


def node(cpu: str = "4", memory: str = "8Gi", raw: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "node-1"}
    if raw is not None:
        meta["annotations"] = {"node.koordinator.sh/raw-allocatable": json.dumps(raw)}
    return {"metadata": meta, "status": {"allocatable": {"cpu": cpu, "memory": memory}}}


# pod a: predicted, 2 days old; b: in cold start; c: batch (not prod); d: prod, no model
A = pod("a", "2", "4Gi", age=2 * DAY)
B = pod("b", "1", "1Gi", age=3600)
C = pod("c", "3", "3Gi", age=2 * DAY, priority=5500)
D = pod("d", "500m", "512Mi", age=2 * DAY)
E = pod("e", "8", "8Gi", age=2 * DAY, phase="Succeeded")  # finished: uses nothing


def models() -> Models:
    uid = {p["metadata"]["name"]: p["metadata"]["uid"] for p in (A, B, C)}
    return Models(
        {
            uid["a"]: prediction(500, GI),
            uid["b"]: prediction(900, 900 * MI),  # trained, but in cold start: not used
            uid["c"]: prediction(3000, 3 * GI),
            SYSTEM_UID: prediction(200, 512 * MI),
            node_item_uid("koord-prod"): prediction(1000, 2 * GI),
            node_item_uid(""): prediction(0, 0),
        }
    )


def predict(node_obj: dict[str, Any] | None, source: Models | None = None):
    new = prod_reclaimable_factory(
        source or models(),
        lambda: node_obj,
        cold_start_seconds=COLD_START,
        safety_margin_percent=10,
        clock=lambda: NOW,
    )
    predictor = new()
    for p in (A, B, C, D, E):
        predictor.add_pod(p)
    return predictor


def test_pod_and_priority_predictors_and_their_minimum():
    predictor = predict(node())
    pod_predictor, priority_predictor = predictor.predictors
    # pod a: peak (550m, int(1 GiB x 1.1)); reclaimable its request minus that
    assert pod_predictor.result() == Usage(
        min(4000 - 550, 2000 - 550),  # 1450
        min(8 * GI - 1181116006, 4 * GI - 1181116006),  # 3113851290
    )
    # peak: a's peak plus the requests of b (cold start) and d (no model)
    assert pod_predictor.peak() == Usage(550 + 1000 + 500, 1181116006 + GI + 512 * MI)
    # sys + prod + none = (1200m, 2.5 GiB), x 1.1 = (1320m, 2952790016); requests of a, b, d
    assert priority_predictor.peak() == Usage(1320, 2952790016)
    assert priority_predictor.result() == Usage(
        min(4000 - 1320, 3500 - 1320),  # 2180
        min(8 * GI - 2952790016, 5632 * MI - 2952790016),  # 2952790016
    )
    assert predictor.result() == Usage(1450, 2952790016)
    assert predictor.peak() == Usage(2050, 2952790016)


def test_raw_allocatable_annotation_replaces_the_allocatable():
    predictor = predict(node(raw={"cpu": "1500m", "memory": "4Gi"}))
    pod_predictor, priority_predictor = predictor.predictors
    assert pod_predictor.result() == Usage(min(1500 - 550, 1450), min(4 * GI - 1181116006, 3113851290))
    assert priority_predictor.result() == Usage(min(1500 - 1320, 2180), min(4 * GI - 2952790016, 2952790016))
    assert predictor.result() == Usage(180, 4 * GI - 2952790016)


def test_cold_start_counts_the_whole_request():
    # every prod pod younger than the cold start: nothing predicted, all requests in the peak
    young = [pod(name, "1", "1Gi", age=COLD_START - 1) for name in ("x", "y")]
    source = models()
    for p in young:
        source.predictions[p["metadata"]["uid"]] = prediction(100, 100 * MI)
    predictor = prod_reclaimable_factory(
        source, node, cold_start_seconds=COLD_START, safety_margin_percent=10, clock=lambda: NOW
    )()
    for p in young:
        predictor.add_pod(p)
    pod_predictor, _ = predictor.predictors
    assert pod_predictor.result() == Usage(0, 0)
    assert pod_predictor.peak() == Usage(2000, 2 * GI)
    assert predictor.result() == Usage(0, 0)


def test_no_result_without_the_node_or_the_node_models():
    assert predict(None).result() is None
    no_sys = models()
    del no_sys.predictions[SYSTEM_UID]
    untrained = predict(node(), no_sys)
    assert untrained.result() is None
    assert untrained.peak() is None


def test_node_allocatable():
    assert node_allocatable(node()) == Usage(4000, 8 * GI)
    assert node_allocatable(node(raw={"cpu": "2"})) == Usage(2000, 8 * GI)
    assert node_allocatable({"status": {"allocatable": {"cpu": "4"}}}) is None


def test_a_malformed_raw_allocatable_is_ignored(caplog):
    broken = node()
    broken["metadata"]["annotations"] = {"node.koordinator.sh/raw-allocatable": "{not json"}
    assert node_allocatable(broken) == Usage(4000, 8 * GI)
    assert "raw-allocatable" in caplog.text


@pytest.mark.parametrize("twice", [A, D], ids=["predicted", "unpredicted"])
def test_a_pod_added_twice_counts_once(twice):
    once = predict(node())
    again = predict(node())
    again.add_pod(twice)
    for added_once, added_twice in zip(once.predictors, again.predictors, strict=True):
        assert added_twice.peak() == added_once.peak()
        assert added_twice.result() == added_once.result()


def test_answers_are_recorded_in_the_koordlet_metrics():
    metrics = KoordletMetrics(CollectorRegistry(), "node-1")
    predictor = prod_reclaimable_factory(
        models(),
        node,
        cold_start_seconds=COLD_START,
        safety_margin_percent=10,
        clock=lambda: NOW,
        metrics=metrics,
    )()
    for p in (A, B, C, D):
        predictor.add_pod(p)
    predictor.result()
    predictor.peak()
    registry = metrics.registry

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"koordlet_{name}", {"node": "node-1", **labels})

    reclaimable = "node_predicted_resource_reclaimable"
    assert value(reclaimable, predictor="podReclaimablePredictor", resource="cpu", unit="core") == 1.45
    assert value(reclaimable, predictor="priorityReclaimablePredictor", resource="cpu", unit="core") == 2.18
    assert value(reclaimable, predictor="minPredictor", resource="memory", unit="byte") == 2952790016
    peak = "node_predicted_resource_peak"
    assert value(peak, predictor="minPredictor", resource="cpu", unit="core") == 2.05
    prod = {"priority": "koord-prod", "resource": "cpu", "unit": "core"}
    assert value("node_priority_resource_reclaimable", **prod) == 1.45
    assert value("node_resource_priority_reclaimable_status", priority="koord-prod") == 1


def test_a_failed_prediction_sets_the_status_to_zero():
    """Without a node allocatable there is no result: the reclaimable gauge reads 0, as
    upstream's, and the status tells that from nothing to reclaim."""
    metrics = KoordletMetrics(CollectorRegistry(), "node-1")
    predictor = prod_reclaimable_factory(
        models(),
        lambda: {"status": {"allocatable": {"cpu": "4"}}},
        cold_start_seconds=COLD_START,
        safety_margin_percent=10,
        clock=lambda: NOW,
        metrics=metrics,
    )()
    assert predictor.result() is None
    labels = {"node": "node-1", "priority": "koord-prod"}
    registry = metrics.registry
    assert registry.get_sample_value("koordlet_node_resource_priority_reclaimable_status", labels) == 0
    reclaimable = {**labels, "resource": "cpu", "unit": "core"}
    assert registry.get_sample_value("koordlet_node_priority_resource_reclaimable", reclaimable) == 0
