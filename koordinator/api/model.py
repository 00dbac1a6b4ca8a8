"""Typed API objects: dataclasses whose fields carry their JSON name, omitempty and schema facts.

Every CRD type and annotation shape is a dataclass deriving from :class:`Model`; each field
is declared with :func:`field`, which records the upstream JSON name, Go's ``omitempty``
behaviour and the OpenAPI facts (description, enum, bounds, pattern, default, CEL rules).
From that one declaration:

* :meth:`Model.to_dict` writes JSON exactly as Go would marshal the struct: fields in
  declaration order, map keys sorted, ``None`` omitted, zero scalars/empty lists and maps
  omitted when ``omitempty``; quantities in canonical form.
* :meth:`Model.from_dict` reads JSON like Go's decoder: unknown keys ignored, wrong types
  refused with a :class:`ModelError` naming the JSON path.
* :mod:`koordinator.api.openapi` derives the structural OpenAPI v3 schema.

Supported field types: ``str``, ``int``, ``float``, ``bool``, :class:`Quantity`,
:data:`IntOrString` (``int | str``), :data:`JSON` (any JSON value kept verbatim), nested
models, ``list[T]``, ``dict[str, T]``, and ``T | None`` for Go pointers.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeAlias, Union

from koordinator.api.jsonutil import marshal, unmarshal
from koordinator.api.quantity import Quantity, QuantityError

__all__ = [
    "JSON",
    "FieldInfo",
    "IntOrString",
    "Model",
    "ModelError",
    "Rule",
    "TypeDesc",
    "field",
    "model_fields",
]

#: Any JSON value, kept as decoded (Go ``runtime.RawExtension`` / ``map[string]interface{}``).
JSON: TypeAlias = dict[str, Any]
#: ``intstr.IntOrString``.
IntOrString: TypeAlias = int | str

_META_KEY = "koordinator.api"


class ModelError(ValueError):
    """JSON that does not fit a model; ``path`` is the JSON path of the offending value."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or '<root>'}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True, slots=True)
class Rule:
    """A CEL validation rule (``x-kubernetes-validations`` entry)."""

    rule: str
    message: str = ""
    field_path: str = ""
    reason: str = ""

    def to_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule}
        if self.message:
            out["message"] = self.message
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True, slots=True)
class FieldInfo:
    """What a field means on the wire and in the schema."""

    json: str
    omitempty: bool = True
    required: bool = False
    description: str = ""
    enum: tuple[Any, ...] = ()
    minimum: int | float | None = None
    maximum: int | float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    pattern: str | None = None
    min_items: int | None = None
    max_items: int | None = None
    min_length: int | None = None
    max_length: int | None = None
    #: OpenAPI ``format`` (``int32``, ``int64``, ``date-time`` ...). Integers default to int64.
    format: str | None = None
    #: Schema default (a JSON value) the apiserver fills in when the field is absent.
    schema_default: Any = None
    nullable: bool = False
    #: Schemaless object that keeps unknown fields (upstream ``+kubebuilder:validation:Schemaless``).
    schemaless: bool = False
    preserve_unknown: bool = False
    list_type: str | None = None
    list_map_keys: tuple[str, ...] = ()
    map_type: str | None = None
    rules: tuple[Rule, ...] = ()
    #: Replace the generated schema entirely (used for ``metadata`` at the root).
    schema_override: Mapping[str, Any] | None = None
    #: Constraints for the items of a list (or values of a map) of scalars.
    item_enum: tuple[Any, ...] = ()
    item_pattern: str | None = None


def field(
    json: str,
    *,
    default: Any = None,
    factory: Any = None,
    **info: Any,
) -> Any:
    """Declare a model field named ``json`` on the wire; ``info`` fills :class:`FieldInfo`."""
    meta = {_META_KEY: FieldInfo(json, **info)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


# ---- type descriptors --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TypeDesc:
    """A resolved field type. ``kind``: str, int, float, bool, quantity, intstr, json, model, list, map."""

    kind: str
    optional: bool = False
    model: type[Model] | None = None
    item: TypeDesc | None = None


_SCALARS = {str: "str", int: "int", float: "float", bool: "bool"}


def _describe(tp: Any, owner: type) -> TypeDesc:
    optional = False
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) != len(typing.get_args(tp))
        if sorted(map(str, args)) == sorted(map(str, [int, str])):
            return TypeDesc("intstr", optional)
        if len(args) != 1:
            raise TypeError(f"{owner.__name__}: unsupported union {tp}")
        tp = args[0]
        origin = typing.get_origin(tp)
    if tp in _SCALARS:
        return TypeDesc(_SCALARS[tp], optional)
    if tp is Quantity:
        return TypeDesc("quantity", optional)
    if tp is Any:
        return TypeDesc("json", optional)
    if origin is list:
        (item,) = typing.get_args(tp)
        return TypeDesc("list", optional, item=_describe(item, owner))
    if origin is dict:
        key, value = typing.get_args(tp)
        if key is not str:
            raise TypeError(f"{owner.__name__}: map keys must be str")
        if value is Any:
            return TypeDesc("json", optional)
        return TypeDesc("map", optional, item=_describe(value, owner))
    if isinstance(tp, type) and issubclass(tp, Model):
        return TypeDesc("model", optional, model=tp)
    raise TypeError(f"{owner.__name__}: unsupported field type {tp!r}")


@dataclass(frozen=True, slots=True)
class Slot:
    """One field of a model: Python attribute, wire facts and resolved type."""

    attr: str
    info: FieldInfo
    type: TypeDesc


_FIELDS: dict[type, tuple[Slot, ...]] = {}


def model_fields(cls: type[Model]) -> tuple[Slot, ...]:
    """The fields of a model class in declaration order (base classes first)."""
    cached = _FIELDS.get(cls)
    if cached is None:
        cached = _FIELDS[cls] = _resolve_fields(cls)
    return cached


def _resolve_fields(cls: type[Model]) -> tuple[Slot, ...]:
    hints = typing.get_type_hints(cls)
    slots = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        info = f.metadata.get(_META_KEY)
        if info is None:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with koordinator.api.model.field()")
        slots.append(Slot(f.name, info, _describe(hints[f.name], cls)))
    return tuple(slots)


# ---- encoding ----------------------------------------------------------------------------------


def _is_empty(value: Any, desc: TypeDesc) -> bool:
    """Go's omitempty test for a non-pointer value."""
    if desc.kind in ("str", "int", "float", "bool"):
        return not value
    if desc.kind in ("list", "map"):
        return len(value) == 0
    if desc.kind == "json":
        return value is None or (isinstance(value, dict | list) and len(value) == 0)
    if desc.kind == "intstr":
        return False
    return False


def _encode(value: Any, desc: TypeDesc) -> Any:
    kind = desc.kind
    if kind == "quantity":
        return str(value)
    if kind == "model":
        return value.to_dict()
    if kind == "list":
        assert desc.item is not None
        return [_encode(v, desc.item) for v in value]
    if kind == "map":
        assert desc.item is not None
        return {k: _encode(value[k], desc.item) for k in sorted(value)}
    if kind == "json":
        return copy.deepcopy(value)
    return value


def _decode(value: Any, desc: TypeDesc, path: str) -> Any:
    kind = desc.kind
    if kind == "str":
        if not isinstance(value, str):
            raise ModelError(path, f"expected a string, got {_json_type(value)}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ModelError(path, f"expected an integer, got {_json_type(value)}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ModelError(path, f"expected a number, got {_json_type(value)}")
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ModelError(path, f"expected a boolean, got {_json_type(value)}")
        return value
    if kind == "quantity":
        try:
            return Quantity.from_json(value)
        except QuantityError as exc:
            raise ModelError(path, str(exc)) from None
    if kind == "intstr":
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ModelError(path, f"expected an integer or a string, got {_json_type(value)}")
        return value
    if kind == "json":
        return copy.deepcopy(value)
    if kind == "model":
        assert desc.model is not None
        return desc.model.from_dict(value, path=path)
    if kind == "list":
        if not isinstance(value, list):
            raise ModelError(path, f"expected an array, got {_json_type(value)}")
        assert desc.item is not None
        return [_decode(v, desc.item, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "map":
        if not isinstance(value, Mapping):
            raise ModelError(path, f"expected an object, got {_json_type(value)}")
        assert desc.item is not None
        return {str(k): _decode(v, desc.item, f"{path}.{k}") for k, v in value.items()}
    raise ModelError(path, f"unsupported type {kind}")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class Model:
    """Base of every typed API object. Subclasses are ``@dataclass`` with :func:`field` fields."""

    #: CEL rules checked on this object's schema node (``x-kubernetes-validations``).
    __api_rules__: ClassVar[tuple[Rule, ...]] = ()
    #: Schema description of the type (a sentence of our own; ``None`` for none).
    __api_description__: ClassVar[str | None] = None
    #: Extra OpenAPI keys for this type's object schema (``minProperties``, map type ...).
    __api_schema__: ClassVar[Mapping[str, Any]] = {}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for slot in model_fields(type(self)):
            value = getattr(self, slot.attr)
            if value is None:
                continue
            if slot.info.omitempty and not slot.type.optional and _is_empty(value, slot.type):
                continue
            out[slot.info.json] = _encode(value, slot.type)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: str = "") -> Self:
        if not isinstance(data, Mapping):
            raise ModelError(path, f"expected an object, got {_json_type(data)}")
        kwargs: dict[str, Any] = {}
        for slot in model_fields(cls):
            if slot.info.json not in data:
                continue
            raw = data[slot.info.json]
            if raw is None:
                continue
            where = f"{path}.{slot.info.json}" if path else slot.info.json
            kwargs[slot.attr] = _decode(raw, slot.type, where)
        return cls(**kwargs)

    def to_json(self) -> str:
        """Compact JSON text as Go's ``json.Marshal`` writes it."""
        return marshal(self.to_dict())

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        return cls.from_dict(unmarshal(text))

    def copy(self) -> Self:
        return copy.deepcopy(self)
