"""Shape checks for the objects a webhook decodes, with Go-decoder-like error messages.

Upstream decodes ``request.object`` into typed Go structs; a value of the wrong JSON type
(a number where a label value belongs, a quantity that does not parse) makes the decoder
fail and the webhook answer 400. These checks give the same outcome for the fields the
webhooks read or write, so handler code can rely on the types it touches and malformed
input never reaches it. ``null`` is accepted wherever Go accepts it (it decodes to the zero
value), except as an element of a list of objects (``containers: [null]``): Go would decode a
zero-value element that the apiserver's validation refuses anyway, and a patch could point
into it, so it is refused here. Unknown fields pass through untouched.

Each kind has one spec (:data:`POD`, :data:`ELASTIC_QUOTA`, :data:`NODE`, ...);
:func:`check` raises :class:`ObjectError` naming the JSON path of the first problem.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.quantity import Quantity, QuantityError

__all__ = [
    "CLUSTER_COLOCATION_PROFILE",
    "CONFIG_MAP",
    "ELASTIC_QUOTA",
    "ELASTIC_QUOTA_PROFILE",
    "NODE",
    "POD",
    "RESERVATION",
    "ObjectError",
    "check",
    "ensure_map",
    "quantity",
]

_INT32 = (-(1 << 31), (1 << 31) - 1)


class ObjectError(ValueError):
    """An object that the typed decoder would refuse; the message names the JSON path."""


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Quantity:
    return Quantity.from_json(text)


def quantity(raw: Any) -> Quantity:
    """``Quantity.from_json`` with the few spellings a cluster uses cached (Quantity is immutable)."""
    if isinstance(raw, str):
        return _parse_text(raw)
    return Quantity.from_json(raw)


@dataclass(frozen=True, slots=True)
class _Scalar:
    kind: str  # "string" | "bool" | "int32" | "number" | "quantity" | "any"


@dataclass(frozen=True, slots=True)
class _Object:
    fields: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class _Map:
    values: Any


@dataclass(frozen=True, slots=True)
class _List:
    items: Any


STRING = _Scalar("string")
BOOL = _Scalar("bool")
INT32 = _Scalar("int32")
QUANTITY = _Scalar("quantity")
ANY = _Scalar("any")


def obj(**fields: Any) -> _Object:
    return _Object(fields)


def map_of(values: Any) -> _Map:
    return _Map(values)


def list_of(items: Any) -> _List:
    return _List(items)


def json_type(value: Any) -> str:
    """The JSON type of a decoded value, as error messages name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _fail(path: str, expected: str, value: Any) -> ObjectError:
    return ObjectError(f"{path or '<root>'}: cannot decode {json_type(value)} as {expected}")


def _check(value: Any, spec: Any, path: str) -> None:
    if value is None:
        return
    if isinstance(spec, _Scalar):
        _check_scalar(value, spec.kind, path)
    elif isinstance(spec, _Object):
        if not isinstance(value, dict):
            raise _fail(path, "an object", value)
        for key, child in spec.fields.items():
            if key in value:
                _check(value[key], child, f"{path}.{key}" if path else key)
    elif isinstance(spec, _Map):
        if not isinstance(value, dict):
            raise _fail(path, "a map", value)
        for key, item in value.items():
            _check(item, spec.values, f"{path}[{key}]")
    elif isinstance(spec, _List):
        if not isinstance(value, list):
            raise _fail(path, "a list", value)
        for index, item in enumerate(value):
            if item is None and isinstance(spec.items, _Object):
                # Go would decode a zero-value element the apiserver then refuses; refuse it here,
                # so no patch ever points into an element that is null in the request.
                raise ObjectError(f"{path}[{index}]: cannot decode null as an object")
            _check(item, spec.items, f"{path}[{index}]")


def _check_scalar(value: Any, kind: str, path: str) -> None:
    if kind == "any":
        return
    if kind == "string":
        if not isinstance(value, str):
            raise _fail(path, "a string", value)
    elif kind == "bool":
        if not isinstance(value, bool):
            raise _fail(path, "a bool", value)
    elif kind == "int32":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(path, "an int32", value)
        if not _INT32[0] <= value <= _INT32[1]:
            raise ObjectError(f"{path}: {value} overflows int32")
    elif kind == "quantity":
        try:
            quantity(value)
        except QuantityError as exc:
            raise ObjectError(f"{path}: {exc}") from None


def ensure_map(owner: dict[str, Any], key: str) -> dict[str, Any]:
    """``owner[key]`` as a dict to write into: created when missing or ``null``."""
    current = owner.get(key)
    if not isinstance(current, dict):
        current = {}
        owner[key] = current
    return current


Predicate = Callable[[Any], bool]


def _accepts_scalar(kind: str) -> Predicate:
    if kind == "string":
        return lambda value: value is None or isinstance(value, str)
    if kind == "bool":
        return lambda value: value is None or isinstance(value, bool)
    if kind == "int32":
        low, high = _INT32
        return lambda value: (
            value is None or (isinstance(value, int) and not isinstance(value, bool) and low <= value <= high)
        )
    if kind == "quantity":

        def accepts_quantity(value: Any) -> bool:
            if value is None:
                return True
            try:
                quantity(value)
            except QuantityError:
                return False
            return True

        return accepts_quantity
    return lambda value: True


#: Compiled predicates by spec identity (specs are module constants: a handful of entries).
_COMPILED: dict[int, tuple[Any, Predicate]] = {}


def _accepts(spec: Any) -> Predicate:
    """Whether a value passes :func:`_check` -- the same verdict, without building any path.

    Compiled once per spec; :func:`check` runs :func:`_check` only on a value this refuses,
    to name the problem.
    """
    cached = _COMPILED.get(id(spec))
    if cached is not None and cached[0] is spec:
        return cached[1]
    predicate = _compile(spec)
    _COMPILED[id(spec)] = (spec, predicate)
    return predicate


def _compile(spec: Any) -> Predicate:
    if isinstance(spec, _Scalar):
        return _accepts_scalar(spec.kind)
    if isinstance(spec, _Object):
        # ``None`` passes every spec, and a string field is one isinstance: both decided inline
        strings = tuple(key for key, child in spec.fields.items() if child == STRING)
        others = tuple(
            (key, _accepts(child)) for key, child in spec.fields.items() if child != STRING and child != ANY
        )

        def accepts_object(value: Any) -> bool:
            if value is None:
                return True
            if not isinstance(value, dict):
                return False
            for key in strings:
                child = value.get(key)
                if child is not None and not isinstance(child, str):
                    return False
            for key, accepts in others:
                child = value.get(key)
                if child is not None and not accepts(child):
                    return False
            return True

        return accepts_object
    if isinstance(spec, _Map):
        if spec.values == STRING:

            def accepts_strings(value: Any) -> bool:
                if value is None:
                    return True
                if not isinstance(value, dict):
                    return False
                for item in value.values():  # noqa: SIM110 (all() over a generator is slower)
                    if item is not None and not isinstance(item, str):
                        return False
                return True

            return accepts_strings
        accepts_value = _accepts(spec.values)

        def accepts_map(value: Any) -> bool:
            if value is None:
                return True
            if not isinstance(value, dict):
                return False
            for item in value.values():  # noqa: SIM110 (all() over a generator is slower)
                if not accepts_value(item):
                    return False
            return True

        return accepts_map
    accepts_item = _accepts(spec.items)
    objects = isinstance(spec.items, _Object)

    def accepts_list(value: Any) -> bool:
        if value is None:
            return True
        if not isinstance(value, list):
            return False
        for item in value:
            if item is None:
                if objects:
                    return False
            elif not accepts_item(item):
                return False
        return True

    return accepts_list


def check(value: Any, spec: Any, what: str) -> dict[str, Any]:
    """Return ``value`` (a dict) when it fits ``spec``; else raise :class:`ObjectError`."""
    if not isinstance(value, dict):
        raise ObjectError(f"cannot decode {what}: expected a JSON object, got {json_type(value)}")
    if _accepts(spec)(value):
        return value
    try:
        _check(value, spec, "")
    except ObjectError as exc:
        raise ObjectError(f"cannot decode {what}: {exc}") from None
    return value


METADATA = obj(
    name=STRING,
    generateName=STRING,
    namespace=STRING,
    uid=STRING,
    resourceVersion=STRING,
    labels=map_of(STRING),
    annotations=map_of(STRING),
    finalizers=list_of(STRING),
)
_RESOURCES = obj(requests=map_of(QUANTITY), limits=map_of(QUANTITY))
_CONTAINER = obj(name=STRING, image=STRING, resources=_RESOURCES)
_SELECTOR_REQUIREMENT = obj(key=STRING, operator=STRING, values=list_of(STRING))
_NODE_SELECTOR_TERM = obj(
    matchExpressions=list_of(_SELECTOR_REQUIREMENT), matchFields=list_of(_SELECTOR_REQUIREMENT)
)
_LABEL_SELECTOR = obj(matchLabels=map_of(STRING), matchExpressions=list_of(_SELECTOR_REQUIREMENT))
POD_SPEC = obj(
    containers=list_of(_CONTAINER),
    initContainers=list_of(_CONTAINER),
    ephemeralContainers=list_of(_CONTAINER),
    overhead=map_of(QUANTITY),
    priority=INT32,
    priorityClassName=STRING,
    preemptionPolicy=STRING,
    schedulerName=STRING,
    nodeName=STRING,
    nodeSelector=map_of(STRING),
    affinity=obj(
        nodeAffinity=obj(
            requiredDuringSchedulingIgnoredDuringExecution=obj(nodeSelectorTerms=list_of(_NODE_SELECTOR_TERM))
        )
    ),
)

POD = obj(
    apiVersion=STRING,
    kind=STRING,
    metadata=METADATA,
    spec=POD_SPEC,
    status=obj(qosClass=STRING, phase=STRING),
)
NODE = obj(
    apiVersion=STRING,
    kind=STRING,
    metadata=METADATA,
    status=obj(allocatable=map_of(QUANTITY), capacity=map_of(QUANTITY)),
)
CONFIG_MAP = obj(apiVersion=STRING, kind=STRING, metadata=METADATA, data=map_of(STRING))
ELASTIC_QUOTA = obj(
    apiVersion=STRING,
    kind=STRING,
    metadata=METADATA,
    spec=obj(min=map_of(QUANTITY), max=map_of(QUANTITY)),
    status=obj(used=map_of(QUANTITY)),
)
RESERVATION = obj(
    apiVersion=STRING,
    kind=STRING,
    metadata=METADATA,
    spec=obj(template=obj(metadata=METADATA, spec=POD_SPEC)),
)
CLUSTER_COLOCATION_PROFILE = obj(
    apiVersion=STRING,
    kind=STRING,
    metadata=METADATA,
    spec=obj(
        namespaceSelector=_LABEL_SELECTOR,
        selector=_LABEL_SELECTOR,
        probability=ANY,
        qosClass=STRING,
        priorityClassName=STRING,
        koordinatorPriority=INT32,
        labels=map_of(STRING),
        annotations=map_of(STRING),
        labelKeysMapping=map_of(STRING),
        annotationKeysMapping=map_of(STRING),
        labelSuffixes=map_of(STRING),
        schedulerName=STRING,
        patch=ANY,
    ),
)
ELASTIC_QUOTA_PROFILE = obj(
    apiVersion=STRING,
    kind=STRING,
    metadata=METADATA,
    spec=obj(quotaName=STRING, nodeSelector=_LABEL_SELECTOR),
)
