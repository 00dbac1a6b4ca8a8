"""Fitting a pod into a matched reservation: the node fit (Default/Aligned), the
reservation fit (Restricted), Filter and PreFilter verdicts and the allocate-policy
conflict of reserve pods."""

from __future__ import annotations

import pytest

from controlplane.scheduler.reservation.fit import (
    SKIP,
    SUCCESS,
    UNSCHEDULABLE,
    UNSCHEDULABLE_AND_UNRESOLVABLE,
    Verdict,
    allocate_policy_conflict,
    filter_pod,
    filter_reserve_pod,
    filter_with_reservations,
    fits_node,
    fits_reservation,
    pre_filter,
    resource_view,
)
from controlplane.scheduler.reservation.info import ReservationInfo
from controlplane.scheduler.reservation.reservepod import reserve_pod
from controlplane.scheduler.reservation.transformer import NodeReservationState, PodContext, restore_node
from koordinator.api import resourcelist
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.reservation.builders import make_pod, make_reservation

NODE = resourcelist.parse({"cpu": "16", "memory": "64Gi", "pods": "110"})


def _q(**raw: str) -> dict[str, Quantity]:
    return {k.replace("_", "-"): Quantity.parse(v) for k, v in raw.items()}


def _r1(policy: str = "") -> ReservationInfo:
    """4 cpu reserved, 1 cpu taken by an owner."""
    owner = make_pod("o1").requests(cpu="1").build()
    return (
        make_reservation("r1")
        .requests(cpu="4", memory="8Gi")
        .spec(allocatePolicy=policy, allocateOnce=False)
        .available("n1")
        .info(owner)
    )


def _state(rinfo: ReservationInfo, pods_on_node: int = 6) -> NodeReservationState:
    # the node: other pods 4 cpu + R1's reserve pod 4 + its owner 1 + an unmatched R2 whose owners fill 3 of 4
    r2 = make_reservation("r2").requests(cpu="4").spec(allocateOnce=False).available("n1")
    r2_info = r2.info(make_pod("o2").requests(cpu="3").build())
    return restore_node("n1", _q(cpu="16", memory="8Gi"), pods_on_node, [rinfo], [r2_info])


@pytest.mark.parametrize(
    ("request_cpu", "short"),
    [
        # real use: others 4 + R1 4 + R2 4 = 12 of 16, so 4 free on the node plus R1's 3 left = 7
        pytest.param("7", [], id="reservation-remainder-plus-node-free"),
        pytest.param("7001m", ["cpu"], id="one-milli-more"),
    ],
)
def test_node_fit_takes_the_reservation_first_then_the_node(request_cpu, short):
    rinfo = _r1()
    assert fits_node(_q(cpu=request_cpu), NODE, _state(rinfo), rinfo) == short


def test_node_fit_without_a_reservation_counts_only_free_node_resources():
    rinfo = _r1()
    # 16 - (13 - 1 allocated by R1's owner) = 4
    assert fits_node(_q(cpu="4"), NODE, _state(rinfo)) == []
    assert fits_node(_q(cpu="5"), NODE, _state(rinfo)) == ["cpu"]


@pytest.mark.parametrize(
    ("allowed", "short"),
    [
        pytest.param("5", [], id="five-pods-fit"),
        pytest.param("4", ["pods"], id="one-pod-too-many"),
    ],
)
def test_node_fit_counts_pods(allowed, short):
    rinfo = _r1()
    node = {**NODE, "pods": Quantity.parse(allowed)}
    # 6 pods, 5 once R1's reserve pod left; upstream then takes the matched one off again: 5 - 1 + 1 = 5
    assert fits_node(_q(cpu="1"), node, _state(rinfo, pods_on_node=6), rinfo) == short


def test_zero_request_pod_is_only_counted():
    rinfo = _r1()
    node = {**NODE, "pods": Quantity.parse("1")}
    assert fits_node({}, node, _state(rinfo), rinfo) == ["pods"]


def test_scalar_resources_are_checked_in_name_order():
    rinfo = _r1()
    pod = {
        "nvidia.com/gpu": Quantity.parse("1"),
        "example.com/foo": Quantity.parse("1"),
        "cpu": Quantity.parse("1"),
    }
    assert fits_node(pod, NODE, _state(rinfo), rinfo) == ["example.com/foo", "nvidia.com/gpu"]


def test_resource_view_uses_milli_cpu_and_whole_units():
    view = resource_view(_q(cpu="1500m", memory="1Ki", pods="3", **{"nvidia.com/gpu": "1"}, foo="1"))
    assert view == {"cpu": 1500, "memory": 1024, "nvidia.com/gpu": 1}


def _restricted(reserved_cpu: str | None = None, pods: str | None = None) -> ReservationInfo:
    builder = (
        make_reservation("r1")
        .requests(cpu="4", memory="8Gi")
        .spec(allocatePolicy="Restricted", allocateOnce=False)
    )
    if pods:
        builder.requests(cpu="4", memory="8Gi", pods=pods)
    if reserved_cpu:
        builder.annotations(
            {"node.koordinator.sh/reservation": f'{{"resources":{{"cpu":"{reserved_cpu}"}}}}'}
        )
    owner = make_pod("o1").requests(cpu="1", memory="2Gi").build()
    return builder.available("n1").info(owner)


@pytest.mark.parametrize(
    ("pod", "detailed", "reasons"),
    [
        pytest.param(_q(cpu="3", memory="6Gi"), False, [], id="fits-the-remainder"),
        pytest.param(_q(cpu="3500m"), False, ["Reservation(s) Insufficient cpu"], id="cpu-short"),
        pytest.param(
            _q(cpu="3500m"),
            True,
            ["Reservation(s) Insufficient cpu, requested: 3500, used: 1000, capacity: 4000"],
            id="cpu-short-detailed-in-millis",
        ),
        pytest.param(
            _q(memory="7Gi"),
            True,
            [
                "Reservation(s) Insufficient memory, "
                "requested: 7516192768, used: 2147483648, capacity: 8589934592"
            ],
            id="memory-short-detailed-in-bytes",
        ),
        pytest.param(
            _q(cpu="5", memory="7Gi"),
            False,
            ["Reservation(s) Insufficient cpu", "Reservation(s) Insufficient memory"],
            id="every-short-resource",
        ),
        pytest.param(
            _q(cpu="0", **{"nvidia.com/gpu": "8"}), False, [], id="undeclared-and-zero-requests-ignored"
        ),
    ],
)
def test_reservation_fit(pod, detailed, reasons):
    assert fits_reservation(pod, _restricted(), detailed=detailed) == reasons


def test_reservation_fit_excludes_what_is_reserved_inside():
    rinfo = _restricted(reserved_cpu="1")
    assert fits_reservation(_q(cpu="2"), rinfo) == []
    assert fits_reservation(_q(cpu="2500m"), rinfo, detailed=True) == [
        "Reservation(s) Insufficient cpu, requested: 2500, used: 1000, capacity: 3000"
    ]


@pytest.mark.parametrize(
    ("detailed", "reason"),
    [
        pytest.param(False, "Reservation(s) Too many pods", id="brief"),
        pytest.param(True, "Reservation(s) Too many pods, requested: 1, used: 1, capacity: 1", id="detailed"),
    ],
)
def test_reservation_fit_counts_pods_when_reserved_explicitly(detailed, reason):
    assert fits_reservation(_q(cpu="1"), _restricted(pods="1"), detailed=detailed) == [reason]


def test_reservation_fit_gives_back_preemptible_owners():
    assert fits_reservation(_q(cpu="4"), _restricted(), _q(cpu="1")) == []


def _affinity_pod(cpu: str, name: str | None = None) -> PodContext:
    affinity = {"name": name} if name else {}
    return PodContext.of(make_pod().requests(cpu=cpu).affinity(affinity).build())


@pytest.mark.parametrize(
    ("policy", "cpu", "verdict"),
    [
        pytest.param("", "7", Verdict(), id="default-fits"),
        pytest.param("Aligned", "7", Verdict(), id="aligned-fits"),
        pytest.param(
            "Aligned", "8", Verdict(UNSCHEDULABLE, ("Insufficient cpu by node",)), id="aligned-node-short"
        ),
        pytest.param("Restricted", "3", Verdict(), id="restricted-fits"),
        pytest.param(
            "Restricted",
            "3500m",
            Verdict(UNSCHEDULABLE, ("Reservation(s) Insufficient cpu",)),
            id="restricted-only-from-it",
        ),
    ],
)
def test_filter_by_allocate_policy(policy, cpu, verdict):
    rinfo = _r1(policy)
    state = _state(rinfo)
    assert filter_with_reservations(_affinity_pod(cpu), NODE, state, [rinfo], required=True) == verdict


def test_named_reservation_gives_detailed_reasons():
    rinfo = _r1("Restricted")
    verdict = filter_with_reservations(
        _affinity_pod("3500m", name="r1"), NODE, _state(rinfo), [rinfo], required=True
    )
    assert verdict.reasons == (
        "Reservation(s) Insufficient cpu, requested: 3500, used: 1000, capacity: 4000",
    )


@pytest.mark.parametrize(
    ("ctx", "why"),
    [
        pytest.param(_affinity_pod("1", name="r9"), "another reservation is named", id="other-name"),
        pytest.param(
            PodContext.of(make_pod().requests(memory="1Gi").build()),
            "no shared resource and no affinity",
            id="nothing-in-common",
        ),
    ],
)
def test_reservations_passed_over_leave_the_generic_reason(ctx, why):
    rinfo = make_reservation("r1").requests(cpu="4").available("n1").info()
    verdict = filter_with_reservations(ctx, NODE, _state(rinfo), [rinfo], required=True)
    assert verdict == Verdict(UNSCHEDULABLE, ("node(s) no reservation(s) to meet the requirements",)), why


def test_extra_reservation_checks_can_refuse():
    rinfo = _r1()
    verdict = filter_with_reservations(
        _affinity_pod("1"),
        NODE,
        _state(rinfo),
        [rinfo],
        required=True,
        extra_check=lambda r: ["Insufficient gpu"],
    )
    assert verdict == Verdict(UNSCHEDULABLE, ("Insufficient gpu",))


def test_filter_without_requirement_passes():
    rinfo = _r1()
    ctx = PodContext.of(make_pod().requests(cpu="15").build())
    assert filter_pod(ctx, NODE, _state(rinfo)) == Verdict()


@pytest.mark.parametrize(
    ("ctx", "with_state", "verdict"),
    [
        pytest.param(
            _affinity_pod("1"),
            False,
            Verdict(UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) no reservations match reservation affinity",)),
            id="affinity-without-a-match-on-the-node",
        ),
        pytest.param(_affinity_pod("1"), True, Verdict(), id="affinity-with-a-fitting-match"),
        pytest.param(
            PodContext.of(make_pod().requests(cpu="1").build()),
            False,
            Verdict(),
            id="plain-pod-no-reservations",
        ),
        pytest.param(
            PodContext.of(reserve_pod(make_reservation().build())), True, Verdict(), id="reserve-pod"
        ),
    ],
)
def test_filter_pod(ctx, with_state, verdict):
    rinfo = _r1()
    assert filter_pod(ctx, NODE, _state(rinfo) if with_state else None) == verdict


@pytest.mark.parametrize(
    ("policy", "on_node", "conflict"),
    [
        pytest.param("", ["Aligned"], True, id="default-meets-aligned"),
        pytest.param("Restricted", [""], True, id="restricted-meets-default"),
        pytest.param("Aligned", ["Restricted"], False, id="aligned-with-restricted"),
        pytest.param("", [""], False, id="default-with-default"),
        pytest.param("Aligned", [], False, id="empty-node"),
    ],
)
def test_allocate_policy_conflict(policy, on_node, conflict):
    assert allocate_policy_conflict(policy, on_node) is conflict


@pytest.mark.parametrize(
    ("pinned", "policy", "on_node", "verdict"),
    [
        pytest.param(None, "Aligned", ["Aligned"], Verdict(), id="fits"),
        pytest.param(
            "n2",
            "Aligned",
            [],
            Verdict(
                UNSCHEDULABLE_AND_UNRESOLVABLE,
                ("node(s) didn't match the nodeName specified by reservation",),
            ),
            id="pinned-elsewhere",
        ),
        pytest.param(
            "n1",
            "",
            ["Restricted"],
            Verdict(UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) reservation allocate policy conflict",)),
            id="policy-conflict",
        ),
    ],
)
def test_filter_reserve_pod(pinned, policy, on_node, verdict):
    builder = make_reservation()
    if pinned:
        builder.template(nodeName=pinned)
    assert filter_reserve_pod(reserve_pod(builder.build()), "n1", policy, on_node) == verdict


@pytest.mark.parametrize(
    ("ctx", "nodes", "verdict", "remaining"),
    [
        pytest.param(
            _affinity_pod("1"),
            [],
            Verdict(UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) no reservations match reservation affinity",)),
            None,
            id="affinity-and-no-match-anywhere",
        ),
        pytest.param(
            _affinity_pod("1"), ["n1"], Verdict(), frozenset({"n1"}), id="affinity-restricts-the-nodes"
        ),
        pytest.param(PodContext.of(make_pod().build()), [], Verdict(SKIP), None, id="nothing-to-do-skips"),
        pytest.param(
            PodContext.of(make_pod().build()), ["n1"], Verdict(SUCCESS), None, id="plain-pod-all-nodes"
        ),
    ],
)
def test_pre_filter(ctx, nodes, verdict, remaining):
    rinfo = _r1()
    states = {node: _state(rinfo) for node in nodes}
    assert pre_filter(ctx, states) == (verdict, remaining)
