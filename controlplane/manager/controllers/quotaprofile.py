"""The quotaprofile controller: one root ElasticQuota per ElasticQuotaProfile, sized by its nodes.

Upstream's ``pkg/quota-controller/profile/profile_controller.go``. Reconcile of a profile
(``namespace/name``):

1. a profile without the ``quota.scheduling.koordinator.sh/tree-id`` label gets it (FNV-1a
   of ``namespace/name``; a merge patch on the version read);
2. the ElasticQuota named ``spec.quotaName`` in the profile's namespace is created, or
   updated when the fields the profile owns differ (:mod:`.quotaprofile_sizing`): ``min``
   from the allocatable of the nodes ``spec.nodeSelector`` matches, ``max``, the
   ``profile``/``tree-id``/``is-root`` labels plus ``spec.quotaLabels``, and the
   ``total-resource``/``unschedulable-resource`` annotations;
3. the profile comes back every 10 s, so node changes reach the quota within that.

Profiles are watched for creation and spec changes (a new ``metadata.generation``), as
upstream's ``GenerationChangedPredicate``; Nodes and ElasticQuotas are read from caches.
A create or update the apiserver refuses is told as a Warning Event on the profile
(``CreateQuotaFailed``/``UpdateQuotaFailed``, upstream's reasons and words) and retried
after 2 s; a conflict or a quota not cached yet is retried with backoff. A ``nodeSelector``
that is not a valid label selector is a permanent error (a Warning Event) until the profile
changes. Deleting a profile leaves its quota in place, as upstream.
"""

from __future__ import annotations

import logging
from typing import Any

from controlplane.manager.controllers.context import FIELD_MANAGER, ControllerContext
from controlplane.manager.controllers.quotaprofile_sizing import (
    NodeRecord,
    node_record,
    profile_quota,
    tree_id,
)
from controlplane.reactor import PermanentError, Result, TemporaryError
from koordinator.api.extension.annotations import labels_of
from koordinator.api.extension.quota import LABEL_QUOTA_TREE_ID
from koordinator.api.selectors import SelectorError, label_selector_matches, validate_label_selector
from koordinator.kube import resources as res
from koordinator.kube.client import PatchType
from koordinator.kube.errors import AlreadyExistsError, ApiError, ConflictError, NotFoundError
from koordinator.kube.events import WARNING, EventRecorder
from koordinator.kube.informer import Consumer

__all__ = [
    "COMPONENT",
    "NAME",
    "REASON_CREATE_QUOTA_FAILED",
    "REASON_UPDATE_QUOTA_FAILED",
    "REQUEUE_S",
    "QuotaProfileController",
]

log = logging.getLogger(__name__)

NAME = "quotaprofile"
#: who the Events name as their source (upstream's recorder)
COMPONENT = "quotaprofile-controller"
REASON_CREATE_QUOTA_FAILED = "CreateQuotaFailed"
REASON_UPDATE_QUOTA_FAILED = "UpdateQuotaFailed"
#: every profile is reconciled again after this long
REQUEUE_S = 10.0
#: after a refused create or update
RETRY_REFUSED_S = 2.0
PROFILE_KIND = "ElasticQuotaProfile"

Obj = dict[str, Any]


def _generation(obj: Obj) -> object:
    return (obj.get("metadata") or {}).get("generation")


class QuotaProfileController:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.recorder = EventRecorder(ctx.client, COMPONENT, ctx.recorder.host)
        self.reactor = ctx.controller(NAME, self.reconcile, self.recorder)
        enqueue = self.reactor.enqueue
        self.profiles: Consumer[Obj] = ctx.factory.informer(res.ELASTIC_QUOTA_PROFILES).add_consumer(
            name="quotaprofile-profiles",
            on_add=lambda profile: enqueue(self._key(profile)),
            on_update=lambda old, new: (
                enqueue(self._key(new)) if _generation(old) != _generation(new) else None
            ),
        )
        self.nodes = ctx.factory.informer(res.NODES).add_consumer(node_record, name="quotaprofile-nodes")
        self.quotas: Consumer[Obj] = ctx.factory.informer(res.ELASTIC_QUOTAS).add_consumer(
            name="quotaprofile-quotas"
        )

    @staticmethod
    def _key(obj: Obj) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"

    def enqueue_all(self) -> None:
        self.reactor.enqueue_all(self.profiles.store.keys())

    async def run(self) -> None:
        await self.reactor.run()

    async def reconcile(self, key: str) -> Result | None:
        profile = self.profiles.store.get(key)
        if profile is None:
            return None
        namespace, _, name = key.partition("/")
        quota_tree_id = labels_of(profile).get(LABEL_QUOTA_TREE_ID) or ""
        if not quota_tree_id:
            quota_tree_id = tree_id(namespace, name)
            await self._label(profile, namespace, name, quota_tree_id)
        spec = profile.get("spec") or {}
        selector = spec.get("nodeSelector")
        try:
            validate_label_selector(selector)
        except SelectorError as exc:
            raise PermanentError(
                f"ElasticQuotaProfile {key}: invalid nodeSelector: {exc}",
                reason="InvalidNodeSelector",
                involved=profile,
                kind=PROFILE_KIND,
            ) from None
        nodes: list[NodeRecord] = [
            node for node in self.nodes.store.values() if label_selector_matches(selector, node.labels)
        ]
        desired = profile_quota(profile, quota_tree_id, nodes)
        quota_name = str(spec.get("quotaName") or "")
        current = self.quotas.store.get(f"{namespace}/{quota_name}")
        if current is None:
            return await self._create(profile, desired.new_quota(namespace, quota_name))
        updated = desired.updated(current)
        if updated is not None:
            return await self._update(profile, updated)
        return Result(requeue_after=REQUEUE_S)

    async def _label(self, profile: Obj, namespace: str, name: str, quota_tree_id: str) -> None:
        """Put the tree id on the profile, on the version the cache holds."""
        metadata: Obj = {"labels": {LABEL_QUOTA_TREE_ID: quota_tree_id}}
        version = (profile.get("metadata") or {}).get("resourceVersion")
        if version:
            metadata["resourceVersion"] = version
        try:
            await self.ctx.client.patch(
                res.ELASTIC_QUOTA_PROFILES,
                name,
                {"metadata": metadata},
                namespace,
                patch_type=PatchType.MERGE,
                field_manager=FIELD_MANAGER,
            )
        except (ConflictError, NotFoundError) as exc:
            raise TemporaryError(f"ElasticQuotaProfile {namespace}/{name}: {exc.message}") from exc
        log.info("quotaprofile: ElasticQuotaProfile %s/%s gets tree id %s", namespace, name, quota_tree_id)

    async def _create(self, profile: Obj, quota: Obj) -> Result:
        meta = quota["metadata"]
        try:
            await self.ctx.client.create(res.ELASTIC_QUOTAS, quota, field_manager=FIELD_MANAGER)
        except AlreadyExistsError:
            raise TemporaryError(
                f"ElasticQuota {meta['namespace']}/{meta['name']} exists but is not in the cache yet"
            ) from None
        except ApiError as exc:
            return await self._refused(profile, REASON_CREATE_QUOTA_FAILED, "create", exc)
        log.info("quotaprofile: created ElasticQuota %s/%s", meta["namespace"], meta["name"])
        return Result(requeue_after=REQUEUE_S)

    async def _update(self, profile: Obj, quota: Obj) -> Result:
        meta = quota["metadata"]
        try:
            await self.ctx.client.replace(res.ELASTIC_QUOTAS, quota, field_manager=FIELD_MANAGER)
        except (ConflictError, NotFoundError) as exc:
            raise TemporaryError(f"ElasticQuota {meta['namespace']}/{meta['name']}: {exc.message}") from exc
        except ApiError as exc:
            return await self._refused(profile, REASON_UPDATE_QUOTA_FAILED, "update", exc)
        log.info("quotaprofile: updated ElasticQuota %s/%s", meta["namespace"], meta["name"])
        return Result(requeue_after=REQUEUE_S)

    async def _refused(self, profile: Obj, reason: str, verb: str, error: ApiError) -> Result:
        message = f"failed to {verb} quota, err: {error.message or error}"
        log.error("quotaprofile: profile %s: %s", self._key(profile), message)
        await self.recorder.record(profile, WARNING, reason, message, kind=PROFILE_KIND)
        return Result(requeue_after=RETRY_REFUSED_S)
