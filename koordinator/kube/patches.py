"""JSON patch (RFC 6902) and JSON merge patch (RFC 7386), as the apiserver applies them.

Used by the fake apiserver and by ``koord-manager admit`` (which applies a webhook's
answer to the object it was asked about). Both functions return new values and leave
their inputs intact; a patch that does not apply raises :class:`PatchError`.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["PatchError", "json_patch", "merge_patch"]


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
