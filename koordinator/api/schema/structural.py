"""What the apiserver does with a custom resource and its structural schema, in its order.

1. :func:`prune` drops fields the schema does not declare (unless
   ``x-kubernetes-preserve-unknown-fields``), drops ``null`` values of non-nullable fields, and
   normalises integral numbers at integer nodes to ``int``.
2. :func:`apply_defaults` fills ``default`` values of absent properties, top-down, inside
   objects that exist.
3. :func:`validate` checks types, ``required``, ``enum``, bounds, lengths, ``pattern``,
   ``date-time`` format, list uniqueness (``x-kubernetes-list-type`` set/map) and CEL rules,
   returning :class:`FieldError` objects named by field path like the apiserver's.

All three take plain JSON values (dicts, lists, scalars) and never mutate their input.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from koordinator.api.schema.cel import CELError, evaluate, is_transition_rule
from koordinator.api.schema.errors import ErrorType, FieldError

__all__ = ["apply_defaults", "prune", "validate"]

Schema = Mapping[str, Any]
_ROOT_KEEP = ("apiVersion", "kind", "metadata")
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _index(path: str, index: int | str) -> str:
    return f"{path}[{index}]"


def _is_int_or_string(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-int-or-string"))


# ---- pruning --------------------------------------------------------------------------------------


def _prune(value: Any, schema: Schema, root: bool, embedded: bool) -> Any:
    if (
        isinstance(value, float)
        and value.is_integer()
        and (schema.get("type") == "integer" or _is_int_or_string(schema))
    ):
        return int(value)
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            return [_prune(v, items, False, bool(items.get("x-kubernetes-embedded-resource"))) for v in value]
        return copy.deepcopy(value)
    if not isinstance(value, dict):
        return value
    properties: Mapping[str, Any] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    out: dict[str, Any] = {}
    for key, item in value.items():
        if (root or embedded) and key in _ROOT_KEEP:
            # Type and object metadata are handled by the apiserver itself, never pruned.
            out[key] = copy.deepcopy(item)
        elif key in properties:
            sub = properties[key]
            if item is None and not sub.get("nullable"):
                continue
            out[key] = _prune(item, sub, False, bool(sub.get("x-kubernetes-embedded-resource")))
        elif isinstance(additional, Mapping):
            if item is None and not additional.get("nullable"):
                continue
            out[key] = _prune(item, additional, False, bool(additional.get("x-kubernetes-embedded-resource")))
        elif preserve or additional is True:
            out[key] = copy.deepcopy(item)
    return out


def prune(obj: Any, schema: Schema) -> Any:
    """A copy of ``obj`` with undeclared fields and non-nullable nulls removed."""
    return _prune(obj, schema, True, False)


# ---- defaulting -----------------------------------------------------------------------------------


def _default(value: Any, schema: Schema) -> None:
    if isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties") or {}
        for key, sub in properties.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        for key, item in value.items():
            if key in properties:
                _default(item, properties[key])
            elif isinstance(schema.get("additionalProperties"), Mapping):
                _default(item, schema["additionalProperties"])
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            _default(item, schema["items"])


def apply_defaults(obj: Any, schema: Schema) -> Any:
    """A copy of ``obj`` with schema defaults filled in."""
    result = copy.deepcopy(obj)
    _default(result, schema)
    return result


# ---- validation -----------------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(expected: str, actual: str) -> bool:
    if expected == actual:
        return True
    return expected == "number" and actual == "integer"


def _in_body(path: str, text: str) -> str:
    return f"{path or 'body'} in body {text}"


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _check_scalar(value: Any, schema: Schema, path: str, errors: list[FieldError]) -> None:
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        errors.append(FieldError.not_supported(path, value, list(enum)))
    if isinstance(value, int | float) and not isinstance(value, bool):
        minimum, maximum = schema.get("minimum"), schema.get("maximum")
        if minimum is not None:
            if schema.get("exclusiveMinimum") and value <= minimum:
                errors.append(
                    FieldError.invalid(
                        path, value, _in_body(path, f"should be greater than {_number(minimum)}")
                    )
                )
            elif value < minimum:
                errors.append(
                    FieldError.invalid(
                        path, value, _in_body(path, f"should be greater than or equal to {_number(minimum)}")
                    )
                )
        if maximum is not None:
            if schema.get("exclusiveMaximum") and value >= maximum:
                errors.append(
                    FieldError.invalid(path, value, _in_body(path, f"should be less than {_number(maximum)}"))
                )
            elif value > maximum:
                errors.append(
                    FieldError.invalid(
                        path, value, _in_body(path, f"should be less than or equal to {_number(maximum)}")
                    )
                )
        multiple = schema.get("multipleOf")
        if multiple and value % multiple:
            errors.append(
                FieldError.invalid(path, value, _in_body(path, f"should be a multiple of {multiple}"))
            )
    if isinstance(value, str):
        min_length, max_length = schema.get("minLength"), schema.get("maxLength")
        if min_length is not None and len(value) < min_length:
            errors.append(
                FieldError.invalid(path, value, _in_body(path, f"should be at least {min_length} chars long"))
            )
        if max_length is not None and len(value) > max_length:
            errors.append(
                FieldError(ErrorType.TOO_LONG, path, value, f"may not be more than {max_length} bytes")
            )
        pattern = schema.get("pattern")
        if pattern is not None and _regex(pattern).search(value) is None:
            errors.append(FieldError.invalid(path, value, _in_body(path, f"should match '{pattern}'")))
        if schema.get("format") == "date-time" and not _DATE_TIME.match(value):
            errors.append(
                FieldError.invalid(path, value, _in_body(path, f'must be of type date-time: "{value}"'))
            )


def _check_list(value: list[Any], schema: Schema, path: str, errors: list[FieldError]) -> None:
    min_items, max_items = schema.get("minItems"), schema.get("maxItems")
    if min_items is not None and len(value) < min_items:
        errors.append(
            FieldError.invalid(path, len(value), _in_body(path, f"should have at least {min_items} items"))
        )
    if max_items is not None and len(value) > max_items:
        errors.append(
            FieldError(ErrorType.TOO_MANY, path, len(value), f"must have at most {max_items} items")
        )
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                errors.append(FieldError.duplicate(_index(path, i), item))
            seen.append(item)
    elif list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or ()
        seen_keys: list[tuple[Any, ...]] = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = tuple(item.get(k) for k in keys)
            if key in seen_keys:
                errors.append(FieldError.duplicate(_index(path, i), dict(zip(keys, key, strict=True))))
            seen_keys.append(key)


_REASONS = {
    "FieldValueRequired": ErrorType.REQUIRED,
    "FieldValueForbidden": ErrorType.FORBIDDEN,
    "FieldValueDuplicate": ErrorType.DUPLICATE,
    "FieldValueInvalid": ErrorType.INVALID,
}


def _rule_path(path: str, field_path: str) -> str:
    if not field_path:
        return path
    return f"{path}{field_path}" if field_path.startswith((".", "[")) else _child(path, field_path)


def _check_rules(value: Any, old: Any, schema: Schema, path: str, errors: list[FieldError]) -> None:
    type_name = schema.get("type") or ("integer,string" if _is_int_or_string(schema) else "object")
    for entry in schema.get("x-kubernetes-validations") or ():
        rule = entry["rule"]
        if is_transition_rule(rule) and old is None:
            continue
        where = _rule_path(path, entry.get("fieldPath", ""))
        try:
            ok = evaluate(rule, value, old)
        except CELError as exc:
            errors.append(FieldError.invalid(path, type_name, f"{exc} evaluating rule: {rule}"))
            continue
        if ok:
            continue
        message = entry.get("message") or f"failed rule: {rule}"
        kind = _REASONS.get(entry.get("reason", ""), ErrorType.INVALID)
        if kind is ErrorType.INVALID:
            errors.append(FieldError.invalid(where, type_name, message))
        else:
            errors.append(FieldError(kind, where, type_name, message))


def _validate(value: Any, old: Any, schema: Schema, path: str, errors: list[FieldError]) -> None:
    actual = _json_type(value)
    if value is None and schema.get("nullable"):
        return
    if _is_int_or_string(schema):
        if actual not in ("integer", "string"):
            errors.append(
                FieldError.invalid(
                    path, actual, _in_body(path, f'must be of type integer,string: "{actual}"')
                )
            )
            return
    elif "type" in schema and not _type_ok(schema["type"], actual):
        errors.append(
            FieldError.invalid(path, actual, _in_body(path, f'must be of type {schema["type"]}: "{actual}"'))
        )
        return
    if isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties") or {}
        for name in schema.get("required") or ():
            if name not in value:
                errors.append(FieldError.required(_child(path, name)))
        old_map = old if isinstance(old, dict) else {}
        for key, item in value.items():
            if key in properties:
                _validate(item, old_map.get(key), properties[key], _child(path, key), errors)
            elif isinstance(schema.get("additionalProperties"), Mapping):
                _validate(item, old_map.get(key), schema["additionalProperties"], _index(path, key), errors)
        for key in ("minProperties", "maxProperties"):
            if key in schema:
                bound = schema[key]
                if (key == "minProperties" and len(value) < bound) or (
                    key == "maxProperties" and len(value) > bound
                ):
                    word = "at least" if key == "minProperties" else "at most"
                    errors.append(
                        FieldError.invalid(
                            path, len(value), _in_body(path, f"should have {word} {bound} properties")
                        )
                    )
    elif isinstance(value, list):
        _check_list(value, schema, path, errors)
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _validate(item, None, items, _index(path, i), errors)
    else:
        _check_scalar(value, schema, path, errors)
    _check_rules(value, old, schema, path, errors)


def validate(obj: Any, schema: Schema, *, old: Any = None, path: str = "") -> list[FieldError]:
    """Schema and CEL errors of ``obj`` (already pruned and defaulted); ``old`` enables transition rules."""
    errors: list[FieldError] = []
    _validate(obj, old, schema, path, errors)
    return errors
