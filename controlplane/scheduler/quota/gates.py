"""The scheduler feature gates the quota core honours, as one immutable value.

The core takes a :class:`QuotaGates` instead of the process-wide gate table so that a tree
is built, and tested, with explicit switches. :meth:`QuotaGates.from_feature_gates` reads
them from the scheduler's :class:`~koordinator.api.features.FeatureGates`.
"""

from __future__ import annotations

from dataclasses import dataclass

from koordinator.api.features import FeatureGates

__all__ = ["QuotaGates"]


@dataclass(frozen=True)
class QuotaGates:
    #: ``MultiQuotaTree``: quotas with a tree-id label live in their own tree
    multi_quota_tree: bool = False
    #: ``ElasticQuotaIgnorePodOverhead``: a pod's request leaves out ``spec.overhead``
    ignore_pod_overhead: bool = False
    #: ``ElasticQuotaIgnoreTerminatingPod``: pods past deletion time + grace are not counted
    ignore_terminating_pod: bool = False
    #: ``ElasticQuotaImmediateIgnoreTerminatingPod``: pods being deleted are not counted
    immediate_ignore_terminating_pod: bool = False
    #: ``ElasticQuotaGuaranteeUsage``: no quota lends; guaranteed = max(allocated, min)
    guarantee_usage: bool = False
    #: ``DisableDefaultQuota``: pods without a quota label are not quota-managed
    disable_default_quota: bool = False

    @classmethod
    def from_feature_gates(cls, gates: FeatureGates) -> QuotaGates:
        return cls(
            multi_quota_tree=gates.enabled("MultiQuotaTree"),
            ignore_pod_overhead=gates.enabled("ElasticQuotaIgnorePodOverhead"),
            ignore_terminating_pod=gates.enabled("ElasticQuotaIgnoreTerminatingPod"),
            immediate_ignore_terminating_pod=gates.enabled("ElasticQuotaImmediateIgnoreTerminatingPod"),
            guarantee_usage=gates.enabled("ElasticQuotaGuaranteeUsage"),
            disable_default_quota=gates.enabled("DisableDefaultQuota"),
        )
