"""Resource descriptors: how one kind is addressed on the API (group, version, plural, scope).

A :class:`Resource` is all the client needs to build URLs for core resources (``/api/v1``),
built-in groups (``/apis/<group>/<version>``) and custom resources alike. The well-known
built-ins are constants here; CRDs come from :mod:`koordinator.kube.discovery` or are
declared directly by the code that owns them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

#: what a name is made of when it needs no escaping in a path (every DNS name does)
_PATH_SAFE = re.compile(r"[A-Za-z0-9._~-]+")


def _segment(text: str) -> str:
    """``text`` as one path segment: escaped unless it is plain already (the common case)."""
    return text if _PATH_SAFE.fullmatch(text) else quote(text, safe="")


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: ``group`` is ``""`` for the core group."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def group_resource(self) -> str:
        """``plural.group`` as the apiserver writes it in messages (``leases.coordination.k8s.io``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def base_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path of the collection, or of one object (and its subresource).

        ``namespace`` is required for a namespaced object; for a namespaced collection
        ``None`` means all namespaces. It is rejected for a cluster-scoped resource.
        """
        parts = [self.base_path()]
        if self.namespaced:
            if namespace:
                parts.append(f"namespaces/{_segment(namespace)}")
            elif name is not None:
                raise ValueError(f"{self.group_resource} is namespaced: a namespace is required for {name!r}")
        elif namespace:
            raise ValueError(
                f"{self.group_resource} is cluster-scoped: no namespace allowed (got {namespace!r})"
            )
        parts.append(self.plural)
        if name is not None:
            if not name:
                raise ValueError(f"{self.group_resource}: empty object name")
            parts.append(_segment(name))
            if subresource:
                parts.append(subresource)
        elif subresource:
            raise ValueError("a subresource needs an object name")
        return "/".join(parts)

    def __str__(self) -> str:
        return f"{self.group_resource}/{self.version}"


def _core(plural: str, kind: str, namespaced: bool = True) -> Resource:
    return Resource("", "v1", plural, kind, namespaced)


PODS = _core("pods", "Pod")
NODES = _core("nodes", "Node", namespaced=False)
NAMESPACES = _core("namespaces", "Namespace", namespaced=False)
CONFIG_MAPS = _core("configmaps", "ConfigMap")
SECRETS = _core("secrets", "Secret")
SERVICES = _core("services", "Service")
SERVICE_ACCOUNTS = _core("serviceaccounts", "ServiceAccount")
EVENTS = _core("events", "Event")
PERSISTENT_VOLUMES = _core("persistentvolumes", "PersistentVolume", namespaced=False)
PERSISTENT_VOLUME_CLAIMS = _core("persistentvolumeclaims", "PersistentVolumeClaim")
RESOURCE_QUOTAS = _core("resourcequotas", "ResourceQuota")
LIMIT_RANGES = _core("limitranges", "LimitRange")
ENDPOINTS = _core("endpoints", "Endpoints")

LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
POD_DISRUPTION_BUDGETS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True)
DAEMON_SETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
STATEFUL_SETS = Resource("apps", "v1", "statefulsets", "StatefulSet", True)
JOBS = Resource("batch", "v1", "jobs", "Job", True)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)
CSI_NODES = Resource("storage.k8s.io", "v1", "csinodes", "CSINode", False)
EVENTS_V1 = Resource("events.k8s.io", "v1", "events", "Event", True)
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", True)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True)
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
)
SELF_SUBJECT_REVIEWS = Resource(
    "authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False
)
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False)

BUILTIN: tuple[Resource, ...] = (
    PODS,
    NODES,
    NAMESPACES,
    CONFIG_MAPS,
    SECRETS,
    SERVICES,
    SERVICE_ACCOUNTS,
    EVENTS,
    PERSISTENT_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
    RESOURCE_QUOTAS,
    LIMIT_RANGES,
    ENDPOINTS,
    LEASES,
    POD_DISRUPTION_BUDGETS,
    DEPLOYMENTS,
    REPLICA_SETS,
    DAEMON_SETS,
    STATEFUL_SETS,
    JOBS,
    PRIORITY_CLASSES,
    STORAGE_CLASSES,
    CSI_NODES,
    EVENTS_V1,
    CUSTOM_RESOURCE_DEFINITIONS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    ROLES,
    ROLE_BINDINGS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
)

_BY_KIND = {(r.api_version, r.kind): r for r in BUILTIN}


def builtin_for(api_version: str, kind: str) -> Resource | None:
    """The built-in resource serving ``kind`` in ``api_version``, if this table knows it."""
    return _BY_KIND.get((api_version, kind))


def object_key(obj: dict[str, object]) -> str:
    """``namespace/name`` (or ``name`` for cluster-scoped objects), the informer store key."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ValueError("object has no metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("object has no metadata.name")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def split_key(key: str) -> tuple[str | None, str]:
    """The inverse of :func:`object_key`."""
    namespace, sep, name = key.partition("/")
    return (namespace, name) if sep else (None, namespace)


# Koordinator's custom resources (crds/), addressed like any other resource.
NODE_SLOS = Resource("slo.koordinator.sh", "v1alpha1", "nodeslos", "NodeSLO", False)
NODE_METRICS = Resource("slo.koordinator.sh", "v1alpha1", "nodemetrics", "NodeMetric", False)
NODE_RESOURCE_TOPOLOGIES = Resource(
    "topology.node.k8s.io", "v1alpha1", "noderesourcetopologies", "NodeResourceTopology", False
)
DEVICES = Resource("scheduling.koordinator.sh", "v1alpha1", "devices", "Device", False)
RESERVATIONS = Resource("scheduling.koordinator.sh", "v1alpha1", "reservations", "Reservation", False)
POD_MIGRATION_JOBS = Resource(
    "scheduling.koordinator.sh", "v1alpha1", "podmigrationjobs", "PodMigrationJob", False
)
CLUSTER_COLOCATION_PROFILES = Resource(
    "config.koordinator.sh", "v1alpha1", "clustercolocationprofiles", "ClusterColocationProfile", False
)
ELASTIC_QUOTAS = Resource("scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas", "ElasticQuota", True)
ELASTIC_QUOTA_PROFILES = Resource(
    "quota.koordinator.sh", "v1alpha1", "elasticquotaprofiles", "ElasticQuotaProfile", True
)
POD_GROUPS = Resource("scheduling.sigs.k8s.io", "v1alpha1", "podgroups", "PodGroup", True)
RECOMMENDATIONS = Resource("analysis.koordinator.sh", "v1alpha1", "recommendations", "Recommendation", True)
