"""The three classic patch formats: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and
Kubernetes strategic merge patch.

Strategic merge uses :class:`~koordinator.kube.fake.schema.Structure` for merge keys and
supports the directives clients send: ``$patch: replace|delete|merge``,
``$deleteFromPrimitiveList/<field>``, ``$setElementOrder/<field>`` (accepted, order kept
as merged) and ``$retainKeys``. All functions return new values and leave inputs intact.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson

from koordinator.kube.fake.schema import Path, Structure


class PatchError(ValueError):
    """The patch cannot be applied (the apiserver answers 422 or 400)."""


# --- JSON patch -----------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    idx = int(token)
    if idx > len(container) or (idx == len(container) and not allow_end):
        raise PatchError(f"array index {idx} out of range")
    return idx


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"path component {token!r} not found")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise PatchError(f"cannot traverse into a scalar at {token!r}")
    return node


def _get_at(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {last!r} not found")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, allow_end=False)]
    raise PatchError("cannot index a scalar")


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"cannot remove missing key {last!r}")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise PatchError("cannot remove from a scalar")


def _add(doc: Any, tokens: list[str], value: Any, replace: bool = False) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"cannot replace missing key {last!r}")
        parent[last] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(parent, last, allow_end=False)] = value
        else:
            parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise PatchError("cannot add to a scalar")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations")
    result = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed JSON patch operation {op!r}")
        kind, tokens = op["op"], _pointer(op["path"])
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {kind} needs a value")
        if kind == "add":
            result = _add(result, tokens, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(result, tokens)
        elif kind == "replace":
            result = _add(result, tokens, copy.deepcopy(op["value"]), replace=True)
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = _remove(result, source) if kind == "move" else copy.deepcopy(_get_at(result, source))
            result = _add(result, tokens, value)
        elif kind == "test":
            if _get_at(result, tokens) != op["value"]:
                raise PatchError(f"test operation failed at {op['path']!r}")
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return result


# --- merge patch ----------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge patch ----------------------------------------------------------

_DELETE_FROM = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"


def strategic_merge_patch(original: Any, patch: Any, structure: Structure) -> Any:
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    return _smp_map(original if isinstance(original, dict) else {}, patch, structure, ())


def _smp_map(
    original: dict[str, Any], patch: dict[str, Any], structure: Structure, path: Path
) -> dict[str, Any]:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive not in (None, "merge", "delete"):
        raise PatchError(f"unknown $patch directive {directive!r}")
    result = dict(original)
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith(_SET_ORDER):
            continue
        if key.startswith(_DELETE_FROM):
            field = key[len(_DELETE_FROM) :]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                current = result.get(key)
                result[key] = _smp_map(
                    current if isinstance(current, dict) else {}, value, structure, (*path, key)
                )
        elif isinstance(value, list):
            result[key] = _smp_list(result.get(key), value, structure, (*path, key))
        else:
            result[key] = value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _ordered(server_only: list[Any], patched: list[Any], server_index: Callable[[Any], int]) -> list[Any]:
    """Interleave like the apiserver: a server-only item goes first only if it preceded the patched item."""
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
            li, ri = server_index(server_only[i]), server_index(patched[j])
            if li >= 0 and ri >= 0 and li < ri:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patched[j])
                j += 1
    return out


def _smp_list(original: Any, patch: list[Any], structure: Structure, path: Path) -> list[Any]:
    rule = structure.list_rule(path)
    current = list(original) if isinstance(original, list) else []
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and p.get("$patch") == "replace")]
    if not rule.smp_merge:
        return [copy.deepcopy(p) for p in patch]
    if not rule.smp_key:
        patched_values = list(dict.fromkeys(_hashable(p) for p in patch))
        values = [_unhashable(v) for v in patched_values]
        server_only = [copy.deepcopy(v) for v in current if v not in values]
        return _ordered(
            server_only,
            [copy.deepcopy(v) for v in values],
            lambda v: current.index(v) if v in current else -1,
        )
    key = rule.smp_key
    by_key = {i.get(key): i for i in current if isinstance(i, dict)}
    deleted: set[Any] = set()
    patched: list[Any] = []
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"list {'.'.join(path)} is merged by {key!r}; got a non-object item")
        if key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {key}")
        if item.get("$patch") == "delete":
            deleted.add(_hashable(item[key]))
            continue
        existing = by_key.get(item[key])
        if existing is None:
            patched.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
        else:
            patched.append(_smp_map(existing, item, structure, path))
    touched = {_hashable(i[key]) for i in patched} | deleted
    server_only = [
        copy.deepcopy(i) for i in current if not (isinstance(i, dict) and _hashable(i.get(key)) in touched)
    ]
    order = [i.get(key) if isinstance(i, dict) else None for i in current]

    def server_index(item: Any) -> int:
        value = item.get(key) if isinstance(item, dict) else None
        return order.index(value) if value in order else -1

    return _ordered(server_only, patched, server_index)


def _hashable(value: Any) -> Any:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS) if isinstance(value, dict | list) else value


def _unhashable(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, bytes) else value
