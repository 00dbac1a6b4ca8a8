"""``config.koordinator.sh/v1alpha1``: ClusterColocationProfile, the pod-mutation policy of colocation."""

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from koordinator.api.model import JSON, IntOrString, Model, field
from koordinator.api.types.core import LabelSelector, Resource

__all__ = ["ClusterColocationProfile", "ClusterColocationProfileSpec", "ClusterColocationProfileStatus"]

GROUP = "config.koordinator.sh"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


@dataclass
class ClusterColocationProfileSpec(Model):
    namespace_selector: LabelSelector | None = field(
        "namespaceSelector", description="Namespaces whose pods the profile applies to (empty: all)."
    )
    selector: LabelSelector | None = field(
        "selector", description="Pods the profile applies to (empty: all)."
    )
    probability: IntOrString | None = field(
        "probability",
        minimum=0,
        maximum=100,
        pattern=r"^(100|[1-9]?[0-9])%$",
        description='Chance that a matching pod is mutated: an integer 0-100 or a percentage string ("50%").',
    )
    qos_class: str = field(
        "qosClass",
        default="",
        enum=("LSE", "LSR", "LS", "BE", "SYSTEM"),
        description="Value for the pod label koordinator.sh/qosClass.",
    )
    priority_class_name: str = field(
        "priorityClassName", default="", description="PriorityClass whose name and value the pod receives."
    )
    koordinator_priority: int | None = field(
        "koordinatorPriority", format="int32", description="Value for the pod label koordinator.sh/priority."
    )
    labels: dict[str, str] = field("labels", factory=dict, description="Labels added to the pod.")
    annotations: dict[str, str] = field(
        "annotations", factory=dict, description="Annotations added to the pod."
    )
    label_keys_mapping: dict[str, str] = field(
        "labelKeysMapping", factory=dict, description="Copy the value of label <key> to label <value>."
    )
    annotation_keys_mapping: dict[str, str] = field(
        "annotationKeysMapping", factory=dict, description="Copy the value of annotation <key> to <value>."
    )
    label_suffixes: dict[str, str] = field(
        "labelSuffixes", factory=dict, description="Append <value> to the existing value of label <key>."
    )
    scheduler_name: str = field("schedulerName", default="", description="Scheduler that places the pod.")
    patch: JSON | None = field(
        "patch", schemaless=True, description="A strategic-merge patch applied to the pod."
    )


@dataclass
class ClusterColocationProfileStatus(Model):
    __api_description__ = "Empty."


@dataclass
class ClusterColocationProfile(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ClusterColocationProfile"
    __api_description__ = "Rewrites matching pods at admission into Koordinator's QoS and priority protocol."

    spec: ClusterColocationProfileSpec | None = field("spec")
    status: ClusterColocationProfileStatus | None = field("status")
