"""PreBind's ``reservation-allocated`` annotation, serialized as upstream's Go JSON."""

from __future__ import annotations

import pytest

from controlplane.scheduler.reservation.prebind import reservation_allocated_value, with_reservation_allocated
from controlplane.scheduler.reservation.reservepod import reserve_pod
from tests.controlplane.scheduler.reservation.builders import make_pod, make_reservation

KEY = "scheduling.koordinator.sh/reservation-allocated"


@pytest.mark.parametrize(
    ("name", "uid", "text"),
    [
        pytest.param("r1", "6f1c-4d", '{"name":"r1","uid":"6f1c-4d"}', id="name-then-uid-no-spaces"),
        pytest.param("", "6f1c-4d", '{"uid":"6f1c-4d"}', id="empty-name-omitted"),
    ],
)
def test_annotation_text(name, uid, text):
    assert reservation_allocated_value(name, uid) == text


def test_pod_copy_gets_the_annotation_next_to_its_own():
    pod = make_pod().annotation("team", "a").build()
    annotated = with_reservation_allocated(pod, make_reservation("r1", uid="u1").build())
    assert annotated["metadata"]["annotations"] == {"team": "a", KEY: '{"name":"r1","uid":"u1"}'}
    assert KEY not in pod["metadata"]["annotations"]


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(reserve_pod(make_reservation("r0").build()), id="reserve-pod"),
        pytest.param(
            make_pod().label("scheduling.koordinator.sh/reservation-ignored", "true").build(),
            id="ignored-pod",
        ),
    ],
)
def test_pods_that_get_no_annotation(pod):
    annotated = with_reservation_allocated(pod, make_reservation("r1").build())
    assert KEY not in (annotated["metadata"].get("annotations") or {})
