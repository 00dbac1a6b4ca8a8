"""The colocationprofile controller (upstream ``pkg/controller/colocationprofile``, gate
``ColocationProfileController``): profiles applied to pods that already exist.

The pod webhook applies ClusterColocationProfiles when a pod is created; this controller
applies them again to pods that are still **Pending and unscheduled** (no
``spec.nodeName``), for the profiles labelled
``config.koordinator.sh/controller-managed=true`` -- or every profile with
``--colocation-profile-reconcile-by-default``. Each profile is reconciled on every change
and every ``--colocation-profile-reconcile-interval`` (30 s).

For each such pod the selected profile passes the probability rule, then a per pod and
profile cache (a pod is not patched for a profile again within
``--colocation-profile-force-update-pod-duration``, 5 min, whether the patch was applied or
refused) and a token bucket over all pod updates (``--colocation-profile-update-pod-qps``
10, burst 100; a pod that needs no change takes no token). A rate-limited pod, or one whose
patch failed for a reason that may pass (429, 5xx), waits for the next round.

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
* the labels the pod validating webhook treats as immutable on UPDATE are applied on
  admission only: a change of the raw QoS class (``koordinator.sh/qosClass``, so
  ``qosClass``), of the raw priority class (``koordinator.sh/priority-class``), of
  ``koordinator.sh/priority`` (``koordinatorPriority``; sent when
  ``ColocationProfileSkipValidatingPriority`` lets it change) or of
  ``quota.scheduling.koordinator.sh/preemptible`` is left out of the patch, so the other
  labels and annotations apply. Upstream's controller sends them and the webhook refuses
  the whole patch (a ``BE`` profile also trips "BE with priority class none"), on every
  round;
* a patch the apiserver refuses (a 4xx other than 408, 409 and 429, e.g. a webhook's denial) is
  logged once and not sent again within the force-update period; upstream retries it
  every round, each time taking a token of the bucket;
* matching managed profiles are combined as the webhook combines them, in name order, the
  last one winning: a label or annotation that a later-named profile reconciled for the
  same pod sets differently is left to that profile. Upstream applies each profile on its
  own, so two profiles setting one key flip its value every force-update period;
* the probability rule draws once per profile and pending pod (the number is kept while
  the pod stays pending, and a change of ``probability`` is judged against it); upstream
  draws again every round, so a pending pod under a 10 % profile has ~88 % after 20
  rounds;
* upstream ignores ``namespaceSelector`` here (left for later there), which applies a profile to pending
  pods of namespaces it does not select; here a profile matches an existing pod exactly as
  it matches a new one in the webhook.
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Callable, Mapping, Sequence
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
from koordinator.api.extension.priority import (
    LABEL_POD_PRIORITY,
    LABEL_POD_PRIORITY_CLASS,
    get_pod_priority_class_raw,
)
from koordinator.api.extension.qos import LABEL_POD_QOS, get_pod_qos_class_raw
from koordinator.api.extension.quota import LABEL_PREEMPTIBLE
from koordinator.kube import resources as res
from koordinator.kube.client import PatchType
from koordinator.kube.errors import ApiError
from koordinator.kube.informer import Consumer, Tombstone
from koordinator.kube.ratelimit import TokenBucket

__all__ = ["NAME", "ColocationProfileController", "Summary", "metadata_patch", "refused_label_changes"]

log = logging.getLogger(__name__)

NAME = "colocationprofile"
_UNSCHEDULED = "unscheduled"
_SECTIONS = ("labels", "annotations")
#: the feature gate that lets ``koordinator.sh/priority`` change on an existing pod
_SKIP_VALIDATING_PRIORITY = "ColocationProfileSkipValidatingPriority"
#: stands for a key a map does not hold
_ABSENT = object()

Obj = dict[str, Any]


def _unscheduled(pod: Obj) -> list[str]:
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    return ["pending"] if not spec.get("nodeName") and phase == "Pending" else []


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get(key) or {}


def metadata_patch(before: Mapping[str, Any], after: Mapping[str, Any]) -> Obj | None:
    """A JSON merge patch taking ``before``'s labels and annotations to ``after``'s; None if equal."""
    patch: Obj = {}
    for key in _SECTIONS:
        old = _section(before, key)
        new = _section(after, key)
        changes: dict[str, str | None] = {k: v for k, v in new.items() if old.get(k) != v}
        changes.update({k: None for k in old if k not in new})
        if changes:
            patch[key] = changes
    return {"metadata": patch} if patch else None


def refused_label_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], *, check_priority_label: bool
) -> set[str]:
    """The labels whose change from ``old`` to ``new`` the pod validating webhook refuses on UPDATE.

    Its rules (``validate_colocation`` and the ElasticQuota pod check): the raw QoS class
    and the raw priority class may not change (``new`` keeps ``old``'s spec, so only the
    ``koordinator.sh/priority-class`` label can change the latter), nor
    ``koordinator.sh/priority`` unless ``check_priority_label`` is off, nor
    ``quota.scheduling.koordinator.sh/preemptible``.
    """
    refused: set[str] = set()
    if get_pod_qos_class_raw(new) is not get_pod_qos_class_raw(old):
        refused.add(LABEL_POD_QOS)
    if get_pod_priority_class_raw(new) is not get_pod_priority_class_raw(old):
        refused.add(LABEL_POD_PRIORITY_CLASS)
    old_labels, new_labels = labels_of(old), labels_of(new)
    keys = (LABEL_POD_PRIORITY, LABEL_PREEMPTIBLE) if check_priority_label else (LABEL_PREEMPTIBLE,)
    refused.update(key for key in keys if old_labels.get(key, "") != new_labels.get(key, ""))
    return refused


def _restore(values: dict[str, str], key: str, old: Mapping[str, str]) -> None:
    if key in old:
        values[key] = old[key]
    else:
        values.pop(key, None)


def _leave_to_later(pod: Obj, mine: Obj, last: Obj) -> Obj:
    """``pod`` with the label and annotation changes of ``mine`` that ``last`` keeps.

    ``mine`` is the pod with one profile applied, ``last`` is ``mine`` with the later-named
    profiles applied too: a change that ``last`` does not keep is a later profile's to make.
    """
    meta = dict(pod.get("metadata") or {})
    for key in _SECTIONS:
        old, new, final = _section(pod, key), _section(mine, key), _section(last, key)
        values = dict(new)
        for name in set(old) | set(new):
            wanted = new.get(name, _ABSENT)
            if old.get(name, _ABSENT) != wanted and final.get(name, _ABSENT) != wanted:
                _restore(values, name, old)
        if values or key in meta:
            meta[key] = values
    return {**pod, "metadata": meta}


def _refused(exc: ApiError) -> bool:
    """Whether the apiserver refused the request itself (sending it again gets the same answer)."""
    return 400 <= exc.code < 500 and exc.code not in (408, 409, 429)


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
    failed: int = 0


class ColocationProfileController:
    def __init__(self, ctx: ControllerContext) -> None:
        if ctx.profile_rules is None:
            raise ValueError(
                "the colocationprofile controller needs the profile rules (ControllerSettings.profile_rules)"
            )
        self.ctx = ctx
        self.rules: ProfileRules = ctx.profile_rules
        self.settings: ColocationProfileSettings = ctx.colocation_profile
        self.check_priority_label = not ctx.gates.enabled(_SKIP_VALIDATING_PRIORITY)
        self.reactor = ctx.controller(NAME, self.reconcile)
        self.limiter = TokenBucket(
            self.settings.update_pod_qps, self.settings.update_pod_burst, ctx.clock.monotonic
        )
        #: "profile/pod uid" -> monotonic time until which that pod is not patched for that
        #: profile again (after a patch that was applied or refused)
        self.updated: dict[str, float] = {}
        #: (profile, pod uid) -> the probability draw kept while the pod is pending
        self.draws: dict[tuple[str, str], int] = {}
        self.rand_intn: Callable[[int], int] = random.randrange
        enqueue = self.reactor.enqueue
        self.profiles: Consumer[Obj] = ctx.factory.informer(res.CLUSTER_COLOCATION_PROFILES).add_consumer(
            name="colocationprofile-profiles",
            on_add=lambda profile: enqueue(self._key(profile)),
            on_update=lambda old, new: enqueue(self._key(new)),
            # a deleted profile's round forgets its draws
            on_delete=lambda profile: enqueue(
                profile.key if isinstance(profile, Tombstone) else self._key(profile)
            ),
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

    def _managed(self, profile: Obj) -> bool:
        """Whether this controller applies ``profile`` (a selector aside)."""
        if (profile.get("metadata") or {}).get("deletionTimestamp"):
            return False
        return self.settings.reconcile_by_default or is_controller_managed(profile)

    def _later(self, name: str) -> list[Obj]:
        """The profiles named after ``name`` that this controller applies to existing pods, by name."""
        later = [
            profile
            for key, profile in self.profiles.store.items()
            if key > name
            and self._managed(profile)
            and (profile.get("spec") or {}).get("selector") is not None
        ]
        later.sort(key=self._key)
        return later

    async def reconcile(self, key: str) -> Result | None:
        pending = self.pods.store.by_index(_UNSCHEDULED, "pending")
        self._expire()
        self._forget(pending)
        profile = self.profiles.store.get(key)
        if profile is None or not self._managed(profile):
            return None
        interval = Result(requeue_after=self.settings.reconcile_interval_s)
        if (profile.get("spec") or {}).get("selector") is None:
            # upstream: a profile without a pod selector selects no existing pod
            return interval
        summary = Summary(key)
        later = self._later(key)
        for pod in pending:
            await self._pod(profile, later, pod, summary)
        log.log(
            logging.INFO if summary.changed or summary.failed else logging.DEBUG,
            "colocationprofile: profile %s: %s",
            key,
            summary,
        )
        return interval

    def _skips(self, profile: Obj, uid: str) -> bool:
        """The probability rule, on the draw kept for the profile and pod (drawn on first use)."""
        if not uid:
            return self.rules.should_skip(profile, self.rand_intn)
        key = (self._key(profile), uid)

        def kept(n: int) -> int:
            drawn = self.draws.get(key)
            if drawn is None:
                drawn = self.draws[key] = self.rand_intn(n)
            return drawn

        return self.rules.should_skip(profile, kept)

    async def _applies(self, profile: Obj, pod: Obj, namespace_labels: Mapping[str, str]) -> bool:
        """Whether a later profile takes part for ``pod`` (its own round logs its problems)."""
        if not await self.rules.matches(profile, labels_of(pod), namespace_labels, []):
            return False
        try:
            return not self._skips(profile, str((pod.get("metadata") or {}).get("uid") or ""))
        except (ValueError, RuntimeError):
            return False

    async def _target(
        self, profile: Obj, later: Sequence[Obj], pod: Obj, namespace_labels: Mapping[str, str]
    ) -> Obj:
        """The pod as this profile's patch should leave it: its labels and annotations, less
        what a later-named profile sets and what the validating webhook refuses to change."""
        mine = await self.rules.apply(copy.deepcopy(pod), profile)
        if metadata_patch(pod, mine) is None:
            return pod
        last = mine
        for other in later:
            if not await self._applies(other, pod, namespace_labels):
                continue
            try:
                last = await self.rules.apply(copy.deepcopy(last), other)
            except Exception:  # a broken profile takes no part; its own round logs it
                continue
        target = _leave_to_later(pod, mine, last)
        refused = refused_label_changes(pod, target, check_priority_label=self.check_priority_label)
        if refused:
            labels = dict(_section(target, "labels"))
            for key in refused:
                _restore(labels, key, labels_of(pod))
            target["metadata"] = {**target["metadata"], "labels": labels}
        return target

    async def _pod(self, profile: Obj, later: Sequence[Obj], pod: Obj, summary: Summary) -> None:
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        found = self.namespaces.store.get(namespace)
        namespace_labels = labels_of(found) if found else {}
        warnings: list[str] = []
        if not await self.rules.matches(profile, labels_of(pod), namespace_labels, warnings):
            for warning in warnings:
                log.warning("colocationprofile: %s", warning)
            return
        name = f"{namespace}/{meta.get('name')}"
        profile_name = self._key(profile)
        uid = str(meta.get("uid") or "")
        try:
            if self._skips(profile, uid):
                summary.skipped += 1
                return
        except (ValueError, RuntimeError) as exc:  # an invalid probability (the webhook's ProfileError)
            log.error("colocationprofile: profile %s: %s", profile_name, exc)
            return
        cache_key = f"{profile_name}/{uid}"
        if cache_key in self.updated:
            summary.cached += 1
            return
        summary.desired += 1
        try:
            target = await self._target(profile, later, pod, namespace_labels)
        except Exception as exc:  # a profile error must not stop the round for the other pods
            log.error(
                "colocationprofile: profile %s cannot be applied to pod %s: %s", profile_name, name, exc
            )
            return
        patch = metadata_patch(pod, target)
        if patch is None:
            summary.succeeded += 1
            return
        if not self.limiter.try_acquire():
            summary.rate_limited += 1
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
            summary.failed += 1
            if not _refused(exc):
                log.warning(
                    "colocationprofile: pod %s not patched for profile %s, trying again next round: %s",
                    name,
                    profile_name,
                    exc,
                )
                return
            self._hold(cache_key)
            log.error(
                "colocationprofile: pod %s not patched for profile %s (not tried again for %gs): %s",
                name,
                profile_name,
                self.settings.force_update_pod_s,
                exc,
            )
            return
        log.info("colocationprofile: pod %s updated by profile %s", name, profile_name)
        summary.succeeded += 1
        summary.changed += 1
        self._hold(cache_key)

    def _hold(self, cache_key: str) -> None:
        self.updated[cache_key] = self.ctx.clock.monotonic() + self.settings.force_update_pod_s

    def _expire(self) -> None:
        now = self.ctx.clock.monotonic()
        for key in [k for k, until in self.updated.items() if until <= now]:
            del self.updated[key]

    def _forget(self, pending: Sequence[Obj]) -> None:
        """Drop the draws of pods no longer pending (or gone) and of profiles gone."""
        if not self.draws:
            return
        uids = {str((pod.get("metadata") or {}).get("uid") or "") for pod in pending}
        profiles = self.profiles.store
        for key in [k for k in self.draws if k[1] not in uids or k[0] not in profiles]:
            del self.draws[key]
