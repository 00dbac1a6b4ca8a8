"""``scheduling.sigs.k8s.io/v1alpha1`` (scheduler-plugins): ElasticQuota and PodGroup."""

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from koordinator.api.model import Model, field
from koordinator.api.types.core import DATE_TIME, Resource, ResourceList

__all__ = [
    "ElasticQuota",
    "ElasticQuotaSpec",
    "ElasticQuotaStatus",
    "PodGroup",
    "PodGroupSpec",
    "PodGroupStatus",
]

GROUP = "scheduling.sigs.k8s.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


@dataclass
class ElasticQuotaSpec(Model):
    min: ResourceList = field("min", factory=dict, description="Guaranteed resources of the quota.")
    max: ResourceList = field(
        "max", factory=dict, description="Upper bound of the resources the quota may use."
    )


@dataclass
class ElasticQuotaStatus(Model):
    used: ResourceList = field("used", factory=dict, description="Resources used by the quota's pods.")


@dataclass
class ElasticQuota(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ElasticQuota"
    __api_description__ = "A node of the elastic quota tree: guaranteed min, capped max, lending in between."

    spec: ElasticQuotaSpec | None = field("spec")
    status: ElasticQuotaStatus | None = field("status")


@dataclass
class PodGroupSpec(Model):
    min_member: int = field(
        "minMember", default=0, format="int32", description="Pods that must be schedulable together."
    )
    min_resources: ResourceList | None = field(
        "minResources", description="Resources the group needs before any member is scheduled."
    )
    schedule_timeout_seconds: int | None = field(
        "scheduleTimeoutSeconds",
        format="int32",
        description="How long members wait for the rest of the gang.",
    )


@dataclass
class PodGroupStatus(Model):
    phase: str = field(
        "phase",
        default="",
        enum=(
            "Pending",
            "PreScheduling",
            "Scheduling",
            "Scheduled",
            "Running",
            "Finished",
            "Failed",
            "Unknown",
        ),
    )
    occupied_by: str = field("occupiedBy", default="", description="The workload that owns the group.")
    scheduled: int = field("scheduled", default=0, format="int32")
    running: int = field("running", default=0, format="int32")
    succeeded: int = field("succeeded", default=0, format="int32")
    failed: int = field("failed", default=0, format="int32")
    schedule_start_time: str | None = field("scheduleStartTime", format=DATE_TIME)


@dataclass
class PodGroup(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "PodGroup"
    __api_description__ = "A gang: pods scheduled all together or not at all."

    spec: PodGroupSpec | None = field("spec")
    status: PodGroupStatus | None = field("status")
