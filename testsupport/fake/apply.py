"""Field ownership (``metadata.managedFields``) and server-side apply.

Field paths use the ``FieldsV1`` element spelling: ``f:<field>`` for a map field,
``k:<json key>`` for an item of an associative list, ``v:<json value>`` for a member of a
set. A fieldset is a set of such paths; a path owned together with paths below it is
written with the ``"."`` marker, as the apiserver writes it.

* An **Update** (create, PUT, non-apply PATCH) makes its manager own every field it added
  or changed, taking those fields from other managers; fields that disappear are dropped
  from every manager.
* An **Apply** owns exactly the fields of the applied configuration. A field that another
  manager owns with a different value is a conflict (409, one cause per field) unless
  ``force`` moves it over. Fields the applier owned before and no longer applies are
  removed from the object when nobody else owns them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from testsupport.fake.schema import Path, Structure
from testsupport.fake.status import Cause, StatusError

FieldPath = tuple[str, ...]
FieldSet = set[FieldPath]

_IGNORED_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)


def _key_element(item: dict[str, Any], keys: tuple[str, ...]) -> str:
    present = {k: item[k] for k in sorted(keys) if k in item}
    return "k:" + orjson.dumps(present, option=orjson.OPT_SORT_KEYS).decode()


def _value_element(value: Any) -> str:
    return "v:" + orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _roots(obj: dict[str, Any], scope: str) -> Iterable[tuple[str, Any]]:
    """The top-level fields tracked for ``scope`` (``main``, ``status`` or ``all``)."""
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if scope == "main" and key == "status":
            continue
        if scope == "status" and key != "status":
            continue
        if key == "metadata" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in _IGNORED_META}
            if not value:
                continue
        yield key, value


def fieldset(obj: dict[str, Any], structure: Structure, scope: str = "all") -> FieldSet:
    """Every field path set in ``obj`` (the fieldset of an applied configuration)."""
    out: FieldSet = set()
    for key, value in _roots(obj, scope):
        _walk(value, (key,), (f"f:{key}",), structure, out, item=False)
    return out


def _walk(
    value: Any,
    spath: Path,
    fpath: FieldPath,
    structure: Structure,
    out: FieldSet,
    item: bool,
    every_map: bool = False,
) -> None:
    """The field paths of ``value``: its leaves, atomic lists and set items, its empty maps
    and map-list items; with ``every_map`` (an added value) each map it holds as well."""
    if isinstance(value, dict):
        if item or not value or every_map:
            out.add(fpath)
        for key, child in value.items():
            _walk(child, (*spath, key), (*fpath, f"f:{key}"), structure, out, False, every_map)
    elif isinstance(value, list):
        rule = structure.list_rule(spath)
        if rule.kind == "map" and all(isinstance(i, dict) for i in value):
            for entry in value:
                element = _key_element(entry, rule.keys)
                _walk(entry, spath, (*fpath, element), structure, out, True, every_map)
        elif rule.kind == "set":
            for entry in value:
                out.add((*fpath, _value_element(entry)))
        else:
            out.add(fpath)
    else:
        out.add(fpath)


def changed_fields(old: dict[str, Any], new: dict[str, Any], structure: Structure, scope: str) -> FieldSet:
    """Paths added or changed from ``old`` to ``new`` (an added map or list item is owned itself too)."""
    out: FieldSet = set()
    old_roots = dict(_roots(old, scope))
    for key, value in _roots(new, scope):
        if key in old_roots:
            _diff(old_roots[key], value, (key,), (f"f:{key}",), structure, out)
        else:
            _added(value, (key,), (f"f:{key}",), structure, out, item=False)
    return out


def _added(
    value: Any, spath: Path, fpath: FieldPath, structure: Structure, out: FieldSet, item: bool
) -> None:
    """An added value owns every field in it, its maps included."""
    _walk(value, spath, fpath, structure, out, item, every_map=True)


def _diff(old: Any, new: Any, spath: Path, fpath: FieldPath, structure: Structure, out: FieldSet) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key, child in new.items():
            sub_s, sub_f = (*spath, key), (*fpath, f"f:{key}")
            if key in old:
                _diff(old[key], child, sub_s, sub_f, structure, out)
            else:
                _added(child, sub_s, sub_f, structure, out, item=False)
        return
    if isinstance(old, list) and isinstance(new, list):
        rule = structure.list_rule(spath)
        if rule.kind == "map" and all(isinstance(i, dict) for i in (*old, *new)):
            before = {_key_element(i, rule.keys): i for i in old}
            for entry in new:
                element = _key_element(entry, rule.keys)
                if element in before:
                    _diff(before[element], entry, spath, (*fpath, element), structure, out)
                else:
                    _added(entry, spath, (*fpath, element), structure, out, item=True)
            return
        if rule.kind == "set":
            for entry in new:
                if entry not in old:
                    out.add((*fpath, _value_element(entry)))
            return
    if old != new:
        _added(new, spath, fpath, structure, out, item=False)


# --- FieldsV1 encoding ---------------------------------------------------------------


def to_fields_v1(paths: FieldSet) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for element in path:
            node = node.setdefault(element, {})
    for path in paths:
        node = tree
        for element in path:
            node = node[element]
        if node and "." not in node:
            node["."] = {}
    return _sorted_tree(tree)


def _sorted_tree(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: _sorted_tree(tree[k]) for k in sorted(tree)}


def from_fields_v1(tree: dict[str, Any], prefix: FieldPath = ()) -> FieldSet:
    out: FieldSet = set()
    for key, child in tree.items():
        if key == ".":
            out.add(prefix)
        elif isinstance(child, dict) and child:
            out |= from_fields_v1(child, (*prefix, key))
        else:
            out.add((*prefix, key))
    return out


# --- managed-field entries ------------------------------------------------------------------


@dataclass
class Manager:
    manager: str
    operation: str
    api_version: str
    time: str
    fields: FieldSet
    subresource: str = ""

    def same_slot(self, other: Manager) -> bool:
        return (self.manager, self.operation, self.subresource) == (
            other.manager,
            other.operation,
            other.subresource,
        )

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(self.fields),
        }
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry


def read_managers(obj: dict[str, Any]) -> list[Manager]:
    out = []
    for entry in (obj.get("metadata") or {}).get("managedFields") or ():
        if not isinstance(entry, dict):
            continue
        out.append(
            Manager(
                manager=str(entry.get("manager", "")),
                operation=str(entry.get("operation", "Update")),
                api_version=str(entry.get("apiVersion", "")),
                time=str(entry.get("time", "")),
                fields=from_fields_v1(entry.get("fieldsV1") or {}),
                subresource=str(entry.get("subresource", "")),
            )
        )
    return out


def write_managers(obj: dict[str, Any], managers: list[Manager]) -> None:
    kept = [m.as_dict() for m in managers if m.fields]
    meta = obj.setdefault("metadata", {})
    if kept:
        meta["managedFields"] = kept
    else:
        meta.pop("managedFields", None)


def _without(fields: FieldSet, drop: FieldSet) -> FieldSet:
    """``fields`` minus ``drop`` and everything below a dropped path."""
    if not drop:
        return set(fields)
    return {p for p in fields if not any(p[: len(d)] == d for d in drop if len(d) <= len(p))}


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    structure: Structure,
    manager: str,
    api_version: str,
    now: str,
    subresource: str = "",
) -> None:
    """Rewrite ``new``'s managedFields for an Update by ``manager`` (``old`` is None on create)."""
    scope = "status" if subresource == "status" else "all"
    base = old if old is not None else {"metadata": {}}
    changed = changed_fields(base, new, structure, scope)
    removed = fieldset(base, structure, scope) - fieldset(new, structure, scope) if old is not None else set()
    managers = read_managers(old) if old is not None else []
    for entry in managers:
        entry.fields = _without(entry.fields, removed) - changed
    if changed:
        slot = Manager(manager, "Update", api_version, now, set(), subresource)
        mine = next((m for m in managers if m.same_slot(slot)), None)
        if mine is None:
            managers.append(slot)
            mine = slot
        mine.fields |= changed
        mine.time = now
        mine.api_version = api_version
    write_managers(new, managers)


# --- apply -----------------------------------------------------------------------------


def _locate(obj: Any, path: FieldPath) -> tuple[bool, Any]:
    """Whether ``path`` exists in ``obj``, and its value."""
    node = obj
    for element in path:
        kind, _, raw = element.partition(":")
        if kind == "f":
            if not isinstance(node, dict) or raw not in node:
                return False, None
            node = node[raw]
        elif kind == "k":
            if not isinstance(node, list):
                return False, None
            key = orjson.loads(raw)
            node = next(
                (i for i in node if isinstance(i, dict) and all(i.get(k) == v for k, v in key.items())), None
            )
            if node is None:
                return False, None
        elif kind == "v":
            value = orjson.loads(raw)
            if not isinstance(node, list) or value not in node:
                return False, None
            node = value
        else:
            return False, None
    return True, node


def _merge(live: Any, applied: Any, structure: Structure, spath: Path) -> Any:
    if isinstance(live, dict) and isinstance(applied, dict):
        result = dict(live)
        for key, value in applied.items():
            result[key] = (
                _merge(live.get(key), value, structure, (*spath, key))
                if key in live
                else copy.deepcopy(value)
            )
        return result
    if isinstance(live, list) and isinstance(applied, list):
        rule = structure.list_rule(spath)
        if rule.kind == "map" and all(isinstance(i, dict) for i in (*live, *applied)):
            result_list = [copy.deepcopy(i) for i in live]
            index = {_key_element(i, rule.keys): n for n, i in enumerate(result_list)}
            for entry in applied:
                element = _key_element(entry, rule.keys)
                if element in index:
                    result_list[index[element]] = _merge(result_list[index[element]], entry, structure, spath)
                else:
                    index[element] = len(result_list)
                    result_list.append(copy.deepcopy(entry))
            return result_list
        if rule.kind == "set":
            merged = [copy.deepcopy(i) for i in live]
            merged.extend(copy.deepcopy(i) for i in applied if i not in live)
            return merged
    return copy.deepcopy(applied)


def _remove_path(obj: Any, path: FieldPath) -> None:
    """Delete ``path`` from ``obj`` and prune maps it leaves empty."""
    if not path:
        return
    parents: list[tuple[Any, str]] = []
    node = obj
    for element in path[:-1]:
        found, child = _locate(node, (element,))
        if not found:
            return
        parents.append((node, element))
        node = child
    _delete_child(node, path[-1])
    for parent, element in reversed(parents):
        found, child = _locate(parent, (element,))
        if found and isinstance(child, dict) and not child:
            _delete_child(parent, element)
        else:
            break


def _delete_child(node: Any, element: str) -> None:
    kind, _, raw = element.partition(":")
    if kind == "f" and isinstance(node, dict):
        node.pop(raw, None)
    elif kind == "k" and isinstance(node, list):
        key = orjson.loads(raw)
        node[:] = [
            i for i in node if not (isinstance(i, dict) and all(i.get(k) == v for k, v in key.items()))
        ]
    elif kind == "v" and isinstance(node, list):
        value = orjson.loads(raw)
        node[:] = [i for i in node if i != value]


def _render_path(path: FieldPath) -> str:
    out = []
    for element in path:
        kind, _, raw = element.partition(":")
        if kind == "f":
            out.append(f".{raw}")
        elif kind == "k":
            out.append(
                "[" + ",".join(f"{k}={orjson.dumps(v).decode()}" for k, v in orjson.loads(raw).items()) + "]"
            )
        else:
            out.append(f"[={raw}]")
    return "".join(out)


def _conflict_error(conflicts: dict[tuple[str, str, str], list[FieldPath]]) -> StatusError:
    total = sum(len(v) for v in conflicts.values())
    parts: list[str] = []
    causes: list[Cause] = []
    for (manager, operation, api_version), paths in conflicts.items():
        who = f'"{manager}"' if operation == "Apply" else f'"{manager}" using {api_version}'
        rendered = sorted(_render_path(p) for p in paths)
        if len(rendered) == 1:
            parts.append(f"conflict with {who}: {rendered[0]}")
        else:
            parts.append(f"conflicts with {who}:\n" + "\n".join(f"- {r}" for r in rendered))
        causes.extend(Cause("FieldManagerConflict", f"conflict with {who}", r) for r in rendered)
    message = f"Apply failed with {total} conflict{'s' if total != 1 else ''}: " + "\n".join(parts)
    return StatusError(409, "Conflict", message, {"causes": [c.as_dict() for c in causes]})


def apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    structure: Structure,
    manager: str,
    api_version: str,
    now: str,
    force: bool,
    subresource: str = "",
    scope: str = "all",
) -> dict[str, Any]:
    """The object after ``manager`` applies ``applied`` to ``live`` (raises 409 on conflicts)."""
    base = live if live is not None else {}
    mine = fieldset(applied, structure, scope)
    managers = read_managers(base)
    slot = Manager(manager, "Apply", api_version, now, mine, subresource)
    others = [m for m in managers if not m.same_slot(slot)]
    previous = next((m.fields for m in managers if m.same_slot(slot)), set())

    conflicts: dict[tuple[str, str, str], list[FieldPath]] = {}
    for path in mine:
        present, current = _locate(base, path)
        if not present:
            continue
        _, wanted = _locate(applied, path)
        if current == wanted or (isinstance(current, dict) and isinstance(wanted, dict)):
            continue
        for other in others:
            if path in other.fields:
                if force:
                    other.fields.discard(path)
                else:
                    conflicts.setdefault((other.manager, other.operation, other.api_version), []).append(path)
    if conflicts:
        raise _conflict_error(conflicts)

    result = _merge(base, applied, structure, ())
    if not isinstance(result, dict):
        raise StatusError(400, "BadRequest", "an applied configuration must be an object")
    owned_by_others: FieldSet = set().union(*(m.fields for m in others)) if others else set()
    still_owned = owned_by_others | mine
    removable = [p for p in previous - mine if not any(o[: len(p)] == p for o in still_owned)]
    removable_set = set(removable)
    for path in sorted(removable, key=len, reverse=True):
        if any(path[:n] in removable_set for n in range(1, len(path))):
            continue  # an ancestor goes as a whole
        _remove_path(result, path)
    # keep the entries' order: this manager's slot stays where it was, or goes last
    ordered = [m for m in managers if not m.same_slot(slot)]
    position = next((i for i, m in enumerate(managers) if m.same_slot(slot)), len(ordered))
    ordered.insert(min(position, len(ordered)), slot)
    write_managers(result, ordered)
    return result
