"""Kubernetes strategic merge patch, as the apiserver applies it.

What a list does is the caller's rule, by field path (the Go types' ``patchStrategy`` and
``patchMergeKey`` tags, or a CRD's list markers): ``None`` replaces the list, ``""`` merges a
list of scalars as a union, a name merges a list of objects by that key. Besides:

* maps merge key by key; ``null`` deletes a key; ``{"$patch": "replace"}`` replaces the map,
  ``{"$patch": "delete"}`` removes it; ``$retainKeys`` keeps only the listed keys;
* in a merged list of objects an item with ``"$patch": "delete"`` removes the matching one,
  and the result is ordered as the apiserver orders it: patch items in patch order, an
  untouched item before them only when it preceded them in the original list;
  ``$deleteFromPrimitiveList/<field>`` removes values from a list of scalars;
  ``$setElementOrder/<field>`` is accepted (the merged order is kept).

Used by the ClusterColocationProfile webhook and by the fake apiserver. Functions return
new documents and never modify their arguments.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ListRules", "Path", "StrategicMergeError", "strategic_merge"]

Path = tuple[str, ...]
#: the rule of the list at a path: None (replace), "" (union of scalars) or a merge key
ListRules = Callable[[Path], str | None]


class StrategicMergeError(ValueError):
    """A patch the apiserver's strategic merge would refuse."""


_DELETE_FROM = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"
_DIRECTIVES = ("$patch", "$retainKeys")


def strategic_merge(original: Mapping[str, Any], patch: Any, rules: ListRules) -> dict[str, Any]:
    """``original`` with ``patch`` applied; raises :class:`StrategicMergeError`."""
    if not isinstance(patch, dict):
        raise StrategicMergeError("a strategic merge patch must be a JSON object")
    return _merge_map(dict(original), patch, rules, ())


def _merge_map(
    original: dict[str, Any], patch: dict[str, Any], rules: ListRules, path: Path
) -> dict[str, Any]:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive not in (None, "merge", "delete"):
        raise StrategicMergeError(f"unknown patch directive {directive!r}")
    result = dict(original)
    for key, value in patch.items():
        if not isinstance(key, str):
            raise StrategicMergeError("patch keys must be strings")
        if key in _DIRECTIVES or key.startswith(_SET_ORDER):
            continue
        if key.startswith(_DELETE_FROM):
            name = key[len(_DELETE_FROM) :]
            if not isinstance(value, list):
                raise StrategicMergeError(f"{key}: expected a list of values to delete")
            current = result.get(name)
            if isinstance(current, list):
                result[name] = [item for item in current if item not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
                continue
            current = result.get(key)
            result[key] = _merge_map(current if isinstance(current, dict) else {}, value, rules, (*path, key))
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, rules, (*path, key))
        else:
            result[key] = value
    retain = patch.get("$retainKeys")
    if retain is not None:
        if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
            raise StrategicMergeError("$retainKeys must be a list of strings")
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _interleave(server_only: list[Any], patched: list[Any], position: Any) -> list[Any]:
    """The apiserver's order: a server-only item comes first only if it preceded the patched item."""
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patched):
        if j >= len(patched):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(patched[j])
            j += 1
        else:
            left, right = position(server_only[i]), position(patched[j])
            if 0 <= left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patched[j])
                j += 1
    return out


def _merge_list(original: Any, patch: list[Any], rules: ListRules, path: Path) -> list[Any]:
    current = list(original) if isinstance(original, list) else []
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [
            copy.deepcopy(item)
            for item in patch
            if not (isinstance(item, dict) and item.get("$patch") == "replace")
        ]
    key = rules(path)
    if key is None:
        return copy.deepcopy(patch)
    if not key:
        values: list[Any] = []
        for item in patch:
            if isinstance(item, dict | list):
                raise StrategicMergeError(f"{'.'.join(path)} is a list of scalars")
            if item not in values:
                values.append(item)
        server_only = [item for item in current if item not in values]
        return _interleave(server_only, values, lambda v: current.index(v) if v in current else -1)
    by_key = {item.get(key): item for item in current if isinstance(item, dict)}
    touched: list[Any] = []
    patched: list[Any] = []
    for item in patch:
        if not isinstance(item, dict):
            raise StrategicMergeError(f"{'.'.join(path)} items must be objects merged by {key!r}")
        if key not in item:
            raise StrategicMergeError(f"map: {item!r} does not contain declared merge key: {key}")
        touched.append(item[key])
        if item.get("$patch") == "delete":
            continue
        existing = by_key.get(item[key])
        if existing is None:
            patched.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
        else:
            patched.append(_merge_map(existing, item, rules, path))
    server_only = [
        copy.deepcopy(item) for item in current if not (isinstance(item, dict) and item.get(key) in touched)
    ]
    order = [item.get(key) if isinstance(item, dict) else None for item in current]

    def position(item: Any) -> int:
        value = item.get(key) if isinstance(item, dict) else None
        return order.index(value) if value in order else -1

    return _interleave(server_only, patched, position)
