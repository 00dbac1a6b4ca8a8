"""ElasticQuota checks on pods (a step of ``/validate-pod``).

A pod's quota is its ``quota.scheduling.koordinator.sh/name`` label, else the quota named
like its namespace (in that namespace), else a quota whose ``namespaces`` annotation lists
the namespace (not with ``DisableDefaultQuota``: then only the label names a quota);
unknown names fall back to ``koordinator-default-quota``, which accepts any pod. On UPDATE
the ``quota.scheduling.koordinator.sh/preemptible`` label may not change (checked first,
and alone); pods may not join a parent quota (``is-parent: "true"``)
unless ``SupportParentQuotaSubmitPod`` is on. Messages are upstream's.
"""

from __future__ import annotations

from typing import Any

from controlplane.manager.webhooks.context import WebhookContext
from koordinator.api.extension.annotations import labels_of
from koordinator.api.extension.quota import DEFAULT_QUOTA_NAME, LABEL_PREEMPTIBLE

__all__ = ["NAME", "validate_pod_quota"]

NAME = "QuotaMetaChecker"

Obj = dict[str, Any]


def validate_pod_quota(ctx: WebhookContext, pod: Obj, old: Obj | None, namespace: str) -> list[str]:
    if old is not None and labels_of(old).get(LABEL_PREEMPTIBLE, "") != labels_of(pod).get(
        LABEL_PREEMPTIBLE, ""
    ):
        return ["Preemptible label is forbidden modify now."]
    if ctx.enabled("SupportParentQuotaSubmitPod"):
        return []
    view = ctx.quotas.view()
    name = view.quota_name_for_pod(pod, namespace, by_namespace=not ctx.enabled("DisableDefaultQuota"))
    if name == DEFAULT_QUOTA_NAME:
        return []
    info = view.infos.get(name)
    if info is not None and info.is_parent:
        pod_name = (pod.get("metadata") or {}).get("name") or ""
        return [f"pod can not be linked to a parentQuotaGroup,quota:{name}, pod:{pod_name}"]
    return []
