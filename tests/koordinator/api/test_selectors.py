"""Label selector and node selector matching as Kubernetes evaluates them."""

from __future__ import annotations

import pytest

from koordinator.api.selectors import (
    SelectorError,
    label_selector_matches,
    node_fields,
    node_selector_matches,
    node_selector_term_matches,
)

LABELS = {"app": "web", "tier": "front", "cores": "16"}


def expr(key: str, operator: str, *values: str) -> dict[str, object]:
    out: dict[str, object] = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        pytest.param({}, True, id="empty-matches-all"),
        pytest.param({"matchLabels": {"app": "web"}}, True, id="match-labels"),
        pytest.param({"matchLabels": {"app": "db"}}, False, id="match-labels-miss"),
        pytest.param({"matchExpressions": [expr("tier", "In", "front", "back")]}, True, id="in"),
        pytest.param({"matchExpressions": [expr("tier", "NotIn", "front")]}, False, id="not-in"),
        pytest.param({"matchExpressions": [expr("zone", "NotIn", "a")]}, True, id="not-in-absent-key"),
        pytest.param({"matchExpressions": [expr("app", "Exists")]}, True, id="exists"),
        pytest.param({"matchExpressions": [expr("app", "DoesNotExist")]}, False, id="does-not-exist"),
        pytest.param(
            {"matchLabels": {"app": "web"}, "matchExpressions": [expr("tier", "In", "back")]},
            False,
            id="anded",
        ),
    ],
)
def test_label_selector(selector, matches):
    assert label_selector_matches(selector, LABELS) is matches


def test_none_selector_matches_nothing():
    assert label_selector_matches(None, LABELS) is False


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param({"matchExpressions": [expr("app", "In")]}, id="in-without-values"),
        pytest.param({"matchExpressions": [expr("app", "Exists", "x")]}, id="exists-with-values"),
        pytest.param({"matchExpressions": [expr("app", "Gt", "1")]}, id="gt-not-a-label-operator"),
        pytest.param({"matchExpressions": [expr("bad key!", "Exists")]}, id="bad-key"),
        pytest.param({"matchLabels": {"app": "bad value!"}}, id="bad-value"),
    ],
)
def test_malformed_label_selectors_raise(selector):
    with pytest.raises(SelectorError):
        label_selector_matches(selector, LABELS)


@pytest.mark.parametrize(
    ("term", "matches"),
    [
        pytest.param({"matchExpressions": [expr("cores", "Gt", "8")]}, True, id="gt"),
        pytest.param({"matchExpressions": [expr("cores", "Lt", "8")]}, False, id="lt"),
        pytest.param({"matchExpressions": [expr("app", "Gt", "8")]}, False, id="gt-non-numeric-label"),
        pytest.param({"matchExpressions": [expr("gpu", "Gt", "8")]}, False, id="gt-missing-label"),
        pytest.param({"matchFields": [expr("metadata.name", "In", "node-1")]}, True, id="field-in"),
        pytest.param({"matchFields": [expr("metadata.name", "NotIn", "node-1")]}, False, id="field-not-in"),
        pytest.param(
            {
                "matchExpressions": [expr("app", "In", "web")],
                "matchFields": [expr("metadata.name", "In", "node-2")],
            },
            False,
            id="expressions-and-fields-anded",
        ),
        pytest.param({}, False, id="empty-term-matches-nothing"),
    ],
)
def test_node_selector_term(term, matches):
    node = {"metadata": {"name": "node-1", "labels": LABELS}}
    assert node_selector_term_matches(term, LABELS, node_fields(node)) is matches


def test_node_selector_ors_terms_and_skips_malformed_ones():
    fields = {"metadata.name": "node-1"}
    selector = {
        "nodeSelectorTerms": [
            {"matchFields": [expr("metadata.uid", "In", "x")]},
            {"matchExpressions": [expr("cores", "Gt", "one")]},
            {"matchExpressions": [expr("tier", "In", "front")]},
        ]
    }
    assert node_selector_matches(selector, LABELS, fields) is True
    assert (
        node_selector_matches({"nodeSelectorTerms": selector["nodeSelectorTerms"][:2]}, LABELS, fields)
        is False
    )
    with pytest.raises(SelectorError):
        node_selector_term_matches(selector["nodeSelectorTerms"][0], LABELS, fields)
