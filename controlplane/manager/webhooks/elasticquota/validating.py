"""``/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota``: the ElasticQuota tree invariants.

CREATE, UPDATE and DELETE (gate ``ElasticValidatingWebhook``); a violation is refused with
status code 400 and upstream's message:

* CREATE: the name is not taken; each namespace of the ``namespaces`` annotation is not
  bound to another quota; the quota's own checks (non-negative min, max and shared weight,
  every ``min`` resource in ``max`` and not above it, ``max >= used`` for the resources in
  ``max-strict-check-resource-keys``); then the tree checks: the parent exists and is a
  parent, tree ids agree, the ``max`` resource names equal the parent's and the children's
  (with ``ElasticQuotaEnableUpdateResourceKey``: included in the parent's), ``min`` names
  are included in the parent's, the siblings' ``min`` plus this one fit in the parent's
  ``min`` and the children's ``min`` fit in this one's (unless ``allow-force-update`` or
  ``is-root``), and with ``ElasticQuotaGuaranteeUsage`` the guaranteed chain;
* UPDATE: nothing to check when the parent, is-parent and tree-id labels, the
  ``namespaces`` annotation and the spec are unchanged; the system and root quotas cannot
  change; the tree id is immutable; ``is-parent`` cannot turn false while the quota has
  children, nor true while pods use it; then the CREATE checks;
* DELETE: not the system, root or default quota; no children; no pods labelled with it.

Admitted changes count at once for the next request (see ``topology.QuotaTopology``),
except for dry runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.manager.webhooks import metrics
from controlplane.manager.webhooks.context import ClusterError, PluginStep, WebhookContext
from controlplane.manager.webhooks.elasticquota.topology import (
    QuotaError,
    QuotaInfo,
    QuotaView,
    validate_delete,
    validate_quota_self,
    validate_topology,
)
from controlplane.manager.webhooks.objects import ELASTIC_QUOTA, ObjectError, check
from controlplane.manager.webhooks.review import AdmissionRequest, AdmissionResponse, allowed, errored
from koordinator.api.extension.annotations import annotations_of, labels_of
from koordinator.api.extension.quota import (
    ANNOTATION_NAMESPACES,
    LABEL_QUOTA_IS_PARENT,
    LABEL_QUOTA_NAME,
    LABEL_QUOTA_PARENT,
    LABEL_QUOTA_TREE_ID,
    ROOT_QUOTA_NAME,
    SYSTEM_QUOTA_NAME,
)

__all__ = ["ElasticQuotaValidatingHandler"]

NAME = "QuotaMetaChecker"

Obj = dict[str, Any]


def _fields(quota: Mapping[str, Any]) -> tuple[Any, ...]:
    """What an update must change for the checks to run (``quotaFieldsCopy``)."""
    labels, annotations = labels_of(quota), annotations_of(quota)
    return (
        labels.get(LABEL_QUOTA_PARENT, ""),
        labels.get(LABEL_QUOTA_IS_PARENT, ""),
        labels.get(LABEL_QUOTA_TREE_ID, ""),
        annotations.get(ANNOTATION_NAMESPACES, ""),
        quota.get("spec") or {},
    )


def _namespace_conflict(view: QuotaView, info: QuotaInfo, old: QuotaInfo | None) -> str | None:
    already = set(old.namespaces) if old is not None else set()
    for namespace in info.namespaces:
        if namespace in already:
            continue
        for name in sorted(view.infos):
            if name != info.name and namespace in view.infos[name].namespaces:
                return f"namespace {namespace} is already bound to quota {name}"
    return None


class ElasticQuotaValidatingHandler:
    def __init__(self, ctx: WebhookContext) -> None:
        self.ctx = ctx

    async def handle(self, request: AdmissionRequest) -> AdmissionResponse:
        if request.sub_resource or request.resource_name != "elasticquotas":
            return allowed()
        if request.operation not in ("CREATE", "UPDATE", "DELETE"):
            return allowed()
        with PluginStep(self.ctx, metrics.VALIDATING, metrics.ELASTIC_QUOTA, request.operation, NAME) as step:
            try:
                problem = await self._validate(request)
            except ObjectError as exc:
                problem = str(exc)
            except ClusterError as exc:
                step.reject()
                return errored(500, str(exc))
            if problem:
                step.reject()
                return errored(400, problem)
        return allowed()

    async def _validate(self, request: AdmissionRequest) -> str | None:
        if request.operation == "DELETE":
            old = check(request.old_object, ELASTIC_QUOTA, "elastic quota") if request.old_object else {}
            name = str((old.get("metadata") or {}).get("name") or request.name)
            return await self._validate_delete(request, name)
        quota = check(request.object, ELASTIC_QUOTA, "elastic quota")
        old_quota = None
        if request.operation == "UPDATE":
            old_quota = check(request.old_object, ELASTIC_QUOTA, "old elastic quota")
            if _fields(old_quota) == _fields(quota):
                return None
        name = str((quota.get("metadata") or {}).get("name") or request.name)
        if old_quota is not None and name in (SYSTEM_QUOTA_NAME, ROOT_QUOTA_NAME):
            return f"forbidden to modify quota {name}"
        view = self.ctx.quotas.view()
        old_info = None
        if old_quota is None:
            if name in view.infos:
                return f"AddQuota quota already exist:{name}"
        else:
            old_info = view.infos.get(name)
            if old_info is None:
                return f"quota not exist in quotaInfoMap:{name}"
        if problem := validate_quota_self(quota):
            return problem
        try:
            info = QuotaInfo.from_quota(quota)
        except QuotaError as exc:
            return f"{name} {exc}"
        if problem := _namespace_conflict(view, info, old_info):
            return problem
        has_pods = False
        if old_info is not None and not old_info.is_parent and info.is_parent:
            has_pods = bool(await self._bound_pods(name, old_info.namespaces))
        problem = validate_topology(
            view,
            old_info,
            info,
            has_bound_pods=has_pods,
            update_resource_key=self.ctx.enabled("ElasticQuotaEnableUpdateResourceKey"),
            guarantee_usage=self.ctx.enabled("ElasticQuotaGuaranteeUsage"),
        )
        if problem is None and not request.dry_run:
            self.ctx.quotas.admit(name, info)
        return problem

    async def _bound_pods(self, name: str, namespaces: tuple[str, ...]) -> list[str]:
        found: dict[str, None] = {}
        for pod in await self.ctx.cluster.pods(labels={LABEL_QUOTA_NAME: name}):
            found[_pod_key(pod)] = None
        for namespace in (name, *namespaces):
            for pod in await self.ctx.cluster.pods(namespace=namespace):
                found[_pod_key(pod)] = None
        return list(found)

    async def _validate_delete(self, request: AdmissionRequest, name: str) -> str | None:
        if problem := validate_delete(self.ctx.quotas.view(), name):
            return problem
        pods = sorted(_pod_key(pod) for pod in await self.ctx.cluster.pods(labels={LABEL_QUOTA_NAME: name}))
        if pods:
            return f"delete quota failed, quota {name} has {len(pods)} child pods: {', '.join(pods)}"
        if not request.dry_run:
            self.ctx.quotas.admit(name, None)
        return None


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
