"""Which pods quota-scoped preemption may touch (the ElasticQuota PostFilter's rules).

:func:`can_preempt` is upstream's ``canPreempt``: the victim must be preemptible (not
labelled ``preemptible: "false"``), counted in the same quota as the preemptor, of
strictly lower priority, and not in the default quota when
``disableDefaultQuotaPreemption`` is on (pods fall into the default quota merely by not
naming a quota, and may be important pods Koordinator does not schedule).

:func:`eligible_to_preempt_others` is ``PodEligibleToPreemptOthers``: a pod with
``preemptionPolicy: Never`` never preempts, and a pod that already nominated a node waits
while a lower-priority pod of its own quota is still terminating there.
"""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.scheduler.quota.forest import QuotaForest
from controlplane.scheduler.quota.pods import QuotaPod
from koordinator.api.extension.quota import DEFAULT_QUOTA_NAME

__all__ = ["can_preempt", "eligible_to_preempt_others"]

PREEMPT_NEVER = "Never"


def _quota_of(forest: QuotaForest, pod: QuotaPod) -> str:
    ref = forest.resolve(pod)
    return ref.name if ref is not None else ""


def can_preempt(
    forest: QuotaForest,
    preemptor: QuotaPod,
    victim: QuotaPod,
    *,
    disable_default_quota_preemption: bool | None = None,
) -> bool:
    """Whether ``victim`` may be evicted to make room for ``preemptor``."""
    if victim.non_preemptible:
        return False
    if disable_default_quota_preemption is None:
        disable_default_quota_preemption = forest.args.disable_default_quota_preemption
    victim_quota = _quota_of(forest, victim)
    if disable_default_quota_preemption and victim_quota == DEFAULT_QUOTA_NAME:
        return False
    if victim_quota != _quota_of(forest, preemptor):
        return False
    return victim.priority < preemptor.priority


def eligible_to_preempt_others(
    forest: QuotaForest,
    preemptor: QuotaPod,
    *,
    nominated_node_unresolvable: bool = False,
    pods_on_nominated_node: Iterable[QuotaPod] | None = None,
) -> tuple[bool, str]:
    """(eligible, reason) for a preemptor; ``pods_on_nominated_node`` None: the node is gone."""
    if preemptor.preemption_policy == PREEMPT_NEVER:
        return False, "not eligible due to preemptionPolicy=Never."
    if not preemptor.nominated_node or nominated_node_unresolvable or pods_on_nominated_node is None:
        return True, ""
    quota = _quota_of(forest, preemptor)
    for pod in pods_on_nominated_node:
        if (
            pod.deletion_time is not None
            and _quota_of(forest, pod) == quota
            and pod.priority < preemptor.priority
        ):
            return False, "not eligible due to a terminating pod on the nominated node."
    return True, ""
