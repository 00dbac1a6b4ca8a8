"""Nominating a reservation per node and scoring nodes: MostAllocated inside the
reservation, 1000 for the node holding the smallest ``reservation-order``, then the
0..100 normalization."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.scheduler.reservation.info import ReservationInfo
from controlplane.scheduler.reservation.reservepod import reserve_pod
from controlplane.scheduler.reservation.scoring import (
    MOST_PREFERRED_SCORE,
    node_score,
    nominate,
    normalize_scores,
    pre_score,
    preferred_node,
    reservation_score,
    score_reservation,
)
from controlplane.scheduler.reservation.transformer import NodeReservationState, PodContext, restore_node
from koordinator.api import resourcelist
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.reservation.builders import ReservationBuilder, make_pod, make_reservation

NODE = resourcelist.parse({"cpu": "16", "memory": "128Gi", "pods": "110"})


def _q(**raw: str) -> dict[str, Quantity]:
    return {k: Quantity.parse(v) for k, v in raw.items()}


def _reservation(
    name: str, cpu: str, memory: str, node: str = "n1", order: str | None = None, **spec: Any
) -> ReservationBuilder:
    builder = (
        make_reservation(name)
        .requests(cpu=cpu, memory=memory)
        .spec(allocateOnce=False, **spec)
        .available(node)
    )
    if order is not None:
        builder.order(order)
    return builder


R4C8G = _reservation("r-4c8g", "4", "8Gi")
R2C4G = _reservation("r-2c4g", "2", "4Gi")


@pytest.mark.parametrize(
    ("rinfo", "pod", "allocated", "score"),
    [
        pytest.param(R4C8G.info(), _q(cpu="2", memory="4Gi"), None, 50, id="half-of-4c8g"),
        pytest.param(R2C4G.info(), _q(cpu="2", memory="4Gi"), None, 100, id="all-of-2c4g"),
        pytest.param(
            R2C4G.info(),
            _q(cpu="2", memory="4Gi"),
            _q(cpu="2", memory="3Gi"),
            0,
            id="over-what-is-left-scores-0",
        ),
        pytest.param(R2C4G.info(), {}, None, 0, id="zero-request-pod"),
        pytest.param(R4C8G.info(), _q(cpu="1"), None, 12, id="one-resource-of-two-integer-division"),
        pytest.param(
            _reservation("thirds", "3", "3Gi").info(),
            _q(cpu="1", memory="2Gi"),
            None,
            49,
            id="floor-per-resource-then-mean",
        ),
        pytest.param(
            make_reservation().requests({"cpu": "4", "nvidia.com/gpu": "0"}).available("n1").info(),
            _q(cpu="2"),
            None,
            50,
            id="zero-allocatable-is-not-a-resource",
        ),
        pytest.param(make_reservation().available("n1").info(), _q(cpu="2"), None, 0, id="nothing-reserved"),
    ],
)
def test_score_reservation(rinfo, pod, allocated, score):
    assert score_reservation(pod, rinfo, allocated) == score


def test_reservation_score_counts_what_owners_took():
    owner = make_pod("o").requests(cpu="2").build()
    rinfo = R4C8G.info(owner)
    # (100*(2+2)/4 + 100*4/8) / 2 = 75; giving the owner back as preemptible: 50
    assert reservation_score(_q(cpu="2", memory="4Gi"), rinfo) == 75
    assert reservation_score(_q(cpu="2", memory="4Gi"), rinfo, _q(cpu="2")) == 50


def _state(*rinfos: ReservationInfo, node: str = "n1") -> NodeReservationState:
    requested = resourcelist.sum_of(r.allocatable for r in rinfos)
    return restore_node(node, requested, len(rinfos), list(rinfos))


POD = PodContext.of(make_pod().requests(cpu="2", memory="4Gi").build())


@pytest.mark.parametrize(
    ("reservations", "want"),
    [
        pytest.param([R4C8G, R2C4G], "r-2c4g", id="highest-score-wins"),
        pytest.param(
            [_reservation("r-4c8g", "4", "8Gi", order="2"), R2C4G], "r-4c8g", id="order-beats-score"
        ),
        pytest.param(
            [_reservation("a", "4", "8Gi", order="5"), _reservation("b", "4", "8Gi", order="3")],
            "b",
            id="smallest-order",
        ),
        pytest.param(
            [_reservation("a", "4", "8Gi", order="0"), R2C4G], "r-2c4g", id="order-zero-is-no-order"
        ),
        pytest.param(
            [_reservation("a", "4", "8Gi"), _reservation("b", "4", "8Gi")], "a", id="ties-take-the-first"
        ),
        pytest.param(
            [_reservation("small", "1", "1Gi", allocatePolicy="Restricted"), R2C4G],
            "r-2c4g",
            id="only-one-passes-the-filter",
        ),
        pytest.param(
            [_reservation("small", "1", "1Gi", allocatePolicy="Restricted")], None, id="nothing-fits"
        ),
    ],
)
def test_nominate(reservations, want):
    state = _state(*(r.info() for r in reservations))
    nominated = nominate(POD, NODE, state)
    assert (nominated.name if nominated else None) == want


def test_nominate_skips_a_used_allocate_once_reservation():
    used = (
        make_reservation("used").requests(cpu="4", memory="8Gi").available("n1").info(make_pod("o").build())
    )
    state = _state(used, R2C4G.info())
    nominated = nominate(POD, NODE, state)
    assert nominated is not None
    assert nominated.name == "r-2c4g"


def test_nominate_with_affinity_and_one_match_takes_it_unchecked():
    ctx = PodContext.of(make_pod().requests(cpu="100").affinity({}).build())
    nominated = nominate(ctx, NODE, _state(R2C4G.info()))
    assert nominated is not None
    assert nominated.name == "r-2c4g"


def test_nominate_keeps_an_earlier_nomination():
    earlier = R4C8G.info()
    nominated = nominate(POD, NODE, _state(earlier, R2C4G.info()), previous=earlier)
    assert nominated is earlier


def test_reserve_pods_are_never_nominated():
    ctx = PodContext.of(reserve_pod(R2C4G.build()))
    assert nominate(ctx, NODE, _state(R2C4G.info())) is None


@pytest.mark.parametrize(
    ("orders", "want"),
    [
        pytest.param({"n1": None, "n2": "5", "n3": "3", "n4": "3"}, "n3", id="smallest-first-on-ties"),
        pytest.param({"n1": "0", "n2": None}, None, id="zero-means-no-preference"),
        pytest.param({"n1": "later", "n2": "2"}, "n2", id="malformed-order-ignored"),
        pytest.param({"n1": "-1", "n2": "2"}, "n1", id="negative-order-is-smaller"),
    ],
)
def test_preferred_node(orders, want):
    states = {
        node: _state(_reservation(f"r-{node}", "4", "8Gi", node=node, order=order).info(), node=node)
        for node, order in orders.items()
    }
    assert preferred_node(list(orders), states) == want


def test_node_scores_with_order_then_normalized():
    # three nodes with one matching 4C8G reservation each, a fourth whose reservation is ordered
    nodes = ["n1", "n2", "n3", "n4"]
    states = {
        node: _state(
            _reservation(f"r-{node}", "4", "8Gi", node=node, order="123456" if node == "n4" else None).info(),
            node=node,
        )
        for node in nodes
    }
    ctx = PodContext.of(make_pod().requests(cpu="4", memory="8Gi").build())
    plan = pre_score(ctx, nodes, states, dict.fromkeys(nodes, NODE))
    assert plan is not None
    assert plan.preferred_node == "n4"
    scores = {node: node_score(ctx, node, plan) for node in nodes}
    assert scores == {"n1": 100, "n2": 100, "n3": 100, "n4": MOST_PREFERRED_SCORE}
    assert normalize_scores(scores) == {"n1": 10, "n2": 10, "n3": 10, "n4": 100}


def test_nodes_without_a_nominated_reservation_score_zero():
    states = {"n1": _state(R2C4G.info())}
    plan = pre_score(POD, ["n1", "n2"], states, {"n1": NODE, "n2": NODE})
    assert {node: node_score(POD, node, plan) for node in ("n1", "n2")} == {"n1": 100, "n2": 0}


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(
            make_pod().label("scheduling.koordinator.sh/reservation-ignored", "true").build(),
            id="ignored-pod",
        ),
        pytest.param(reserve_pod(R2C4G.build()), id="reserve-pod"),
    ],
)
def test_pods_that_skip_scoring(pod):
    ctx = PodContext.of(pod)
    plan = pre_score(ctx, ["n1"], {"n1": _state(R2C4G.info())}, {"n1": NODE})
    assert plan is None
    assert node_score(ctx, "n1", plan) == 0


def test_pre_score_skips_without_any_reservation_state():
    assert pre_score(POD, ["n1"], {}, {"n1": NODE}) is None


@pytest.mark.parametrize(
    ("scores", "reserve", "want"),
    [
        pytest.param({"a": 50, "b": 25}, False, {"a": 100, "b": 50}, id="scaled-to-the-best"),
        pytest.param({"a": 33, "b": 100}, False, {"a": 33, "b": 100}, id="already-in-range"),
        pytest.param({"a": 1, "b": 3}, False, {"a": 33, "b": 100}, id="integer-division"),
        pytest.param({"a": 0, "b": 0}, False, {"a": 0, "b": 0}, id="all-zero-stays"),
        pytest.param({"a": 1000}, True, {"a": 1000}, id="reserve-pods-untouched"),
    ],
)
def test_normalize_scores(scores, reserve, want):
    assert normalize_scores(scores, reserve_pod=reserve) == want
