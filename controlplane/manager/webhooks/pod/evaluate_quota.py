"""``EvaluateQuota``: the quota admission step of ``/validate-pod`` (gate ``EnableQuotaAdmission``).

Upstream's ``evaluate_quota.go``. The pod's quota is its ``quota.scheduling.koordinator.sh/name``
label; without one (and unless ``DisableDefaultQuota``) the quota named like the pod's
namespace, else one whose ``namespaces`` annotation lists it, else the default quota.

* CREATE is evaluated; UPDATE only with ``EnableQuotaAdmissionOnUpdate`` and only when the
  quota changes -- and then, as upstream, the new quota must exist but nothing is charged
  (upstream's evaluator handles CREATE only);
* no quota, the default, system and root quotas: nothing to check;
* a name no ElasticQuota has (in any namespace) refuses the pod (``elastic quota q not
  found``), and so does a name two quotas share;
* otherwise :class:`~controlplane.manager.webhooks.quotaevaluate.evaluator.QuotaEvaluator`
  charges the pod; with ``ElasticQuotaEvaluationTransformPod`` and
  ``ReplaceResourcesTransformer`` it sees the pod rewritten by
  ``pod.koordinator.sh/replace-resources``.
"""

from __future__ import annotations

from typing import Any

from controlplane.manager.webhooks.context import WebhookContext
from controlplane.manager.webhooks.quotaevaluate.evaluator import Attributes
from controlplane.manager.webhooks.quotaevaluate.usage import replace_resources
from controlplane.manager.webhooks.review import AdmissionRequest
from koordinator.api.extension.annotations import labels_of
from koordinator.api.extension.quota import (
    DEFAULT_QUOTA_NAME,
    LABEL_QUOTA_NAME,
    ROOT_QUOTA_NAME,
    SYSTEM_QUOTA_NAME,
)
from koordinator.api.quantity import QuantityError

__all__ = ["NAME", "evaluate_quota", "quota_name_of"]

NAME = "EvaluateQuota"

Obj = dict[str, Any]
_NOT_CHECKED = ("", DEFAULT_QUOTA_NAME, SYSTEM_QUOTA_NAME, ROOT_QUOTA_NAME)


def quota_name_of(ctx: WebhookContext, pod: Obj, namespace: str) -> str:
    """The quota a pod asks for (upstream's ``GetQuotaName``); a label naming no quota is kept."""
    label = labels_of(pod).get(LABEL_QUOTA_NAME, "")
    if label or ctx.enabled("DisableDefaultQuota"):
        return label
    return ctx.quotas.view().quota_for_namespace(namespace) or DEFAULT_QUOTA_NAME


def _namespace_of(obj: Obj, fallback: str) -> str:
    namespace = (obj.get("metadata") or {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else fallback


async def evaluate_quota(
    ctx: WebhookContext, request: AdmissionRequest, pod: Obj, old: Obj | None, namespace: str
) -> list[str]:
    """The refusal (one message), or nothing when the pod is admitted."""
    if not ctx.enabled("EnableQuotaAdmission"):
        return []
    name = quota_name_of(ctx, pod, namespace)
    if request.operation == "UPDATE":
        if not ctx.enabled("EnableQuotaAdmissionOnUpdate") or old is None:
            return []
        if quota_name_of(ctx, old, _namespace_of(old, namespace)) == name:
            return []
    elif request.operation != "CREATE":
        return []
    if name in _NOT_CHECKED:
        return []
    evaluator = ctx.quota_evaluator
    if evaluator is None:
        return ["elastic quota admission is enabled, but this webhook server has no quota evaluator"]
    found = evaluator.accessor.quotas_named(name)
    if not found:
        return [f"elastic quota {name} not found"]
    if len(found) > 1:
        return [f"more than one elastic quota {name} found"]
    evaluated = pod
    if ctx.enabled("ElasticQuotaEvaluationTransformPod") and ctx.enabled("ReplaceResourcesTransformer"):
        try:
            evaluated = replace_resources(pod)
        except QuantityError as exc:
            return [f"invalid resources of the pod: {exc}"]
    quota_namespace = str((found[0].get("metadata") or {}).get("namespace") or "")
    refusal = await evaluator.evaluate(
        Attributes(quota_namespace, name, request.operation, evaluated, dry_run=request.dry_run)
    )
    return [refusal] if refusal else []
