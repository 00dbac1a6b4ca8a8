"""``quota.koordinator.sh/v1alpha1``: ElasticQuotaProfile, which derives a root quota from a node pool."""

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from koordinator.api.model import Model, field
from koordinator.api.types.core import LabelSelector, Resource

__all__ = ["ElasticQuotaProfile", "ElasticQuotaProfileSpec", "ElasticQuotaProfileStatus"]

GROUP = "quota.koordinator.sh"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: A non-negative decimal number (``"0.9"``, ``"1"``).
RATIO_PATTERN = r"^([0-9]+\.?[0-9]*|\.[0-9]+)$"


@dataclass
class ElasticQuotaProfileSpec(Model):
    quota_name: str = field(
        "quotaName",
        default="",
        omitempty=False,
        required=True,
        min_length=1,
        description="Name of the ElasticQuota the profile maintains.",
    )
    quota_labels: dict[str, str] = field("quotaLabels", factory=dict, description="Labels put on that quota.")
    resource_ratio: str | None = field(
        "resourceRatio",
        pattern=RATIO_PATTERN,
        description='Share of the nodes\' allocatable given to the quota, as a decimal string ("0.9").',
    )
    node_selector: LabelSelector | None = field(
        "nodeSelector",
        omitempty=False,
        required=True,
        description="The nodes whose resources form the quota.",
    )


@dataclass
class ElasticQuotaProfileStatus(Model):
    __api_description__ = "Empty."


@dataclass
class ElasticQuotaProfile(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ElasticQuotaProfile"
    __api_description__ = "Builds an ElasticQuota tree root from the resources of selected nodes."

    spec: ElasticQuotaProfileSpec | None = field("spec", required=True)
    status: ElasticQuotaProfileStatus | None = field("status")
