"""The transformer: which reservations of a node a pod may use, and the node as that pod
sees it once matched reservations are given back."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.scheduler.reservation.info import ReservationInfo
from controlplane.scheduler.reservation.transformer import PodContext, match_on_node, restore_node
from koordinator.api import resourcelist
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.reservation.builders import ReservationBuilder, make_pod, make_reservation

WEB = make_pod("p").labels(app="web").requests(cpu="1")
OWNER = make_pod("owner").requests(cpu="1").build()


def _web_reservation(name: str, **spec: Any) -> ReservationBuilder:
    return (
        make_reservation(name)
        .requests(cpu="4")
        .owners({"labelSelector": {"matchLabels": {"app": "web"}}})
        .spec(**spec)
        .available("n1")
    )


def _names(rinfos: list[ReservationInfo]) -> list[str]:
    return [r.name for r in rinfos]


def test_matched_and_unmatched_on_a_node():
    reservations = [
        _web_reservation("web-free").info(),
        make_reservation("db-used")
        .requests(cpu="4")
        .owners({"object": {"name": "db"}})
        .spec(allocateOnce=False)
        .available("n1")
        .info(OWNER),
        make_reservation("db-free")
        .requests(cpu="4")
        .owners({"object": {"name": "db"}})
        .available("n1")
        .info(),
    ]
    match = match_on_node(PodContext.of(WEB.build()), reservations, {})
    assert _names(match.matched) == ["web-free"]
    assert _names(match.unmatched) == ["db-used"]
    assert match.diagnosis.owner_matched == 1
    assert match.relevant


@pytest.mark.parametrize(
    ("reservation", "why"),
    [
        pytest.param(_web_reservation("pending").status(phase="Pending"), "not available", id="pending"),
        pytest.param(_web_reservation("waiting").status(phase="Waiting"), "not available", id="waiting"),
        pytest.param(
            _web_reservation("bad").owners(
                {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "?"}]}}
            ),
            "parse error",
            id="unparsable",
        ),
    ],
)
def test_unusable_reservations_are_skipped(reservation, why):
    match = match_on_node(PodContext.of(WEB.build()), [reservation.info(OWNER)], {})
    assert (match.matched, match.unmatched) == ([], []), why


def test_allocate_once_reservation_with_an_owner_is_skipped_entirely():
    match = match_on_node(PodContext.of(WEB.build()), [_web_reservation("once").info(OWNER)], {})
    assert (match.matched, match.unmatched) == ([], [])


def test_reusable_reservation_with_an_owner_still_matches():
    match = match_on_node(
        PodContext.of(WEB.build()), [_web_reservation("multi", allocateOnce=False).info(OWNER)], {}
    )
    assert _names(match.matched) == ["multi"]


def test_ignored_pod_takes_every_reservation():
    pod = make_pod().label("scheduling.koordinator.sh/reservation-ignored", "true").build()
    reservations = [
        _web_reservation("a").info(),
        make_reservation("b").owners({"object": {"name": "x"}}).available("n1").info(),
    ]
    match = match_on_node(PodContext.of(pod), reservations, {})
    assert _names(match.matched) == ["a", "b"]
    assert match.diagnosis.ignored == 2


@pytest.mark.parametrize(
    ("pod", "relevant"),
    [
        pytest.param(WEB.build(), True, id="without-affinity-unmatched-still-needs-restoring"),
        pytest.param(
            make_pod().labels(app="web").affinity({"name": "nope"}).build(),
            False,
            id="with-affinity-nothing-matched",
        ),
    ],
)
def test_relevance_of_a_node_with_only_unmatched_reservations(pod, relevant):
    used = (
        make_reservation("db").requests(cpu="4").owners({"object": {"name": "db"}}).spec(allocateOnce=False)
    )
    match = match_on_node(PodContext.of(pod), [used.available("n1").info(OWNER)], {})
    assert match.relevant is relevant


def _cpu(value: str) -> dict[str, Quantity]:
    return {"cpu": Quantity.parse(value)}


def test_restore_gives_back_matched_and_undoes_double_counting_of_unmatched():
    # node requests: other pods 4 + R1 reserve pod 4 + its owner 1 + R2 reserve pod 4 + its owners 3 = 16 cpu,
    # pods: 2 others + 2 reserve pods + 2 owners = 6
    r1 = make_reservation("r1").requests(cpu="4").spec(allocateOnce=False).available("n1").info(OWNER)
    r2 = (
        make_reservation("r2")
        .requests(cpu="4")
        .spec(allocateOnce=False)
        .available("n1")
        .info(make_pod("o2").requests(cpu="3").build())
    )
    state = restore_node("n1", _cpu("16"), 6, [r1], [r2])
    assert resourcelist.to_json(state.pod_requested) == {"cpu": "13"}  # 16 - 4 + (4 - 3)
    assert resourcelist.to_json(state.requested) == {"cpu": "9"}  # 13 - R1's reserve pod
    assert resourcelist.to_json(state.r_allocated) == {"cpu": "1"}
    assert state.pod_count == 5


def test_unmatched_reservation_without_owners_is_left_alone():
    idle = make_reservation("idle").requests(cpu="4").available("n1").info()
    state = restore_node("n1", _cpu("8"), 3, [], [idle])
    assert resourcelist.to_json(state.requested) == {"cpu": "8"}
