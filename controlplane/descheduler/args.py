"""Readers for plug-in args fields, and the one error they raise: :class:`ArgsError`, whose
message names the field as upstream's validation does (the configuration loader turns it
into an exit-2 error)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.api.goparse import GoParseError, parse_duration_seconds
from koordinator.api.selectors import SelectorError, validate_label_selector

__all__ = [
    "ArgsError",
    "boolean",
    "duration",
    "integer",
    "label_selector",
    "mapping",
    "namespaces",
    "strings",
]


class ArgsError(ValueError):
    """Args upstream's decoding or validation would refuse."""


def mapping(raw: Any, path: str) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ArgsError(f"{path}: must be an object")
    return raw


def boolean(raw: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ArgsError(f"{path}.{key}: Invalid value: {value!r}: must be true or false")
    return value


def integer(raw: Mapping[str, Any], key: str, path: str, default: int | None) -> int | None:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgsError(f"{path}.{key}: Invalid value: {value!r}: must be an integer")
    return value


def duration(raw: Mapping[str, Any], key: str, path: str, default: float | None) -> float | None:
    """A Go duration string (``5m``, ``500ms``) in seconds."""
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ArgsError(f"{path}.{key}: Invalid value: {value!r}: must be a duration such as 5m")
    try:
        return parse_duration_seconds(value)
    except GoParseError as err:
        raise ArgsError(f"{path}.{key}: Invalid value: {value!r}: {err}") from None


def strings(raw: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ArgsError(f"{path}.{key}: must be a list of strings")
    return tuple(value)


def label_selector(raw: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
    """A ``metav1.LabelSelector`` (None when absent)."""
    value = raw.get(key)
    if value is None:
        return None
    try:
        validate_label_selector(value)
    except SelectorError as err:
        raise ArgsError(f"{path}.{key}: Invalid value: {err}") from None
    return mapping(value, f"{path}.{key}")


def namespaces(raw: Mapping[str, Any], key: str, path: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """An ``{include, exclude}`` namespaces field: (include, exclude), at most one set."""
    where = f"{path}.{key}"
    value = mapping(raw.get(key), where)
    include = strings(value, "include", where)
    exclude = strings(value, "exclude", where)
    if include and exclude:
        raise ArgsError(f"{where}: Invalid value: only one of Include/Exclude namespaces can be set")
    return include, exclude
