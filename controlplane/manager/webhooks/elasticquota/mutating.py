"""``/mutate-scheduling-sigs-k8s-io-v1alpha1-elasticquota``: defaults of new ElasticQuotas.

On CREATE (gate ``ElasticMutatingWebhook``), except for the root quota itself:

* the ``quota.scheduling.koordinator.sh/parent`` label defaults to ``koordinator-root-quota``;
* a quota under another parent without a ``tree-id`` label inherits the parent's tree id;
* the ``shared-weight`` annotation defaults to ``spec.max`` (Go's JSON of the list); when
  present, resources of ``max`` it lacks are added with their ``max`` value and resources
  not in ``max`` are dropped.

A quota whose parent is neither the root nor a known quota, and that has no tree id, is
refused (``fill quota <name> failed, parent not exist``); so is a ``shared-weight``
annotation that does not parse. Both are answered with status code 400.
"""

from __future__ import annotations

from controlplane.manager.webhooks import metrics
from controlplane.manager.webhooks.context import PluginStep, WebhookContext
from controlplane.manager.webhooks.elasticquota.topology import QuotaError, annotation_resources
from controlplane.manager.webhooks.jsonpatch import create_patch, json_copy
from controlplane.manager.webhooks.objects import ELASTIC_QUOTA, ObjectError, check, ensure_map
from controlplane.manager.webhooks.review import (
    AdmissionRequest,
    AdmissionResponse,
    allowed,
    errored,
    patched,
)
from koordinator.api import resourcelist
from koordinator.api.extension.quota import (
    ANNOTATION_SHARED_WEIGHT,
    LABEL_QUOTA_PARENT,
    LABEL_QUOTA_TREE_ID,
    ROOT_QUOTA_NAME,
)
from koordinator.api.jsonutil import marshal

__all__ = ["ElasticQuotaMutatingHandler"]

NAME = "QuotaMetaChecker"


class ElasticQuotaMutatingHandler:
    def __init__(self, ctx: WebhookContext) -> None:
        self.ctx = ctx

    async def handle(self, request: AdmissionRequest) -> AdmissionResponse:
        if request.sub_resource or request.resource_name != "elasticquotas" or request.operation != "CREATE":
            return allowed()
        try:
            original = check(request.object, ELASTIC_QUOTA, "elastic quota")
        except ObjectError as exc:
            return errored(400, str(exc))
        quota = json_copy(original)
        meta = ensure_map(quota, "metadata")
        if meta.get("name") == ROOT_QUOTA_NAME:
            return allowed()
        with PluginStep(self.ctx, metrics.MUTATING, metrics.ELASTIC_QUOTA, request.operation, NAME) as step:
            labels = ensure_map(meta, "labels")
            parent = labels.get(LABEL_QUOTA_PARENT) or ""
            if not parent:
                labels[LABEL_QUOTA_PARENT] = parent = ROOT_QUOTA_NAME
            if parent != ROOT_QUOTA_NAME and not labels.get(LABEL_QUOTA_TREE_ID):
                parent_info = self.ctx.quotas.view().infos.get(parent)
                if parent_info is None:
                    step.reject()
                    return errored(400, f"fill quota {meta.get('name', '')} failed, parent not exist")
                if parent_info.tree_id:
                    labels[LABEL_QUOTA_TREE_ID] = parent_info.tree_id
            maximum = resourcelist.parse((quota.get("spec") or {}).get("max"))
            try:
                weight = annotation_resources(quota, ANNOTATION_SHARED_WEIGHT)
            except QuotaError as exc:
                step.reject()
                return errored(400, f"fillDefaultQuotaInfo unmarshal sharedWeight failed:{exc}")
            # upstream's fixedSharedWeight: written when absent, or when its resources are
            # not max's (missing ones take max's value, others go); a weight naming max's
            # resources is left as the user spelled it
            if weight is None or weight.keys() != maximum.keys():
                if weight is None:
                    weight = maximum
                else:
                    weight = {name: weight.get(name, value) for name, value in maximum.items()}
                annotations = ensure_map(meta, "annotations")
                annotations[ANNOTATION_SHARED_WEIGHT] = marshal(resourcelist.to_json(weight))
        return patched(create_patch(original, quota))
