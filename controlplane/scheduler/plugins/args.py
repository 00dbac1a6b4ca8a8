"""The one error a plug-in's args parser raises (its message names the field, and the
configuration loader turns it into a ConfigError, exit 2) and the readers of the field
types every plug-in's args share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.api.goparse import GoParseError, parse_duration_seconds

#: the largest weight of a resource in a scoring strategy
MAX_WEIGHT = 100


class ArgsError(ValueError):
    """Plug-in args upstream's validation would refuse."""


def boolean(raw: Mapping[str, Any], key: str, path: str, default: bool = False) -> bool:
    """The boolean field ``key`` of an args mapping (absent or null: ``default``)."""
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ArgsError(f"{path}.{key}: Invalid value: {value!r}: must be true or false")
    return value


def duration(value: Any, where: str, example: str) -> float:
    """A Go duration string (``where``: the field's path) in seconds. Negative durations are
    returned: each plug-in refuses them with its own upstream message."""
    if not isinstance(value, str):
        raise ArgsError(f"{where}: Invalid value: {value!r}: must be a duration such as {example}")
    try:
        return parse_duration_seconds(value)
    except GoParseError as err:
        raise ArgsError(f"{where}: Invalid value: {value!r}: {err}") from None


def resource_weights(raw: Any, path: str, *, weights: bool = True) -> dict[str, int]:
    """A scoring strategy's ``resources`` list of ``{name, weight}`` (weight 1 to 100; with
    ``weights=False`` every weight must be 1), as kube-scheduler validates it."""
    if not isinstance(raw, list):
        raise ArgsError(f"{path}: must be a list of {{name, weight}}")
    out: dict[str, int] = {}
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or not item["name"]:
            raise ArgsError(f"{where}.name: Required value")
        weight = item.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise ArgsError(f"{where}.weight: must be an integer")
        if weights and not 1 <= weight <= MAX_WEIGHT:
            raise ArgsError(
                f"{where}.weight: Invalid value: {weight}: "
                f"resource weight of {item['name']} not in range [1-100]"
            )
        if not weights and weight != 1:
            raise ArgsError(f"{where}.weight: Invalid value: {weight}: must be 1")
        if item["name"] in out:
            raise ArgsError(f"{where}.name: Duplicate value: {item['name']!r}")
        out[item["name"]] = weight
    return out
