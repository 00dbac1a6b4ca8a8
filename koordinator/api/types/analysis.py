"""``analysis.koordinator.sh/v1alpha1``: Recommendation, per-container resource suggestions for a workload."""

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from koordinator.api.model import Model, Rule, field
from koordinator.api.types.core import (
    DATE_TIME,
    CrossVersionObjectReference,
    LabelSelector,
    Resource,
    ResourceList,
)

__all__ = [
    "Recommendation",
    "RecommendationCondition",
    "RecommendationSpec",
    "RecommendationStatus",
    "RecommendationTarget",
    "RecommendedContainerStatus",
    "RecommendedPodStatus",
]

GROUP = "analysis.koordinator.sh"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


@dataclass
class RecommendationTarget(Model):
    __api_rules__ = (
        Rule(
            "!has(self.type) || self.type != 'workload' || has(self.workload)",
            message="workload must be set when type is workload",
            field_path=".workload",
        ),
        Rule(
            "!has(self.type) || self.type != 'podSelector' || has(self.podSelector)",
            message="podSelector must be set when type is podSelector",
            field_path=".podSelector",
        ),
    )

    type: str = field(
        "type",
        default="",
        omitempty=False,
        required=True,
        enum=("workload", "podSelector"),
        description="workload or podSelector.",
    )
    workload: CrossVersionObjectReference | None = field("workload", description="The workload to analyse.")
    pod_selector: LabelSelector | None = field("podSelector", description="The pods to analyse.")


@dataclass
class RecommendationSpec(Model):
    target: RecommendationTarget | None = field(
        "target", omitempty=False, required=True, description="What the recommendation is for."
    )


@dataclass
class RecommendedContainerStatus(Model):
    container_name: str = field("containerName", default="")
    resources: ResourceList = field("resources", factory=dict, description="Recommended requests.")


@dataclass
class RecommendedPodStatus(Model):
    container_statuses: list[RecommendedContainerStatus] = field("containerStatuses", factory=list)


@dataclass
class RecommendationCondition(Model):
    type: str = field("type", default="", omitempty=False, required=True)
    status: str = field("status", default="", omitempty=False, required=True)
    last_transition_time: str | None = field("lastTransitionTime", format=DATE_TIME)
    reason: str = field("reason", default="")
    message: str = field("message", default="")


@dataclass
class RecommendationStatus(Model):
    pod_status: RecommendedPodStatus | None = field("podStatus")
    update_time: str | None = field("updateTime", format=DATE_TIME)
    conditions: list[RecommendationCondition] = field("conditions", factory=list)


@dataclass
class Recommendation(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Recommendation"
    __api_description__ = "Recommended container resources for a workload or a set of pods."

    spec: RecommendationSpec | None = field("spec", required=True)
    status: RecommendationStatus | None = field("status")
