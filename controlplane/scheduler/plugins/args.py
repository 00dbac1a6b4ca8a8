"""The one error a plug-in's args parser raises (its message names the field, and the
configuration loader turns it into a ConfigError, exit 2) and the readers of the field
types every plug-in's args share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.api.goparse import GoParseError, parse_duration_seconds


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
