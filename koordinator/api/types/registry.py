"""Every CRD Koordinator installs: group, kind, names, scope, versions, subresources, printer columns.

:data:`CRDS` drives :mod:`koordinator.api.crdgen` (the YAML in ``crds/``) and lets callers map
an ``apiVersion``/``kind`` pair to its model (:func:`model_for`) or CRD (:func:`crd_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordinator.api.types.analysis import Recommendation
from koordinator.api.types.config import ClusterColocationProfile
from koordinator.api.types.core import Resource
from koordinator.api.types.quota import ElasticQuotaProfile
from koordinator.api.types.scheduling import (
    ClusterNetworkTopology,
    Device,
    PodMigrationJob,
    Reservation,
    ScheduleExplanation,
)
from koordinator.api.types.sigs import ElasticQuota, PodGroup
from koordinator.api.types.slo import NodeMetric, NodeSLO
from koordinator.api.types.topology import NodeResourceTopology, NodeResourceTopologyV1Alpha2

__all__ = ["CRDS", "CRDDefinition", "CRDVersion", "PrinterColumn", "crd_for", "crd_named", "model_for"]


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0

    def to_manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"jsonPath": self.json_path, "name": self.name, "type": self.type}
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


@dataclass(frozen=True, slots=True)
class CRDVersion:
    name: str
    model: type[Resource]
    storage: bool = True
    served: bool = True
    status_subresource: bool = False
    printer_columns: tuple[PrinterColumn, ...] = ()


@dataclass(frozen=True, slots=True)
class CRDDefinition:
    group: str
    kind: str
    plural: str
    scope: str  # "Cluster" or "Namespaced"
    versions: tuple[CRDVersion, ...]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def namespaced(self) -> bool:
        return self.scope == "Namespaced"

    @property
    def file_name(self) -> str:
        return f"{self.group}_{self.plural}.yaml"

    @property
    def storage_version(self) -> CRDVersion:
        return next(v for v in self.versions if v.storage)

    def version(self, name: str) -> CRDVersion | None:
        return next((v for v in self.versions if v.name == name), None)


_AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date")
# Groups under k8s.io need an API-review annotation or the apiserver refuses the CRD.
_SCHEDULER_PLUGINS_APPROVAL = {
    "api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/scheduler-plugins/pull/50"
}
_NRT_APPROVAL = {"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/1870"}

CRDS: tuple[CRDDefinition, ...] = (
    CRDDefinition(
        "slo.koordinator.sh",
        "NodeMetric",
        "nodemetrics",
        "Cluster",
        (CRDVersion("v1alpha1", NodeMetric, status_subresource=True),),
    ),
    CRDDefinition(
        "slo.koordinator.sh",
        "NodeSLO",
        "nodeslos",
        "Cluster",
        (CRDVersion("v1alpha1", NodeSLO, status_subresource=True),),
    ),
    CRDDefinition(
        "config.koordinator.sh",
        "ClusterColocationProfile",
        "clustercolocationprofiles",
        "Cluster",
        (CRDVersion("v1alpha1", ClusterColocationProfile, status_subresource=True),),
    ),
    CRDDefinition(
        "scheduling.koordinator.sh",
        "Reservation",
        "reservations",
        "Cluster",
        (
            CRDVersion(
                "v1alpha1",
                Reservation,
                status_subresource=True,
                printer_columns=(
                    PrinterColumn("Phase", ".status.phase", description="The phase of the reservation"),
                    _AGE,
                    PrinterColumn("Node", ".status.nodeName"),
                    PrinterColumn("TTL", ".spec.ttl"),
                    PrinterColumn("Expires", ".spec.expires"),
                ),
            ),
        ),
    ),
    CRDDefinition(
        "scheduling.koordinator.sh",
        "PodMigrationJob",
        "podmigrationjobs",
        "Cluster",
        (
            CRDVersion(
                "v1alpha1",
                PodMigrationJob,
                status_subresource=True,
                printer_columns=(
                    PrinterColumn("Phase", ".status.phase", description="The phase of the job"),
                    PrinterColumn("Status", ".status.status", description="The current step of the job"),
                    PrinterColumn("Node", ".status.nodeName"),
                    PrinterColumn("Reservation", ".spec.reservationOptions.reservationRef.name"),
                    PrinterColumn("PodNamespace", ".spec.podRef.namespace"),
                    PrinterColumn("Pod", ".spec.podRef.name"),
                    PrinterColumn("NewPod", ".status.podRef.name"),
                    PrinterColumn("TTL", ".spec.ttl"),
                    _AGE,
                ),
            ),
        ),
        short_names=("pmj",),
    ),
    CRDDefinition(
        "scheduling.koordinator.sh",
        "Device",
        "devices",
        "Cluster",
        (CRDVersion("v1alpha1", Device),),
    ),
    CRDDefinition(
        "scheduling.koordinator.sh",
        "ClusterNetworkTopology",
        "clusternetworktopologies",
        "Cluster",
        (CRDVersion("v1alpha1", ClusterNetworkTopology, status_subresource=True),),
    ),
    CRDDefinition(
        "scheduling.koordinator.sh",
        "ScheduleExplanation",
        "scheduleexplanations",
        "Namespaced",
        (CRDVersion("v1alpha1", ScheduleExplanation, status_subresource=True),),
        short_names=("sched-exp",),
    ),
    CRDDefinition(
        "scheduling.sigs.k8s.io",
        "ElasticQuota",
        "elasticquotas",
        "Namespaced",
        (CRDVersion("v1alpha1", ElasticQuota),),
        annotations=_SCHEDULER_PLUGINS_APPROVAL,
    ),
    CRDDefinition(
        "scheduling.sigs.k8s.io",
        "PodGroup",
        "podgroups",
        "Namespaced",
        (CRDVersion("v1alpha1", PodGroup),),
        annotations=_SCHEDULER_PLUGINS_APPROVAL,
    ),
    CRDDefinition(
        "quota.koordinator.sh",
        "ElasticQuotaProfile",
        "elasticquotaprofiles",
        "Namespaced",
        (CRDVersion("v1alpha1", ElasticQuotaProfile),),
        short_names=("eqp",),
    ),
    CRDDefinition(
        "analysis.koordinator.sh",
        "Recommendation",
        "recommendations",
        "Namespaced",
        (CRDVersion("v1alpha1", Recommendation, status_subresource=True),),
        short_names=("recom",),
    ),
    CRDDefinition(
        "topology.node.k8s.io",
        "NodeResourceTopology",
        "noderesourcetopologies",
        "Cluster",
        (
            CRDVersion("v1alpha1", NodeResourceTopology, storage=True),
            CRDVersion("v1alpha2", NodeResourceTopologyV1Alpha2, storage=False),
        ),
        short_names=("node-res-topo",),
        annotations=_NRT_APPROVAL,
    ),
)

_BY_GROUP_KIND = {(crd.group, crd.kind): crd for crd in CRDS}
_BY_NAME = {crd.name: crd for crd in CRDS}


def crd_for(api_version: str, kind: str) -> CRDDefinition | None:
    """The CRD serving ``apiVersion``/``kind``, or ``None`` for built-in and unknown kinds."""
    group, _, version = api_version.rpartition("/")
    crd = _BY_GROUP_KIND.get((group, kind))
    if crd is None or crd.version(version) is None:
        return None
    return crd


def crd_named(name: str) -> CRDDefinition | None:
    """The CRD called ``<plural>.<group>``."""
    return _BY_NAME.get(name)


def model_for(api_version: str, kind: str) -> type[Resource] | None:
    """The model class of ``apiVersion``/``kind``."""
    crd = crd_for(api_version, kind)
    if crd is None:
        return None
    version = crd.version(api_version.rpartition("/")[2])
    return version.model if version else None
