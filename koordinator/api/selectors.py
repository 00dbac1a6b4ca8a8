"""Label, node and field selectors: the one place that validates, parses, matches and builds them.

``metav1.LabelSelector`` and ``v1.NodeSelector`` dicts (the API objects) are matched
against labels and fields here, and so are the query-string selectors of list and watch
requests (:class:`LabelSelector`, :class:`FieldSelector`), which share the dicts' key and
value checks and their requirement matching.

Label selectors (``matchLabels`` plus ``matchExpressions`` with ``In``, ``NotIn``, ``Exists``,
``DoesNotExist``) follow ``metav1.LabelSelectorAsSelector``: ``None`` matches nothing, ``{}``
matches everything, and a malformed selector raises :class:`SelectorError`.

Node selectors follow ``component-helpers/scheduling/corev1/nodeaffinity``: terms are ORed,
a term ANDs its ``matchExpressions`` (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``,
``Lt``) and ``matchFields`` (only ``metadata.name`` with ``In``/``NotIn`` and one value), an
empty term matches nothing, and a malformed term never matches (the other terms still can).

Query strings follow ``k8s.io/apimachinery/pkg/labels``: ``a=b``, ``a==b``, ``a!=b``,
``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``, ``a>1``, ``a<1``, comma-separated (AND).
A ``metav1.LabelSelector`` dict converts to the same form. Field selectors are
``field=value``, ``field==value`` or ``field!=value``, with ``\\`` escaping ``,``, ``=``,
``!`` and ``\\`` inside values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from koordinator.api.goparse import GoParseError, parse_int

__all__ = [
    "FieldRequirement",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "SelectorError",
    "field_selector",
    "label_selector",
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
    """A selector (dict or query string) that Kubernetes would refuse to evaluate."""


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
    return tuple(_check_value(key, value) for value in values)


def _check_value(key: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _VALUE.match(value):
        raise SelectorError(f"{key}: invalid label value {value!r}")
    return value


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


# --- query-string selectors (list and watch requests) ---------------------------


@dataclass(frozen=True, slots=True)
class Requirement:
    """One label requirement; ``op``: ``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!``, ``gt``, ``lt``."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return _matches(self.key, _OPERATOR_NAMES[self.op], self.values, labels)

    def __str__(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!":
            return f"!{self.key}"
        if self.op in ("in", "notin"):
            return f"{self.key} {self.op} ({','.join(sorted(self.values))})"
        if self.op in ("gt", "lt"):
            return f"{self.key}{'>' if self.op == 'gt' else '<'}{self.values[0]}"
        return f"{self.key}{self.op}{self.values[0]}"


#: a :class:`Requirement` op -> the ``matchExpressions`` operator it means (``=`` is a one-value ``In``)
_OPERATOR_NAMES = {
    "=": "In",
    "in": "In",
    "!=": "NotIn",
    "notin": "NotIn",
    "exists": "Exists",
    "!": "DoesNotExist",
    "gt": "Gt",
    "lt": "Lt",
}
_STRING_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
_TOKEN = re.compile(r"\s*(==|!=|=|\(|\)|,|!|>|<|[^\s=!(),<>]+)")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """An AND of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if not text or not text.strip():
            return cls()
        tokens = [m.group(1) for m in _TOKEN.finditer(text)]
        if "".join(tokens) != re.sub(r"\s+", "", text):
            raise SelectorError(f"unable to parse label selector {text!r}")
        reqs: list[Requirement] = []
        i = 0

        def take() -> str:
            nonlocal i
            if i >= len(tokens):
                raise SelectorError(f"unable to parse requirement: unexpected end of {text!r}")
            tok = tokens[i]
            i += 1
            return tok

        while i < len(tokens):
            tok = take()
            if tok == "!":
                reqs.append(Requirement(_check_key(take()), "!"))
            else:
                key = _check_key(tok)
                if i >= len(tokens) or tokens[i] == ",":
                    reqs.append(Requirement(key, "exists"))
                else:
                    op = take()
                    if op in ("=", "==", "!="):
                        value = ""
                        if i < len(tokens) and tokens[i] != ",":
                            value = take()
                        reqs.append(
                            Requirement(key, "=" if op != "!=" else "!=", (_check_value(key, value),))
                        )
                    elif op in ("in", "notin"):
                        if take() != "(":
                            raise SelectorError(f"unable to parse requirement: expected '(' in {text!r}")
                        values: list[str] = []
                        while True:
                            tok = take()
                            if tok == ")":
                                break
                            if tok == ",":
                                continue
                            values.append(_check_value(key, tok))
                        reqs.append(Requirement(key, op, tuple(values)))
                    elif op in (">", "<"):
                        value = take()
                        try:
                            parse_int(value)
                        except GoParseError:
                            raise SelectorError(f"{value!r} is not an integer in {text!r}") from None
                        reqs.append(Requirement(key, "gt" if op == ">" else "lt", (value,)))
                    else:
                        raise SelectorError(f"unable to parse requirement: unexpected {op!r} in {text!r}")
            if i < len(tokens):
                if tokens[i] != ",":
                    raise SelectorError(f"unable to parse requirement: expected ',' in {text!r}")
                i += 1
                if i == len(tokens):
                    raise SelectorError(f"unable to parse requirement: trailing ',' in {text!r}")
        return cls(tuple(reqs))

    @classmethod
    def from_dict(cls, selector: Mapping[str, Any] | None) -> LabelSelector:
        """Convert a ``metav1.LabelSelector``; ``None`` matches nothing in Kubernetes, so it is rejected."""
        if selector is None:
            raise SelectorError("a nil LabelSelector selects nothing; pass {} to select everything")
        requirements = _label_requirements(selector)  # matchLabels first, then matchExpressions
        n_labels = len(selector.get("matchLabels") or {})
        equal = sorted(requirements[:n_labels])
        return cls(
            (
                *(Requirement(key, "=", values) for key, _, values in equal),
                *(Requirement(key, _STRING_OPS[op], values) for key, op, values in requirements[n_labels:]),
            )
        )


def label_selector(match: Mapping[str, str] | None = None, expressions: Sequence[Requirement] = ()) -> str:
    """Build a selector string from equality pairs plus further requirements."""
    reqs = [Requirement(k, "=", (v,)) for k, v in sorted((match or {}).items())]
    return str(LabelSelector((*reqs, *expressions)))


# --- field selectors ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        have = fields.get(self.field, "")
        return have == self.value if self.op == "=" else have != self.value


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace("!", "\\!")


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(r.field for r in self.requirements)

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(r.matches(fields) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(f"{r.field}{r.op}{_escape(r.value)}" for r in self.requirements)

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector:
        if not text:
            return cls()
        parts: list[str] = []
        current: list[str] = []
        escaped = False
        for ch in text:
            if escaped:
                current.append("\\" + ch)
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == ",":
                parts.append("".join(current))
                current = []
            else:
                current.append(ch)
        if escaped:
            raise SelectorError(f"invalid field selector {text!r}: trailing backslash")
        parts.append("".join(current))
        reqs = []
        for part in parts:
            match = re.match(r"^((?:[^=!\\]|\\.)+?)(==|!=|=)(.*)$", part)
            if not match:
                raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
            field, op, raw = match.groups()
            value = re.sub(r"\\(.)", r"\1", raw)
            reqs.append(FieldRequirement(field.strip(), "!=" if op == "!=" else "=", value))
        return cls(tuple(reqs))


def field_selector(**equal: str) -> str:
    """``field_selector(**{"spec.nodeName": "n1"})`` -> ``spec.nodeName=n1`` (values escaped)."""
    return str(FieldSelector(tuple(FieldRequirement(k, "=", v) for k, v in sorted(equal.items()))))
