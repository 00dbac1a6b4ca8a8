"""Evaluation of ``x-kubernetes-validations`` CEL rules with cel-python.

A rule sees the value of its schema node as ``self`` (and the previous value as ``oldSelf``
for transition rules, which only run on updates where an old value exists). Compiled
programs are cached by rule text. :func:`evaluate` returns ``True``/``False`` for a verdict
and raises :class:`CELError` when the rule cannot be compiled or evaluated (a missing key
without ``has()``, a type mismatch), which the apiserver also reports as an invalid value.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import celpy

__all__ = ["CELError", "CELUnavailableError", "available", "evaluate", "is_transition_rule"]

#: the extra that installs cel-python (the node agent can do without: the apiserver
#: evaluates a CRD's rules before an object is stored)
EXTRA = "koordinator-py[cel]"


class CELError(ValueError):
    """A rule that does not compile, or fails while evaluating."""


class CELUnavailableError(CELError):
    """cel-python is not installed, so no rule can be evaluated."""


@cache
def available() -> bool:
    """Whether cel-python can be imported (looked up once)."""
    try:
        import celpy  # noqa: F401  (deferred: an optional dependency)
    except ImportError:
        return False
    return True


@cache
def _environment() -> celpy.Environment:
    if not available():
        raise CELUnavailableError(f"cel-python is not installed (install {EXTRA})")
    import celpy

    return celpy.Environment()


@cache
def _program(rule: str) -> celpy.Runner:
    from celpy.celparser import CELParseError

    env = _environment()
    try:
        return env.program(env.compile(rule))
    except CELParseError as exc:
        raise CELError(f"compilation failed: {exc}") from None


def is_transition_rule(rule: str) -> bool:
    """Whether the rule reads ``oldSelf`` (and so only applies to updates)."""
    return "oldSelf" in rule


def evaluate(rule: str, value: Any, old: Any = None) -> bool:
    """The verdict of ``rule`` with ``self`` bound to ``value`` (and ``oldSelf`` to ``old``);
    raises :class:`CELUnavailableError` when cel-python is not installed."""
    program = _program(rule)
    from celpy.adapter import json_to_cel
    from celpy.celtypes import BoolType
    from celpy.evaluation import CELEvalError

    activation: dict[str, Any] = {"self": json_to_cel(value)}
    if old is not None:
        activation["oldSelf"] = json_to_cel(old)
    try:
        result = program.evaluate(activation)
    except CELEvalError as exc:
        raise CELError(str(exc.args[0] if exc.args else exc)) from None
    if isinstance(result, CELEvalError):
        raise CELError(str(result.args[0] if result.args else result))
    if not isinstance(result, BoolType):
        raise CELError(f"rule returned {type(result).__name__}, not a bool")
    return bool(result)
