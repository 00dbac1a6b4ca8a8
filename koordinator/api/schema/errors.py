"""Field errors worded like the apiserver's (``k8s.io/apimachinery/pkg/util/validation/field``).

``str(error)`` gives ``spec.ttl: Invalid value: "12 hours": spec.ttl in body should match ...``,
the text a 422 response carries; :attr:`FieldError.reason` is the ``StatusCause`` reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["ErrorType", "FieldError"]


class ErrorType(StrEnum):
    """The ``field.ErrorType`` values (their string is the StatusCause reason)."""

    NOT_FOUND = "FieldValueNotFound"
    REQUIRED = "FieldValueRequired"
    DUPLICATE = "FieldValueDuplicate"
    INVALID = "FieldValueInvalid"
    NOT_SUPPORTED = "FieldValueNotSupported"
    FORBIDDEN = "FieldValueForbidden"
    TOO_LONG = "FieldValueTooLong"
    TOO_MANY = "FieldValueTooMany"
    INTERNAL = "InternalError"
    TYPE_INVALID = "FieldValueTypeInvalid"

    @property
    def text(self) -> str:
        return _TEXT[self]


_TEXT = {
    ErrorType.NOT_FOUND: "Not found",
    ErrorType.REQUIRED: "Required value",
    ErrorType.DUPLICATE: "Duplicate value",
    ErrorType.INVALID: "Invalid value",
    ErrorType.NOT_SUPPORTED: "Unsupported value",
    ErrorType.FORBIDDEN: "Forbidden",
    ErrorType.TOO_LONG: "Too long",
    ErrorType.TOO_MANY: "Too many",
    ErrorType.INTERNAL: "Internal error",
    ErrorType.TYPE_INVALID: "Invalid value",
}
_NO_VALUE = frozenset({ErrorType.REQUIRED, ErrorType.FORBIDDEN, ErrorType.TOO_LONG, ErrorType.INTERNAL})
_OMIT = object()


def _render(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One validation failure at a field path (``spec.owners[0].labelSelector``)."""

    type: ErrorType
    field: str
    bad_value: Any = _OMIT
    detail: str = ""

    @property
    def reason(self) -> str:
        return str(self.type)

    def body(self) -> str:
        """``field.Error.ErrorBody``: the message without the field path."""
        if self.type in _NO_VALUE or self.bad_value is _OMIT:
            text = self.type.text
        else:
            text = f"{self.type.text}: {_render(self.bad_value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    @classmethod
    def required(cls, path: str, detail: str = "") -> FieldError:
        return cls(ErrorType.REQUIRED, path, detail=detail)

    @classmethod
    def invalid(cls, path: str, value: Any, detail: str) -> FieldError:
        return cls(ErrorType.INVALID, path, value, detail)

    @classmethod
    def not_supported(cls, path: str, value: Any, supported: list[Any]) -> FieldError:
        listed = ", ".join(_render(v) for v in supported)
        return cls(ErrorType.NOT_SUPPORTED, path, value, f"supported values: {listed}")

    @classmethod
    def forbidden(cls, path: str, detail: str) -> FieldError:
        return cls(ErrorType.FORBIDDEN, path, detail=detail)

    @classmethod
    def duplicate(cls, path: str, value: Any) -> FieldError:
        return cls(ErrorType.DUPLICATE, path, value)
