"""The recommendation controller: per-container resource recommendations for Recommendation objects.

Upstream Koordinator ships the ``analysis.koordinator.sh/v1alpha1`` Recommendation CRD
without a controller; this one fills its status. Reconcile of ``namespace/name``:

1. the Recommendation's state (:mod:`.state`) is taken from memory, or on the first
   reconcile after a start from its checkpoint ConfigMap -- a new controller instance
   continues where the last one stopped. A state is of one object (its uid) and one
   target: a Recommendation deleted and created again under the same name, or whose
   ``spec.target`` was edited, starts afresh;
2. the target (:mod:`.targets`) gives a pod selector; the target's pods that are not
   finished are grouped by node, and each node's NodeMetric report that was not sampled yet
   (``status.updateTime`` differs from the one remembered) feeds the pods' usage into the
   histograms -- one sample per report. Containers the pods no longer have are dropped;
3. new samples are checkpointed at most once every ``checkpoint_interval_s`` (a
   Deployment spread over many nodes gets a report from each of them; a restart loses at
   most that much), retried on each reconcile until written; a ConfigMap of the
   checkpoint's name that no Recommendation of this name owns is someone else's: it is
   left alone, with a ``CheckpointConflict`` Warning Event. Then
   ``status.podStatus.containerStatuses`` gets, per container with at least
   ``min_samples`` samples, the p95 of CPU and the p99 of memory times
   ``1 + safety margin`` (CPU rounded up to milli-cores, memory to MiB), with
   ``status.updateTime`` and the ``RecommendationReady`` condition, whose message names
   the target's containers that have no recommendation yet.

Condition reasons: ``Recommended`` (True); ``TargetNotFound`` and ``InvalidTarget`` (the
workload is gone or unusable), ``NoPods`` (the target selects no running pod),
``NotEnoughSamples`` (False). Recommendations computed before the target vanished stay in
the status while the condition says why they no longer move. Each Recommendation comes
back every ``resync_s`` seconds, at once whenever the NodeMetric of a node that hosts its
pods changes, and when a pod of its namespace is bound to a node.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from controlplane.manager.controllers.context import FIELD_MANAGER, ControllerContext
from controlplane.manager.controllers.recommendation.histogram import HistogramError
from controlplane.manager.controllers.recommendation.settings import RecommendationSettings
from controlplane.manager.controllers.recommendation.state import (
    CHECKPOINT_KEY,
    RecommendationState,
    checkpoint_name,
    target_fingerprint,
)
from controlplane.manager.controllers.recommendation.targets import Target, TargetError, resolve
from controlplane.reactor import Result, TemporaryError
from koordinator.api.selectors import label_selector_matches
from koordinator.kube import resources as res
from koordinator.kube.client import PatchType
from koordinator.kube.errors import AlreadyExistsError, ApiError, ConflictError, NotFoundError
from koordinator.kube.events import WARNING
from koordinator.kube.informer import Consumer, Tombstone
from koordinator.kube.timeutil import format_time, parse_time

__all__ = [
    "CONDITION_READY",
    "NAME",
    "REASON_NOT_ENOUGH_SAMPLES",
    "REASON_NO_PODS",
    "REASON_RECOMMENDED",
    "RecommendationController",
]

log = logging.getLogger(__name__)

NAME = "recommendation"
KIND = "Recommendation"
API_VERSION = "analysis.koordinator.sh/v1alpha1"
CONDITION_READY = "RecommendationReady"
REASON_RECOMMENDED = "Recommended"
REASON_NO_PODS = "NoPods"
REASON_NOT_ENOUGH_SAMPLES = "NotEnoughSamples"
REASON_CHECKPOINT_INVALID = "InvalidCheckpoint"
REASON_CHECKPOINT_CONFLICT = "CheckpointConflict"
_FINISHED = ("Succeeded", "Failed")

Obj = dict[str, Any]


def _pod_record(pod: Obj) -> Obj:
    """What the controller keeps of a pod: identity, labels, node, phase, container requests."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return {
        "metadata": {
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "labels": meta.get("labels"),
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": [
                {"name": c.get("name"), "resources": {"requests": (c.get("resources") or {}).get("requests")}}
                for c in spec.get("containers") or ()
            ],
        },
        "phase": (pod.get("status") or {}).get("phase"),
    }


def _namespace_of(pod: Obj) -> list[str]:
    return [str(pod["metadata"].get("namespace") or "")]


def _is_checkpoint_of(config_map: Mapping[str, Any], name: str) -> bool:
    """Whether a Recommendation named ``name`` owns ``config_map`` (this one, or a deleted one
    of the same name whose checkpoint the garbage collector has not removed yet)."""
    owners = (config_map.get("metadata") or {}).get("ownerReferences") or ()
    return any(
        isinstance(o, dict)
        and o.get("kind") == KIND
        and str(o.get("apiVersion") or "").startswith("analysis.koordinator.sh/")
        and o.get("name") == name
        for o in owners
    )


def _node_of(pod: Obj) -> str:
    return str(pod["spec"].get("nodeName") or "")


def _container_names(pods: list[Obj]) -> set[str]:
    return {str(c["name"]) for p in pods for c in p["spec"]["containers"] if c.get("name")}


def _update_time(metric: Mapping[str, Any]) -> str:
    return str((metric.get("status") or {}).get("updateTime") or "")


class RecommendationController:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.settings: RecommendationSettings = ctx.recommendation
        self.reactor = ctx.controller(NAME, self.reconcile)
        self.states: dict[str, RecommendationState] = {}
        #: Recommendations whose samples are newer than their checkpoint ConfigMap
        self.unsaved: set[str] = set()
        #: key -> monotonic time of the last checkpoint written
        self.saved_at: dict[str, float] = {}
        #: key -> the nodes that hosted the target's pods at the last reconcile
        self.nodes: dict[str, set[str]] = {}
        enqueue = self.reactor.enqueue
        self.recommendations: Consumer[Obj] = ctx.factory.informer(res.RECOMMENDATIONS).add_consumer(
            name="recommendation-recommendations",
            on_add=lambda rec: enqueue(self._key(rec)),
            on_update=lambda old, new: enqueue(self._key(new)),
            # the reconcile of a missing object forgets its state
            on_delete=lambda rec: enqueue(rec.key if isinstance(rec, Tombstone) else self._key(rec)),
        )
        self.pods: Consumer[Obj] = ctx.factory.informer(res.PODS).add_consumer(
            _pod_record,
            name="recommendation-pods",
            indexers={"namespace": _namespace_of},
            on_add=lambda pod: self._pod_placed(pod) if _node_of(pod) else None,
            on_update=lambda old, new: self._pod_placed(new) if _node_of(old) != _node_of(new) else None,
        )
        self.node_metrics: Consumer[Obj] = ctx.factory.informer(res.NODE_METRICS).add_consumer(
            name="recommendation-nodemetrics",
            on_update=lambda old, new: (
                self._node_reported(str((new.get("metadata") or {}).get("name") or ""))
                if _update_time(old) != _update_time(new)
                else None
            ),
        )

    @staticmethod
    def _key(obj: Obj) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"

    def enqueue_all(self) -> None:
        self.reactor.enqueue_all(self.recommendations.store.keys())

    def _node_reported(self, node: str) -> None:
        """A node's NodeMetric has a new report: the Recommendations with pods there, and
        those not reconciled yet (their nodes are not known)."""
        keys = self.recommendations.store.keys()
        self.reactor.enqueue_all(key for key in keys if node in self.nodes.get(key, (node,)))

    def _pod_placed(self, pod: Obj) -> None:
        """A pod was bound to a node: the Recommendations of its namespace (one may select it,
        and its node's reports are sampled from now on)."""
        prefix, keys = f"{_namespace_of(pod)[0]}/", self.recommendations.store.keys()
        self.reactor.enqueue_all(key for key in keys if key.startswith(prefix))

    def _forget(self, key: str) -> None:
        self.states.pop(key, None)
        self.unsaved.discard(key)
        self.saved_at.pop(key, None)
        self.nodes.pop(key, None)

    async def run(self) -> None:
        await self.reactor.run()

    async def reconcile(self, key: str) -> Result | None:
        recommendation = self.recommendations.store.get(key)
        if recommendation is None:
            # the checkpoint ConfigMap is owned by the Recommendation: the garbage collector deletes it
            self._forget(key)
            return None
        uid = str((recommendation.get("metadata") or {}).get("uid") or "")
        state = self.states.get(key)
        if state is not None and state.uid != uid:
            # deleted and created again under this name: nothing of the old object carries over
            self._forget(key)
            state = None
        if state is None:
            state = await self._restore(recommendation)
            state.uid = uid
            self.states[key] = state
        target_of = target_fingerprint(recommendation)
        if state.target != target_of:
            if state.target:
                log.info("recommendation: %s: its target changed, starting afresh", key)
                state = self.states[key] = RecommendationState(self.settings.half_life_s, uid=uid)
                self.unsaved.add(key)
            state.target = target_of
        try:
            target = await resolve(self.ctx.client, recommendation)
        except TargetError as problem:
            await self._write_status(recommendation, state, "False", problem.reason, problem.message)
            return Result(requeue_after=self.settings.resync_s)
        pods = self._target_pods(target)
        self.nodes[key] = {_node_of(p) for p in pods if _node_of(p)}
        if self._sample(state, pods):
            self.unsaved.add(key)
        requeue = self.settings.resync_s
        if key in self.unsaved:
            # retried on every reconcile until written: a report is sampled once, so a failed
            # write would otherwise wait for the next report
            wait = self.saved_at.get(key, -math.inf) + self.settings.checkpoint_interval_s
            wait -= self.ctx.clock.monotonic()
            if wait > 0:
                requeue = min(requeue, wait)
            elif await self._checkpoint(recommendation, state):
                self.unsaved.discard(key)
                self.saved_at[key] = self.ctx.clock.monotonic()
        if not pods:
            await self._write_status(
                recommendation, state, "False", REASON_NO_PODS, f"{target.description} selects no running pod"
            )
        elif not state.recommended_names(self.settings.min_samples):
            await self._write_status(
                recommendation,
                state,
                "False",
                REASON_NOT_ENOUGH_SAMPLES,
                f"fewer than {self.settings.min_samples} NodeMetric samples of every container",
            )
        else:
            message = f"recommended from {len(pods)} pods"
            pending = sorted(_container_names(pods) - set(state.recommended_names(self.settings.min_samples)))
            if pending:
                message += (
                    f"; none yet for {', '.join(pending)} (fewer than {self.settings.min_samples} "
                    "samples, or no request of a resource beside containers with one: its share of "
                    "the pod's usage cannot be told)"
                )
            await self._write_status(recommendation, state, "True", REASON_RECOMMENDED, message)
        return Result(requeue_after=requeue)

    def _target_pods(self, target: Target) -> list[Obj]:
        return [
            pod
            for pod in self.pods.store.by_index("namespace", target.namespace)
            if pod.get("phase") not in _FINISHED
            and label_selector_matches(target.selector, pod["metadata"].get("labels") or {})
        ]

    def _sample(self, state: RecommendationState, pods: list[Obj]) -> bool:
        """Feed every NodeMetric report not sampled yet; whether anything was added."""
        by_node: dict[str, list[Obj]] = {}
        for pod in pods:
            node = _node_of(pod)
            if node:
                by_node.setdefault(node, []).append(pod)
        changed = bool(pods) and state.retain(_container_names(pods))
        for node, node_pods in by_node.items():
            metric = self.node_metrics.store.get(node)
            if metric is None:
                continue
            update_time = _update_time(metric)
            if not update_time or state.sampled.get(node) == update_time:
                continue
            try:
                at = parse_time(update_time)
            except ValueError:
                log.warning("recommendation: NodeMetric %s has an invalid updateTime %r", node, update_time)
                continue
            reported = {
                (str(m.get("namespace") or ""), str(m.get("name") or "")): m
                for m in (metric.get("status") or {}).get("podsMetric") or ()
                if isinstance(m, dict)
            }
            for pod in node_pods:
                meta = pod["metadata"]
                found = reported.get((str(meta.get("namespace") or ""), str(meta.get("name") or "")))
                if found is not None:
                    state.add_pod(pod, found, at)
            state.sampled[node] = update_time
            changed = True
        # forget nodes that host none of the target's pods any more (the map stays small)
        for node in [n for n in state.sampled if n not in by_node]:
            del state.sampled[node]
            changed = True
        return changed

    async def _restore(self, recommendation: Obj) -> RecommendationState:
        meta = recommendation.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        fresh = RecommendationState(self.settings.half_life_s)
        try:
            found = await self.ctx.client.get(res.CONFIG_MAPS, checkpoint_name(name), namespace)
        except NotFoundError:
            return fresh
        owners = (found.get("metadata") or {}).get("ownerReferences") or ()
        if not any(o.get("uid") == meta.get("uid") for o in owners if isinstance(o, dict)):
            # left by a deleted Recommendation of the same name, not collected yet
            log.info(
                "recommendation: %s/%s: checkpoint belongs to an earlier object, starting afresh",
                namespace,
                name,
            )
            return fresh
        text = (found.get("data") or {}).get(CHECKPOINT_KEY) or ""
        try:
            state = RecommendationState.from_checkpoint(text, self.settings.half_life_s)
        except HistogramError as exc:
            message = f"checkpoint {checkpoint_name(name)} cannot be restored, starting afresh: {exc}"
            log.warning("recommendation: %s/%s: %s", namespace, name, message)
            await self.ctx.recorder.record(
                recommendation, WARNING, REASON_CHECKPOINT_INVALID, message, kind=KIND
            )
            return fresh
        log.info("recommendation: %s/%s restored from its checkpoint", namespace, name)
        return state

    async def _checkpoint(self, recommendation: Obj, state: RecommendationState) -> bool:
        """Write the checkpoint ConfigMap; whether it was written."""
        meta = recommendation.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        config_map: Obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": checkpoint_name(name),
                "namespace": namespace,
                "ownerReferences": [
                    {
                        "apiVersion": API_VERSION,
                        "kind": KIND,
                        "name": name,
                        "uid": meta.get("uid"),
                        "controller": True,
                    }
                ],
            },
            "data": {CHECKPOINT_KEY: state.to_checkpoint()},
        }
        try:
            try:
                found = await self.ctx.client.get(res.CONFIG_MAPS, checkpoint_name(name), namespace)
            except NotFoundError:
                await self.ctx.client.create(
                    res.CONFIG_MAPS, config_map, namespace, field_manager=FIELD_MANAGER
                )
                return True
            if not _is_checkpoint_of(found, name):
                # someone else's ConfigMap: a merge patch would replace its owner references
                # with the Recommendation, and the garbage collector would delete it with it
                message = (
                    f"ConfigMap {namespace}/{checkpoint_name(name)} exists and is not owned by a "
                    f"Recommendation {name}: left as it is, no checkpoint written"
                )
                log.error("recommendation: %s/%s: %s", namespace, name, message)
                await self.ctx.recorder.record(
                    recommendation, WARNING, REASON_CHECKPOINT_CONFLICT, message, kind=KIND
                )
                return False
            # the resourceVersion makes the patch fail (and be retried) if the ConfigMap changed
            config_map["metadata"]["resourceVersion"] = (found.get("metadata") or {}).get("resourceVersion")
            await self.ctx.client.patch(
                res.CONFIG_MAPS,
                checkpoint_name(name),
                config_map,
                namespace,
                patch_type=PatchType.MERGE,
                field_manager=FIELD_MANAGER,
            )
            return True
        except (AlreadyExistsError, ConflictError, NotFoundError) as exc:
            raise TemporaryError(f"checkpoint of Recommendation {namespace}/{name}: {exc.message}") from exc
        except ApiError as exc:
            # the samples stay in memory; the next reconcile writes them again
            log.error(
                "recommendation: %s/%s: checkpoint not written: %s", namespace, name, exc.message or exc
            )
            return False

    async def _write_status(
        self, recommendation: Obj, state: RecommendationState, status: str, reason: str, message: str
    ) -> None:
        settings = self.settings
        current = recommendation.get("status") or {}
        statuses = state.recommend(
            settings.cpu_percentile, settings.memory_percentile, settings.safety_margin, settings.min_samples
        )
        if not statuses:
            # keep what was recommended before (e.g. the target was deleted): the condition says why
            statuses = list(((current.get("podStatus") or {}).get("containerStatuses")) or ())
        now = format_time(self.ctx.clock.time())
        previous = next(
            (
                c
                for c in current.get("conditions") or ()
                if isinstance(c, dict) and c.get("type") == CONDITION_READY
            ),
            None,
        )
        condition = {"type": CONDITION_READY, "status": status, "reason": reason, "message": message}
        unchanged_condition = previous is not None and all(previous.get(k) == v for k, v in condition.items())
        if unchanged_condition and statuses == (
            (current.get("podStatus") or {}).get("containerStatuses") or []
        ):
            return
        transition = (
            previous.get("lastTransitionTime") if previous and previous.get("status") == status else None
        )
        condition["lastTransitionTime"] = transition or now
        others = [
            c
            for c in current.get("conditions") or ()
            if isinstance(c, dict) and c.get("type") != CONDITION_READY
        ]
        body = {
            "status": {
                "podStatus": {"containerStatuses": statuses},
                "updateTime": now,
                "conditions": [*others, condition],
            }
        }
        meta = recommendation.get("metadata") or {}
        try:
            await self.ctx.client.patch(
                res.RECOMMENDATIONS,
                str(meta.get("name") or ""),
                body,
                str(meta.get("namespace") or ""),
                patch_type=PatchType.MERGE,
                subresource="status",
                field_manager=FIELD_MANAGER,
            )
        except NotFoundError:
            log.info("recommendation: %s deleted before its status was written", self._key(recommendation))
        except ConflictError as exc:
            raise TemporaryError(f"Recommendation {self._key(recommendation)}: {exc.message}") from exc
