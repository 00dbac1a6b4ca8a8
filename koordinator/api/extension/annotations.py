"""Reading and writing JSON-valued labels and annotations on object dicts.

Every typed annotation in this package is a :class:`~koordinator.api.model.Model`; these
helpers decode one from an annotation map (``None`` when absent, :class:`AnnotationError`
naming the key when the JSON or its shape is wrong) and encode it back as Go would.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any, TypeVar

from koordinator.api import resourcelist
from koordinator.api.jsonutil import JSONError, marshal, unmarshal
from koordinator.api.model import Model, ModelError

__all__ = [
    "AnnotationError",
    "annotations_of",
    "decode_json",
    "get_model",
    "get_resource_list",
    "get_string_list",
    "labels_of",
    "set_model",
]

M = TypeVar("M", bound=Model)


class AnnotationError(ValueError):
    """An annotation (or label) whose value does not have the documented format."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"invalid {key}: {reason}")
        self.key = key
        self.reason = reason


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """``metadata.labels`` of an object dict (empty when absent)."""
    return dict((obj.get("metadata") or {}).get("labels") or {})


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """``metadata.annotations`` of an object dict (empty when absent)."""
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def decode_json(annotations: Mapping[str, str] | None, key: str) -> Any:
    """The decoded JSON value of ``key``, or ``None`` when the key is absent."""
    if not annotations or key not in annotations:
        return None
    try:
        return unmarshal(annotations[key])
    except JSONError as exc:
        raise AnnotationError(key, str(exc)) from None


def get_model(annotations: Mapping[str, str] | None, key: str, model: type[M]) -> M | None:
    """Decode ``key`` into ``model``; ``None`` when absent."""
    data = decode_json(annotations, key)
    if data is None:
        return None
    try:
        return model.from_dict(data)
    except ModelError as exc:
        raise AnnotationError(key, str(exc)) from None


def set_model(annotations: MutableMapping[str, str], key: str, value: Model) -> str:
    """Encode ``value`` into ``annotations[key]`` (Go's JSON text) and return the text."""
    text = value.to_json()
    annotations[key] = text
    return text


def get_resource_list(annotations: Mapping[str, str] | None, key: str) -> resourcelist.ResourceList | None:
    """A JSON ResourceList annotation (quota ``runtime``, node ``raw-allocatable`` ...)."""
    data = decode_json(annotations, key)
    if data is None:
        return None
    try:
        return resourcelist.parse(data)
    except resourcelist.ResourceListError as exc:
        raise AnnotationError(key, str(exc)) from None


def set_resource_list(
    annotations: MutableMapping[str, str], key: str, value: resourcelist.ResourceList
) -> str:
    text = marshal(resourcelist.to_json(value))
    annotations[key] = text
    return text


def get_string_list(annotations: Mapping[str, str] | None, key: str) -> list[str] | None:
    """A JSON array of strings (quota ``namespaces``, gang ``groups`` ...)."""
    data = decode_json(annotations, key)
    if data is None:
        return None
    if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
        raise AnnotationError(key, "expected a JSON array of strings")
    return data
