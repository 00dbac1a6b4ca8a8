"""Matching of ``metav1.LabelSelector`` and ``v1.NodeSelector`` dicts against labels and fields.

Label selectors (``matchLabels`` plus ``matchExpressions`` with ``In``, ``NotIn``, ``Exists``,
``DoesNotExist``) follow ``metav1.LabelSelectorAsSelector``: ``None`` matches nothing, ``{}``
matches everything, and a malformed selector raises :class:`SelectorError`.

Node selectors follow ``component-helpers/scheduling/corev1/nodeaffinity``: terms are ORed,
a term ANDs its ``matchExpressions`` (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``,
``Lt``) and ``matchFields`` (only ``metadata.name`` with ``In``/``NotIn`` and one value), an
empty term matches nothing, and a malformed term never matches (the other terms still can).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from koordinator.api.goparse import GoParseError, parse_int

__all__ = [
    "SelectorError",
    "label_selector_matches",
    "node_fields",
    "node_selector_matches",
    "node_selector_term_matches",
    "validate_label_selector",
    "validate_node_selector_term",
]

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
METADATA_NAME_FIELD = "metadata.name"


class SelectorError(ValueError):
    """A selector that Kubernetes would refuse to evaluate."""


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key:
        raise SelectorError(f"invalid label key {key!r}: must be a non-empty string")
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise SelectorError(f"invalid label key {key!r}: prefix must be a DNS-1123 subdomain")
    if len(name) > 63 or not _NAME.match(name):
        raise SelectorError(f"invalid label key {key!r}: name part must be a qualified name")
    return key


def _check_values(key: str, values: Any) -> tuple[str, ...]:
    if values is None:
        return ()
    if not isinstance(values, Sequence) or isinstance(values, str):
        raise SelectorError(f"{key}: values must be a list of strings")
    out = []
    for value in values:
        if not isinstance(value, str) or len(value) > 63 or not _VALUE.match(value):
            raise SelectorError(f"{key}: invalid label value {value!r}")
        out.append(value)
    return tuple(out)


def _requirement(expr: Any, operators: frozenset[str]) -> tuple[str, str, tuple[str, ...]]:
    if not isinstance(expr, Mapping):
        raise SelectorError("a match expression must be an object")
    key = _check_key(expr.get("key"))
    operator = expr.get("operator")
    if operator not in operators:
        raise SelectorError(f"{key}: {operator!r} is not a valid selector operator")
    values = _check_values(key, expr.get("values"))
    if operator in ("In", "NotIn") and not values:
        raise SelectorError(f"{key}: for 'In', 'NotIn' operators, values set can't be empty")
    if operator in ("Exists", "DoesNotExist") and values:
        raise SelectorError(f"{key}: values set must be empty for exists and does not exist")
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            raise SelectorError(f"{key}: for 'Gt', 'Lt' operators, exactly one value is required")
        try:
            parse_int(values[0])
        except GoParseError:
            raise SelectorError(
                f"{key}: for 'Gt', 'Lt' operators, the value must be an integer: {values[0]!r}"
            ) from None
    return key, operator, values


def _matches(key: str, operator: str, values: tuple[str, ...], labels: Mapping[str, str]) -> bool:
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if key not in labels:
        return False
    try:
        have = parse_int(labels[key])
    except GoParseError:
        return False
    want = parse_int(values[0])
    return have > want if operator == "Gt" else have < want


_LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_NODE_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


def _label_requirements(selector: Mapping[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    if not isinstance(selector, Mapping):
        raise SelectorError("a label selector must be an object")
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("matchLabels must be an object")
    requirements = [
        (_check_key(key), "In", _check_values(key, [value])) for key, value in match_labels.items()
    ]
    requirements.extend(
        _requirement(expr, _LABEL_OPERATORS) for expr in selector.get("matchExpressions") or ()
    )
    return requirements


def validate_label_selector(selector: Mapping[str, Any] | None) -> None:
    """Raise :class:`SelectorError` when the selector is malformed."""
    if selector is not None:
        _label_requirements(selector)


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Whether ``labels`` satisfy the selector; ``None`` matches nothing and ``{}`` everything."""
    if selector is None:
        return False
    have = labels or {}
    return all(_matches(key, op, values, have) for key, op, values in _label_requirements(selector))


def node_fields(node: Mapping[str, Any]) -> dict[str, str]:
    """The fields a node selector term can match on (``metadata.name``)."""
    return {METADATA_NAME_FIELD: str((node.get("metadata") or {}).get("name", ""))}


def _field_requirement(expr: Any) -> tuple[str, str, str]:
    if not isinstance(expr, Mapping):
        raise SelectorError("a match field must be an object")
    key = expr.get("key")
    if key != METADATA_NAME_FIELD:
        raise SelectorError(f"{key!r} is not a valid field selector key")
    operator = expr.get("operator")
    if operator not in ("In", "NotIn"):
        raise SelectorError(f"{key}: {operator!r} is not a supported field selector operator")
    values = expr.get("values") or []
    if len(values) != 1 or not isinstance(values[0], str):
        raise SelectorError(f"{key}: must have one element")
    return key, operator, values[0]


def validate_node_selector_term(term: Mapping[str, Any]) -> None:
    """Raise :class:`SelectorError` when the term is malformed."""
    for expr in term.get("matchExpressions") or ():
        _requirement(expr, _NODE_OPERATORS)
    for expr in term.get("matchFields") or ():
        _field_requirement(expr)


def node_selector_term_matches(
    term: Mapping[str, Any], labels: Mapping[str, str] | None, fields: Mapping[str, str] | None = None
) -> bool:
    """One ``NodeSelectorTerm``; raises :class:`SelectorError` when it is malformed."""
    expressions = term.get("matchExpressions") or ()
    match_fields = term.get("matchFields") or ()
    if not expressions and not match_fields:
        return False
    have = labels or {}
    requirements = [_requirement(expr, _NODE_OPERATORS) for expr in expressions]
    field_requirements = [_field_requirement(expr) for expr in match_fields]
    if not all(_matches(key, op, values, have) for key, op, values in requirements):
        return False
    have_fields = fields or {}
    for key, operator, value in field_requirements:
        equal = have_fields.get(key) == value
        if equal != (operator == "In"):
            return False
    return True


def node_selector_matches(
    selector: Mapping[str, Any], labels: Mapping[str, str] | None, fields: Mapping[str, str] | None = None
) -> bool:
    """A ``NodeSelector``: true when any term matches; malformed terms are skipped."""
    for term in selector.get("nodeSelectorTerms") or ():
        try:
            if node_selector_term_matches(term, labels, fields):
                return True
        except SelectorError:
            continue
    return False
