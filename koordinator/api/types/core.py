"""Kubernetes types embedded in Koordinator CRDs, with the shapes controller-gen gives them.

Small types (label and node selectors, tolerations, taints, object/owner references,
``metav1.Condition``, delete options) are fully typed so the generated schemas validate
them. Large ones (``PodTemplateSpec``, ``ObjectMeta`` inside templates) stay plain dicts and
are schemaless in the CRDs, as upstream declares them. :class:`Resource` is the base of every
top-level object: ``apiVersion``, ``kind`` and ``metadata`` (a dict).
"""

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from koordinator.api.model import JSON, Model, field
from koordinator.api.quantity import Quantity

__all__ = [
    "DATE_TIME",
    "DURATION_PATTERN",
    "OBJECT_META_FIELDS",
    "Condition",
    "CrossVersionObjectReference",
    "DeleteOptions",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "ObjectReference",
    "OwnerReference",
    "Preconditions",
    "Resource",
    "ResourceList",
    "Taint",
    "Toleration",
]

#: ``metav1.ObjectMeta``'s JSON fields in declaration order, the order in which the apiserver
#: encodes the metadata of built-in objects (``managedFields`` last)
OBJECT_META_FIELDS = (
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
)

#: OpenAPI format of ``metav1.Time`` values.
DATE_TIME = "date-time"
#: Go ``time.ParseDuration`` syntax, enforced on ``metav1.Duration`` fields.
DURATION_PATTERN = r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"

ResourceList = dict[str, Quantity]


@dataclass
class LabelSelectorRequirement(Model):
    key: str = field(
        "key", omitempty=False, required=True, description="The label key the selector applies to."
    )
    operator: str = field(
        "operator",
        omitempty=False,
        required=True,
        description="How the key relates to the values: In, NotIn, Exists or DoesNotExist.",
    )
    values: list[str] = field(
        "values",
        factory=list,
        list_type="atomic",
        description="Values for In and NotIn; empty for Exists and DoesNotExist.",
    )


@dataclass
class LabelSelector(Model):
    __api_description__ = "A label query: matchLabels and matchExpressions are ANDed; empty matches all."
    __api_schema__: ClassVar[dict[str, Any]] = {"x-kubernetes-map-type": "atomic"}

    match_expressions: list[LabelSelectorRequirement] = field(
        "matchExpressions", factory=list, list_type="atomic", description="Label requirements, ANDed."
    )
    match_labels: dict[str, str] = field(
        "matchLabels", factory=dict, description="Exact key=value pairs, each one an In requirement."
    )


@dataclass
class NodeSelectorRequirement(Model):
    key: str = field("key", omitempty=False, required=True, description="The label or field key.")
    operator: str = field(
        "operator",
        omitempty=False,
        required=True,
        description="In, NotIn, Exists, DoesNotExist, Gt or Lt.",
    )
    values: list[str] = field(
        "values", factory=list, list_type="atomic", description="The values to compare with."
    )


@dataclass
class NodeSelectorTerm(Model):
    __api_description__ = "Requirements ANDed together; an empty term matches no node."
    __api_schema__: ClassVar[dict[str, Any]] = {"x-kubernetes-map-type": "atomic"}

    match_expressions: list[NodeSelectorRequirement] = field(
        "matchExpressions", factory=list, list_type="atomic", description="Requirements on node labels."
    )
    match_fields: list[NodeSelectorRequirement] = field(
        "matchFields",
        factory=list,
        list_type="atomic",
        description="Requirements on node fields (metadata.name).",
    )


@dataclass
class NodeSelector(Model):
    __api_description__ = "Terms ORed together."
    __api_schema__: ClassVar[dict[str, Any]] = {"x-kubernetes-map-type": "atomic"}

    node_selector_terms: list[NodeSelectorTerm] = field(
        "nodeSelectorTerms", factory=list, omitempty=False, required=True, list_type="atomic"
    )


@dataclass
class Toleration(Model):
    key: str = field("key", default="", description="The taint key; empty with Exists matches every key.")
    operator: str = field("operator", default="", description="Exists or Equal (the default).")
    value: str = field("value", default="", description="The taint value for Equal.")
    effect: str = field(
        "effect", default="", description="NoSchedule, PreferNoSchedule or NoExecute; empty = all."
    )
    toleration_seconds: int | None = field(
        "tolerationSeconds", format="int64", description="How long a NoExecute taint is tolerated."
    )


@dataclass
class Taint(Model):
    key: str = field("key", omitempty=False, required=True, description="The taint key.")
    value: str = field("value", default="", description="The taint value.")
    effect: str = field(
        "effect", omitempty=False, required=True, description="NoSchedule, PreferNoSchedule or NoExecute."
    )
    time_added: str | None = field(
        "timeAdded", format=DATE_TIME, description="When a NoExecute taint was added."
    )


@dataclass
class ObjectReference(Model):
    __api_schema__: ClassVar[dict[str, Any]] = {"x-kubernetes-map-type": "atomic"}

    kind: str = field("kind", default="", description="Kind of the referent.")
    namespace: str = field("namespace", default="", description="Namespace of the referent.")
    name: str = field("name", default="", description="Name of the referent.")
    uid: str = field("uid", default="", description="UID of the referent.")
    api_version: str = field("apiVersion", default="", description="API version of the referent.")
    resource_version: str = field(
        "resourceVersion", default="", description="Specific resourceVersion referred to."
    )
    field_path: str = field("fieldPath", default="", description="A field inside the referent.")


@dataclass
class OwnerReference(Model):
    __api_schema__: ClassVar[dict[str, Any]] = {"x-kubernetes-map-type": "atomic"}

    api_version: str = field("apiVersion", default="", omitempty=False, required=True)
    kind: str = field("kind", default="", omitempty=False, required=True)
    name: str = field("name", default="", omitempty=False, required=True)
    uid: str = field("uid", default="", omitempty=False, required=True)
    controller: bool | None = field("controller", description="True if the owner is the managing controller.")
    block_owner_deletion: bool | None = field("blockOwnerDeletion")


_CONDITION_TYPE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)


@dataclass
class Condition(Model):
    """``metav1.Condition``."""

    __api_description__ = "One aspect of the object's current state."

    type: str = field("type", omitempty=False, required=True, max_length=316, pattern=_CONDITION_TYPE)
    status: str = field("status", omitempty=False, required=True, enum=("True", "False", "Unknown"))
    observed_generation: int | None = field("observedGeneration", minimum=0, format="int64")
    last_transition_time: str | None = field(
        "lastTransitionTime", omitempty=False, required=True, format=DATE_TIME
    )
    reason: str = field(
        "reason",
        omitempty=False,
        required=True,
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
    )
    message: str = field("message", omitempty=False, required=True, max_length=32768)


@dataclass
class CrossVersionObjectReference(Model):
    kind: str = field(
        "kind", omitempty=False, required=True, description="Kind of the referent (Deployment ...)."
    )
    name: str = field("name", omitempty=False, required=True, description="Name of the referent.")
    api_version: str = field("apiVersion", default="", description="API version of the referent.")


@dataclass
class Preconditions(Model):
    resource_version: str | None = field("resourceVersion")
    uid: str | None = field("uid")


@dataclass
class DeleteOptions(Model):
    api_version: str = field("apiVersion", default="")
    kind: str = field("kind", default="")
    grace_period_seconds: int | None = field("gracePeriodSeconds", format="int64")
    preconditions: Preconditions | None = field("preconditions")
    orphan_dependents: bool | None = field("orphanDependents")
    propagation_policy: str | None = field("propagationPolicy")
    dry_run: list[str] = field("dryRun", factory=list, list_type="atomic")


@dataclass
class Resource(Model):
    """A top-level API object: ``apiVersion``, ``kind`` and ``metadata`` plus the subclass fields."""

    API_VERSION: ClassVar[str] = ""
    KIND: ClassVar[str] = ""

    api_version: str = field(
        "apiVersion",
        default="",
        description="The versioned schema of this representation of an object.",
    )
    kind: str = field("kind", default="", description="The REST resource this object represents.")
    metadata: JSON = field("metadata", factory=dict, schema_override={"type": "object"})

    def __post_init__(self) -> None:
        if not self.api_version:
            self.api_version = type(self).API_VERSION
        if not self.kind:
            self.kind = type(self).KIND

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", ""))

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.metadata.get("labels") or {})

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.metadata.get("annotations") or {})
