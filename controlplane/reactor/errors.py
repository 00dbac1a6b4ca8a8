"""How a reconcile failed: temporary (retry with backoff) or permanent (wait for a change).

Controllers raise :class:`TemporaryError` or :class:`PermanentError` for failures they
understand; everything else is classified by :func:`is_temporary`:

* temporary: a lost or refused connection, a timeout, 409 Conflict (a newer version
  exists), 429 (throttled), 5xx, 401 (the token is refreshed on the next call), 403 (RBAC
  may be fixed without any watched object changing, so keep retrying with backoff) and 404
  (the object vanished between the cache and the call; the next attempt sees the cache
  catch up);
* permanent: the apiserver refused what was sent (400, 405, 406, 413, 415, 422) -- the
  same request would be refused again -- and any other exception, which is a bug: retrying
  a deterministic failure would only repeat it. The key is reconciled again when one of
  its watched objects changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.kube.errors import ApiConnectionError, ApiError

__all__ = ["PermanentError", "ReconcileError", "TemporaryError", "is_temporary"]

_TEMPORARY_CODES = frozenset({401, 403, 404, 408, 409, 410, 429})


class ReconcileError(Exception):
    """A reconcile failure the controller describes itself."""


class TemporaryError(ReconcileError):
    """Retry later: with backoff, or after ``retry_after`` seconds when given."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(ReconcileError):
    """Do not retry until an input changes; ``involved`` (an object dict) gets a Warning Event.

    ``kind`` names the involved object's kind when the dict does not carry it (informer
    records of built-in kinds come without ``kind``).
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str = "ReconcileFailed",
        involved: Mapping[str, Any] | None = None,
        kind: str = "",
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.involved = involved
        self.kind = kind


def is_temporary(error: BaseException) -> bool:
    """Whether retrying the same reconcile later can succeed."""
    if isinstance(error, TemporaryError):
        return True
    if isinstance(error, PermanentError):
        return False
    if isinstance(error, ApiConnectionError | TimeoutError | ConnectionError):
        return True
    if isinstance(error, ApiError):
        return error.code in _TEMPORARY_CODES or error.code >= 500
    return False
