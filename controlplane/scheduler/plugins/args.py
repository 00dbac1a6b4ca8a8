"""The one error a plug-in's args parser raises: its message names the field, and the
configuration loader turns it into a ConfigError (exit 2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
