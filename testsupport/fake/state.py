"""The fake apiserver's storage and API semantics, independent of HTTP.

:class:`ClusterState` holds every object under one global resourceVersion counter and a
bounded event history, and implements the verbs with the real apiserver's rules:
optimistic concurrency, generateName, uid/creationTimestamp/generation, status
subresources, finalizers and graceful pod deletion, namespace lifecycle, field ownership
and server-side apply, LIST pagination and resourceVersion semantics, watches with replay
from history (410 once it is gone), binding and eviction. Failures raise
:class:`~testsupport.fake.status.StatusError`. All methods are synchronous: a write
and the watch events it causes happen in one step, so watchers never miss or reorder.
"""

from __future__ import annotations

import random
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from koordinator.api.selectors import FieldSelector, LabelSelector
from koordinator.api.types.core import OBJECT_META_FIELDS
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.resources import CUSTOM_RESOURCE_DEFINITIONS, NAMESPACES, POD_DISRUPTION_BUDGETS, PODS
from koordinator.kube.timeutil import format_time
from testsupport.fake import apply as ssa
from testsupport.fake import crds, deletion, pods
from testsupport.fake import status as st
from testsupport.fake.defaults import prepare_pod
from testsupport.fake.listing import Lister
from testsupport.fake.objects import copy_obj, meta_of
from testsupport.fake.patching import PatchError, json_patch, merge_patch, strategic_merge_patch
from testsupport.fake.registry import Registry, ResourceType, SchemaValidatorFactory
from testsupport.fake.schema import prune
from testsupport.fake.validation import validate
from testsupport.fake.watching import HistoryEvent, Watcher

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


def _managers_sans_time(obj: Obj) -> list[Obj]:
    return [{k: v for k, v in m.items() if k != "time"} for m in obj["metadata"].get("managedFields") or ()]


_TYPE_META_ORDER = ("kind", "apiVersion", "metadata")


def _reorder(mapping: Obj, order: tuple[str, ...]) -> None:
    """Put ``mapping``'s keys in ``order`` (unknown ones after), in place."""
    present = [k for k in order if k in mapping]
    if list(mapping)[: len(present)] == present:
        return  # already in order (objects written again mostly are)
    ordered = {k: mapping[k] for k in present}
    ordered.update((k, v) for k, v in mapping.items() if k not in ordered)
    mapping.clear()
    mapping.update(ordered)


def _in_go_field_order(obj: Obj) -> None:
    """Encode a built-in object as the apiserver does: type and object meta first, meta in field order."""
    _reorder(obj["metadata"], OBJECT_META_FIELDS)
    _reorder(obj, _TYPE_META_ORDER)


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
        self.type_start: dict[StorageKey, int] = {}
        self.watchers_by_type: dict[StorageKey, set[Watcher]] = {}
        self.lister = Lister(self)
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

    def served(self, rtype: ResourceType, obj: Obj) -> Obj:
        api_version = rtype.resource.api_version
        return obj if obj.get("apiVersion") == api_version else {**obj, "apiVersion": api_version}

    def key(self, rtype: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rtype.namespaced else "", name)

    def require(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self.objects(rtype).get(self.key(rtype, namespace, name))
        if obj is None:
            raise st.not_found(rtype.plural, rtype.group, name)
        return obj

    def commit(self, rtype: ResourceType, event_type: str, obj: Obj, prev: Obj | None) -> Obj:
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        if not rtype.crd_name:
            _in_go_field_order(obj)
        key = (meta.get("namespace", "") if rtype.namespaced else "", meta["name"])
        store = self.objects(rtype)
        if event_type == "DELETED":
            store.pop(key, None)
        else:
            store[key] = obj
        self.history.append(HistoryEvent(self.rv, rtype.storage_key, event_type, obj, prev))
        while len(self.history) > self.history_limit:
            self.compacted_rv = self.history.popleft().rv
        for watcher in list(self.watchers_by_type.get(rtype.storage_key, ())):
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
            raise st.invalid(rtype.kind, rtype.group, str(meta_of(obj).get("name") or ""), causes)

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
        obj = copy_obj(body)
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
        if self.key(rtype, namespace, name) in self.objects(rtype):
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
        created = self.commit(rtype, "ADDED", obj, None)
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
                raise st.forbidden("pods", "", str(meta_of(obj).get("name") or ""), str(exc)) from None
        elif rtype.resource == POD_DISRUPTION_BUDGETS:
            obj["status"] = {
                "disruptionsAllowed": 0,
                "currentHealthy": 0,
                "desiredHealthy": 0,
                "expectedPods": 0,
            }
        elif rtype.resource == NAMESPACES:
            meta = meta_of(obj)
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
            crds.establish_crd(self, rtype, obj)

    # --- read --------------------------------------------------------------------------

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        return self.served(rtype, self.require(rtype, namespace, name))

    def parse_selectors(
        self, rtype: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> tuple[LabelSelector, FieldSelector]:
        return self.lister.parse_selectors(rtype, label_selector, field_selector)

    def list_objects(self, rtype: ResourceType, namespace: str | None, **options: Any) -> Obj:
        """LIST (see :mod:`testsupport.fake.listing` for the options)."""
        return self.lister.list_objects(rtype, namespace, **options)

    def register_crd(self, crd: Obj) -> Obj:
        """Create a CRD object as a client would; it is served and Established at once."""
        return crds.register_crd(self, crd)

    def bind(self, namespace: str, name: str, binding: Obj) -> None:
        pods.bind(self, namespace, name, binding)

    def evict(self, namespace: str, name: str, eviction: Obj) -> None:
        pods.evict(self, namespace, name, eviction)

    # --- update / patch -------------------------------------------------------------------

    def _prepare_update(self, rtype: ResourceType, old: Obj, body: Obj, subresource: str) -> Obj:
        new = copy_obj(body)
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
            result = copy_obj(old)
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
                            "Forbidden: no new finalizers can be added if the "
                            "object is being deleted, found new finalizers " + str(added),
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
            return self.served(rtype, old)
        if dry_run:
            return new
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            # the last finalizer is gone: the update becomes the deletion
            return self.finish_delete(rtype, new)
        return self.served(rtype, self.commit(rtype, "MODIFIED", new, old))

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
        meta = meta_of(body)
        if meta.get("name") and meta["name"] != name:
            raise st.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        if rtype.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise st.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        old = self.require(rtype, namespace, name)
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
                    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                    "Required value: is required for apply patch",
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
        old = self.require(rtype, namespace, name)
        current = self.served(rtype, old)
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
                        "application/json-patch+json, "
                        "application/merge-patch+json, application/apply-patch+yaml"
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
        applied = copy_obj(body)
        applied.setdefault("metadata", {})["name"] = name
        if rtype.crd_schema is not None:
            prune(applied, rtype.crd_schema)
        scope = self._scope(rtype, subresource)
        old = self.objects(rtype).get(self.key(rtype, namespace, name))
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
            self.served(rtype, old),
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

    # --- delegated verbs ------------------------------------------------------------------

    def delete(
        self, rtype: ResourceType, namespace: str | None, name: str, options: Obj | None = None
    ) -> tuple[Obj, bool]:
        """What the apiserver returns for a DELETE, and whether the object is gone now."""
        return deletion.delete(self, rtype, namespace, name, options)

    def finish_delete(self, rtype: ResourceType, obj: Obj) -> Obj:
        return deletion.finish_delete(self, rtype, obj)

    def delete_collection(
        self,
        rtype: ResourceType,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        options: Obj | None = None,
    ) -> Obj:
        return deletion.delete_collection(self, rtype, namespace, label_selector, field_selector, options)

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
            for obj in self.lister.filter(
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
            oldest = max(self.compacted_rv, self.type_start.get(rtype.storage_key, 0))
            if start < oldest:
                raise st.gone(f"too old resource version: {start} ({oldest})")
            for event in self.history:
                if event.rv > start and event.storage == rtype.storage_key:
                    watcher.offer(event.type, event.obj, event.prev, event.rv)
            watcher.sent_rv = max(start, watcher.sent_rv)
        self.watchers_by_type.setdefault(rtype.storage_key, set()).add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self.watchers_by_type.get(watcher.rtype.storage_key, set()).discard(watcher)
        watcher.closed = True

    def close_watches(self) -> int:
        """End every open watch (as a restarting apiserver would); returns how many."""
        count = 0
        for watchers in self.watchers_by_type.values():
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
        return [w for ws in self.watchers_by_type.values() for w in ws]

    def pick(self, rtype: ResourceType, predicate: Callable[[Obj], bool]) -> list[Obj]:
        return [o for _, o in sorted(self.objects(rtype).items()) if predicate(o)]
