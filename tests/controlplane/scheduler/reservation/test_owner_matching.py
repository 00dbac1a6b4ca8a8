"""``spec.owners`` as a disjunction of entries whose object, controller and label-selector
parts are ANDed (``ReservationOwnerMatcher``)."""

from __future__ import annotations

import pytest

from controlplane.scheduler.reservation.matching import match_owners, parse_owner_matchers
from controlplane.scheduler.reservation.reservepod import ReservationError
from tests.controlplane.scheduler.reservation.builders import make_pod, make_reservation

POD = (
    make_pod("p1", "ns1").labels(app="web", tier="fe").owned_by("ReplicaSet", "rs1", controller=True).build()
)


@pytest.mark.parametrize(
    ("owners", "want"),
    [
        pytest.param([{}], True, id="wildcard-entry-matches-everything"),
        pytest.param([], False, id="no-entries-match-nothing"),
        # object: each set field must equal the pod's
        pytest.param([{"object": {"uid": "uid-p1"}}], True, id="object-uid"),
        pytest.param([{"object": {"uid": "uid-p2"}}], False, id="object-other-uid"),
        pytest.param([{"object": {"name": "p1", "namespace": "ns1"}}], True, id="object-name-and-namespace"),
        pytest.param([{"object": {"name": "p1", "namespace": "ns2"}}], False, id="object-other-namespace"),
        pytest.param([{"object": {"name": "p1", "apiVersion": "v1"}}], True, id="object-api-version"),
        pytest.param([{"object": {"name": "p1", "apiVersion": "v2"}}], False, id="object-other-api-version"),
        pytest.param([{"object": {"name": "p1", "kind": "Deployment"}}], True, id="object-kind-is-ignored"),
        # controller: some ownerReference agrees on each set field
        pytest.param(
            [{"controller": {"kind": "ReplicaSet", "name": "rs1"}}], True, id="controller-kind-name"
        ),
        pytest.param([{"controller": {"kind": "Deployment"}}], False, id="controller-other-kind"),
        pytest.param(
            [{"controller": {"uid": "uid-rs1", "controller": True}}], True, id="controller-flag-true"
        ),
        pytest.param(
            [{"controller": {"name": "rs1", "controller": False}}], False, id="controller-flag-differs"
        ),
        pytest.param(
            [{"controller": {"name": "rs1", "apiVersion": "apps/v1"}}], True, id="controller-api-version"
        ),
        pytest.param([{"controller": {"name": "rs1", "namespace": "ns1"}}], True, id="controller-namespace"),
        pytest.param(
            [{"controller": {"name": "rs1", "namespace": "ns2"}}], False, id="controller-other-namespace"
        ),
        # labelSelector
        pytest.param([{"labelSelector": {"matchLabels": {"app": "web"}}}], True, id="selector-labels"),
        pytest.param([{"labelSelector": {"matchLabels": {"app": "db"}}}], False, id="selector-other-labels"),
        pytest.param(
            [
                {
                    "labelSelector": {
                        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]
                    }
                }
            ],
            True,
            id="selector-expression",
        ),
        pytest.param([{"labelSelector": {}}], True, id="empty-selector-matches-everything"),
        # one entry ANDs, entries OR
        pytest.param(
            [{"object": {"name": "p1"}, "labelSelector": {"matchLabels": {"app": "db"}}}],
            False,
            id="and-within-an-entry",
        ),
        pytest.param(
            [
                {
                    "object": {"name": "p1"},
                    "controller": {"name": "rs1"},
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }
            ],
            True,
            id="all-three-parts-hold",
        ),
        pytest.param(
            [{"object": {"name": "other"}}, {"labelSelector": {"matchLabels": {"app": "web"}}}],
            True,
            id="or-across-entries",
        ),
    ],
)
def test_owner_dnf(owners, want):
    assert match_owners(POD, parse_owner_matchers(owners)) is want


@pytest.mark.parametrize(
    ("pod", "owner"),
    [
        pytest.param(
            make_pod().build(), {"controller": {"kind": "ReplicaSet"}}, id="pod-without-owner-references"
        ),
        pytest.param(
            make_pod().owned_by("ReplicaSet", "rs1", controller=None).build(),
            {"controller": {"name": "rs1", "controller": True}},
            id="flag-required-but-pod-reference-has-none",
        ),
    ],
)
def test_controller_entries_need_a_matching_owner_reference(pod, owner):
    assert match_owners(pod, parse_owner_matchers([owner])) is False


BAD_SELECTOR = {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}}


def test_an_unparsable_selector_is_an_error():
    with pytest.raises(ReservationError, match=r"owners\[1\]"):
        parse_owner_matchers([{}, BAD_SELECTOR])


def test_a_reservation_with_an_unparsable_selector_matches_no_pod():
    rinfo = make_reservation().owners({}, BAD_SELECTOR).info()
    assert rinfo.parse_error is not None
    assert rinfo.match_owners(POD) is False
