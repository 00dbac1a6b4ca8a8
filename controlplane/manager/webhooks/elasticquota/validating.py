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
from koordinator.api.extension.annotations import AnnotationError, annotations_of, get_string_list, labels_of
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


def _namespace_conflict(
    view: QuotaView, name: str, namespaces: tuple[str, ...], old_namespaces: tuple[str, ...] | None
) -> str | None:
    """A namespace of the ``namespaces`` annotation that another quota already lists.

    On UPDATE (``old_namespaces`` given) the namespaces the quota already listed are not
    checked again: a namespace two quotas came to share outside this webhook does not block
    every later change of either.
    """
    update = old_namespaces is not None
    for namespace in namespaces:
        if old_namespaces is not None and namespace in old_namespaces:
            continue
        for other in sorted(view.infos):
            if other != name and namespace in view.infos[other].namespaces:
                if update:
                    # "Updadte" is upstream's spelling; users grep for it.
                    return (
                        f"UpdadteQuota, quota {name} update namespaces, but namespace {namespace} "
                        f"is already bound to quota {other}"
                    )
                return (
                    f"AddQuota quota {name}'s annotation namespace {namespace} "
                    f"is already bound to quota {other}"
                )
    return None


def _annotation_namespaces(quota: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``namespaces`` annotation; one that does not parse is left to :class:`QuotaInfo` to report."""
    try:
        return tuple(get_string_list(annotations_of(quota), ANNOTATION_NAMESPACES) or ())
    except AnnotationError:
        return ()


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
            return f"invalid quota {name}"
        view = self.ctx.quotas.view()
        old_info = None
        if old_quota is None and name in view.infos:
            return f"AddQuota quota already exist:{name}"
        namespaces = _annotation_namespaces(quota)
        old_namespaces = _annotation_namespaces(old_quota) if old_quota is not None else None
        if problem := _namespace_conflict(view, name, namespaces, old_namespaces):
            return problem
        if old_quota is not None:
            old_info = view.infos.get(name)
            if old_info is None:
                return f"UpdateQuota quota not exist in quotaInfoMap:{name}"
        if problem := validate_quota_self(quota):
            return problem
        try:
            info = QuotaInfo.from_quota(quota)
        except QuotaError as exc:
            return f"{name} {exc}"
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

    async def _bound_pods(self, name: str, namespaces: tuple[str, ...]) -> list[tuple[str, str]]:
        found: dict[tuple[str, str], None] = {}
        for pod in await self.ctx.cluster.pods(labels={LABEL_QUOTA_NAME: name}):
            found[_pod_key(pod)] = None
        for namespace in (name, *namespaces):
            for pod in await self.ctx.cluster.pods(namespace=namespace):
                found[_pod_key(pod)] = None
        return list(found)

    async def _validate_delete(self, request: AdmissionRequest, name: str) -> str | None:
        if problem := validate_delete(self.ctx.quotas.view(), name):
            return problem
        try:
            bound = await self.ctx.cluster.pods(labels={LABEL_QUOTA_NAME: name})
        except ClusterError as exc:
            # Upstream's words; its status code is 400, here an internal failure is a 500.
            raise ClusterError(f"failed list pods for quota {name}, err: {exc}") from None
        pods = sorted(pod_name for _, pod_name in map(_pod_key, bound))
        if pods:
            # Bare pod names, at most two and then "...", as upstream; sorted here (upstream
            # shows the first two its cache happens to list).
            shown = pods[:2] + (["..."] if len(pods) > 2 else [])
            return f"delete quota failed, quota {name} has {len(pods)} child pods: {', '.join(shown)}"
        if not request.dry_run:
            self.ctx.quotas.admit(name, None)
        return None


def _pod_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
