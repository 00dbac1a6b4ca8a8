"""A Reservation's phases, expiry with an injected clock, the status written at Bind, on
expiry, on success and after a failed attempt, the owner sync, and garbage collection."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controlplane.scheduler.reservation.lifecycle import (
    bind,
    needs_cleanup,
    needs_expiration,
    next_sync_after,
    set_expired,
    set_succeeded,
    set_unschedulable,
    should_expire,
    should_garbage_collect,
    sync_owners,
)
from controlplane.scheduler.reservation.phases import (
    is_active,
    is_available,
    is_expired,
    is_failed,
    is_succeeded,
)
from controlplane.scheduler.reservation.reservepod import ReservationError
from koordinator.kube.timeutil import format_time
from tests.controlplane.scheduler.reservation.builders import T0, make_pod, make_reservation

HOUR = 3600.0
DAY = 86400.0


def _ready(status: str, reason: str, at: float = T0) -> dict[str, str]:
    stamp = format_time(at)
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
    }


@pytest.mark.parametrize(
    ("status", "want"),
    [
        # (active, available, succeeded, failed, expired)
        pytest.param({"phase": "Pending"}, (False, False, False, False, False), id="pending"),
        pytest.param(
            {"phase": "Available", "nodeName": "n1"}, (True, True, False, False, False), id="available"
        ),
        pytest.param(
            {"phase": "Available"}, (False, False, False, False, False), id="available-without-node"
        ),
        pytest.param(
            {"phase": "Waiting", "nodeName": "n1"}, (True, False, False, False, False), id="waiting-is-active"
        ),
        pytest.param(
            {"phase": "Succeeded", "nodeName": "n1"}, (False, False, True, False, False), id="succeeded"
        ),
        pytest.param(
            {"phase": "Failed", "conditions": [_ready("False", "Expired")]},
            (False, False, False, True, True),
            id="failed-ready-false-expired-is-expired",
        ),
        pytest.param(
            {
                "phase": "Failed",
                "conditions": [{"type": "Scheduled", "status": "False", "reason": "Unschedulable"}],
            },
            (False, False, False, True, False),
            id="failed-without-ready-is-not-expired",
        ),
        pytest.param(
            {"phase": "Failed", "conditions": [_ready("True", "Expired")]},
            (False, False, False, True, False),
            id="ready-true-is-not-expired",
        ),
        pytest.param(
            {"phase": "Failed", "conditions": [_ready("False", "Succeeded"), _ready("False", "Expired")]},
            (False, False, False, True, False),
            id="first-ready-condition-decides",
        ),
    ],
)
def test_phase_predicates(status, want):
    r = make_reservation().status(**status).build()
    assert (is_active(r), is_available(r), is_succeeded(r), is_failed(r), is_expired(r)) == want


@pytest.mark.parametrize(
    ("spec", "phase", "elapsed", "want"),
    [
        pytest.param({"ttl": "1h"}, "Available", HOUR, False, id="ttl-reached-exactly-is-not-past"),
        pytest.param({"ttl": "1h"}, "Available", HOUR + 1, True, id="ttl-past"),
        pytest.param({"ttl": "0s"}, "Available", 1e9, False, id="ttl-zero-never-expires"),
        pytest.param(
            {"expires": "2024-01-01T01:00:00Z"}, "Pending", HOUR, False, id="expires-reached-exactly"
        ),
        pytest.param({"expires": "2024-01-01T01:00:00Z"}, "Pending", HOUR + 1, True, id="expires-past"),
        pytest.param({}, "Available", DAY, False, id="default-ttl-24h-not-past"),
        pytest.param({}, "Available", DAY + 1, True, id="default-ttl-24h-past"),
        pytest.param({"ttl": "1h"}, "Failed", DAY, False, id="failed-never-expires-again"),
        pytest.param({"ttl": "1h"}, "Succeeded", DAY, False, id="succeeded-never-expires"),
    ],
)
def test_needs_expiration_with_injected_now(spec, phase, elapsed, want):
    r = make_reservation().spec(**spec).status(phase=phase, nodeName="n1").build()
    assert needs_expiration(r, T0 + elapsed) is want


@pytest.mark.parametrize(
    ("node", "node_exists", "want"),
    [
        pytest.param("n1", False, True, id="placed-on-a-vanished-node"),
        pytest.param("n1", True, False, id="placed-on-a-live-node"),
        pytest.param("", False, False, id="not-placed"),
    ],
)
def test_should_expire_when_the_node_is_gone(node, node_exists, want):
    r = make_reservation().spec(ttl="1h").status(phase="Available", nodeName=node).build()
    assert should_expire(r, T0, node_exists=node_exists) is want


@pytest.mark.parametrize(
    ("spec", "phase", "now", "want"),
    [
        pytest.param({"ttl": "1h"}, "Available", T0, 15.0, id="far-off-clamped-to-15s"),
        pytest.param({"ttl": "1h"}, "Available", T0 + HOUR - 1, 3.0, id="near-clamped-to-3s"),
        pytest.param(
            {"expires": "2024-01-01T01:00:00Z"}, "Pending", T0 + HOUR - 10, 10.0, id="expires-in-10s"
        ),
        pytest.param({"ttl": "0s"}, "Available", T0, 0.0, id="never-expiring-is-not-requeued"),
        pytest.param({"ttl": "1h"}, "Succeeded", T0, 0.0, id="finished-is-not-requeued"),
    ],
)
def test_next_sync_after(spec, phase, now, want):
    r = make_reservation().spec(**spec).status(phase=phase).build()
    assert next_sync_after(r, now) == want


NOW = T0 + 60


def test_bind_writes_allocatable_node_phase_and_the_two_conditions():
    r = make_reservation().requests(cpu="4", memory="8Gi").build()
    before = copy.deepcopy(r)
    bound = bind(r, "n1", NOW)
    stamp = format_time(NOW)
    assert bound["status"] == {
        "conditions": [
            {
                "type": "Scheduled",
                "status": "True",
                "reason": "Scheduled",
                "lastProbeTime": stamp,
                "lastTransitionTime": stamp,
            },
            {
                "type": "Ready",
                "status": "True",
                "reason": "Available",
                "lastProbeTime": stamp,
                "lastTransitionTime": stamp,
            },
        ],
        "allocatable": {"cpu": "4", "memory": "8Gi"},
        "nodeName": "n1",
        "phase": "Available",
    }
    assert r == before


def test_bind_takes_resize_allocatable_overrides():
    r = (
        make_reservation()
        .requests(cpu="4", memory="8Gi")
        .annotations(
            {"scheduling.koordinator.sh/reservation-resize-allocatable": '{"resources":{"cpu":"6"}}'}
        )
        .build()
    )
    assert bind(r, "n1", NOW)["status"]["allocatable"] == {"cpu": "6", "memory": "8Gi"}


def test_bind_refuses_a_failed_reservation():
    r = make_reservation().status(phase="Failed").build()
    with pytest.raises(ReservationError) as raised:
        bind(r, "n1", NOW)
    assert str(raised.value) == "reservation is not active"


@pytest.mark.parametrize(
    ("conditions", "want"),
    [
        pytest.param([], [_ready("False", "Expired", NOW)], id="no-ready-condition-appends-one"),
        pytest.param(
            [{**_ready("True", "Available"), "message": "old"}],
            [_ready("False", "Expired", NOW)],
            id="ready-true-is-replaced-whole",
        ),
        pytest.param(
            [_ready("False", "Succeeded")],
            [{**_ready("False", "Expired"), "lastProbeTime": format_time(NOW)}],
            id="ready-false-keeps-its-transition-time",
        ),
    ],
)
def test_set_expired(conditions, want):
    r = make_reservation().status(phase="Available", nodeName="n1", conditions=conditions).build()
    expired = set_expired(r, NOW)
    assert expired["status"]["phase"] == "Failed"
    assert expired["status"]["conditions"] == want
    assert is_expired(expired)


@pytest.mark.parametrize(
    ("conditions", "want"),
    [
        pytest.param([], [_ready("False", "Succeeded", NOW)], id="no-ready-condition-appends-one"),
        pytest.param(
            [_ready("True", "Available")],
            [{**_ready("False", "Succeeded"), "lastProbeTime": format_time(NOW)}],
            id="ready-true-turns-false-keeping-transition-time",
        ),
    ],
)
def test_set_succeeded(conditions, want):
    r = make_reservation().status(phase="Available", nodeName="n1", conditions=conditions).build()
    done = set_succeeded(r, NOW)
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["conditions"] == want


@pytest.mark.parametrize(
    ("conditions", "want"),
    [
        pytest.param(
            [],
            [
                {
                    "type": "Scheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available",
                    "lastProbeTime": format_time(NOW),
                    "lastTransitionTime": format_time(NOW),
                }
            ],
            id="first-failure-appends-scheduled-false",
        ),
        pytest.param(
            [
                {
                    "type": "Scheduled",
                    "status": "True",
                    "reason": "Scheduled",
                    "lastProbeTime": "x",
                    "lastTransitionTime": "y",
                }
            ],
            [
                {
                    "type": "Scheduled",
                    "status": "True",
                    "reason": "Scheduled",
                    "lastProbeTime": format_time(NOW),
                    "lastTransitionTime": "y",
                }
            ],
            id="once-scheduled-only-the-probe-moves",
        ),
        pytest.param(
            [
                {
                    "type": "Scheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "old",
                    "lastTransitionTime": "y",
                }
            ],
            [
                {
                    "type": "Scheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available",
                    "lastTransitionTime": "y",
                    "lastProbeTime": format_time(NOW),
                }
            ],
            id="repeated-failure-updates-the-message",
        ),
    ],
)
def test_set_unschedulable_keeps_the_phase(conditions, want):
    r = make_reservation().status(phase="Pending", conditions=conditions).build()
    updated = set_unschedulable(r, "0/3 nodes are available", NOW)
    assert updated["status"]["phase"] == "Pending"
    assert updated["status"]["conditions"] == want


def _bound(**spec: Any) -> dict[str, Any]:
    return (
        make_reservation("r1", uid="r-uid")
        .requests(cpu="4", memory="8Gi")
        .spec(**spec)
        .available("n1")
        .status(conditions=[_ready("True", "Available")])
        .build()
    )


def _owner_pods() -> list[dict[str, Any]]:
    owner = make_pod("p1", "ns1").requests({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}).on("n1")
    return [
        owner.allocated_from("r1", "r-uid").build(),
        make_pod("p2").requests(cpu="1").on("n1").allocated_from("other", "other-uid").build(),
        make_pod("p3").requests(cpu="1").on("n2").allocated_from("r1", "r-uid").build(),
        make_pod("p4").requests(cpu="1").on("n1").build(),
    ]


def test_sync_owners_records_the_owner_and_its_requests_within_allocatable_keys():
    synced = sync_owners(_bound(allocateOnce=False), _owner_pods(), NOW)
    assert synced is not None
    assert synced["status"]["currentOwners"] == [{"namespace": "ns1", "name": "p1", "uid": "uid-p1"}]
    assert synced["status"]["allocated"] == {"cpu": "1", "memory": "1Gi"}
    assert synced["status"]["phase"] == "Available"


def test_sync_owners_makes_an_allocate_once_reservation_succeeded():
    synced = sync_owners(_bound(), _owner_pods(), NOW)
    assert synced is not None
    assert synced["status"]["phase"] == "Succeeded"
    assert is_succeeded(synced)


def test_sync_owners_writes_nothing_when_already_right_or_not_placed():
    synced = sync_owners(_bound(allocateOnce=False), _owner_pods(), NOW)
    assert synced is not None
    assert sync_owners(synced, _owner_pods(), NOW + 5) is None
    pending = make_reservation().requests(cpu="1").build()
    assert sync_owners(pending, _owner_pods(), NOW) is None


def _finished(phase: str, reason: str, at: float, node: str = "n1") -> dict[str, Any]:
    stamp = format_time(at)
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": reason,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
    }
    return make_reservation().status(phase=phase, nodeName=node, conditions=[condition]).build()


@pytest.mark.parametrize(
    ("reservation", "now", "gc", "node_exists", "want"),
    [
        pytest.param(
            _finished("Failed", "Expired", T0),
            T0 + DAY,
            DAY,
            True,
            False,
            id="expired-exactly-a-day-ago-kept",
        ),
        pytest.param(
            _finished("Failed", "Expired", T0), T0 + DAY + 1, DAY, True, True, id="expired-over-a-day-ago"
        ),
        pytest.param(
            _finished("Succeeded", "Succeeded", T0),
            T0 + DAY + 1,
            DAY,
            True,
            True,
            id="succeeded-over-a-day-ago",
        ),
        pytest.param(
            _finished("Failed", "Expired", T0), T0 + 61, 60, True, True, id="gc-duration-seconds-honoured"
        ),
        pytest.param(_finished("Failed", "Expired", T0), T0 + 1, DAY, False, True, id="fresh-but-node-gone"),
        pytest.param(
            make_reservation().status(phase="Available", nodeName="n1").build(),
            T0 + 9 * DAY,
            DAY,
            False,
            False,
            id="live-never",
        ),
        pytest.param(
            make_reservation().status(phase="Failed").build(),
            T0 + 9 * DAY,
            DAY,
            True,
            False,
            id="failed-not-expired-never",
        ),
    ],
)
def test_garbage_collection(reservation, now, gc, node_exists, want):
    assert should_garbage_collect(reservation, now, gc_duration_s=gc, node_exists=node_exists) is want


def test_cleanup_age_of_succeeded_counts_from_the_last_probe():
    r = _finished("Succeeded", "Succeeded", T0)
    r["status"]["conditions"][0]["lastTransitionTime"] = format_time(T0 - 9 * DAY)
    assert needs_cleanup(r, T0 + 10) is False
