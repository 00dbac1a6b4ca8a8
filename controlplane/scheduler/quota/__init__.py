"""ElasticQuota for koord-scheduler, as a library: the quota trees, their runtime, and the
decisions the plug-in and its controllers take from them.

No I/O and no framework imports: the caller feeds ElasticQuota objects (dicts as the API
returns them), the cluster's allocatable total and :class:`QuotaPod` records, and asks.

* :mod:`.args` -- ``ElasticQuotaArgs`` parsed from a pluginConfig entry;
* :mod:`.builtin` -- the root, system and default quota objects created at start;
* :mod:`.spec`, :mod:`.pods` -- what is read from a quota object and from a pod;
* :mod:`.runtime` -- the per-parent sharing (Hamilton apportionment, min scaling);
* :mod:`.tree` -- one quota tree: request, used, runtime, summaries;
* :mod:`.forest` -- every tree (``MultiQuotaTree``), pod to quota resolution, Reserve;
* :mod:`.checks` -- the PreFilter check and the cycle state preemption adjusts;
* :mod:`.preemption` -- which victims quota preemption may take;
* :mod:`.status` -- the merge patch of a quota's status annotations and ``status.used``;
* :mod:`.revoke` -- overuse revoke: when and which pods.
"""

from __future__ import annotations

from controlplane.scheduler.quota.args import NAME, ElasticQuotaArgs, HookPluginConf, elastic_quota_args
from controlplane.scheduler.quota.builtin import builtin_quotas, default_quota, root_quota, system_quota
from controlplane.scheduler.quota.checks import Code, PostFilterState, QuotaCheck, check_parents, pre_filter
from controlplane.scheduler.quota.forest import QuotaForest, QuotaRef
from controlplane.scheduler.quota.gates import QuotaGates
from controlplane.scheduler.quota.pods import QuotaPod, is_ignored, more_important, quota_pod
from controlplane.scheduler.quota.preemption import can_preempt, eligible_to_preempt_others
from controlplane.scheduler.quota.revoke import OveruseMonitor, OveruseRevoker, select_revoke_victims
from controlplane.scheduler.quota.runtime import ShareRequest, distribute, hamilton_deltas, scale_min
from controlplane.scheduler.quota.spec import QuotaSpec, QuotaSpecError, quota_spec
from controlplane.scheduler.quota.status import status_annotations, status_patch
from controlplane.scheduler.quota.tree import QuotaSummary, QuotaTree

__all__ = [
    "NAME",
    "Code",
    "ElasticQuotaArgs",
    "HookPluginConf",
    "OveruseMonitor",
    "OveruseRevoker",
    "PostFilterState",
    "QuotaCheck",
    "QuotaForest",
    "QuotaGates",
    "QuotaPod",
    "QuotaRef",
    "QuotaSpec",
    "QuotaSpecError",
    "QuotaSummary",
    "QuotaTree",
    "ShareRequest",
    "builtin_quotas",
    "can_preempt",
    "check_parents",
    "default_quota",
    "distribute",
    "elastic_quota_args",
    "eligible_to_preempt_others",
    "hamilton_deltas",
    "is_ignored",
    "more_important",
    "pre_filter",
    "quota_pod",
    "quota_spec",
    "root_quota",
    "scale_min",
    "select_revoke_victims",
    "status_annotations",
    "status_patch",
    "system_quota",
]
