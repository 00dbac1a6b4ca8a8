"""A pod's ``reservation-affinity`` (name, selector, required terms, tolerations) and
``exact-match-reservation``, and the order in which the transformer applies every check."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.scheduler.reservation.matching import (
    RequiredReservationAffinity,
    exact_match,
    exact_match_resources,
    find_untolerated_taint,
)
from controlplane.scheduler.reservation.messages import NodeDiagnosis
from controlplane.scheduler.reservation.reservepod import ReservationError, reserve_pod
from controlplane.scheduler.reservation.transformer import MatchOutcome, PodContext, classify
from koordinator.api.quantity import Quantity
from koordinator.api.taints import tolerates
from tests.controlplane.scheduler.reservation.builders import make_pod, make_reservation

EXACT = "scheduling.koordinator.sh/exact-match-reservation"


def test_no_annotation_means_no_affinity():
    assert RequiredReservationAffinity.from_pod(make_pod().build()) is None


def test_an_empty_annotation_is_an_affinity_matching_any_reservation():
    pod = make_pod().annotation("scheduling.koordinator.sh/reservation-affinity", "").build()
    affinity = RequiredReservationAffinity.from_pod(pod)
    assert affinity == RequiredReservationAffinity()
    assert affinity is not None
    assert affinity.match_affinity("r1", {}, {})


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("{not json", id="malformed-json"),
        pytest.param(
            '{"requiredDuringSchedulingIgnoredDuringExecution":{"reservationSelectorTerms":'
            '[{"matchExpressions":[{"key":"a","operator":"Near"}]}]}}',
            id="malformed-term",
        ),
    ],
)
def test_a_malformed_affinity_is_an_error(raw):
    pod = make_pod().annotation("scheduling.koordinator.sh/reservation-affinity", raw).build()
    with pytest.raises(ReservationError):
        RequiredReservationAffinity.from_pod(pod)


def _terms(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"reservationSelectorTerms": list(terms)}}


def _in(key: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}


@pytest.mark.parametrize(
    ("affinity", "reservation_labels", "node_labels", "want"),
    [
        pytest.param({"reservationSelector": {"pool": "a"}}, {"pool": "a"}, {}, True, id="selector-matches"),
        pytest.param({"reservationSelector": {"pool": "a"}}, {"pool": "b"}, {}, False, id="selector-differs"),
        pytest.param(
            {"reservationSelector": {"zone": "z1"}}, {}, {"zone": "z1"}, True, id="selector-sees-node-labels"
        ),
        pytest.param(
            {"reservationSelector": {"zone": "z1"}},
            {"zone": "z2"},
            {"zone": "z1"},
            False,
            id="reservation-label-wins",
        ),
        pytest.param(_terms(_in("pool", "a")), {"pool": "a"}, {}, True, id="term-expression"),
        pytest.param(
            _terms(_in("pool", "x"), _in("pool", "a")), {"pool": "a"}, {}, True, id="terms-are-ored"
        ),
        pytest.param(
            _terms({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["r1"]}]}),
            {},
            {},
            True,
            id="term-field-is-the-reservation-name",
        ),
        pytest.param(
            _terms({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["r2"]}]}),
            {},
            {},
            False,
            id="term-field-other-name",
        ),
        pytest.param(_terms(), {"pool": "a"}, {}, False, id="required-without-terms-matches-nothing"),
        pytest.param(
            {"reservationSelector": {"pool": "a"}, **_terms(_in("pool", "b"))},
            {"pool": "a"},
            {},
            False,
            id="both-must-hold",
        ),
    ],
)
def test_match_affinity(affinity, reservation_labels, node_labels, want):
    parsed = RequiredReservationAffinity.from_pod(make_pod().affinity(affinity).build())
    assert parsed is not None
    assert parsed.match_affinity("r1", reservation_labels, node_labels) is want


TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "want"),
    [
        pytest.param({"key": "k", "operator": "Exists"}, True, id="exists-on-key"),
        pytest.param({"key": "k", "value": "v"}, True, id="equal-is-the-default-operator"),
        pytest.param({"key": "k", "operator": "Equal", "value": "w"}, False, id="equal-other-value"),
        pytest.param({"key": "k", "operator": "Exists", "effect": "NoExecute"}, False, id="other-effect"),
        pytest.param({"operator": "Exists"}, True, id="exists-without-key-tolerates-all"),
        pytest.param({"key": "j", "operator": "Exists"}, False, id="other-key"),
    ],
)
def test_tolerates(toleration, want):
    assert tolerates(toleration, TAINT) is want


def test_only_noschedule_and_noexecute_taints_need_a_toleration():
    affinity = RequiredReservationAffinity()
    prefer = {"key": "p", "value": "", "effect": "PreferNoSchedule"}
    assert affinity.untolerated_taint([prefer]) is None
    assert affinity.untolerated_taint([prefer, TAINT]) == TAINT


def test_reservation_taints_are_not_checked_without_affinity():
    assert find_untolerated_taint(None, [TAINT]) is None


@pytest.mark.parametrize(
    ("names", "pod", "reservation", "want"),
    [
        pytest.param(None, {"cpu": "1"}, {"cpu": "2"}, True, id="no-spec"),
        pytest.param(["cpu"], {"cpu": "2"}, {"cpu": "2"}, True, id="equal"),
        pytest.param(["cpu"], {"cpu": "1"}, {"cpu": "2"}, False, id="differs"),
        pytest.param(["cpu"], {"cpu": "2000m"}, {"cpu": "2"}, True, id="equal-quantities-in-other-units"),
        pytest.param(["memory"], {"memory": "1Gi"}, {}, False, id="pod-only"),
        pytest.param(
            ["memory", "cpu"], {"cpu": "1"}, {"cpu": "2"}, True, id="absent-on-both-sides-ends-the-check"
        ),
    ],
)
def test_exact_match(names, pod, reservation, want):
    def quantities(raw: dict[str, str]) -> dict[str, Quantity]:
        return {k: Quantity.parse(v) for k, v in raw.items()}

    assert exact_match(quantities(pod), quantities(reservation), names) is want


def test_exact_match_annotation():
    pod = make_pod().annotation(EXACT, '{"resourceNames":["cpu","memory"]}').build()
    assert exact_match_resources(pod) == ["cpu", "memory"]
    assert exact_match_resources(make_pod().build()) is None
    with pytest.raises(ReservationError):
        exact_match_resources(make_pod().annotation(EXACT, "[").build())


# ---- the order of the checks -------------------------------------------------------------------

WEB = make_pod("p1").labels(app="web").requests(cpu="2")
R = make_reservation("r1").requests(cpu="2").owners({"labelSelector": {"matchLabels": {"app": "web"}}})


def _diag_counts(diag: NodeDiagnosis) -> dict[str, int]:
    return {name: value for name, value in vars(diag).items() if name != "taints_unmatched_reasons" and value}


@pytest.mark.parametrize(
    ("pod", "reservation", "outcome", "counts"),
    [
        pytest.param(reserve_pod(R.build()), R, MatchOutcome.RESERVE_POD, {}, id="reserve-pods-never-match"),
        pytest.param(
            make_pod().label("scheduling.koordinator.sh/reservation-ignored", "true").build(),
            R,
            MatchOutcome.IGNORED,
            {"ignored": 1},
            id="ignored-pod-takes-any-reservation",
        ),
        pytest.param(
            make_pod().labels(app="db").build(), R, MatchOutcome.OWNER_UNMATCHED, {}, id="owner-unmatched"
        ),
        pytest.param(WEB.build(), R, MatchOutcome.MATCHED, {"owner_matched": 1}, id="matched"),
        pytest.param(
            make_pod().labels(app="web").affinity({"name": "r2"}).build(),
            R,
            MatchOutcome.NAME_UNMATCHED,
            {"owner_matched": 1, "name_unmatched": 1},
            id="named-another-reservation",
        ),
        pytest.param(
            make_pod().labels(app="web").affinity({"name": "r1"}).build(),
            make_reservation("r1").owners({}).spec(unschedulable=True, taints=[TAINT]),
            MatchOutcome.MATCHED,
            {"owner_matched": 1, "name_matched": 1},
            id="a-name-skips-unschedulable-and-taints",
        ),
        pytest.param(
            make_pod()
            .labels(app="web")
            .affinity({"name": "r1"})
            .annotation(EXACT, '{"resourceNames":["cpu"]}')
            .build(),
            R,
            MatchOutcome.NOT_EXACT_MATCHED,
            {"owner_matched": 1, "not_exact_matched": 1},
            id="a-name-still-needs-exact-match",
        ),
        pytest.param(
            WEB.build(),
            make_reservation("r1").owners({}).spec(unschedulable=True),
            MatchOutcome.UNSCHEDULABLE,
            {"owner_matched": 1, "unschedulable_unmatched": 1},
            id="unschedulable",
        ),
        pytest.param(
            make_pod().affinity({}).build(),
            make_reservation("r1").owners({}).spec(taints=[TAINT]),
            MatchOutcome.TAINT_UNTOLERATED,
            {"owner_matched": 1, "taints_unmatched": 1},
            id="untolerated-taint",
        ),
        pytest.param(
            make_pod().build(),
            make_reservation("r1").owners({}).spec(taints=[TAINT]),
            MatchOutcome.MATCHED,
            {"owner_matched": 1},
            id="taints-ignored-without-affinity",
        ),
        pytest.param(
            make_pod().affinity({"reservationSelector": {"pool": "a"}}).build(),
            make_reservation("r1").owners({}).labels(pool="b"),
            MatchOutcome.AFFINITY_UNMATCHED,
            {"owner_matched": 1, "affinity_unmatched": 1},
            id="affinity-unmatched",
        ),
        pytest.param(
            make_pod().requests(cpu="1").annotation(EXACT, '{"resourceNames":["cpu"]}').build(),
            make_reservation("r1").owners({}).requests(cpu="2"),
            MatchOutcome.NOT_EXACT_MATCHED,
            {"owner_matched": 1, "not_exact_matched": 1},
            id="not-exact",
        ),
    ],
)
def test_classify_order_and_diagnosis(pod, reservation, outcome, counts):
    diagnosis = NodeDiagnosis()
    got = classify(PodContext.of(pod), reservation.info(), {}, diagnosis)
    assert got is outcome
    assert _diag_counts(diagnosis) == counts


def test_untolerated_taint_is_named_in_the_diagnosis():
    diagnosis = NodeDiagnosis()
    classify(
        PodContext.of(make_pod().affinity({}).build()),
        make_reservation().spec(taints=[TAINT]).info(),
        {},
        diagnosis,
    )
    assert diagnosis.taints_unmatched_reasons == {"{k: v}": 1}
