"""The colocationprofile controller (upstream ``pkg/controller/colocationprofile``, gate
``ColocationProfileController``): profiles applied to pods that already exist.

The pod webhook applies ClusterColocationProfiles when a pod is created; this controller
applies them again to pods that are still **Pending and unscheduled** (no
``spec.nodeName``), for the profiles labelled
``config.koordinator.sh/controller-managed=true`` -- or every profile with
``--colocation-profile-reconcile-by-default``. Each profile is reconciled on every change
and every ``--colocation-profile-reconcile-interval`` (30 s).

For each such pod the selected profile passes the probability rule, then a per pod and
profile cache (an update is not repeated within ``--colocation-profile-force-update-pod-duration``,
5 min) and a token bucket over all pod updates (``--colocation-profile-update-pod-qps`` 10,
burst 100). A rate-limited pod waits for the next round.

What is applied to an existing pod, as upstream: ``labels``, ``annotations``,
``labelKeysMapping``, ``annotationKeysMapping``, ``qosClass`` and ``koordinatorPriority``
(labels), and the ``patch``. Not ``schedulerName``, ``priorityClassName`` (fields the
apiserver does not let change on an existing pod) and not ``labelSuffixes`` (appending
again on every round would grow the label), nor the batch/mid resource replacement.

Deliberate differences from upstream, each covered by a test:

* only the pod's labels and annotations are written (a JSON merge patch of
  ``metadata.labels``/``metadata.annotations``): a profile ``patch`` that changes the pod
  spec is applied on admission only, because sending spec changes of a created pod makes
  the apiserver refuse the whole patch, labels included;
* upstream ignores ``namespaceSelector`` here (left for later there), which applies a profile to pending
  pods of namespaces it does not select; here a profile matches an existing pod exactly as
  it matches a new one in the webhook.
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.manager.controllers.colocationprofile.settings import (
    ColocationProfileSettings,
    ProfileRules,
)
from controlplane.manager.controllers.context import FIELD_MANAGER, ControllerContext
from controlplane.reactor import Result
from koordinator.api.extension.annotations import labels_of
from koordinator.api.extension.colocation import is_controller_managed
from koordinator.kube import resources as res
from koordinator.kube.client import PatchType
from koordinator.kube.errors import ApiError
from koordinator.kube.informer import Consumer
from koordinator.kube.ratelimit import TokenBucket

__all__ = ["NAME", "ColocationProfileController", "Summary", "metadata_patch"]

log = logging.getLogger(__name__)

NAME = "colocationprofile"
_UNSCHEDULED = "unscheduled"

Obj = dict[str, Any]


def _unscheduled(pod: Obj) -> list[str]:
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    return ["pending"] if not spec.get("nodeName") and phase == "Pending" else []


def metadata_patch(before: Mapping[str, Any], after: Mapping[str, Any]) -> Obj | None:
    """A JSON merge patch taking ``before``'s labels and annotations to ``after``'s; None if equal."""
    patch: Obj = {}
    for key in ("labels", "annotations"):
        old = (before.get("metadata") or {}).get(key) or {}
        new = (after.get("metadata") or {}).get(key) or {}
        changes: dict[str, str | None] = {k: v for k, v in new.items() if old.get(k) != v}
        changes.update({k: None for k in old if k not in new})
        if changes:
            patch[key] = changes
    return {"metadata": patch} if patch else None


@dataclass
class Summary:
    """One round over a profile's pods, logged at its end (upstream's ReconcileSummary)."""

    profile: str
    desired: int = 0
    succeeded: int = 0
    changed: int = 0
    rate_limited: int = 0
    skipped: int = 0
    cached: int = 0


class ColocationProfileController:
    def __init__(self, ctx: ControllerContext) -> None:
        if ctx.profile_rules is None:
            raise ValueError(
                "the colocationprofile controller needs the profile rules (ControllerSettings.profile_rules)"
            )
        self.ctx = ctx
        self.rules: ProfileRules = ctx.profile_rules
        self.settings: ColocationProfileSettings = ctx.colocation_profile
        self.reactor = ctx.controller(NAME, self.reconcile)
        self.limiter = TokenBucket(
            self.settings.update_pod_qps, self.settings.update_pod_burst, ctx.clock.monotonic
        )
        #: "profile/pod uid" -> monotonic time until which that pod is not updated for that profile again
        self.updated: dict[str, float] = {}
        self.rand_intn = random.randrange
        enqueue = self.reactor.enqueue
        self.profiles: Consumer[Obj] = ctx.factory.informer(res.CLUSTER_COLOCATION_PROFILES).add_consumer(
            name="colocationprofile-profiles",
            on_add=lambda profile: enqueue(self._key(profile)),
            on_update=lambda old, new: enqueue(self._key(new)),
        )
        self.pods: Consumer[Obj] = ctx.factory.informer(res.PODS).add_consumer(
            name="colocationprofile-pods", indexers={_UNSCHEDULED: _unscheduled}
        )
        self.namespaces: Consumer[Obj] = ctx.factory.informer(res.NAMESPACES).add_consumer(
            name="colocationprofile-namespaces"
        )

    @staticmethod
    def _key(obj: Obj) -> str:
        return str((obj.get("metadata") or {}).get("name") or "")

    def enqueue_all(self) -> None:
        self.reactor.enqueue_all(self.profiles.store.keys())

    async def run(self) -> None:
        await self.reactor.run()

    async def reconcile(self, key: str) -> Result | None:
        profile = self.profiles.store.get(key)
        if profile is None or (profile.get("metadata") or {}).get("deletionTimestamp"):
            return None
        if not self.settings.reconcile_by_default and not is_controller_managed(profile):
            return None
        interval = Result(requeue_after=self.settings.reconcile_interval_s)
        if (profile.get("spec") or {}).get("selector") is None:
            # upstream: a profile without a pod selector selects no existing pod
            return interval
        self._expire()
        summary = Summary(key)
        for pod in self.pods.store.by_index(_UNSCHEDULED, "pending"):
            await self._pod(profile, pod, summary)
        log.log(
            logging.INFO if summary.changed else logging.DEBUG,
            "colocationprofile: profile %s: %s",
            key,
            summary,
        )
        return interval

    async def _pod(self, profile: Obj, pod: Obj, summary: Summary) -> None:
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        found = self.namespaces.store.get(namespace)
        warnings: list[str] = []
        if not await self.rules.matches(profile, labels_of(pod), labels_of(found) if found else {}, warnings):
            for warning in warnings:
                log.warning("colocationprofile: %s", warning)
            return
        name = f"{namespace}/{meta.get('name')}"
        profile_name = self._key(profile)
        try:
            if self.rules.should_skip(profile, self.rand_intn):
                summary.skipped += 1
                return
        except (ValueError, RuntimeError) as exc:  # an invalid probability (the webhook's ProfileError)
            log.error("colocationprofile: profile %s: %s", profile_name, exc)
            return
        cache_key = f"{profile_name}/{meta.get('uid')}"
        if cache_key in self.updated:
            summary.cached += 1
            return
        summary.desired += 1
        if not self.limiter.try_acquire():
            summary.rate_limited += 1
            return
        try:
            modified = await self.rules.apply(copy.deepcopy(pod), profile)
        except Exception as exc:  # a profile error must not stop the round for the other pods
            log.error(
                "colocationprofile: profile %s cannot be applied to pod %s: %s", profile_name, name, exc
            )
            return
        patch = metadata_patch(pod, modified)
        summary.succeeded += 1
        if patch is None:
            return
        try:
            await self.ctx.client.patch(
                res.PODS,
                str(meta.get("name") or ""),
                patch,
                namespace,
                patch_type=PatchType.MERGE,
                field_manager=FIELD_MANAGER,
            )
        except ApiError as exc:
            summary.succeeded -= 1
            log.error(
                "colocationprofile: pod %s not patched for profile %s: %s",
                name,
                profile_name,
                exc.message or exc,
            )
            return
        log.info("colocationprofile: pod %s updated by profile %s", name, profile_name)
        summary.changed += 1
        self.updated[cache_key] = self.ctx.clock.monotonic() + self.settings.force_update_pod_s

    def _expire(self) -> None:
        now = self.ctx.clock.monotonic()
        for key in [k for k, until in self.updated.items() if until <= now]:
            del self.updated[key]
