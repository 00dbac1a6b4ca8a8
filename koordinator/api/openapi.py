"""Structural OpenAPI v3 schemas derived from the models' field declarations.

The output follows the apiextensions rules for structural schemas (every node typed, except
int-or-string and preserve-unknown-fields nodes) and controller-gen's conventions: integers
carry ``format: int64``/``int32``, quantities are int-or-string with Kubernetes' quantity
pattern, ``metav1.Time`` is a ``date-time`` string, schemaless fields keep unknown fields,
and model-level CEL rules appear as ``x-kubernetes-validations``.
"""

from __future__ import annotations

from typing import Any

from koordinator.api.model import FieldInfo, Model, TypeDesc, model_fields

__all__ = ["QUANTITY_PATTERN", "model_schema", "root_schema"]

#: The apiserver's pattern for quantities written as strings.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

_SCALAR_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def _type_schema(desc: TypeDesc, info: FieldInfo | None, *, item: bool = False) -> dict[str, Any]:
    kind = desc.kind
    if kind in _SCALAR_TYPES:
        schema: dict[str, Any] = {"type": _SCALAR_TYPES[kind]}
        if kind == "int":
            schema["format"] = (info.format if info and info.format else None) or "int64"
        if kind == "float":
            schema["format"] = "double"
        return schema
    if kind == "quantity":
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    if kind == "intstr":
        return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    if kind == "json":
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if kind == "model":
        assert desc.model is not None
        return model_schema(desc.model)
    assert desc.item is not None
    inner = _type_schema(desc.item, None, item=True)
    if info is not None and not item:
        if info.item_enum:
            inner["enum"] = list(info.item_enum)
        if info.item_pattern:
            inner["pattern"] = info.item_pattern
    if kind == "list":
        return {"type": "array", "items": inner}
    return {"type": "object", "additionalProperties": inner}


def _field_schema(desc: TypeDesc, info: FieldInfo) -> dict[str, Any]:
    if info.schema_override is not None:
        return dict(info.schema_override)
    if info.schemaless:
        schema: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    else:
        schema = _type_schema(desc, info)
    if info.description:
        schema["description"] = info.description
    if (desc.kind == "int" and info.format) or (info.format and desc.kind == "str"):
        schema["format"] = info.format
    if info.enum:
        schema["enum"] = list(info.enum)
    if info.minimum is not None:
        schema["minimum"] = info.minimum
        if info.exclusive_minimum:
            schema["exclusiveMinimum"] = True
    if info.maximum is not None:
        schema["maximum"] = info.maximum
        if info.exclusive_maximum:
            schema["exclusiveMaximum"] = True
    if info.pattern is not None:
        schema["pattern"] = info.pattern
    for key, value in (
        ("minItems", info.min_items),
        ("maxItems", info.max_items),
        ("minLength", info.min_length),
        ("maxLength", info.max_length),
    ):
        if value is not None:
            schema[key] = value
    if info.schema_default is not None:
        schema["default"] = info.schema_default
    if info.nullable:
        schema["nullable"] = True
    if info.preserve_unknown:
        schema["x-kubernetes-preserve-unknown-fields"] = True
    if info.list_type:
        schema["x-kubernetes-list-type"] = info.list_type
    if info.list_map_keys:
        schema["x-kubernetes-list-map-keys"] = list(info.list_map_keys)
    if info.map_type:
        schema["x-kubernetes-map-type"] = info.map_type
    if info.rules:
        schema.setdefault("x-kubernetes-validations", []).extend(r.to_schema() for r in info.rules)
    return schema


def model_schema(cls: type[Model]) -> dict[str, Any]:
    """The object schema of a model class (properties, required, description, CEL rules)."""
    schema: dict[str, Any] = {"type": "object"}
    if cls.__api_description__:
        schema["description"] = cls.__api_description__
    properties: dict[str, Any] = {}
    required: list[str] = []
    for slot in model_fields(cls):
        properties[slot.info.json] = _field_schema(slot.type, slot.info)
        if slot.info.required:
            required.append(slot.info.json)
    if properties:
        schema["properties"] = properties
    if required:
        schema["required"] = required
    schema.update(cls.__api_schema__)
    if cls.__api_rules__:
        schema["x-kubernetes-validations"] = [r.to_schema() for r in cls.__api_rules__]
    return schema


def root_schema(cls: type[Model]) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of a top-level resource model."""
    return model_schema(cls)
