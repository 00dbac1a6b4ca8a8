"""Label and field selector parsing, matching and rendering."""

from __future__ import annotations

import pytest

from koordinator.api.selectors import (
    FieldSelector,
    LabelSelector,
    Requirement,
    SelectorError,
    field_selector,
    label_selector,
)

LABELS = {"app": "web", "tier": "fe", "koordinator.sh/qosClass": "LS", "replicas": "3"}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        pytest.param("", True, id="empty-matches-all"),
        pytest.param("app=web", True, id="equals"),
        pytest.param("app==web", True, id="double-equals"),
        pytest.param("app!=web", False, id="not-equals"),
        pytest.param("missing!=x", True, id="not-equals-missing-key"),
        pytest.param("app in (web, db)", True, id="in"),
        pytest.param("app notin (web)", False, id="notin"),
        pytest.param("tier", True, id="exists"),
        pytest.param("!tier", False, id="does-not-exist"),
        pytest.param("koordinator.sh/qosClass=LS,app=web", True, id="prefixed-key-and"),
        pytest.param("replicas>2", True, id="greater-than"),
        pytest.param("replicas<2", False, id="less-than"),
        pytest.param("app=web,tier=be", False, id="and-fails"),
    ],
)
def test_label_selector_matching(text, matches):
    assert LabelSelector.parse(text).matches(LABELS) is matches


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("app in", id="in-without-values"),
        pytest.param("app=web,", id="trailing-comma"),
        pytest.param("-bad=x", id="bad-key"),
        pytest.param("app=not valid", id="space-in-value"),
        pytest.param("replicas>x", id="non-integer-gt"),
    ],
)
def test_label_selector_errors(text):
    with pytest.raises(SelectorError):
        LabelSelector.parse(text)


@pytest.mark.parametrize(
    ("selector", "text"),
    [
        pytest.param({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2", id="match-labels-sorted"),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]},
            "tier in (be,fe)",
            id="in-expression",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, "!x", id="does-not-exist"
        ),
        pytest.param({}, "", id="empty-selects-all"),
    ],
)
def test_label_selector_from_dict(selector, text):
    assert str(LabelSelector.from_dict(selector)) == text


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param(None, id="nil-selects-nothing"),
        pytest.param(
            {"matchExpressions": [{"key": "x", "operator": "In", "values": []}]}, id="in-without-values"
        ),
        pytest.param({"matchExpressions": [{"key": "x", "operator": "Near"}]}, id="unknown-operator"),
    ],
)
def test_label_selector_from_dict_errors(selector):
    with pytest.raises(SelectorError):
        LabelSelector.from_dict(selector)


def test_label_selector_builder_round_trips():
    text = label_selector({"app": "web"}, [Requirement("tier", "notin", ("be",))])
    assert text == "app=web,tier notin (be)"
    assert LabelSelector.parse(text).matches(LABELS)


@pytest.mark.parametrize(
    ("text", "fields", "matches"),
    [
        pytest.param("spec.nodeName=n1", {"spec.nodeName": "n1"}, True, id="equals"),
        pytest.param("spec.nodeName==n1", {"spec.nodeName": "n2"}, False, id="double-equals"),
        pytest.param("spec.nodeName!=n1", {"spec.nodeName": "n2"}, True, id="not-equals"),
        pytest.param("spec.nodeName=", {"spec.nodeName": ""}, True, id="empty-value"),
        pytest.param(r"metadata.name=a\,b", {"metadata.name": "a,b"}, True, id="escaped-comma"),
        pytest.param("a=1,b!=2", {"a": "1", "b": "3"}, True, id="and"),
    ],
)
def test_field_selector(text, fields, matches):
    assert FieldSelector.parse(text).matches(fields) is matches


def test_field_selector_rendering_escapes_values():
    assert field_selector(**{"metadata.name": "a,b=c"}) == r"metadata.name=a\,b\=c"
    assert FieldSelector.parse(field_selector(**{"metadata.name": "a,b=c"})).matches(
        {"metadata.name": "a,b=c"}
    )


@pytest.mark.parametrize(
    "text", [pytest.param("nonsense", id="no-operator"), pytest.param("a=b\\", id="trailing-escape")]
)
def test_field_selector_errors(text):
    with pytest.raises(SelectorError):
        FieldSelector.parse(text)
