"""ElasticQuota checks on pods (a step of ``/validate-pod``).

A pod's quota is its ``quota.scheduling.koordinator.sh/name`` label, else the quota named
like its namespace (in that namespace), else a quota whose ``namespaces`` annotation lists
the namespace; unknown names fall back to ``koordinator-default-quota``, which accepts any
pod. Pods may not join a parent quota (``is-parent: "true"``) unless
``SupportParentQuotaSubmitPod`` is on, and on UPDATE the
``quota.scheduling.koordinator.sh/preemptible`` label may not change.
"""

from __future__ import annotations

from typing import Any

from controlplane.manager.webhooks.context import WebhookContext
from koordinator.api.extension.annotations import labels_of
from koordinator.api.extension.quota import DEFAULT_QUOTA_NAME, LABEL_PREEMPTIBLE
from koordinator.api.schema.errors import FieldError

__all__ = ["NAME", "validate_pod_quota"]

NAME = "QuotaMetaChecker"

Obj = dict[str, Any]


def validate_pod_quota(
    ctx: WebhookContext, pod: Obj, old: Obj | None, namespace: str
) -> list[FieldError | str]:
    problems: list[FieldError | str] = []
    if old is not None:
        before, after = labels_of(old).get(LABEL_PREEMPTIBLE, ""), labels_of(pod).get(LABEL_PREEMPTIBLE, "")
        if before != after:
            problems.append(FieldError.invalid(f"labels.{LABEL_PREEMPTIBLE}", after, "field is immutable"))
    view = ctx.quotas.view()
    name = view.quota_name_for_pod(pod, namespace)
    if name == DEFAULT_QUOTA_NAME or ctx.enabled("SupportParentQuotaSubmitPod"):
        return problems
    info = view.infos.get(name)
    if info is not None and info.is_parent:
        pod_name = (pod.get("metadata") or {}).get("name") or ""
        problems.append(f"pod can not be linked to a parentQuotaGroup,quota:{name}, pod:{pod_name}")
    return problems
