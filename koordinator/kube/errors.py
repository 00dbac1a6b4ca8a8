"""Typed API errors, parsed from the ``Status`` object the apiserver returns.

The class is chosen from the HTTP code and, where a code is shared (409 is both
AlreadyExists and Conflict), from ``Status.reason``. Every error keeps the whole Status,
its causes (``field``, ``reason``, ``message``) and ``retryAfterSeconds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class StatusCause:
    """One entry of ``Status.details.causes``; ``reason`` is the Go ``CauseType``."""

    reason: str
    message: str
    field: str


class KubeError(Exception):
    """Base of every error raised by :mod:`koordinator.kube`."""


class ApiConnectionError(KubeError):
    """The request never got an HTTP answer (refused, reset, TLS, timeout)."""


class NotLeaderError(ApiConnectionError):
    """A write refused before it was sent: the leader lease that fences it is no longer held.

    Raised by a client's write guard (:meth:`koordinator.kube.client.ApiClient.with_write_guard`)
    when this process has not renewed its lease within the renew deadline, or has seen
    another holder take it. Nothing reached the apiserver, so, like a refused connection, it
    is a transient failure for whoever retries; the leader steps down at once, so a retry
    happens, if at all, in a later term.
    """


class ApiError(KubeError):
    """The apiserver answered with a failure ``Status``."""

    code: int = 0

    def __init__(self, status: dict[str, Any], code: int | None = None) -> None:
        self.status = status
        self.code = int(code if code is not None else status.get("code") or self.code)
        self.reason = str(status.get("reason") or "")
        self.message = str(status.get("message") or "")
        details = status.get("details") or {}
        self.details: dict[str, Any] = details if isinstance(details, dict) else {}
        self.causes = tuple(
            StatusCause(str(c.get("reason", "")), str(c.get("message", "")), str(c.get("field", "")))
            for c in self.details.get("causes") or ()
            if isinstance(c, dict)
        )
        retry = self.details.get("retryAfterSeconds")
        self.retry_after: float | None = float(retry) if isinstance(retry, int | float) else None
        super().__init__(f"{self.code} {self.reason or 'Failure'}: {self.message}")


class BadRequestError(ApiError):
    code = 400


class UnauthorizedError(ApiError):
    code = 401


class ForbiddenError(ApiError):
    code = 403


class NotFoundError(ApiError):
    code = 404


class MethodNotAllowedError(ApiError):
    code = 405


class NotAcceptableError(ApiError):
    code = 406


class ConflictError(ApiError):
    """409 with reason Conflict: optimistic-concurrency or apply conflict, failed precondition."""

    code = 409


class AlreadyExistsError(ConflictError):
    """409 with reason AlreadyExists (a subclass of :class:`ConflictError`, as the HTTP code is shared)."""


class GoneError(ApiError):
    """410: the requested resourceVersion (or continue token) is too old; relist."""

    code = 410


class RequestEntityTooLargeError(ApiError):
    code = 413


class UnsupportedMediaTypeError(ApiError):
    code = 415


class InvalidError(ApiError):
    """422: the object failed validation; :attr:`causes` names each bad field."""

    code = 422


class TooManyRequestsError(ApiError):
    """429: throttled by the server, or refused by a PodDisruptionBudget on eviction."""

    code = 429


class InternalError(ApiError):
    code = 500


class ServiceUnavailableError(ApiError):
    code = 503


class ServerTimeoutError(ApiError):
    """504 (reason Timeout), or 500 with reason ServerTimeout."""

    code = 504


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    406: NotAcceptableError,
    409: ConflictError,
    410: GoneError,
    413: RequestEntityTooLargeError,
    415: UnsupportedMediaTypeError,
    422: InvalidError,
    429: TooManyRequestsError,
    500: InternalError,
    503: ServiceUnavailableError,
    504: ServerTimeoutError,
}


def error_from_status(status: dict[str, Any], code: int | None = None) -> ApiError:
    """The typed error for a failure ``Status`` (``code`` overrides ``status.code``)."""
    http_code = int(code if code is not None else status.get("code") or 500)
    reason = status.get("reason")
    cls: type[ApiError]
    if http_code == 409 and reason == "AlreadyExists":
        cls = AlreadyExistsError
    elif reason == "ServerTimeout" or reason == "Timeout":
        cls = ServerTimeoutError
    elif reason == "Expired" or reason == "Gone":
        cls = GoneError
    else:
        cls = _BY_CODE.get(http_code, ApiError)
    return cls(status, http_code)


def error_from_response(code: int, body: bytes, retry_after_header: str | None = None) -> ApiError:
    """Parse a failed HTTP response; a body that is not a Status becomes a synthetic one."""
    status: dict[str, Any]
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("kind") == "Status":
        status = parsed
    else:
        text = body.decode("utf-8", "replace").strip()
        status = {"kind": "Status", "status": "Failure", "code": code, "message": text or f"HTTP {code}"}
    if retry_after_header and "retryAfterSeconds" not in (status.get("details") or {}):
        try:
            seconds = int(retry_after_header)
        except ValueError:
            seconds = None
        if seconds is not None:
            status = {**status, "details": {**(status.get("details") or {}), "retryAfterSeconds": seconds}}
    return error_from_status(status, code)
