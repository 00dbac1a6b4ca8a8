"""NodeMetric status with prediction: ``prodReclaimableMetric`` and ``prodPeakMetric`` as
upstream writes them (CPU milli-cores, memory bytes), from the pods the report has usage
for; both left out while the predictor cannot tell, and without a predictor."""

from __future__ import annotations

from typing import Any

from koordinator.api.quantity import Quantity
from koordlet.metriccache import MetricCache, kinds
from koordlet.prediction import prod_reclaimable_factory
from koordlet.prediction.server import SYSTEM_UID
from koordlet.statesinformer.nodemetric import CollectPolicy, node_metric_status
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system.cgroup.layout import CgroupDriver, KubepodsLayout
from tests.koordlet.prediction.test_prod_reclaimable import NOW, A, B, C, D, models, node

GI = 1 << 30
POLICY = CollectPolicy(300, 60, (), "usageWithoutPageCache")


def metas(*pods: dict[str, Any]) -> list[PodMeta]:
    out = []
    for p in pods:
        meta = pod_meta(p, KubepodsLayout.default(CgroupDriver.SYSTEMD))
        assert meta is not None
        out.append(meta)
    return out


def cache_with_usage(*pods: dict[str, Any]) -> MetricCache:
    cache = MetricCache(retention_seconds=7200)
    for p in pods:
        uid = p["metadata"]["uid"]
        cache.append(kinds.POD_CPU_USAGE.sample(0.1, NOW - i, pod_uid=uid) for i in range(10))
        cache.append(kinds.POD_MEMORY_USAGE.sample(GI / 8, NOW - i, pod_uid=uid) for i in range(10))
    return cache


def test_status_carries_prod_reclaimable_and_peak():
    cache = cache_with_usage(A, B, C, D)
    new = prod_reclaimable_factory(
        models(), node, cold_start_seconds=86400, safety_margin_percent=10, clock=lambda: NOW
    )
    status = node_metric_status(
        cache.query, POLICY, metas(A, B, C, D), [], [], NOW, predictor=new()
    ).to_dict()
    # hand-computed in tests/koordlet/prediction/test_prod_reclaimable.py: (1450m, 2952790016)
    # reclaimable and (2050m, 2952790016) peak
    assert status["prodReclaimableMetric"] == {
        "resource": {"resources": {"cpu": "1450m", "memory": "2816Mi"}}
    }
    assert status["prodPeakMetric"] == {"resource": {"resources": {"cpu": "2050m", "memory": "2816Mi"}}}
    assert Quantity.parse("2816Mi").value() == 2952790016


def test_pods_without_usage_are_not_predicted():
    # D has no usage in the window: neither its request (priority predictor) nor its
    # unpredicted request (pod predictor) counts
    cache = cache_with_usage(A, B, C)
    new = prod_reclaimable_factory(
        models(), node, cold_start_seconds=86400, safety_margin_percent=10, clock=lambda: NOW
    )
    status = node_metric_status(
        cache.query, POLICY, metas(A, B, C, D), [], [], NOW, predictor=new()
    ).to_dict()
    # pod: (1450m, 3113851290); priority: requests (3000m, 5 GiB) - (1320m, 2952790016)
    reclaimable = status["prodReclaimableMetric"]["resource"]["resources"]
    assert Quantity.parse(reclaimable["cpu"]).milli_value() == min(1450, 3000 - 1320)
    assert Quantity.parse(reclaimable["memory"]).value() == min(3113851290, 5 * GI - 2952790016)
    peak = status["prodPeakMetric"]["resource"]["resources"]
    assert Quantity.parse(peak["cpu"]).milli_value() == max(550 + 1000, 1320)


def test_no_metrics_while_the_predictor_cannot_tell_or_without_one():
    cache = cache_with_usage(A)
    untrained = models()
    del untrained.predictions[SYSTEM_UID]
    new = prod_reclaimable_factory(
        untrained, node, cold_start_seconds=86400, safety_margin_percent=10, clock=lambda: NOW
    )
    status = node_metric_status(cache.query, POLICY, metas(A), [], [], NOW, predictor=new()).to_dict()
    assert "prodReclaimableMetric" not in status
    assert "prodPeakMetric" not in status
    plain = node_metric_status(cache.query, POLICY, metas(A), [], [], NOW).to_dict()
    assert "prodReclaimableMetric" not in plain
    assert [p["name"] for p in plain["podsMetric"]] == ["a"]
