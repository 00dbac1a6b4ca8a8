"""Failure ``Status`` objects the fake apiserver returns, worded as the real one words them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Cause:
    reason: str
    message: str
    field: str = ""

    def as_dict(self) -> dict[str, str]:
        out = {"reason": self.reason, "message": self.message}
        if self.field:
            out["field"] = self.field
        return out


class StatusError(Exception):
    """A failure the fake answers with ``code`` and a ``Status`` body."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after: int | None = (details or {}).get("retryAfterSeconds")

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(name: str | None, plural: str, group: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = plural
    details.update(extra)
    return details


def _qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> StatusError:
    return StatusError(
        404, "NotFound", f'{_qualified(plural, group)} "{name}" not found', _details(name, plural, group)
    )


def already_exists(plural: str, group: str, name: str) -> StatusError:
    return StatusError(
        409,
        "AlreadyExists",
        f'{_qualified(plural, group)} "{name}" already exists',
        _details(name, plural, group),
    )


def conflict(plural: str, group: str, name: str, why: str) -> StatusError:
    return StatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}',
        _details(name, plural, group),
    )


MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, group: str, name: str, causes: Sequence[Cause]) -> StatusError:
    qualified = f"{kind}.{group}" if group else kind
    rendered = [f"{c.field}: {c.message}" if c.field else c.message for c in causes]
    summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [c.as_dict() for c in causes]
    return StatusError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def forbidden(plural: str, group: str, name: str, why: str, causes: Sequence[Cause] = ()) -> StatusError:
    details = _details(name, plural, group)
    if causes:
        details["causes"] = [c.as_dict() for c in causes]
    return StatusError(403, "Forbidden", f'{_qualified(plural, group)} "{name}" is forbidden: {why}', details)


def gone(message: str) -> StatusError:
    return StatusError(410, "Expired", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> StatusError:
    return StatusError(405, "MethodNotAllowed", message)


def unsupported_media_type(message: str) -> StatusError:
    return StatusError(415, "UnsupportedMediaType", message)


def internal(message: str) -> StatusError:
    return StatusError(500, "InternalError", message, {"causes": [{"message": message}]})


def too_many_requests(
    message: str, causes: Sequence[Cause] = (), retry_after: int | None = None
) -> StatusError:
    details: dict[str, Any] = {}
    if causes:
        details["causes"] = [c.as_dict() for c in causes]
    if retry_after is not None:
        details["retryAfterSeconds"] = retry_after
    return StatusError(429, "TooManyRequests", message, details or None)


def invalid_patch() -> StatusError:
    return StatusError(422, "Invalid", "the server rejected our request due to an error in our request", {})
