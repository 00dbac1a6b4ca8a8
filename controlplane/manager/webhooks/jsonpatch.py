"""RFC 6902 JSON patches built by hand from an original and a mutated object.

A mutating webhook answers with the operations that turn the object it received into the
object it wants. :func:`create_patch` walks both documents once:

* objects: ``remove`` for keys that disappeared, ``add`` (with the whole new subtree) for
  keys that appeared, recursion into keys present in both -- so a missing map such as
  ``metadata.labels`` is added as a whole instead of patched into;
* arrays: element-wise recursion over the common prefix, then ``add`` of appended items or
  ``remove`` of dropped ones from the highest index down;
* scalars: ``replace`` when the value or its JSON type differs (``1`` vs ``1.0`` vs
  ``true`` are different values in JSON).

Keys are escaped as RFC 6901 requires (``~`` -> ``~0``, ``/`` -> ``~1``), which matters for
every Kubernetes label and resource name with a prefix (``koordinator.sh/qosClass``,
``kubernetes.io/batch-cpu``). Building the patch by hand is about two orders of magnitude
faster than a generic diff library and yields minimal, readable operations.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_patch", "escape_token", "pointer"]


def escape_token(token: str) -> str:
    """One RFC 6901 reference token: ``~`` -> ``~0`` first, then ``/`` -> ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    """A JSON pointer from unescaped tokens: ``pointer("metadata", "labels", "a/b")``."""
    return "".join("/" + escape_token(str(token)) for token in tokens)


def create_patch(original: Any, modified: Any) -> list[dict[str, Any]]:
    """The operations that turn ``original`` into ``modified`` (empty when they are equal)."""
    operations: list[dict[str, Any]] = []
    _diff(original, modified, "", operations)
    return operations


def _same_scalar(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _diff(a: Any, b: Any, path: str, out: list[dict[str, Any]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            if key not in b:
                out.append({"op": "remove", "path": f"{path}/{escape_token(key)}"})
        for key, value in b.items():
            child = f"{path}/{escape_token(key)}"
            if key in a:
                _diff(a[key], value, child, out)
            else:
                out.append({"op": "add", "path": child, "value": value})
        return
    if isinstance(a, list) and isinstance(b, list):
        common = min(len(a), len(b))
        for index in range(common):
            _diff(a[index], b[index], f"{path}/{index}", out)
        for index in range(common, len(b)):
            out.append({"op": "add", "path": f"{path}/{index}", "value": b[index]})
        for index in range(len(a) - 1, common - 1, -1):
            out.append({"op": "remove", "path": f"{path}/{index}"})
        return
    if isinstance(a, dict | list) or isinstance(b, dict | list) or not _same_scalar(a, b):
        out.append({"op": "replace", "path": path, "value": b})
