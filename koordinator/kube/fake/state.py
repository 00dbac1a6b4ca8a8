"""The fake apiserver's storage and API semantics, independent of HTTP.

:class:`ClusterState` holds every object under one global resourceVersion counter and a
bounded event history, and implements the verbs with the real apiserver's rules:
optimistic concurrency, generateName, uid/creationTimestamp/generation, status
subresources, finalizers and graceful pod deletion, namespace lifecycle, field ownership
and server-side apply, LIST pagination and resourceVersion semantics, watches with replay
from history (410 once it is gone), binding and eviction. Failures raise
:class:`~koordinator.kube.fake.status.StatusError`. All methods are synchronous: a write
and the watch events it causes happen in one step, so watchers never miss or reorder.
"""

from __future__ import annotations

import base64
import copy
import random
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.fake import apply as ssa
from koordinator.kube.fake import status as st
from koordinator.kube.fake.defaults import prepare_pod
from koordinator.kube.fake.patching import PatchError, json_patch, merge_patch, strategic_merge_patch
from koordinator.kube.fake.registry import Registry, ResourceType, SchemaValidatorFactory
from koordinator.kube.fake.schema import prune
from koordinator.kube.fake.validation import validate
from koordinator.kube.resources import CUSTOM_RESOURCE_DEFINITIONS, NAMESPACES, POD_DISRUPTION_BUDGETS, PODS
from koordinator.kube.selectors import FieldSelector, LabelSelector, SelectorError
from koordinator.kube.timeutil import format_time

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
StorageKey = tuple[str, str]  # (group, plural)

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_MAX_SNAPSHOTS = 64


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise st.bad_request("Object 'metadata' is missing or not an object")
    return meta


def _copy(obj: Obj) -> Obj:
    copied: Obj = orjson.loads(orjson.dumps(obj))
    return copied


def _managers_sans_time(obj: Obj) -> list[Obj]:
    return [{k: v for k, v in m.items() if k != "time"} for m in obj["metadata"].get("managedFields") or ()]


def _is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


@dataclass
class HistoryEvent:
    rv: int
    storage: StorageKey
    type: str
    obj: Obj
    prev: Obj | None


@dataclass
class ListSnapshot:
    rv: int
    items: list[Obj]
    api_version: str


@dataclass(eq=False)
class Watcher:
    """One open watch: its filters and the queue its HTTP stream drains."""

    rtype: ResourceType
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    allow_bookmarks: bool
    queue: Any  # asyncio.Queue[bytes | None]; typed loosely to keep this module loop-agnostic
    #: resourceVersion of the last event or bookmark sent on this watch
    sent_rv: int = 0
    closed: bool = False

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        if not self.labels.empty and not self.labels.matches(meta.get("labels") or {}):
            return False
        return self.fields.empty or self.fields.matches(self.rtype.field_labels(obj))

    def offer(self, event_type: str, obj: Obj, prev: Obj | None, rv: int) -> None:
        if self.closed:
            return
        now_match = self.matches(obj)
        if event_type == "ADDED":
            kind = "ADDED" if now_match else ""
        elif event_type == "DELETED":
            kind = "DELETED" if self.matches(prev if prev is not None else obj) else ""
        else:
            was = self.matches(prev)
            if was and not now_match and prev is not None:
                # leaving the selection: the previous content, at this event's resourceVersion
                left = {**prev, "metadata": {**prev["metadata"], "resourceVersion": str(rv)}}
                self.send("DELETED", left)
                return
            kind = "MODIFIED" if was and now_match else "ADDED" if now_match else ""
        if kind:
            self.send(kind, obj)

    def send(self, kind: str, obj: Obj) -> None:
        api_version = self.rtype.resource.api_version
        if obj.get("apiVersion") != api_version:
            obj = {**obj, "apiVersion": api_version}
        self.queue.put_nowait(orjson.dumps({"type": kind, "object": obj}) + b"\n")
        self.sent_rv = max(self.sent_rv, int(obj["metadata"].get("resourceVersion") or 0))

    def bookmark(self, rv: int, initial_events_end: bool = False) -> None:
        meta: Obj = {"resourceVersion": str(rv)}
        if initial_events_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        body = {"kind": self.rtype.kind, "apiVersion": self.rtype.resource.api_version, "metadata": meta}
        self.queue.put_nowait(orjson.dumps({"type": "BOOKMARK", "object": body}) + b"\n")
        self.sent_rv = max(self.sent_rv, rv)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


class ClusterState:
    def __init__(
        self,
        *,
        clock: Clock = SYSTEM_CLOCK,
        history_limit: int = 10000,
        schema_validator: SchemaValidatorFactory | None = None,
        track_managed_fields: bool = True,
        seed: int | None = None,
    ) -> None:
        self.clock = clock
        self.registry = Registry()
        self.history_limit = history_limit
        self.schema_validator = schema_validator
        self.track_managed_fields = track_managed_fields
        self.rv = 0
        self.compacted_rv = 0
        self.history: deque[HistoryEvent] = deque()
        self._objects: dict[StorageKey, dict[Key, Obj]] = {}
        self._type_start: dict[StorageKey, int] = {}
        self._watchers: dict[StorageKey, set[Watcher]] = {}
        self._snapshots: OrderedDict[str, ListSnapshot] = OrderedDict()
        self._rng = random.Random(seed)
        for name in INITIAL_NAMESPACES:
            self.create(
                self.registry.for_resource(NAMESPACES),
                None,
                {"metadata": {"name": name}},
                manager="kube-apiserver",
            )

    # --- helpers ---------------------------------------------------------------------

    def now(self) -> str:
        return format_time(self.clock.time())

    def objects(self, rtype: ResourceType) -> dict[Key, Obj]:
        return self._objects.setdefault(rtype.storage_key, {})

    def _served(self, rtype: ResourceType, obj: Obj) -> Obj:
        api_version = rtype.resource.api_version
        return obj if obj.get("apiVersion") == api_version else {**obj, "apiVersion": api_version}

    def _key(self, rtype: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rtype.namespaced else "", name)

    def _require(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self.objects(rtype).get(self._key(rtype, namespace, name))
        if obj is None:
            raise st.not_found(rtype.plural, rtype.group, name)
        return obj

    def _commit(self, rtype: ResourceType, event_type: str, obj: Obj, prev: Obj | None) -> Obj:
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        key = (meta.get("namespace", "") if rtype.namespaced else "", meta["name"])
        store = self.objects(rtype)
        if event_type == "DELETED":
            store.pop(key, None)
        else:
            store[key] = obj
        self.history.append(HistoryEvent(self.rv, rtype.storage_key, event_type, obj, prev))
        while len(self.history) > self.history_limit:
            self.compacted_rv = self.history.popleft().rv
        for watcher in list(self._watchers.get(rtype.storage_key, ())):
            watcher.offer(event_type, obj, prev, self.rv)
        return obj

    def _generate_name(self, prefix: str) -> str:
        return prefix + "".join(self._rng.choice(_NAME_CHARS) for _ in range(5))

    def _check_namespace(self, rtype: ResourceType, namespace: str, name: str) -> None:
        ns = self.objects(self.registry.for_resource(NAMESPACES)).get(("", namespace))
        if ns is None:
            raise st.not_found("namespaces", "", namespace)
        if (ns.get("metadata") or {}).get("deletionTimestamp"):
            raise st.forbidden(
                rtype.plural,
                rtype.group,
                name,
                f"unable to create new content in namespace {namespace} because it is being terminated",
                [
                    st.Cause(
                        "NamespaceTerminating",
                        f"namespace {namespace} is being terminated",
                        "metadata.namespace",
                    )
                ],
            )

    def _validate(self, rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
        causes = validate(rtype, obj, old)
        if causes:
            raise st.invalid(rtype.kind, rtype.group, str(_meta(obj).get("name") or ""), causes)

    def _scope(self, rtype: ResourceType, subresource: str) -> str:
        if subresource == "status":
            return "status"
        return "main" if rtype.status_subresource else "all"

    # --- create ------------------------------------------------------------------------

    def _check_kind(self, rtype: ResourceType, body: Obj) -> None:
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != rtype.resource.api_version:
            other = self.registry.for_kind(str(api_version), str(kind or rtype.kind))
            if other is None or other.storage_key != rtype.storage_key:
                raise st.bad_request(
                    f"the API version in the data ({api_version}) does not match the expected API version "
                    f"({rtype.resource.api_version})"
                )
        if kind and kind != rtype.kind:
            raise st.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rtype.kind})"
            )

    def create(
        self,
        rtype: ResourceType,
        namespace: str | None,
        body: Obj,
        *,
        manager: str,
        dry_run: bool = False,
        managed: list[ssa.Manager] | None = None,
    ) -> Obj:
        if not isinstance(body, dict):
            raise st.bad_request("the body of the request must be a JSON object")
        self._check_kind(rtype, body)
        obj = _copy(body)
        obj["apiVersion"], obj["kind"] = rtype.resource.api_version, rtype.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise st.bad_request("Object 'metadata' is missing or not an object")
        if rtype.namespaced:
            given = meta.get("namespace")
            if namespace and given and given != namespace:
                raise st.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            namespace = namespace or given
            if namespace:
                meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise st.internal("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self._generate_name(str(meta["generateName"]))
        name = str(meta.get("name") or "")
        if rtype.namespaced and namespace:
            self._check_namespace(rtype, namespace, name)
        for system in (*_SYSTEM_META, "managedFields" if managed is not None else ""):
            meta.pop(system, None)
        self._prepare_create(rtype, obj)
        self._validate(rtype, obj, None)
        if self._key(rtype, namespace, name) in self.objects(rtype):
            raise st.already_exists(rtype.plural, rtype.group, name)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.now()
        if rtype.generation:
            meta["generation"] = 1
        if self.track_managed_fields:
            if managed is not None:
                ssa.write_managers(obj, managed)
            elif not meta.get("managedFields"):
                ssa.record_update(None, obj, rtype.structure, manager, rtype.resource.api_version, self.now())
        if dry_run:
            meta["resourceVersion"] = ""
            return obj
        created = self._commit(rtype, "ADDED", obj, None)
        self._after_create(rtype, created)
        return created

    def _prepare_create(self, rtype: ResourceType, obj: Obj) -> None:
        if rtype.crd_schema is not None:
            prune(obj, rtype.crd_schema)
        if rtype.status_subresource and rtype.crd_name:
            obj.pop("status", None)
        if rtype.resource == PODS:
            try:
                prepare_pod(obj, self._priority_of)
            except LookupError as exc:
                raise st.forbidden("pods", "", str(_meta(obj).get("name") or ""), str(exc)) from None
        elif rtype.resource == POD_DISRUPTION_BUDGETS:
            obj["status"] = {
                "disruptionsAllowed": 0,
                "currentHealthy": 0,
                "desiredHealthy": 0,
                "expectedPods": 0,
            }
        elif rtype.resource == NAMESPACES:
            meta = _meta(obj)
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = str(meta.get("name") or "")
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}

    def _priority_of(self, name: str) -> int | None:
        for rtype in self.registry.types():
            if rtype.kind == "PriorityClass" and not rtype.crd_name:
                found = self.objects(rtype).get(("", name))
                return int(found.get("value", 0)) if found else None
        return None

    def _after_create(self, rtype: ResourceType, obj: Obj) -> None:
        if rtype.resource == CUSTOM_RESOURCE_DEFINITIONS:
            self._establish_crd(rtype, obj)

    # --- CRDs ------------------------------------------------------------------------------

    def _establish_crd(self, rtype: ResourceType, crd: Obj) -> None:
        try:
            added = self.registry.register_crd(crd, self.schema_validator)
        except ValueError as exc:
            raise st.invalid(
                rtype.kind,
                rtype.group,
                str(_meta(crd).get("name") or ""),
                [st.Cause("FieldValueInvalid", str(exc), "spec")],
            ) from None
        for served in added:
            self._type_start.setdefault(served.storage_key, self.rv)
        names = (crd.get("spec") or {}).get("names") or {}
        now = self.now()
        updated = copy.deepcopy(crd)
        updated["status"] = {
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "lastTransitionTime": now,
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                },
                {
                    "type": "Established",
                    "status": "True",
                    "lastTransitionTime": now,
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                },
            ],
            "acceptedNames": {
                k: v
                for k, v in names.items()
                if k in ("plural", "singular", "kind", "listKind", "shortNames", "categories")
            },
            "storedVersions": [
                v["name"] for v in (crd.get("spec") or {}).get("versions") or () if v.get("storage")
            ],
        }
        self._commit(rtype, "MODIFIED", updated, crd)

    def register_crd(self, crd: Obj) -> Obj:
        """Create a CRD object as a client would (it is established at once)."""
        rtype = self.registry.for_resource(CUSTOM_RESOURCE_DEFINITIONS)
        body = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", **crd}
        body["metadata"] = {
            k: v
            for k, v in (crd.get("metadata") or {}).items()
            if k not in ("resourceVersion", "uid", "creationTimestamp")
        }
        self.create(rtype, None, body, manager="koordinator-fake")
        return self.objects(rtype)[("", str(body["metadata"]["name"]))]

    def _remove_crd(self, crd: Obj) -> None:
        name = str(_meta(crd).get("name") or "")
        types = self.registry.remove_crd(name)
        for rtype in types:
            for obj in list(self.objects(rtype).values()):
                gone = copy.deepcopy(obj)
                self._commit(rtype, "DELETED", gone, obj)
            for watcher in list(self._watchers.pop(rtype.storage_key, ())):
                watcher.close()

    # --- read --------------------------------------------------------------------------

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        return self._served(rtype, self._require(rtype, namespace, name))

    def _filter(
        self,
        rtype: ResourceType,
        items: Iterator[tuple[Key, Obj]] | list[tuple[Key, Obj]],
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
    ) -> list[Obj]:
        out = []
        for (ns, _), obj in sorted(items, key=lambda kv: kv[0]):
            if namespace and rtype.namespaced and ns != namespace:
                continue
            if not labels.empty and not labels.matches((obj.get("metadata") or {}).get("labels") or {}):
                continue
            if not fields.empty and not fields.matches(rtype.field_labels(obj)):
                continue
            out.append(obj)
        return out

    def parse_selectors(
        self, rtype: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> tuple[LabelSelector, FieldSelector]:
        try:
            labels = LabelSelector.parse(label_selector)
        except SelectorError as exc:
            raise st.bad_request(f"unable to parse requirement: {exc}") from None
        try:
            fields = FieldSelector.parse(field_selector)
        except SelectorError as exc:
            raise st.bad_request(str(exc)) from None
        unsupported = sorted(fields.fields - rtype.supported_fields())
        if unsupported:
            raise st.bad_request(f"field label not supported: {unsupported[0]}")
        return labels, fields

    def _state_at(self, rtype: ResourceType, rv: int) -> dict[Key, Obj]:
        if rv < max(self.compacted_rv, self._type_start.get(rtype.storage_key, 0)):
            raise st.gone(
                f"The resourceVersion for the provided list is too old. Current resourceVersion is {self.rv}."
            )
        state = dict(self.objects(rtype))
        for event in reversed(self.history):
            if event.rv <= rv:
                break
            if event.storage != rtype.storage_key:
                continue
            meta = event.obj["metadata"]
            key = (meta.get("namespace", "") if rtype.namespaced else "", meta["name"])
            if event.type == "ADDED":
                state.pop(key, None)
            elif event.prev is not None:
                state[key] = event.prev
        return state

    def list_objects(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> Obj:
        if continue_token:
            return self._continue(rtype, continue_token, limit)
        labels, fields = self.parse_selectors(rtype, label_selector, field_selector)
        list_rv = self.rv
        source: dict[Key, Obj] = self.objects(rtype)
        if resource_version and resource_version != "0":
            try:
                wanted = int(resource_version)
            except ValueError:
                raise st.bad_request(f'invalid resource version "{resource_version}"') from None
            if wanted > self.rv:
                raise st.StatusError(
                    504,
                    "Timeout",
                    f"Timeout: Too large resource version: {wanted}, current: {self.rv}",
                    {
                        "causes": [
                            {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                        ],
                        "retryAfterSeconds": 1,
                    },
                )
            if resource_version_match == "Exact":
                source = self._state_at(rtype, wanted)
                list_rv = wanted
        elif resource_version_match == "Exact":
            raise st.bad_request('resourceVersionMatch "Exact" requires a non-zero resourceVersion')
        items = self._filter(rtype, list(source.items()), namespace, labels, fields)
        return self._page(rtype, items, list_rv, limit)

    def _page(
        self,
        rtype: ResourceType,
        items: list[Obj],
        list_rv: int,
        limit: int,
        offset: int = 0,
        token_id: str = "",
    ) -> Obj:
        meta: Obj = {"resourceVersion": str(list_rv)}
        page = items[offset:]
        if limit and len(page) > limit:
            page = page[:limit]
            if not token_id:
                token_id = uuid.uuid4().hex
                self._snapshots[token_id] = ListSnapshot(list_rv, items, rtype.resource.api_version)
                while len(self._snapshots) > _MAX_SNAPSHOTS:
                    self._snapshots.popitem(last=False)
            next_offset = offset + limit
            token = {"v": "meta.k8s.io/v1", "rv": list_rv, "id": token_id, "offset": next_offset}
            meta["continue"] = base64.urlsafe_b64encode(orjson.dumps(token)).decode().rstrip("=")
            meta["remainingItemCount"] = len(items) - next_offset
        elif token_id:
            self._snapshots.pop(token_id, None)
        strip = not rtype.crd_name
        rendered = [
            {k: v for k, v in o.items() if k not in ("apiVersion", "kind")}
            if strip
            else self._served(rtype, o)
            for o in page
        ]
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.resource.api_version,
            "metadata": meta,
            "items": rendered,
        }

    def _continue(self, rtype: ResourceType, token: str, limit: int) -> Obj:
        try:
            data = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            token_id, offset, rv = str(data["id"]), int(data["offset"]), int(data["rv"])
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            raise st.bad_request(f"continue key is not valid: {token!r}") from None
        snapshot = self._snapshots.get(token_id)
        if snapshot is None or rv < self.compacted_rv:
            raise st.gone(
                "The provided continue parameter is too old to display a consistent list result. You can start a "
                "new list without the continue parameter."
            )
        return self._page(rtype, snapshot.items, snapshot.rv, limit, offset, token_id)

    # --- update / patch -------------------------------------------------------------------

    def _prepare_update(self, rtype: ResourceType, old: Obj, body: Obj, subresource: str) -> Obj:
        new = _copy(body)
        new["apiVersion"], new["kind"] = rtype.resource.api_version, rtype.kind
        meta = new.setdefault("metadata", {})
        old_meta = old["metadata"]
        for system in _SYSTEM_META:
            if system in old_meta:
                meta[system] = old_meta[system]
            else:
                meta.pop(system, None)
        if "managedFields" not in meta and "managedFields" in old_meta:
            meta["managedFields"] = old_meta["managedFields"]
        if rtype.namespaced:
            meta["namespace"] = old_meta.get("namespace")
        if rtype.crd_schema is not None:
            prune(new, rtype.crd_schema)
        if subresource == "status":
            result = _copy(old)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            result_meta = result["metadata"]
            if "managedFields" in meta:
                result_meta["managedFields"] = meta["managedFields"]
            if rtype.status_keeps_metadata:
                for keep in ("labels", "annotations"):
                    if keep in meta:
                        result_meta[keep] = meta[keep]
                    else:
                        result_meta.pop(keep, None)
            return result
        if rtype.status_subresource:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        if rtype.resource == NAMESPACES:
            new["spec"] = old.get("spec", {})
            new["status"] = old.get("status", {})
        return new

    def _store_update(
        self,
        rtype: ResourceType,
        old: Obj,
        new: Obj,
        *,
        manager: str,
        subresource: str,
        dry_run: bool,
        operation: str = "Update",
    ) -> Obj:
        meta, old_meta = new["metadata"], old["metadata"]
        if old_meta.get("deletionTimestamp"):
            added = [f for f in meta.get("finalizers") or () if f not in (old_meta.get("finalizers") or ())]
            if added:
                raise st.invalid(
                    rtype.kind,
                    rtype.group,
                    meta["name"],
                    [
                        st.Cause(
                            "FieldValueForbidden",
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers "
                            + str(added),
                            "metadata.finalizers",
                        )
                    ],
                )
        self._validate(rtype, new, old)
        if rtype.generation and old_meta.get("generation"):
            ignore = (
                {"metadata", "status"} if rtype.status_subresource or not rtype.crd_name else {"metadata"}
            )
            if {k: v for k, v in new.items() if k not in ignore} != {
                k: v for k, v in old.items() if k not in ignore
            }:
                meta["generation"] = int(old_meta.get("generation") or 0) + 1
        if self.track_managed_fields and operation == "Update":
            ssa.record_update(
                old, new, rtype.structure, manager, rtype.resource.api_version, self.now(), subresource
            )
        if self._unchanged(old, new):
            return self._served(rtype, old)
        if dry_run:
            return new
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            # the last finalizer is gone: the update becomes the deletion
            return self._finish_delete(rtype, new)
        return self._served(rtype, self._commit(rtype, "MODIFIED", new, old))

    @staticmethod
    def _unchanged(old: Obj, new: Obj) -> bool:
        def strip(obj: Obj) -> Obj:
            meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")}
            return {**obj, "metadata": meta}

        if strip(old) != strip(new):
            return False
        return _managers_sans_time(old) == _managers_sans_time(new)

    def _check_rv(self, rtype: ResourceType, old: Obj, body_rv: Any, name: str) -> None:
        if body_rv in (None, ""):
            if not rtype.unconditional_update:
                raise st.invalid(
                    rtype.plural,
                    rtype.group,
                    name,
                    [
                        st.Cause(
                            "FieldValueInvalid",
                            "Invalid value: 0: must be specified for an update",
                            "metadata.resourceVersion",
                        )
                    ],
                )
            return
        if str(body_rv) != old["metadata"]["resourceVersion"]:
            raise st.conflict(rtype.plural, rtype.group, name, st.MODIFIED)

    def update(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: Obj,
        *,
        manager: str,
        subresource: str = "",
        dry_run: bool = False,
    ) -> Obj:
        if not isinstance(body, dict):
            raise st.bad_request("the body of the request must be a JSON object")
        self._check_kind(rtype, body)
        meta = _meta(body)
        if meta.get("name") and meta["name"] != name:
            raise st.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        if rtype.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise st.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        old = self._require(rtype, namespace, name)
        self._check_rv(rtype, old, meta.get("resourceVersion"), name)
        new = self._prepare_update(rtype, old, body, subresource)
        new["metadata"]["name"] = name
        return self._store_update(rtype, old, new, manager=manager, subresource=subresource, dry_run=dry_run)

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        patch_type: str,
        body: Any,
        *,
        manager: str,
        subresource: str = "",
        force: bool = False,
        dry_run: bool = False,
        field_manager_given: bool = True,
    ) -> Obj:
        if patch_type == APPLY_PATCH:
            if not field_manager_given:
                raise st.StatusError(
                    422,
                    "Invalid",
                    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
                    {
                        "group": "meta.k8s.io",
                        "kind": "PatchOptions",
                        "causes": [
                            {
                                "reason": "FieldValueRequired",
                                "message": "Required value: is required for apply patch",
                                "field": "fieldManager",
                            }
                        ],
                    },
                )
            return self._apply(
                rtype,
                namespace,
                name,
                body,
                manager=manager,
                subresource=subresource,
                force=force,
                dry_run=dry_run,
            )
        old = self._require(rtype, namespace, name)
        current = self._served(rtype, old)
        try:
            if patch_type == JSON_PATCH:
                patched = json_patch(current, body)
            elif patch_type == MERGE_PATCH:
                if not isinstance(body, dict):
                    raise PatchError("a merge patch must be a JSON object")
                patched = merge_patch(current, body)
            elif patch_type == STRATEGIC_PATCH:
                if not rtype.strategic_merge:
                    raise st.unsupported_media_type(
                        "the body of the request was in an unknown format - accepted media types include: "
                        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
                    )
                patched = strategic_merge_patch(current, body, rtype.structure)
            else:
                raise st.unsupported_media_type(
                    f"the body of the request was in an unknown format - {patch_type}"
                )
        except PatchError:
            raise st.invalid_patch() from None
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise st.invalid_patch()
        if patched["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
            self._check_rv(rtype, old, patched["metadata"].get("resourceVersion"), name)
        if patched["metadata"].get("name") != name:
            raise st.invalid(
                rtype.kind,
                rtype.group,
                name,
                [
                    st.Cause(
                        "FieldValueInvalid",
                        "Invalid value: the name cannot be changed by a patch",
                        "metadata.name",
                    )
                ],
            )
        new = self._prepare_update(rtype, old, patched, subresource)
        return self._store_update(rtype, old, new, manager=manager, subresource=subresource, dry_run=dry_run)

    def _apply(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        manager: str,
        subresource: str,
        force: bool,
        dry_run: bool,
    ) -> Obj:
        if not isinstance(body, dict):
            raise st.bad_request("an applied configuration must be an object")
        if not body.get("apiVersion") or not body.get("kind"):
            raise st.bad_request("apiVersion and kind must be set in an applied configuration")
        self._check_kind(rtype, body)
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise st.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        applied = _copy(body)
        applied.setdefault("metadata", {})["name"] = name
        if rtype.crd_schema is not None:
            prune(applied, rtype.crd_schema)
        scope = self._scope(rtype, subresource)
        old = self.objects(rtype).get(self._key(rtype, namespace, name))
        api_version = rtype.resource.api_version
        if old is None:
            if subresource:
                raise st.not_found(rtype.plural, rtype.group, name)
            result = ssa.apply(
                None, applied, rtype.structure, manager, api_version, self.now(), force, scope=scope
            )
            managed = ssa.read_managers(result)
            result["metadata"].pop("managedFields", None)
            result["metadata"].pop("resourceVersion", None)
            return self.create(rtype, namespace, result, manager=manager, dry_run=dry_run, managed=managed)
        body_rv = meta.get("resourceVersion")
        if body_rv not in (None, "") and str(body_rv) != old["metadata"]["resourceVersion"]:
            raise st.conflict(rtype.plural, rtype.group, name, st.MODIFIED)
        applied["metadata"].pop("resourceVersion", None)
        merged = ssa.apply(
            self._served(rtype, old),
            applied,
            rtype.structure,
            manager,
            api_version,
            self.now(),
            force,
            subresource,
            scope,
        )
        new = self._prepare_update(rtype, old, merged, subresource)
        return self._store_update(
            rtype, old, new, manager=manager, subresource=subresource, dry_run=dry_run, operation="Apply"
        )

    # --- delete ------------------------------------------------------------------------------

    def delete(
        self, rtype: ResourceType, namespace: str | None, name: str, options: Obj | None = None
    ) -> tuple[Obj, bool]:
        """Returns what the apiserver returns and whether the object is gone now."""
        options = options or {}
        old = self._require(rtype, namespace, name)
        meta = old["metadata"]
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise st.conflict(
                rtype.kind,
                rtype.group,
                name,
                f"the UID in the precondition ({pre['uid']}) does not match the UID in record ({meta.get('uid')}). "
                "The object might have been deleted and then recreated",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise st.conflict(
                rtype.kind,
                rtype.group,
                name,
                f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not match the ResourceVersion "
                f"in record ({meta.get('resourceVersion')}). The object might have been modified",
            )
        dry_run = bool(options.get("dryRun"))
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise st.invalid(
                "DeleteOptions",
                "meta.k8s.io",
                "",
                [
                    st.Cause(
                        "FieldValueNotSupported",
                        f'Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan"',
                        "propagationPolicy",
                    )
                ],
            )
        new = _copy(old)
        new_meta = new["metadata"]
        finalizers = list(new_meta.get("finalizers") or [])
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        grace = 0
        if rtype.graceful_delete:
            requested = options.get("gracePeriodSeconds")
            spec = old.get("spec") or {}
            grace = int(
                requested if requested is not None else spec.get("terminationGracePeriodSeconds", 30) or 0
            )
            if not spec.get("nodeName") or (old.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                grace = 0
        if meta.get("deletionTimestamp"):
            current_grace = int(meta.get("deletionGracePeriodSeconds") or 0)
            if not (rtype.graceful_delete and grace < current_grace):
                return self._served(rtype, old), False
        if rtype.resource == NAMESPACES:
            new_meta["deletionTimestamp"] = self.now()
            new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
            if dry_run:
                return new, False
            return self._served(rtype, self._commit(rtype, "MODIFIED", new, old)), False
        if finalizers or rtype.graceful_delete:
            new_meta["finalizers"] = finalizers
            if not finalizers:
                new_meta.pop("finalizers")
            new_meta["deletionTimestamp"] = format_time(self.clock.time() + grace)
            new_meta["deletionGracePeriodSeconds"] = grace
            if new_meta.get("generation"):
                new_meta["generation"] = int(new_meta["generation"]) + 1
            if dry_run:
                return new, False
            committed = self._commit(rtype, "MODIFIED", new, old)
            if finalizers or grace > 0:
                return self._served(rtype, committed), False
            return self._finish_delete(rtype, committed), True
        if dry_run:
            return self._served(rtype, old), True
        return self._finish_delete(rtype, new), True

    def _finish_delete(self, rtype: ResourceType, obj: Obj) -> Obj:
        prev = self.objects(rtype).get(
            self._key(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        )
        final = _copy(obj)
        self._commit(rtype, "DELETED", final, prev)
        if rtype.resource == CUSTOM_RESOURCE_DEFINITIONS:
            self._remove_crd(final)
        if rtype.returns_deleted_object:
            return self._served(rtype, final)
        details: Obj = {"name": final["metadata"]["name"]}
        if rtype.group:
            details["group"] = rtype.group
        details["kind"] = rtype.plural
        details["uid"] = final["metadata"].get("uid")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def delete_collection(
        self,
        rtype: ResourceType,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        options: Obj | None = None,
    ) -> Obj:
        labels, fields = self.parse_selectors(rtype, label_selector, field_selector)
        victims = self._filter(rtype, list(self.objects(rtype).items()), namespace, labels, fields)
        items = []
        for obj in victims:
            meta = obj["metadata"]
            result, _ = self.delete(rtype, meta.get("namespace"), meta["name"], options)
            if result.get("kind") != "Status":
                items.append(result)
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.resource.api_version,
            "metadata": {"resourceVersion": str(self.rv)},
            "items": items,
        }

    # --- pods: binding and eviction ---------------------------------------------------------

    def bind(self, namespace: str, name: str, binding: Obj) -> None:
        pods = self.registry.for_resource(PODS)
        meta = _meta(binding)
        if meta.get("name") and meta["name"] != name:
            raise st.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        target = binding.get("target") or {}
        node = target.get("name")
        if not node:
            raise st.invalid(
                "Binding", "", name, [st.Cause("FieldValueRequired", "Required value", "target.name")]
            )
        old = self._require(pods, namespace, name)
        old_meta = old["metadata"]
        if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
            raise st.conflict(
                "pods/binding",
                "",
                name,
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {old_meta.get('uid')}",
            )
        if old_meta.get("deletionTimestamp"):
            raise st.conflict(
                "pods/binding", "", name, f"pod {name} is being deleted, cannot be assigned to a host"
            )
        assigned = (old.get("spec") or {}).get("nodeName")
        if assigned:
            raise st.conflict(
                "pods/binding", "", name, f'pod {name} is already assigned to node "{assigned}"'
            )
        new = _copy(old)
        new["spec"]["nodeName"] = node
        if meta.get("annotations"):
            new["metadata"].setdefault("annotations", {}).update(meta["annotations"])
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": self.now(),
            }
        )
        status["conditions"] = conditions
        self._commit(pods, "MODIFIED", new, old)

    def _pdbs_for(self, pod: Obj) -> list[tuple[ResourceType, Obj]]:
        rtype = self.registry.for_resource(POD_DISRUPTION_BUDGETS)
        namespace = pod["metadata"].get("namespace", "")
        labels = pod["metadata"].get("labels") or {}
        found = []
        for (ns, _), pdb in sorted(self.objects(rtype).items()):
            selector = (pdb.get("spec") or {}).get("selector")
            if ns != namespace or selector is None:
                continue
            try:
                if LabelSelector.from_dict(selector).matches(labels):
                    found.append((rtype, pdb))
            except SelectorError:
                continue
        return found

    def evict(self, namespace: str, name: str, eviction: Obj) -> None:
        pods = self.registry.for_resource(PODS)
        meta = _meta(eviction)
        if meta.get("name") and meta["name"] != name:
            raise st.bad_request(
                f"name in URL does not match name in Eviction object: {name} != {meta['name']}"
            )
        options = eviction.get("deleteOptions") or {}
        pod = self._require(pods, namespace, name)
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
            self.delete(pods, namespace, name, options)
            return
        pdbs = self._pdbs_for(pod)
        if len(pdbs) > 1:
            raise st.internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
            )
        if not pdbs:
            self.delete(pods, namespace, name, options)
            return
        pdb_type, pdb = pdbs[0]
        spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
        ready = _is_ready(pod)
        if not ready and spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            self.delete(pods, namespace, name, options)
            return
        desired, healthy = int(status.get("desiredHealthy") or 0), int(status.get("currentHealthy") or 0)
        if not ready and healthy >= desired > 0:
            self.delete(pods, namespace, name, options)
            return
        pdb_name = pdb["metadata"]["name"]
        refusal = "Cannot evict pod as it would violate the pod's disruption budget."
        if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 0):
            raise st.too_many_requests(
                refusal,
                [
                    st.Cause(
                        "DisruptionBudget",
                        f"The disruption budget {pdb_name} is still being processed by the server.",
                    )
                ],
                retry_after=10,
            )
        allowed = int(status.get("disruptionsAllowed") or 0)
        if allowed < 0:
            raise st.forbidden(
                "poddisruptionbudgets", "policy", pdb_name, "pdb disruptions allowed is negative"
            )
        if len(status.get("disruptedPods") or {}) > 2000:
            raise st.forbidden(
                "poddisruptionbudgets",
                "policy",
                pdb_name,
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            )
        if allowed == 0:
            raise st.too_many_requests(
                refusal,
                [
                    st.Cause(
                        "DisruptionBudget",
                        f"The disruption budget {pdb_name} needs {desired} healthy pods and has {healthy} currently",
                    )
                ],
            )
        if options.get("dryRun"):
            return
        new_pdb = _copy(pdb)
        new_status = new_pdb.setdefault("status", {})
        new_status["disruptionsAllowed"] = allowed - 1
        new_status.setdefault("disruptedPods", {})[name] = self.now()
        if allowed - 1 == 0:
            conditions = [
                c for c in new_status.get("conditions") or () if c.get("type") != "DisruptionAllowed"
            ]
            conditions.append(
                {
                    "type": "DisruptionAllowed",
                    "status": "False",
                    "observedGeneration": status.get("observedGeneration", 0),
                    "lastTransitionTime": self.now(),
                    "reason": "InsufficientPods",
                    "message": "",
                }
            )
            new_status["conditions"] = conditions
        self._commit(pdb_type, "MODIFIED", new_pdb, pdb)
        self.delete(pods, namespace, name, options)

    # --- watch -----------------------------------------------------------------------------

    def watch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        queue: Any,
        resource_version: str | None,
        label_selector: str | None,
        field_selector: str | None,
        allow_bookmarks: bool,
    ) -> Watcher:
        """Register a watcher and queue what it must see first; 410 (as StatusError) if the RV is gone."""
        labels, fields = self.parse_selectors(rtype, label_selector, field_selector)
        watcher = Watcher(
            rtype, namespace if rtype.namespaced else None, labels, fields, allow_bookmarks, queue
        )
        if resource_version in (None, "", "0"):
            for obj in self._filter(
                rtype, list(self.objects(rtype).items()), watcher.namespace, labels, fields
            ):
                watcher.send("ADDED", obj)
            watcher.sent_rv = self.rv
            if allow_bookmarks:
                watcher.bookmark(self.rv, initial_events_end=True)
        else:
            try:
                start = int(resource_version)
            except ValueError:
                raise st.bad_request(f'invalid resource version "{resource_version}"') from None
            oldest = max(self.compacted_rv, self._type_start.get(rtype.storage_key, 0))
            if start < oldest:
                raise st.gone(f"too old resource version: {start} ({oldest})")
            for event in self.history:
                if event.rv > start and event.storage == rtype.storage_key:
                    watcher.offer(event.type, event.obj, event.prev, event.rv)
            watcher.sent_rv = max(start, watcher.sent_rv)
        self._watchers.setdefault(rtype.storage_key, set()).add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.get(watcher.rtype.storage_key, set()).discard(watcher)
        watcher.closed = True

    def close_watches(self) -> int:
        """End every open watch (as a restarting apiserver would); returns how many."""
        count = 0
        for watchers in self._watchers.values():
            for watcher in list(watchers):
                watcher.close()
                count += 1
            watchers.clear()
        return count

    def compact(self, up_to: int | None = None) -> None:
        """Forget history up to ``up_to`` (default: all): older resourceVersions get 410."""
        limit = self.rv if up_to is None else up_to
        while self.history and self.history[0].rv <= limit:
            self.history.popleft()
        self.compacted_rv = max(self.compacted_rv, limit)

    def watchers(self) -> list[Watcher]:
        return [w for ws in self._watchers.values() for w in ws]

    def pick(self, rtype: ResourceType, predicate: Callable[[Obj], bool]) -> list[Obj]:
        return [o for _, o in sorted(self.objects(rtype).items()) if predicate(o)]
