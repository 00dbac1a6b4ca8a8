"""Per-type structure knowledge the fake needs: list semantics, field labels, CRD schemas.

* :class:`ListRule` says how a list at a path merges: an associative ``map`` keyed by some
  fields, a ``set`` of scalars, or ``atomic``; and how a strategic merge patch treats it
  (``patchMergeKey`` / ``patchStrategy``). Paths name fields only: list items add no element
  (``("spec", "containers", "env")``).
* Built-in rules come from the upstream struct tags of the common types (pod spec and
  templates, node, service, object metadata, ``conditions`` everywhere).
* CRD rules come from ``x-kubernetes-list-type`` / ``x-kubernetes-list-map-keys`` in the
  CRD's ``openAPIV3Schema``; :func:`prune` drops fields the structural schema does not
  declare, as the apiserver does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListRule:
    kind: Literal["map", "set", "atomic"]
    keys: tuple[str, ...] = ()
    #: Strategic merge: the merge key for lists of objects, or ``""``; ``merge`` for primitive lists.
    smp_key: str = ""
    smp_merge: bool = False


ATOMIC = ListRule("atomic")


def _map(*keys: str, smp_key: str | None = None) -> ListRule:
    key = keys[0] if smp_key is None else smp_key
    return ListRule("map", keys, smp_key=key, smp_merge=True)


_CONTAINER: dict[Path, ListRule] = {
    ("ports",): _map("containerPort", "protocol"),
    ("env",): _map("name"),
    ("volumeMounts",): _map("mountPath"),
    ("volumeDevices",): _map("devicePath"),
}
_POD_SPEC: dict[Path, ListRule] = {
    ("volumes",): _map("name"),
    ("imagePullSecrets",): _map("name"),
    ("hostAliases",): _map("ip"),
    ("topologySpreadConstraints",): _map("topologyKey", "whenUnsatisfiable"),
    ("resourceClaims",): _map("name"),
    ("schedulingGates",): _map("name"),
    ("tolerations",): ATOMIC,
}
for _field in ("containers", "initContainers", "ephemeralContainers"):
    _POD_SPEC[(_field,)] = _map("name")
    for _sub, _rule in _CONTAINER.items():
        _POD_SPEC[(_field, *_sub)] = _rule

_POD_STATUS: dict[Path, ListRule] = {
    ("podIPs",): _map("ip"),
    ("hostIPs",): _map("ip"),
}
_METADATA: dict[Path, ListRule] = {
    ("metadata", "finalizers"): ListRule("set", smp_merge=True),
    ("metadata", "ownerReferences"): _map("uid"),
    ("metadata", "managedFields"): ATOMIC,
}


def _mount(prefix: Path, table: Mapping[Path, ListRule]) -> dict[Path, ListRule]:
    return {prefix + path: rule for path, rule in table.items()}


BUILTIN_LISTS: dict[str, dict[Path, ListRule]] = {
    "Pod": {**_mount(("spec",), _POD_SPEC), **_mount(("status",), _POD_STATUS)},
    "Node": {
        ("spec", "podCIDRs"): ListRule("set", smp_merge=True),
        ("spec", "taints"): ATOMIC,
        ("status", "addresses"): _map("type"),
        ("status", "images"): ATOMIC,
    },
    "Service": {("spec", "ports"): _map("port", "protocol", smp_key="port")},
    "PodTemplate": _mount(("template", "spec"), _POD_SPEC),
}
for _kind in ("Deployment", "ReplicaSet", "DaemonSet", "StatefulSet", "Job", "ReplicationController"):
    BUILTIN_LISTS[_kind] = _mount(("spec", "template", "spec"), _POD_SPEC)
BUILTIN_LISTS["CronJob"] = _mount(("spec", "jobTemplate", "spec", "template", "spec"), _POD_SPEC)


class Structure:
    """List rules of one kind; unknown lists are atomic, ``conditions`` are keyed by ``type``."""

    def __init__(self, lists: Mapping[Path, ListRule], conditions_by_type: bool = True) -> None:
        self._lists = {**_METADATA, **lists}
        self._conditions_by_type = conditions_by_type

    def list_rule(self, path: Path) -> ListRule:
        rule = self._lists.get(path)
        if rule is not None:
            return rule
        if self._conditions_by_type and path and path[-1] == "conditions":
            return _map("type")
        return ATOMIC


def builtin_structure(kind: str) -> Structure:
    return Structure(BUILTIN_LISTS.get(kind, {}))


# --- CRD schemas --------------------------------------------------------------


def crd_structure(schema: Mapping[str, Any] | None) -> Structure:
    """List rules declared by a CRD's ``openAPIV3Schema``."""
    lists: dict[Path, ListRule] = {}

    def walk(node: Mapping[str, Any], path: Path) -> None:
        kind = node.get("type")
        if kind == "object" or "properties" in node:
            for name, child in (node.get("properties") or {}).items():
                if isinstance(child, Mapping):
                    walk(child, (*path, name))
            extra = node.get("additionalProperties")
            if isinstance(extra, Mapping):
                walk(extra, (*path, "*"))
        elif kind == "array":
            list_type = node.get("x-kubernetes-list-type")
            if list_type == "map":
                lists[path] = ListRule("map", tuple(node.get("x-kubernetes-list-map-keys") or ()))
            elif list_type == "set":
                lists[path] = ListRule("set")
            items = node.get("items")
            if isinstance(items, Mapping):
                walk(items, path)

    if schema:
        walk(schema, ())
    # CRDs declare their own lists; no implicit "conditions by type" rule.
    return Structure(lists, conditions_by_type=False)


def _preserves(node: Mapping[str, Any]) -> bool:
    return bool(node.get("x-kubernetes-preserve-unknown-fields")) or bool(
        node.get("x-kubernetes-embedded-resource")
    )


def prune(value: Any, schema: Mapping[str, Any] | None, root: bool = True) -> Any:
    """Drop object fields the structural schema does not declare (in place; returns ``value``).

    At the root ``apiVersion``, ``kind`` and ``metadata`` always stay.
    """
    if schema is None or _preserves(schema):
        return value
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if isinstance(props, Mapping):
            for key in list(value):
                if root and key in ("apiVersion", "kind", "metadata"):
                    continue
                child = props.get(key)
                if child is None:
                    if isinstance(extra, Mapping):
                        prune(value[key], extra, root=False)
                    elif extra is not True:
                        del value[key]
                else:
                    prune(value[key], child, root=False)
        elif isinstance(extra, Mapping):
            for key in value:
                prune(value[key], extra, root=False)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                prune(item, items, root=False)
    return value


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def check_types(value: Any, schema: Mapping[str, Any] | None, path: str = "") -> list[tuple[str, str, str]]:
    """A basic structural check: types, ``required``, ``enum``, ``nullable``.

    Returns ``(field, reason, message)`` triples shaped like the apiserver's causes. Full
    OpenAPI validation can be plugged in through the fake server's CRD validator hook.
    """
    problems: list[tuple[str, str, str]] = []
    if schema is None or (_preserves(schema) and "type" not in schema):
        return problems
    field = path or "<root>"
    if value is None:
        if not schema.get("nullable") and path:
            kind = schema.get("type", "")
            problems.append(
                (
                    field,
                    "FieldValueTypeInvalid",
                    f'Invalid value: "null": {field} in body must be of type {kind}: "null"',
                )
            )
        return problems
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _JSON_TYPES:
        ok = isinstance(value, _JSON_TYPES[kind]) and not (
            kind in ("integer", "number") and isinstance(value, bool)
        )
        if kind == "integer" and isinstance(value, float) and value.is_integer():
            ok = True
        if not ok:
            got = type(value).__name__
            got = {
                "dict": "object",
                "list": "array",
                "str": "string",
                "bool": "boolean",
                "int": "integer",
                "float": "number",
            }.get(got, got)
            problems.append(
                (
                    field,
                    "FieldValueTypeInvalid",
                    f'Invalid value: "{got}": {field} in body must be of type {kind}: "{got}"',
                )
            )
            return problems
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        allowed = ", ".join(f'"{e}"' for e in enum)
        problems.append(
            (field, "FieldValueNotSupported", f'Unsupported value: "{value}": supported values: {allowed}')
        )
    if isinstance(value, dict):
        for name in schema.get("required") or ():
            if name not in value:
                sub = f"{path}.{name}" if path else name
                problems.append((sub, "FieldValueRequired", "Required value"))
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            if not path and key in ("apiVersion", "kind", "metadata"):
                continue
            sub = f"{path}.{key}" if path else key
            if key in props:
                problems.extend(check_types(child, props[key], sub))
            elif isinstance(extra, Mapping):
                problems.extend(check_types(child, extra, sub))
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                problems.extend(check_types(item, items, f"{path}[{i}]"))
    return problems
