"""Label and field selectors: parse the query-string syntax, match objects, build strings.

Label selectors follow ``k8s.io/apimachinery/pkg/labels``: ``a=b``, ``a==b``, ``a!=b``,
``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``, ``a>1``, ``a<1``, comma-separated (AND).
A ``metav1.LabelSelector`` dict (``matchLabels`` / ``matchExpressions``) converts to the same
form. Field selectors are ``field=value``, ``field==value`` or ``field!=value``, with ``\\``
escaping ``,``, ``=``, ``!`` and ``\\`` inside values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    """A selector string or LabelSelector dict that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One label requirement; ``op``: ``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!``, ``gt``, ``lt``."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        if op in ("=", "in"):
            return self.key in labels and labels[self.key] in self.values
        if op in ("!=", "notin"):
            return self.key not in labels or labels[self.key] not in self.values
        value = labels.get(self.key)
        if value is None:
            return False
        try:
            have, want = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > want if op == "gt" else have < want

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


_LABEL_KEY = re.compile(
    r"^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_TOKEN = re.compile(r"\s*(==|!=|=|\(|\)|,|!|>|<|[^\s=!(),<>]+)")


def _check_key(key: str) -> str:
    if not _LABEL_KEY.match(key) or len(key.rpartition("/")[2]) > 63:
        raise SelectorError(f"invalid label key {key!r}")
    return key


def _check_value(value: str) -> str:
    if not _LABEL_VALUE.match(value):
        raise SelectorError(f"invalid label value: {value!r}")
    return value


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
                        reqs.append(Requirement(key, "=" if op != "!=" else "!=", (_check_value(value),)))
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
                            values.append(_check_value(tok))
                        reqs.append(Requirement(key, op, tuple(values)))
                    elif op in (">", "<"):
                        value = take()
                        try:
                            int(value)
                        except ValueError:
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
        reqs: list[Requirement] = []
        for key, value in sorted((selector.get("matchLabels") or {}).items()):
            reqs.append(Requirement(_check_key(key), "=", (_check_value(str(value)),)))
        operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
        for expr in selector.get("matchExpressions") or ():
            op = operators.get(expr.get("operator", ""))
            if op is None:
                raise SelectorError(f"{expr.get('operator')!r} is not a valid label selector operator")
            values = tuple(str(v) for v in expr.get("values") or ())
            if op in ("in", "notin") and not values:
                raise SelectorError(f"values must be non-empty for operator {expr['operator']}")
            if op in ("exists", "!") and values:
                raise SelectorError(f"values must be empty for operator {expr['operator']}")
            reqs.append(Requirement(_check_key(str(expr.get("key", ""))), op, values))
        return cls(tuple(reqs))


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
