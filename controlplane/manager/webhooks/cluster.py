"""A fixed set of cluster objects behind the :class:`ClusterReader` interface.

``koord-manager admit --objects FILE`` and the unit tests describe the cluster as a list of
objects (Namespaces, PriorityClasses, ClusterColocationProfiles, ElasticQuotas,
ElasticQuotaProfiles, Nodes, ConfigMaps, Pods); :class:`StaticCluster` answers the webhooks'
questions from it. :func:`quota_topology_of` builds the ElasticQuota tree from the same
objects. Objects of other kinds are kept but never read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controlplane.manager.webhooks.elasticquota.topology import QuotaTopology
from koordinator.api.extension.annotations import labels_of

__all__ = ["ObjectsError", "StaticCluster", "quota_topology_of"]

Obj = dict[str, Any]

_CORE = {"Namespace", "Node", "ConfigMap", "Pod"}
_KINDS = {
    ("v1", "Namespace"),
    ("v1", "Node"),
    ("v1", "ConfigMap"),
    ("v1", "Pod"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("config.koordinator.sh/v1alpha1", "ClusterColocationProfile"),
    ("scheduling.sigs.k8s.io/v1alpha1", "ElasticQuota"),
    ("quota.koordinator.sh/v1alpha1", "ElasticQuotaProfile"),
}


class ObjectsError(ValueError):
    """An object in the cluster description that cannot be used."""


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ObjectsError(f"{obj.get('kind', 'object')} without metadata.name")
    return name


def _namespace(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    value = meta.get("namespace") if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else ""


class StaticCluster:
    """Answers lookups from a list of object dicts (``kind: List`` items are flattened)."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = ()) -> None:
        self._by_kind: dict[str, list[Obj]] = {}
        for item in objects:
            self.add(item)

    def add(self, obj: Mapping[str, Any]) -> None:
        if not isinstance(obj, Mapping):
            raise ObjectsError(f"expected an object, got {type(obj).__name__}")
        kind = obj.get("kind")
        if kind == "List" or (isinstance(kind, str) and kind.endswith("List") and "items" in obj):
            items = obj.get("items") or []
            if not isinstance(items, list):
                raise ObjectsError(f"{kind}.items must be a list")
            for item in items:
                self.add(item)
            return
        if not isinstance(kind, str) or not kind:
            raise ObjectsError("object without kind")
        api_version = obj.get("apiVersion")
        if (api_version, kind) not in _KINDS and kind in _CORE | {k for _, k in _KINDS}:
            raise ObjectsError(f"{kind} {_name(obj)}: unexpected apiVersion {api_version!r}")
        _name(obj)
        self._by_kind.setdefault(kind, []).append(dict(obj))

    def objects(self, kind: str) -> list[Obj]:
        return list(self._by_kind.get(kind, ()))

    def _find(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        for obj in self._by_kind.get(kind, ()):
            if _name(obj) == name and _namespace(obj) == namespace:
                return obj
        return None

    async def namespace(self, name: str) -> Obj | None:
        return self._find("Namespace", name)

    async def priority_class(self, name: str) -> Obj | None:
        return self._find("PriorityClass", name)

    def colocation_profiles(self) -> Sequence[Obj]:
        return self.objects("ClusterColocationProfile")

    def elastic_quota_profiles(self) -> Sequence[Obj]:
        return self.objects("ElasticQuotaProfile")

    def nodes(self) -> Sequence[Obj]:
        return self.objects("Node")

    def config_map(self, namespace: str, name: str) -> Obj | None:
        return self._find("ConfigMap", name, namespace)

    async def pods(self, namespace: str | None = None, labels: Mapping[str, str] | None = None) -> list[Obj]:
        wanted = dict(labels or {})
        found = []
        for pod in self._by_kind.get("Pod", ()):
            if namespace is not None and _namespace(pod) != namespace:
                continue
            have = labels_of(pod)
            if all(have.get(k) == v for k, v in wanted.items()):
                found.append(pod)
        return found

    async def pod(self, namespace: str, name: str) -> Obj | None:
        return self._find("Pod", name, namespace)


def quota_topology_of(cluster: StaticCluster, topology: QuotaTopology | None = None) -> QuotaTopology:
    """The quota tree of the cluster's ElasticQuotas."""
    tree = topology if topology is not None else QuotaTopology()
    tree.replace_all(cluster.objects("ElasticQuota"))
    return tree
