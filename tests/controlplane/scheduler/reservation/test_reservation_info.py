"""``ReservationInfo``: allocatable, resource names, reserved, the owner pods it has given
resources to, and the spec facts the plug-in reads."""

from __future__ import annotations

import pytest

from controlplane.scheduler.reservation.info import ReservationInfo
from koordinator.api import resourcelist
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.reservation.builders import ReservationBuilder, make_pod, make_reservation

RESTRICTED = "scheduling.koordinator.sh/reservation-restricted-options"


def _json(resources: dict[str, Quantity]) -> dict[str, str]:
    return resourcelist.to_json(resources)


@pytest.mark.parametrize(
    ("builder", "allocatable"),
    [
        pytest.param(
            make_reservation().requests(cpu="4", memory="8Gi"),
            {"cpu": "4", "memory": "8Gi"},
            id="pending-template",
        ),
        pytest.param(
            make_reservation().requests(cpu="4", pods="2"),
            {"cpu": "4", "pods": "2"},
            id="pods-when-requested",
        ),
        pytest.param(
            make_reservation().requests(cpu="4").available("n1", {"cpu": "6"}),
            {"cpu": "6"},
            id="available-status",
        ),
    ],
)
def test_allocatable(builder, allocatable):
    assert _json(builder.info().allocatable) == allocatable


@pytest.mark.parametrize(
    ("policy", "options", "names"),
    [
        pytest.param("", None, ["cpu", "memory", "nvidia.com/gpu"], id="all-keys-sorted"),
        pytest.param("Restricted", '{"resources":["cpu"]}', ["cpu"], id="restricted-options-narrow"),
        pytest.param(
            "Restricted",
            '{"resources":["pods"]}',
            ["cpu", "memory", "nvidia.com/gpu"],
            id="unlisted-keeps-all",
        ),
        pytest.param(
            "Aligned",
            '{"resources":["cpu"]}',
            ["cpu", "memory", "nvidia.com/gpu"],
            id="only-restricted-reads-options",
        ),
    ],
)
def test_resource_names(policy, options, names):
    builder = (
        make_reservation()
        .requests({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"})
        .spec(allocatePolicy=policy)
    )
    if options:
        builder.annotations({RESTRICTED: options})
    assert builder.info().resource_names == names


def test_malformed_restricted_options_are_a_parse_error():
    rinfo = (
        make_reservation()
        .requests(cpu="1")
        .spec(allocatePolicy="Restricted")
        .annotations({RESTRICTED: "{"})
        .info()
    )
    assert rinfo.parse_error is not None


def test_reserved_inside_from_the_node_reservation_annotation():
    annotation = '{"resources":{"memory":"1Gi","cpu":"8"},"reservedCPUs":"0-1"}'
    rinfo = (
        make_reservation()
        .requests(cpu="4")
        .annotations({"node.koordinator.sh/reservation": annotation})
        .info()
    )
    assert _json(rinfo.reserved) == {"cpu": "2", "memory": "1Gi"}


OWNER_A = make_pod("a").requests({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}).build()
OWNER_B = make_pod("b").requests(cpu="2").build()


def _r() -> ReservationBuilder:
    return make_reservation().requests(cpu="4", memory="8Gi").available("n1")


def test_allocated_sums_owner_requests_within_the_reserved_resources():
    rinfo = _r().info(OWNER_A, OWNER_B)
    assert _json(rinfo.allocated) == {"cpu": "3", "memory": "1Gi"}
    assert rinfo.allocated_pods == 2
    assert _json(rinfo.remaining()) == {"cpu": "1", "memory": "7Gi"}


def test_adding_the_same_pod_twice_counts_it_once():
    rinfo = _r().info(OWNER_A, OWNER_A)
    assert _json(rinfo.allocated) == {"cpu": "1", "memory": "1Gi"}
    assert rinfo.allocated_pods == 1


def test_removing_gives_back_and_is_idempotent():
    rinfo = _r().info(OWNER_A, OWNER_B)
    rinfo.remove_assigned_pod(OWNER_B)
    rinfo.remove_assigned_pod(OWNER_B)
    rinfo.remove_assigned_pod(make_pod("stranger").requests(cpu="9").build())
    assert _json(rinfo.allocated) == {"cpu": "1", "memory": "1Gi"}
    assert list(rinfo.assigned_pods) == ["uid-a"]


def test_removal_never_goes_below_zero():
    rinfo = _r().info(OWNER_B)
    rinfo.allocated = {}
    rinfo.remove_assigned_pod(OWNER_B)
    assert _json(rinfo.allocated) == {"cpu": "0"}


def test_clone_does_not_share_assigned_pods():
    rinfo = _r().info(OWNER_A)
    copy = rinfo.clone()
    copy.add_assigned_pod(OWNER_B)
    assert rinfo.allocated_pods == 1
    assert copy.allocated_pods == 2


@pytest.mark.parametrize(
    ("builder", "attribute", "want"),
    [
        pytest.param(make_reservation(), "allocate_policy", "", id="policy-default-is-empty"),
        pytest.param(
            make_reservation().spec(allocatePolicy="Aligned"),
            "allocate_policy",
            "Aligned",
            id="policy-aligned",
        ),
        pytest.param(make_reservation(), "allocate_once", True, id="allocate-once-default-true"),
        pytest.param(
            make_reservation().spec(allocateOnce=False), "allocate_once", False, id="allocate-once-false"
        ),
        pytest.param(make_reservation().order("7"), "order", 7, id="order-label"),
        pytest.param(make_reservation().order("soon"), "order", 0, id="malformed-order-is-zero"),
        pytest.param(make_reservation(), "order", 0, id="no-order"),
        pytest.param(
            make_reservation().spec(unschedulable=True), "unschedulable", True, id="unschedulable-spec"
        ),
        pytest.param(make_reservation(), "unschedulable", False, id="schedulable"),
        pytest.param(make_reservation().template(priority=9000), "priority", 9000, id="template-priority"),
        pytest.param(make_reservation(), "priority", 0, id="priority-default-zero"),
        pytest.param(
            make_reservation().status(phase="Available", nodeName="n1"), "node_name", "n1", id="node-name"
        ),
    ],
)
def test_spec_facts(builder, attribute, want):
    assert getattr(builder.info(), attribute) == want


def test_a_reservation_being_deleted_is_unschedulable():
    r = make_reservation().build()
    r["metadata"]["deletionTimestamp"] = "2024-01-02T00:00:00Z"
    assert ReservationInfo.from_reservation(r).unschedulable is True
