"""AdmissionReview wire format: decoding requests and encoding responses (v1 and v1beta1).

The kube-apiserver POSTs an ``admission.k8s.io/v1`` (or ``v1beta1``) AdmissionReview and
expects one of the same version back. Both versions share one shape, so one decoder serves
both and the response is written in the version that was received.

Everything that can go wrong with a request body becomes a :class:`ReviewError`; the
dispatcher turns it into an error AdmissionReview (``allowed: false``, ``status.code:
400``), exactly as controller-runtime answers a body it cannot decode. Responses follow
controller-runtime's conventions, which the apiserver relays to clients:

* :func:`allowed` -- ``{"allowed": true, "status": {"code": 200}}``;
* :func:`patched` -- allowed with a base64 JSON patch and ``patchType: JSONPatch``;
* :func:`errored` -- ``allowed: false`` with ``status.code`` (400 for invalid objects, 500
  for internal failures) and the error text as ``status.message``;
* :func:`denied` -- ``allowed: false``, ``403``/``Forbidden`` (``ValidationResponse(false)``).

Nesting: a request whose fields nest JSON objects and arrays more than
:data:`MAX_NESTING_DEPTH` levels deep is refused right after decoding (Kubernetes objects
nest about 15 levels; the handlers, the JSON patch and the encoder recurse, and would fail
deep inside with a RecursionError). The check walks the decoded request level by level,
without recursion, and is skipped when the body holds too few brackets to nest that deep.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from controlplane.manager.webhooks.objects import json_type
from koordinator.api.jsonutil import nested_deeper

__all__ = [
    "ADMISSION_GROUP",
    "MAX_NESTING_DEPTH",
    "OPERATIONS",
    "SUPPORTED_VERSIONS",
    "AdmissionRequest",
    "AdmissionResponse",
    "ReviewError",
    "allowed",
    "decode_review",
    "denied",
    "encode_review",
    "errored",
    "patched",
]

ADMISSION_GROUP = "admission.k8s.io"
V1 = f"{ADMISSION_GROUP}/v1"
V1BETA1 = f"{ADMISSION_GROUP}/v1beta1"
SUPPORTED_VERSIONS = (V1, V1BETA1)
KIND = "AdmissionReview"
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
#: The deepest nesting of objects and arrays accepted in a request field (``object`` is
#: level 1, ``object.metadata`` level 2, ...).
MAX_NESTING_DEPTH = 100

Obj = dict[str, Any]


class ReviewError(ValueError):
    """A request body that is not a usable AdmissionReview (answered with status code 400).

    ``api_version`` is the review version when it could be read, so the error review is
    written in the version the caller speaks.
    """

    def __init__(self, message: str, api_version: str = V1, uid: str = "") -> None:
        super().__init__(message)
        self.api_version = api_version
        self.uid = uid


@dataclass(slots=True)
class AdmissionRequest:
    """The decoded ``request`` of an AdmissionReview; handlers read it and never change it.

    ``object`` and ``old_object`` are the raw JSON objects (``None`` when absent: no
    ``oldObject`` on CREATE, no ``object`` on DELETE). Not a frozen dataclass: one is made
    for every request, and a frozen one costs five times as much to make.
    """

    api_version: str
    uid: str
    operation: str
    kind: Mapping[str, str]
    resource: Mapping[str, str]
    sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    user_info: Mapping[str, Any] = field(default_factory=dict)
    object: Obj | None = None
    old_object: Obj | None = None
    dry_run: bool = False
    options: Obj | None = None

    @property
    def resource_name(self) -> str:
        """The plural resource name (``pods``, ``elasticquotas`` ...)."""
        return str(self.resource.get("resource", ""))

    @property
    def username(self) -> str:
        return str(self.user_info.get("username", ""))


@dataclass(slots=True)
class AdmissionResponse:
    """What a webhook answers; :func:`encode_review` puts it on the wire."""

    allowed: bool
    code: int = 200
    message: str = ""
    reason: str = ""
    patch: list[Obj] | None = None
    warnings: list[str] = field(default_factory=list)

    def status(self) -> Obj:
        """The ``metav1.Status`` as Go marshals it (``metadata`` is always present)."""
        status: Obj = {"metadata": {}}
        if self.message:
            status["message"] = self.message
        if self.reason:
            status["reason"] = self.reason
        status["code"] = self.code
        return status

    def to_dict(self, uid: str) -> Obj:
        body: Obj = {"uid": uid, "allowed": self.allowed, "status": self.status()}
        if self.patch:
            body["patch"] = binascii.b2a_base64(orjson.dumps(self.patch), newline=False).decode("ascii")
            body["patchType"] = "JSONPatch"
        if self.warnings:
            body["warnings"] = list(self.warnings)
        return body


def allowed(message: str = "") -> AdmissionResponse:
    return AdmissionResponse(True, 200, message)


def patched(operations: Sequence[Obj], warnings: Sequence[str] = ()) -> AdmissionResponse:
    """Allowed with a JSON patch; an empty patch is a plain :func:`allowed`."""
    return AdmissionResponse(True, 200, patch=list(operations) or None, warnings=list(warnings))


def errored(code: int, message: str) -> AdmissionResponse:
    """``admission.Errored(code, err)``: refused, the error text as the status message."""
    return AdmissionResponse(False, code, message)


def denied(message: str) -> AdmissionResponse:
    """``admission.ValidationResponse(false, message)``: 403 Forbidden."""
    return AdmissionResponse(False, 403, message, reason="Forbidden")


# ---- decoding ----------------------------------------------------------------------------------


def _string(request: Mapping[str, Any], key: str, api_version: str, uid: str) -> str:
    value = request.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ReviewError(f"request.{key}: expected a string, got {json_type(value)}", api_version, uid)
    return value


def _group_version(
    request: Mapping[str, Any], key: str, names: tuple[str, ...], api_version: str, uid: str
) -> dict[str, str]:
    value = request.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ReviewError(f"request.{key}: expected an object, got {json_type(value)}", api_version, uid)
    out: dict[str, str] = {}
    for name in names:
        item = value.get(name)
        if item is None:
            continue
        if not isinstance(item, str):
            raise ReviewError(
                f"request.{key}.{name}: expected a string, got {json_type(item)}", api_version, uid
            )
        out[name] = item
    return out


def _raw_object(request: Mapping[str, Any], key: str, api_version: str, uid: str) -> Obj | None:
    value = request.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ReviewError(f"request.{key}: expected a JSON object, got {json_type(value)}", api_version, uid)
    return value


_STRINGS = ("uid", "operation", "subResource", "name", "namespace")
_KIND_NAMES = ("group", "version", "kind")
_RESOURCE_NAMES = ("group", "version", "resource")


def _names(value: Any, names: tuple[str, ...]) -> dict[str, str] | None:
    """:func:`_group_version` of a well-typed value; ``None`` for one it would refuse."""
    if value is None:
        return {}
    if type(value) is not dict:
        return None
    out: dict[str, str] = {}
    for name in names:
        item = value.get(name)
        if item is not None:
            if type(item) is not str:
                return None
            out[name] = item
    return out


def _well_typed(request: dict[str, Any], api_version: str) -> AdmissionRequest | None:
    """The request when every field has the type it should (the apiserver's always do).

    ``None`` sends a request to the field-by-field checks, which name what is wrong; this
    accepts exactly what they accept, in fewer steps.
    """
    get = request.get
    strings: list[str] = []
    for key in _STRINGS:
        value = get(key)
        if value is None:
            strings.append("")
        elif type(value) is str:
            strings.append(value)
        else:
            return None
    uid, operation, sub_resource, name, namespace = strings
    if operation not in OPERATIONS:
        return None
    user_info, dry_run = get("userInfo"), get("dryRun")
    obj, old, options = get("object"), get("oldObject"), get("options")
    if (
        (user_info is not None and type(user_info) is not dict)
        or (dry_run is not None and type(dry_run) is not bool)
        or (obj is not None and type(obj) is not dict)
        or (old is not None and type(old) is not dict)
        or (options is not None and type(options) is not dict)
    ):
        return None
    kind = _names(get("kind"), _KIND_NAMES)
    resource = _names(get("resource"), _RESOURCE_NAMES)
    if kind is None or resource is None:
        return None
    return AdmissionRequest(
        api_version,
        uid,
        operation,
        kind,
        resource,
        sub_resource,
        name,
        namespace,
        user_info or {},
        obj,
        old,
        bool(dry_run),
        options,
    )


def decode_review(body: bytes | bytearray) -> AdmissionRequest:
    """Parse an AdmissionReview body; raises :class:`ReviewError` with the reason."""
    if not body:
        raise ReviewError("request body is empty")
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"couldn't decode the AdmissionReview: {exc}") from None
    if not isinstance(review, dict):
        raise ReviewError(
            f"couldn't decode the AdmissionReview: expected a JSON object, got {json_type(review)}"
        )
    api_version = review.get("apiVersion")
    kind = review.get("kind")
    if not isinstance(api_version, str) or not api_version or not isinstance(kind, str) or not kind:
        raise ReviewError("couldn't get version/kind: apiVersion and kind must be set")
    if api_version not in SUPPORTED_VERSIONS or kind != KIND:
        raise ReviewError(
            f"unsupported review {api_version}, Kind={kind}: "
            f"expected {KIND} in {' or '.join(SUPPORTED_VERSIONS)}"
        )
    request = review.get("request")
    if request is None:
        raise ReviewError("got an empty AdmissionRequest", api_version)
    if not isinstance(request, dict):
        raise ReviewError(f"request: expected an object, got {json_type(request)}", api_version)
    # ``request`` is level 1 of the count, its ``object`` level 2: MAX_NESTING_DEPTH levels below it
    deep = body.count(b"{") + body.count(b"[") > MAX_NESTING_DEPTH
    if deep and nested_deeper(request, MAX_NESTING_DEPTH + 1):
        uid = request.get("uid")
        raise ReviewError(
            f"object nesting exceeds {MAX_NESTING_DEPTH} levels", api_version, uid if type(uid) is str else ""
        )
    return _well_typed(request, api_version) or _checked_request(request, api_version)


def _checked_request(request: dict[str, Any], api_version: str) -> AdmissionRequest:
    """The request, field by field; raises :class:`ReviewError` naming the first wrong field."""
    uid_value = request.get("uid")
    uid = uid_value if isinstance(uid_value, str) else ""
    uid = _string(request, "uid", api_version, uid)
    operation = _string(request, "operation", api_version, uid)
    if operation not in OPERATIONS:
        raise ReviewError(
            f"request.operation: unsupported value {operation!r}: "
            "must be one of CREATE, UPDATE, DELETE, CONNECT",
            api_version,
            uid,
        )
    user_info = request.get("userInfo")
    if user_info is not None and not isinstance(user_info, dict):
        raise ReviewError(
            f"request.userInfo: expected an object, got {json_type(user_info)}", api_version, uid
        )
    dry_run = request.get("dryRun")
    if dry_run is not None and not isinstance(dry_run, bool):
        raise ReviewError(f"request.dryRun: expected a bool, got {json_type(dry_run)}", api_version, uid)
    return AdmissionRequest(
        api_version=api_version,
        uid=uid,
        operation=operation,
        kind=_group_version(request, "kind", ("group", "version", "kind"), api_version, uid),
        resource=_group_version(request, "resource", ("group", "version", "resource"), api_version, uid),
        sub_resource=_string(request, "subResource", api_version, uid),
        name=_string(request, "name", api_version, uid),
        namespace=_string(request, "namespace", api_version, uid),
        user_info=user_info or {},
        object=_raw_object(request, "object", api_version, uid),
        old_object=_raw_object(request, "oldObject", api_version, uid),
        dry_run=bool(dry_run),
        options=_raw_object(request, "options", api_version, uid),
    )


def encode_review(api_version: str, uid: str, response: AdmissionResponse) -> bytes:
    """The AdmissionReview carrying ``response``, in ``api_version``."""
    return orjson.dumps(review_dict(api_version, uid, response))


def review_dict(api_version: str, uid: str, response: AdmissionResponse) -> Obj:
    return {"apiVersion": api_version, "kind": KIND, "response": response.to_dict(uid)}
