"""The reserve pod built from a Reservation (``NewReservePod``) and the way back from it."""

from __future__ import annotations

import pytest

from controlplane.scheduler.reservation.reservepod import (
    DEFAULT_SCHEDULER_NAME,
    FAKE_CONTAINER_NAME,
    MAX_INT32,
    ReservationError,
    is_reserve_pod,
    reservation_name_of,
    reservation_requests,
    reserve_pod,
    reserve_pod_namespaced_name,
    reserve_pod_node_name,
    validate_reservation,
)
from koordinator.api import resourcelist
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.reservation.builders import make_pod, make_reservation

RESERVE_POD = "scheduling.koordinator.sh/reserve-pod"
RESERVATION_NAME = "scheduling.koordinator.sh/reservation-name"
RESERVATION_NODE = "scheduling.koordinator.sh/reservation-node"


def test_named_and_identified_by_the_reservation_uid_in_the_default_namespace():
    pod = reserve_pod(make_reservation("r1", uid="6f1c").build())
    assert pod["metadata"]["name"] == "6f1c"
    assert pod["metadata"]["uid"] == "6f1c"
    assert pod["metadata"]["namespace"] == "default"


def test_template_namespace_is_kept():
    r = make_reservation().template({"namespace": "team-a"}).build()
    assert reserve_pod(r)["metadata"]["namespace"] == "team-a"
    assert reserve_pod_namespaced_name(r) == ("team-a", "uid-r1")


def test_reservation_labels_and_annotations_overlay_the_templates_and_mark_the_pod():
    r = (
        make_reservation("r1")
        .template({"labels": {"a": "t", "b": "t"}, "annotations": {"x": "t", "y": "t"}})
        .labels(b="r")
        .annotations({"y": "r"})
        .build()
    )
    meta = reserve_pod(r)["metadata"]
    assert meta["labels"] == {"a": "t", "b": "r"}
    assert meta["annotations"] == {"x": "t", "y": "r", RESERVE_POD: "true", RESERVATION_NAME: "r1"}


def test_template_node_moves_to_an_annotation_and_the_bound_node_becomes_spec_node():
    pending = make_reservation().template(nodeName="n1").build()
    pod = reserve_pod(pending)
    assert pod["metadata"]["annotations"][RESERVATION_NODE] == "n1"
    assert pod["spec"]["nodeName"] == ""
    bound = make_reservation().template(nodeName="n1").requests(cpu="1").available("n2").build()
    assert reserve_pod(bound)["spec"]["nodeName"] == "n2"


@pytest.mark.parametrize(
    ("template_priority", "label", "want"),
    [
        pytest.param(100, "5000", 100, id="template-priority-wins"),
        pytest.param(None, "5000", 5000, id="priority-label-when-template-has-none"),
        pytest.param(None, "abc", MAX_INT32, id="malformed-label-gives-maxint32"),
        pytest.param(None, "3000000000", MAX_INT32, id="label-beyond-int32-gives-maxint32"),
        pytest.param(None, None, MAX_INT32, id="nothing-gives-maxint32"),
    ],
)
def test_priority_template_then_label_then_maxint32(template_priority, label, want):
    builder = make_reservation()
    if template_priority is not None:
        builder.template(priority=template_priority)
    if label is not None:
        builder.labels(**{"koordinator.sh/priority": label})
    assert reserve_pod(builder.build())["spec"]["priority"] == want


@pytest.mark.parametrize(
    ("scheduler", "want"),
    [
        pytest.param("koord-scheduler", "koord-scheduler", id="template-scheduler"),
        pytest.param("", DEFAULT_SCHEDULER_NAME, id="empty-means-default-scheduler"),
    ],
)
def test_scheduler_name(scheduler, want):
    r = make_reservation().template(schedulerName=scheduler).build()
    assert reserve_pod(r)["spec"]["schedulerName"] == want


@pytest.mark.parametrize(
    ("status", "phase"),
    [
        pytest.param({"phase": "Succeeded"}, "Succeeded", id="succeeded"),
        pytest.param({"phase": "Failed"}, "Failed", id="failed"),
        pytest.param(
            {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False", "reason": "Expired"}]},
            "Failed",
            id="expired",
        ),
        pytest.param({"phase": "Pending"}, None, id="pending-has-no-phase"),
    ],
)
def test_finished_reservations_give_finished_reserve_pods(status, phase):
    pod = reserve_pod(make_reservation().status(**status).build())
    assert pod["status"].get("phase") == phase


def test_available_reservation_with_other_allocatable_gets_one_fake_container():
    r = (
        make_reservation()
        .requests(cpu="4", memory="8Gi")
        .available("n1", {"cpu": "6", "memory": "8Gi"})
        .build()
    )
    pod = reserve_pod(r)
    containers = pod["spec"]["containers"]
    assert containers[0] == {"name": "main", "resources": {}}
    assert containers[1] == {
        "name": FAKE_CONTAINER_NAME,
        "resources": {"limits": {"cpu": "6", "memory": "8Gi"}, "requests": {"cpu": "6", "memory": "8Gi"}},
    }
    assert resourcelist.pod_requests(pod) == {"cpu": Quantity.parse("6"), "memory": Quantity.parse("8Gi")}


def test_available_reservation_matching_its_template_keeps_the_containers():
    r = make_reservation().requests(cpu="4").available("n1").build()
    assert [c["name"] for c in reserve_pod(r)["spec"]["containers"]] == ["main"]


def test_building_does_not_change_the_reservation():
    r = make_reservation().template({"labels": {"a": "1"}}, nodeName="n1").requests(cpu="4").build()
    before = repr(r)
    reserve_pod(r)
    assert repr(r) == before


@pytest.mark.parametrize(
    ("annotations", "is_reserve", "name", "node"),
    [
        pytest.param(
            {RESERVE_POD: "true", RESERVATION_NAME: "r1", RESERVATION_NODE: "n1"},
            True,
            "r1",
            "n1",
            id="reserve",
        ),
        pytest.param({RESERVE_POD: "false", RESERVATION_NAME: "r1"}, False, "r1", "", id="only-true-counts"),
        pytest.param({}, False, "", "", id="ordinary-pod"),
    ],
)
def test_reverse_predicates(annotations, is_reserve, name, node):
    builder = make_pod()
    for key, value in annotations.items():
        builder.annotation(key, value)
    pod = builder.build()
    assert (is_reserve_pod(pod), reservation_name_of(pod), reserve_pod_node_name(pod)) == (
        is_reserve,
        name,
        node,
    )


def test_built_reserve_pod_reads_back_as_its_reservation():
    pod = reserve_pod(make_reservation("r7").build())
    assert is_reserve_pod(pod)
    assert reservation_name_of(pod) == "r7"


@pytest.mark.parametrize(
    ("builder", "error"),
    [
        pytest.param(
            make_reservation().no_template(), "the reservation misses the template spec", id="no-template"
        ),
        pytest.param(make_reservation().owners(), "the reservation misses the owner spec", id="no-owners"),
    ],
)
def test_validation_messages(builder, error):
    with pytest.raises(ReservationError) as raised:
        validate_reservation(builder.build())
    assert str(raised.value) == error


def test_validation_accepts_a_reservation_without_ttl_or_expires_as_the_24h_default():
    validate_reservation(make_reservation().build())


@pytest.mark.parametrize(
    ("builder", "want"),
    [
        pytest.param(
            make_reservation().requests(cpu="4", pods="2"), {"cpu": "4", "pods": "2"}, id="pending-template"
        ),
        pytest.param(
            make_reservation().requests(cpu="4").available("n1", {"cpu": "5"}),
            {"cpu": "5"},
            id="available-status",
        ),
        pytest.param(make_reservation().no_template(), {}, id="no-template"),
    ],
)
def test_reservation_requests(builder, want):
    assert resourcelist.to_json(reservation_requests(builder.build())) == want
