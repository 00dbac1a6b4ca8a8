"""JSON overlay of one model onto another, as ``util.MergeCfg`` does with encoding/json.

Go marshals the override (nil pointers and empty omitempty fields disappear) and unmarshals
the text onto a deep copy of the base. The effect, reproduced here from the model's field
types: nested structs merge field by field, maps gain or replace keys (their values are
replaced whole), lists and scalars are replaced, and absent fields keep the base value.
Fields the override always writes (non-omitempty, e.g. ``totalNetworkBandwidth``) always win.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from koordinator.api.model import Model, TypeDesc, model_fields

__all__ = ["merge", "overlay"]

M = TypeVar("M", bound=Model)


def overlay(model: type[Model], base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Overlay two JSON objects of ``model``'s shape."""
    result = dict(base)
    by_json = {slot.info.json: slot.type for slot in model_fields(model)}
    for key, value in override.items():
        desc: TypeDesc | None = by_json.get(key)
        current = result.get(key)
        if desc is None or value is None:
            result[key] = value
        elif desc.kind == "model" and isinstance(current, Mapping) and isinstance(value, Mapping):
            assert desc.model is not None
            result[key] = overlay(desc.model, current, value)
        elif desc.kind in ("map", "json") and isinstance(current, Mapping) and isinstance(value, Mapping):
            result[key] = {**current, **value}
        else:
            result[key] = value
    return result


def merge(base: M, override: Model | None) -> M:
    """``base`` with ``override`` overlaid (a new object; neither argument changes)."""
    if override is None:
        return base.copy()
    cls = type(base)
    return cls.from_dict(overlay(cls, base.to_dict(), override.to_dict()))
