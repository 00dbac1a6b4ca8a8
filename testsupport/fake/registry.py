"""The kinds the fake apiserver serves, with each kind's storage behaviour.

A :class:`ResourceType` carries what differs between kinds on the real apiserver: the
status subresource (and what a status update may change), ``metadata.generation``
tracking, whether an update without ``resourceVersion`` is allowed, what DELETE returns,
graceful pod deletion, supported field selectors, list merge rules and validation.
Custom resources are added from their CRD (:meth:`Registry.register_crd`); several
served versions share one storage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordinator.kube import resources as res
from koordinator.kube.resources import Resource
from testsupport.fake.schema import Structure, builtin_structure, crd_structure
from testsupport.fake.status import Cause

Obj = dict[str, Any]
#: Extra validation of one object: ``(new, old or None) -> causes``.
Validator = Callable[[Obj, Obj | None], list[Cause]]
#: Builds a validator from one CRD version's ``openAPIV3Schema`` (plug-in point for a full schema validator).
SchemaValidatorFactory = Callable[[Mapping[str, Any]], Callable[[Obj], list[Cause]]]
FieldLabels = Callable[[Obj], dict[str, str]]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    node: Any = obj
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _str(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def meta_fields(obj: Obj, namespaced: bool) -> dict[str, str]:
    fields = {"metadata.name": _str(_get(obj, "metadata", "name"))}
    if namespaced:
        fields["metadata.namespace"] = _str(_get(obj, "metadata", "namespace"))
    return fields


class _PathFields:
    """Field labels read from dotted paths; :meth:`one` reads a single one (a watch matches
    every event against a selector of one or two fields)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.split = {p: tuple(p.split(".")) for p in paths}

    def __call__(self, obj: Obj) -> dict[str, str]:
        return {name: _str(_get(obj, *parts)) for name, parts in self.split.items()}

    def one(self, obj: Obj, name: str) -> str | None:
        parts = self.split.get(name)
        return None if parts is None else _str(_get(obj, *parts))


class _PodFields(_PathFields):
    def __call__(self, obj: Obj) -> dict[str, str]:
        fields = super().__call__(obj)
        fields["spec.hostNetwork"] = fields["spec.hostNetwork"] or "false"
        return fields

    def one(self, obj: Obj, name: str) -> str | None:
        value = super().one(obj, name)
        return (value or "false") if name == "spec.hostNetwork" else value


_pod_fields = _PodFields(
    (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    )
)


def _node_fields(obj: Obj) -> dict[str, str]:
    return {"spec.unschedulable": "true" if _get(obj, "spec", "unschedulable") else "false"}


_EVENT_FIELDS = _PathFields(
    (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    )
)


@dataclass
class ResourceType:
    resource: Resource
    singular: str = ""
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    #: Built-in status updates also keep label/annotation changes; CRD status updates change only status.
    status_keeps_metadata: bool = True
    generation: bool = False
    unconditional_update: bool = True
    returns_deleted_object: bool = False
    graceful_delete: bool = False
    strategic_merge: bool = True
    extra_fields: FieldLabels | None = None
    structure: Structure = field(default_factory=lambda: Structure({}))
    validators: list[Validator] = field(default_factory=list)
    subresources: tuple[str, ...] = ()
    crd_schema: Mapping[str, Any] | None = None
    #: Storage identity shared by every served version of one kind.
    storage_key: tuple[str, str] = ("", "")
    crd_name: str = ""

    def __post_init__(self) -> None:
        if self.storage_key == ("", ""):
            self.storage_key = (self.resource.group, self.resource.plural)
        if not self.singular:
            self.singular = self.resource.kind.lower()
        if self.status_subresource and "status" not in self.subresources:
            self.subresources = ("status", *self.subresources)

    @property
    def group(self) -> str:
        return self.resource.group

    @property
    def plural(self) -> str:
        return self.resource.plural

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def namespaced(self) -> bool:
        return self.resource.namespaced

    def field_labels(self, obj: Obj) -> dict[str, str]:
        fields = meta_fields(obj, self.namespaced)
        if self.extra_fields is not None:
            fields.update(self.extra_fields(obj))
        return fields

    def field_label(self, obj: Obj, name: str) -> str:
        """One field label of ``obj`` ("" for a field it does not have)."""
        if name == "metadata.name":
            return _str(_get(obj, "metadata", "name"))
        if name == "metadata.namespace" and self.namespaced:
            return _str(_get(obj, "metadata", "namespace"))
        one = getattr(self.extra_fields, "one", None)
        if one is not None:
            value = one(obj, name)
            return "" if value is None else value
        return self.field_labels(obj).get(name, "")

    def supported_fields(self) -> frozenset[str]:
        return frozenset(self.field_labels({"metadata": {}}))


def _builtin(resource: Resource, **kwargs: Any) -> ResourceType:
    return ResourceType(resource, structure=builtin_structure(resource.kind), **kwargs)


def builtin_types() -> list[ResourceType]:
    return [
        _builtin(
            res.PODS,
            status_subresource=True,
            generation=True,
            returns_deleted_object=True,
            graceful_delete=True,
            extra_fields=_pod_fields,
            subresources=("binding", "eviction"),
            short_names=("po",),
        ),
        _builtin(res.NODES, status_subresource=True, extra_fields=_node_fields, short_names=("no",)),
        _builtin(
            res.NAMESPACES,
            status_subresource=True,
            returns_deleted_object=True,
            extra_fields=_PathFields(("status.phase",)),
            short_names=("ns",),
        ),
        _builtin(res.CONFIG_MAPS, short_names=("cm",)),
        _builtin(res.SECRETS, extra_fields=_PathFields(("type",))),
        _builtin(res.SERVICES, status_subresource=True, short_names=("svc",)),
        _builtin(res.SERVICE_ACCOUNTS, short_names=("sa",)),
        _builtin(res.EVENTS, extra_fields=_EVENT_FIELDS, short_names=("ev",)),
        _builtin(res.PERSISTENT_VOLUMES, status_subresource=True, short_names=("pv",)),
        _builtin(res.PERSISTENT_VOLUME_CLAIMS, status_subresource=True, short_names=("pvc",)),
        _builtin(res.RESOURCE_QUOTAS, status_subresource=True, short_names=("quota",)),
        _builtin(res.LIMIT_RANGES, short_names=("limits",)),
        _builtin(res.ENDPOINTS, short_names=("ep",)),
        _builtin(res.LEASES, unconditional_update=False),
        _builtin(
            res.POD_DISRUPTION_BUDGETS,
            status_subresource=True,
            generation=True,
            unconditional_update=False,
            short_names=("pdb",),
        ),
        _builtin(
            res.DEPLOYMENTS,
            status_subresource=True,
            generation=True,
            subresources=("scale",),
            short_names=("deploy",),
        ),
        _builtin(
            res.REPLICA_SETS,
            status_subresource=True,
            generation=True,
            subresources=("scale",),
            short_names=("rs",),
        ),
        _builtin(res.DAEMON_SETS, status_subresource=True, generation=True, short_names=("ds",)),
        _builtin(
            res.STATEFUL_SETS,
            status_subresource=True,
            generation=True,
            subresources=("scale",),
            short_names=("sts",),
        ),
        _builtin(res.JOBS, status_subresource=True, generation=True),
        _builtin(res.PRIORITY_CLASSES, short_names=("pc",)),
        _builtin(res.STORAGE_CLASSES, short_names=("sc",)),
        _builtin(res.CSI_NODES),
        _builtin(res.EVENTS_V1, short_names=("ev",)),
        _builtin(
            res.CUSTOM_RESOURCE_DEFINITIONS,
            status_subresource=True,
            generation=True,
            short_names=("crd", "crds"),
        ),
        _builtin(res.MUTATING_WEBHOOK_CONFIGURATIONS, generation=True),
        _builtin(res.VALIDATING_WEBHOOK_CONFIGURATIONS, generation=True),
        _builtin(res.ROLES),
        _builtin(res.ROLE_BINDINGS),
        _builtin(res.CLUSTER_ROLES),
        _builtin(res.CLUSTER_ROLE_BINDINGS),
    ]


def _schema_check(check: Callable[[Obj], list[Cause]]) -> Validator:
    def validator(new: Obj, old: Obj | None) -> list[Cause]:
        return check(new)

    return validator


class RegistryError(ValueError):
    """A CRD that cannot be served."""


class Registry:
    """Every served kind, by (group, version, plural) and by (apiVersion, kind)."""

    def __init__(self) -> None:
        self._by_path: dict[tuple[str, str, str], ResourceType] = {}
        self._by_kind: dict[tuple[str, str], ResourceType] = {}
        for rtype in builtin_types():
            self.add(rtype)

    def add(self, rtype: ResourceType) -> None:
        r = rtype.resource
        key = (r.group, r.version, r.plural)
        if key in self._by_path and self._by_path[key].crd_name != rtype.crd_name:
            raise RegistryError(f"{r} is already served")
        self._by_path[key] = rtype
        self._by_kind[(r.api_version, r.kind)] = rtype

    def remove_crd(self, crd_name: str) -> list[ResourceType]:
        gone = [t for t in self._by_path.values() if t.crd_name == crd_name]
        for rtype in gone:
            r = rtype.resource
            self._by_path.pop((r.group, r.version, r.plural), None)
            self._by_kind.pop((r.api_version, r.kind), None)
        return gone

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def for_kind(self, api_version: str, kind: str) -> ResourceType | None:
        return self._by_kind.get((api_version, kind))

    def for_resource(self, resource: Resource) -> ResourceType:
        rtype = self.lookup(resource.group, resource.version, resource.plural)
        if rtype is None:
            raise KeyError(f"{resource} is not served by the fake apiserver")
        return rtype

    def types(self) -> list[ResourceType]:
        return list(self._by_path.values())

    def group_versions(self) -> dict[str, list[str]]:
        """Group -> served versions (core group under ``""``)."""
        out: dict[str, list[str]] = {}
        for group, version, _ in self._by_path:
            versions = out.setdefault(group, [])
            if version not in versions:
                versions.append(version)
        return out

    def register_crd(
        self, crd: Obj, schema_validator: SchemaValidatorFactory | None = None
    ) -> list[ResourceType]:
        """Serve every served version of a ``CustomResourceDefinition`` (apiextensions.k8s.io/v1)."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group = spec.get("group")
        plural = names.get("plural")
        kind = names.get("kind")
        if not group or not plural or not kind:
            raise RegistryError("a CRD needs spec.group, spec.names.plural and spec.names.kind")
        name = f"{plural}.{group}"
        if (crd.get("metadata") or {}).get("name") not in (None, name):
            raise RegistryError(f"CRD metadata.name must be {name!r}")
        namespaced = spec.get("scope", "Namespaced") == "Namespaced"
        added = []
        for version in spec.get("versions") or ():
            if not version.get("served", True):
                continue
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            subresources = version.get("subresources") or {}
            selectable = tuple(
                str(f.get("jsonPath", "")).lstrip(".")
                for f in version.get("selectableFields") or ()
                if f.get("jsonPath")
            )
            rtype = ResourceType(
                Resource(group, version["name"], plural, kind, namespaced),
                singular=names.get("singular") or kind.lower(),
                short_names=tuple(names.get("shortNames") or ()),
                status_subresource="status" in subresources,
                status_keeps_metadata=False,
                generation=True,
                unconditional_update=False,
                returns_deleted_object=False,
                strategic_merge=False,
                extra_fields=_PathFields(selectable) if selectable else None,
                structure=crd_structure(schema),
                subresources=("scale",) if "scale" in subresources else (),
                crd_schema=schema,
                storage_key=(group, plural),
                crd_name=name,
            )
            if schema_validator is not None and schema is not None:
                rtype.validators.append(_schema_check(schema_validator(schema)))
            self.add(rtype)
            added.append(rtype)
        if not added:
            raise RegistryError(f"CRD {name} serves no version")
        return added
