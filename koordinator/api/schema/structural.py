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
import logging
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from koordinator.api.schema import cel
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

#: Field of errors that belong to no field (rendered like Go's nil ``*field.Path``).
NO_FIELD = "<nil>"
#: Reported instead of CEL results when the schema check already found a blocking error.
RULES_NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)
_BLOCKING = frozenset({ErrorType.REQUIRED, ErrorType.TYPE_INVALID, ErrorType.NOT_SUPPORTED})


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


def _type_ok(schema: Schema, value: Any) -> bool:
    actual = _json_type(value)
    if _is_int_or_string(schema):
        return actual in ("integer", "string")
    expected = schema.get("type")
    return expected is None or expected == actual or (expected == "number" and actual == "integer")


def _in_body(path: str, text: str) -> str:
    return f"{path or 'body'} in body {text}"


def _type_error(path: str, actual: str, expected: str) -> FieldError:
    return FieldError(
        ErrorType.TYPE_INVALID, path, actual, _in_body(path, f'must be of type {expected}: "{actual}"')
    )


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _check_bounds(value: float, schema: Schema, path: str, errors: list[FieldError]) -> None:
    minimum, maximum = schema.get("minimum"), schema.get("maximum")
    if minimum is not None:
        if schema.get("exclusiveMinimum") and value <= minimum:
            errors.append(
                FieldError.invalid(path, value, _in_body(path, f"should be greater than {_number(minimum)}"))
            )
        elif value < minimum:
            detail = _in_body(path, f"should be greater than or equal to {_number(minimum)}")
            errors.append(FieldError.invalid(path, value, detail))
    if maximum is not None:
        if schema.get("exclusiveMaximum") and value >= maximum:
            errors.append(
                FieldError.invalid(path, value, _in_body(path, f"should be less than {_number(maximum)}"))
            )
        elif value > maximum:
            detail = _in_body(path, f"should be less than or equal to {_number(maximum)}")
            errors.append(FieldError.invalid(path, value, detail))
    multiple = schema.get("multipleOf")
    if multiple and value % multiple:
        errors.append(FieldError.invalid(path, value, _in_body(path, f"should be a multiple of {multiple}")))


def _check_string(value: str, schema: Schema, path: str, errors: list[FieldError]) -> None:
    min_length, max_length = schema.get("minLength"), schema.get("maxLength")
    if min_length is not None and len(value) < min_length:
        errors.append(
            FieldError.invalid(path, value, _in_body(path, f"should be at least {min_length} chars long"))
        )
    if max_length is not None and len(value) > max_length:
        errors.append(FieldError(ErrorType.TOO_LONG, path, value, f"may not be more than {max_length} bytes"))
    pattern = schema.get("pattern")
    if pattern is not None and _regex(pattern).search(value) is None:
        errors.append(FieldError.invalid(path, value, _in_body(path, f"should match '{pattern}'")))
    if schema.get("format") == "date-time" and not _DATE_TIME.match(value):
        detail = _in_body(path, f'must be of type date-time: "{value}"')
        errors.append(FieldError(ErrorType.TYPE_INVALID, path, value, detail))


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


def _sub_schema(schema: Schema, key: str) -> Schema | None:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    if key in properties:
        sub: Schema = properties[key]
        return sub
    additional = schema.get("additionalProperties")
    return additional if isinstance(additional, Mapping) else None


def _check_schema(value: Any, schema: Schema, path: str, errors: list[FieldError]) -> None:
    if value is None and schema.get("nullable"):
        return
    if not _type_ok(schema, value):
        actual = _json_type(value)
        if _is_int_or_string(schema):
            # The apiserver reports the int-or-string node, the failed anyOf and its first branch.
            errors.append(_type_error(path, actual, "integer,string"))
            errors.append(
                FieldError.invalid(NO_FIELD, "", f'"{path}" must validate at least one schema (anyOf)')
            )
            errors.append(_type_error(path, actual, "integer"))
        else:
            errors.append(_type_error(path, actual, schema["type"]))
        return
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        errors.append(FieldError.not_supported(path, value, list(enum)))
    if isinstance(value, dict):
        for name in schema.get("required") or ():
            if name not in value:
                errors.append(FieldError.required(_child(path, name)))
        for key, item in value.items():
            sub = _sub_schema(schema, key)
            if sub is not None:
                _check_schema(item, sub, _child(path, key), errors)
        for bound, word in (("minProperties", "at least"), ("maxProperties", "at most")):
            limit = schema.get(bound)
            broken = limit is not None and (
                len(value) < limit if bound == "minProperties" else len(value) > limit
            )
            if broken:
                errors.append(
                    FieldError.invalid(
                        path, len(value), _in_body(path, f"should have {word} {limit} properties")
                    )
                )
    elif isinstance(value, list):
        _check_list(value, schema, path, errors)
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _check_schema(item, items, _index(path, i), errors)
    elif isinstance(value, str):
        _check_string(value, schema, path, errors)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_bounds(value, schema, path, errors)


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
        try:
            ok = evaluate(rule, value, old)
        except CELError as exc:
            errors.append(FieldError.invalid(path, type_name, f"{exc} evaluating rule: {rule}"))
            continue
        if ok:
            continue
        where = _rule_path(path, entry.get("fieldPath", ""))
        message = entry.get("message") or f"failed rule: {rule}"
        errors.append(
            FieldError(_REASONS.get(entry.get("reason", ""), ErrorType.INVALID), where, type_name, message)
        )


def _check_all_rules(value: Any, old: Any, schema: Schema, path: str, errors: list[FieldError]) -> None:
    """CEL rules, children before parents, wherever the value has the schema's type."""
    if not _type_ok(schema, value):
        return
    if isinstance(value, dict):
        old_map = old if isinstance(old, dict) else {}
        for key, item in value.items():
            sub = _sub_schema(schema, key)
            if sub is not None:
                _check_all_rules(item, old_map.get(key), sub, _child(path, key), errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            _check_all_rules(item, None, schema["items"], _index(path, i), errors)
    _check_rules(value, old, schema, path, errors)


def _has_rules(schema: Any) -> bool:
    if isinstance(schema, Mapping):
        return bool(schema.get("x-kubernetes-validations")) or any(_has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_rules(v) for v in schema)
    return False


@cache
def _say_rules_skipped() -> None:
    logging.getLogger(__name__).warning(
        "x-kubernetes-validations rules are not evaluated here: cel-python is not installed "
        "(install %s); the apiserver still enforces them on every write",
        cel.EXTRA,
    )


def validate(obj: Any, schema: Schema, *, old: Any = None, path: str = "") -> list[FieldError]:
    """Schema and CEL errors of ``obj`` (already pruned and defaulted); ``old`` enables transition rules.

    As in the apiserver, CEL rules are not evaluated when the schema check found a missing
    required field, a wrong type or an unsupported enum value; one error then says so.
    Without cel-python (an extra the node agent does without) rules are skipped, logged once.
    """
    errors: list[FieldError] = []
    _check_schema(obj, schema, path, errors)
    if not _has_rules(schema):
        return errors
    if not cel.available():
        _say_rules_skipped()
        return errors
    if any(e.type in _BLOCKING for e in errors):
        errors.append(FieldError.invalid(NO_FIELD, None, RULES_NOT_CHECKED))
        return errors
    _check_all_rules(obj, old, schema, path, errors)
    return errors
