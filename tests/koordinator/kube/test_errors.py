"""Typed errors from Status objects and from bodies that are not one."""

from __future__ import annotations

import orjson
import pytest

from koordinator.kube.errors import (
    AlreadyExistsError,
    ApiError,
    ConflictError,
    GoneError,
    InvalidError,
    NotFoundError,
    ServerTimeoutError,
    TooManyRequestsError,
    UnauthorizedError,
    error_from_response,
    error_from_status,
)


def status(code: int, reason: str, **details: object) -> dict[str, object]:
    return {
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": "m",
        "details": details,
    }


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        pytest.param(404, "NotFound", NotFoundError, id="404"),
        pytest.param(409, "AlreadyExists", AlreadyExistsError, id="409-already-exists"),
        pytest.param(409, "Conflict", ConflictError, id="409-conflict"),
        pytest.param(410, "Expired", GoneError, id="410"),
        pytest.param(200, "Expired", GoneError, id="expired-in-a-watch-error-event"),
        pytest.param(422, "Invalid", InvalidError, id="422"),
        pytest.param(429, "TooManyRequests", TooManyRequestsError, id="429"),
        pytest.param(504, "Timeout", ServerTimeoutError, id="504"),
        pytest.param(500, "ServerTimeout", ServerTimeoutError, id="500-server-timeout"),
        pytest.param(401, "Unauthorized", UnauthorizedError, id="401"),
        pytest.param(418, "Teapot", ApiError, id="unknown-code"),
    ],
)
def test_error_class_from_status(code, reason, cls):
    error = error_from_status(status(code, reason))
    assert type(error) is cls
    assert error.reason == reason


def test_already_exists_is_a_conflict():
    assert isinstance(error_from_status(status(409, "AlreadyExists")), ConflictError)


def test_causes_and_retry_after():
    error = error_from_status(
        status(
            422,
            "Invalid",
            causes=[{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.x"}],
        )
    )
    assert [(c.reason, c.message, c.field) for c in error.causes] == [
        ("FieldValueRequired", "Required value", "spec.x")
    ]
    throttled = error_from_response(429, orjson.dumps(status(429, "TooManyRequests")), retry_after_header="7")
    assert throttled.retry_after == 7.0


def test_non_status_body_becomes_a_synthetic_status():
    error = error_from_response(503, b"upstream connect error")
    assert error.code == 503
    assert error.message == "upstream connect error"
