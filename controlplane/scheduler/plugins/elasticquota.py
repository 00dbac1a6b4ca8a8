"""ElasticQuota: multi-tenant elastic quotas (Koordinator's ``plugins/elasticquota``), the
scheduler's side of :mod:`controlplane.scheduler.quota`.

The quota trees come from ElasticQuota objects (``scheduling.sigs.k8s.io/v1alpha1``) and
the pods they count from the plug-in's own consumer of the pod informer; the cluster's
total is the nodes' allocatable, followed from node adds, updates and deletes from the
start (as upstream's node event handler), not only once pods are scheduled. A pod:

* **PreFilter**: is refused everywhere when its quota's used plus its request passes the
  quota's runtime (``enableRuntimeQuota``; else its max), with upstream's "Insufficient
  quotas, ..." message; a non-preemptible pod also against the quota's min; with
  ``enableCheckParentQuota`` each ancestor too;
* **Reserve / Unreserve**: counts in its quota's used once assumed, and no more.

The controller (:meth:`ElasticQuota.controller`, on the leading scheduler) creates the
root, system and default quotas when they are missing, writes every quota's status
(runtime, request, used ... annotations and ``status.used``) each second when it changed,
and, with ``monitorAllQuotas``, evicts pods of quotas used past their runtime for longer
than ``delayEvictTime`` (overuse revoke, through the Eviction API).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping
from typing import Any

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.plugins.defaultpreemption import VictimRules
from controlplane.scheduler.plugins.interface import (
    CycleState,
    Handle,
    PreFilterResult,
    QueueNotifier,
    deleted_name,
)
from controlplane.scheduler.podinfo import POD_FIELD_SELECTOR, PodInfo
from controlplane.scheduler.queue import ClusterEvent
from controlplane.scheduler.quota import (
    Code,
    ElasticQuotaArgs,
    OveruseRevoker,
    QuotaForest,
    QuotaGates,
    QuotaPod,
    QuotaSpecError,
    builtin_quotas,
    can_preempt,
    elastic_quota_args,
    pre_filter,
    quota_pod,
    status_patch,
)
from controlplane.scheduler.quota.args import NAME as QUOTA_NAME
from koordinator.api.features import FeatureGates
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import to_json
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import AlreadyExistsError, KubeError, NotFoundError
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.informer.informer import Tombstone

log = logging.getLogger(__name__)

NAME = QUOTA_NAME
#: an ElasticQuota came, changed or went, or a quota's pod was deleted: room may have freed
QUOTA_CHANGE = ClusterEvent("ElasticQuota", "*")
STATUS_INTERVAL_S = 1.0
#: why a node is no preemption candidate when evicting its quota's pods is not enough
INSUFFICIENT_QUOTA = "Insufficient quotas"

Obj = Mapping[str, Any]
args = elastic_quota_args


class ElasticQuota:
    NAME = NAME

    def __init__(self, quota_args: ElasticQuotaArgs | None = None) -> None:
        self.args = quota_args or elastic_quota_args(None)
        self.gates = QuotaGates()
        self.forest = QuotaForest(self.args, self.gates)
        self.revoker = OveruseRevoker(self.forest, self.args)
        #: quota name -> its object (the status writer's input)
        self.quotas: dict[str, Obj] = {}
        #: pod key -> its quota record (the plug-in's own view of the pods)
        self.pods: dict[str, QuotaPod] = {}
        #: node -> its allocatable, summed into the cluster total the default tree shares
        self._allocatable: dict[str, Mapping[str, int]] = {}
        #: resource -> the sum over the nodes, and how many nodes list it
        self._totals: dict[str, int] = {}
        self._carriers: dict[str, int] = {}
        #: the nodes came or went since the sum was taken: count them all again
        self._rebuild = True
        #: the forest has not been given the current sum
        self._total_stale = True
        self._cluster: Cluster | None = None
        self._notifier = QueueNotifier(QUOTA_CHANGE)

    # --- wiring ----------------------------------------------------------------------------

    def use_feature_gates(self, gates: FeatureGates) -> None:
        """The process's gates (``MultiQuotaTree``, ``DisableDefaultQuota`` ...): read before
        any quota or pod arrives."""
        self.gates = QuotaGates.from_feature_gates(gates)
        self.forest = QuotaForest(self.args, self.gates)
        self.revoker = OveruseRevoker(self.forest, self.args)
        self._total_stale = True  # a new forest: it has no total yet

    def bind_handle(self, handle: Handle) -> None:
        self._notifier.handle = handle

    def attach(self, factory: InformerFactory, name: str) -> None:
        factory.informer(res.ELASTIC_QUOTAS).add_consumer(
            name=name,
            on_add=self.on_quota,
            on_update=lambda _, new: self.on_quota(new),
            on_delete=self.on_quota_deleted,
        )
        factory.informer(res.PODS, field_selector=POD_FIELD_SELECTOR).add_consumer(
            self._pod_record,
            refresh=self._pod_record,
            name=name,
            on_add=self.on_pod_record,
            on_update=lambda _, new: self.on_pod_record(new),
            on_delete=self.on_pod_record_deleted,
        )

    def _pod_record(self, obj: Obj, previous: QuotaPod | None = None) -> QuotaPod | None:
        try:
            return quota_pod(obj, ignore_overhead=self.gates.ignore_pod_overhead, previous=previous)
        except ValueError as err:
            log.warning("pod %s ignored by ElasticQuota: %s", (obj.get("metadata") or {}).get("name"), err)
            return None

    def take_object(self, obj: Obj) -> None:
        """An object ``simulate`` was given: ElasticQuotas, and every pod (bound or pending)."""
        if obj.get("kind") == "ElasticQuota":
            self.on_quota(obj)
        elif obj.get("kind") == "Pod":
            self.on_pod_record(self._pod_record(obj))

    def describe(self, pod: PodInfo) -> tuple[str, Any] | None:
        """``simulate``'s report of the pod's quota: its name, runtime and used."""
        record = self.pods.get(pod.key)
        ref = self.forest.resolve(record) if record is not None else None
        summary = self.forest.summary(ref.name) if ref is not None else None
        if summary is None:
            return None
        return (
            "quota",
            {"name": summary.name, "runtime": to_json(summary.runtime), "used": to_json(summary.used)},
        )

    def on_quota(self, quota: Obj) -> None:
        name = str((quota.get("metadata") or {}).get("name") or "")
        try:
            self.forest.upsert_quota(quota)
        except QuotaSpecError as err:
            log.warning("ElasticQuota %s ignored: %s", name, err)
            return
        self.quotas[name] = quota
        self._notifier.notify()

    def on_quota_deleted(self, quota: Obj | Tombstone[Obj]) -> None:
        name = deleted_name(quota)
        self.quotas.pop(name, None)
        self.forest.delete_quota(name)
        self._notifier.notify()

    def on_pod_record(self, pod: QuotaPod | None) -> None:
        if pod is None:
            return
        if pod.key in self.pods:
            self.forest.update_pod(pod)
        else:
            self.forest.add_pod(pod)
        self.pods[pod.key] = pod

    def on_pod_record_deleted(self, pod: QuotaPod | Tombstone[QuotaPod | None] | None) -> None:
        key = pod.key if isinstance(pod, (QuotaPod, Tombstone)) else None
        if key is not None and self.pods.pop(key, None) is not None:
            self.forest.remove_pod(key)
            self._notifier.notify()  # its quota's request and used went down

    # --- the cluster total -----------------------------------------------------------------
    #
    # Upstream's GroupQuotaManager follows node add/update/delete; here the plug-in follows
    # the scheduler's cluster from the moment the framework is built (bind_cluster), keeps
    # the sum of the nodes' allocatable up to date by difference on each node change, and
    # hands it to the forest before every PreFilter and every controller round. Before the
    # first PreFilter the status writer and the overuse revoker thus already judge against
    # the real total, not against each quota's min.

    def bind_cluster(self, cluster: Cluster) -> None:
        """Follow ``cluster``'s nodes (the framework calls this once it is built)."""
        if self._cluster is cluster:
            return
        self._cluster = cluster
        cluster.subscribe(self._node_changed)
        self._rebuild = True

    def _node_changed(self, node: str | None, pod: PodInfo | None = None, sign: int = 0) -> None:
        if pod is not None:
            return  # a pod placed or taken off: allocatable stays
        if node is None:
            self._rebuild = True  # nodes came or went: recounted at the next sync
            return
        cluster = self._cluster
        if cluster is None or self._rebuild:
            return
        info = cluster.nodes.get(node)
        current = info.allocatable if info is not None else None
        old = self._allocatable.get(node)
        if old is current:
            return
        if current is not None and old == current:
            self._allocatable[node] = current  # the same figures: keep the cheap identity check
            return
        if old is not None:
            self._count(old, -1)
        if current is None:
            self._allocatable.pop(node, None)
        else:
            self._allocatable[node] = current
            self._count(current, 1)
        self._total_stale = True

    def _count(self, allocatable: Mapping[str, int], sign: int) -> None:
        """Add (``sign`` 1) or take off one node's allocatable from the running total."""
        totals, carriers = self._totals, self._carriers
        for name, value in allocatable.items():
            totals[name] = totals.get(name, 0) + sign * value
            left = carriers.get(name, 0) + sign
            if left > 0:
                carriers[name] = left
            else:
                carriers.pop(name, None)
                totals.pop(name, None)

    def sync_total(self, cluster: Cluster | None = None) -> None:
        """Give the forest the nodes' allocatable total when nodes changed (``cluster``:
        follow it first, when the framework did not bind one)."""
        if cluster is not None:
            self.bind_cluster(cluster)
        cluster = self._cluster
        if cluster is None:
            return
        if self._rebuild:
            self._allocatable, self._totals, self._carriers = {}, {}, {}
            for name, info in cluster.nodes.items():
                self._allocatable[name] = info.allocatable
                self._count(info.allocatable, 1)
            self._rebuild = False
            self._total_stale = True
        if not self._total_stale:
            return
        self.forest.set_cluster_total(
            {
                n: Quantity.from_milli(v) if n == "cpu" else Quantity.from_int(v)
                for n, v in self._totals.items()
            }
        )
        self._total_stale = False

    # --- the points ------------------------------------------------------------------------

    def pre_filter(self, pod: PodInfo, cluster: Cluster) -> PreFilterResult | None:
        record = self.pods.get(pod.key)
        if record is None or pod.reservation:
            return None
        self.sync_total(cluster)
        check = pre_filter(self.forest, record, self.args)
        if check.ok:
            return None
        # over its quota: Unschedulable, so that preemption in the quota may make room
        return PreFilterResult(message=check.message, resolvable=check.code == Code.UNSCHEDULABLE)

    def victim_rules(self, pod: PodInfo) -> VictimRules | None:
        """Quota-scoped preemption for a quota-managed pod: only pods of its own quota, of
        lower priority and preemptible, may go (not the default quota's with
        ``disableDefaultQuotaPreemption``), and the pod must fit its quota once they are gone."""
        record = self.pods.get(pod.key)
        if record is None:
            return None
        check = pre_filter(self.forest, record, self.args)
        if check.state.skip:
            return None
        state = check.state

        def eligible(victim: PodInfo) -> bool:
            other = self.pods.get(victim.key)
            return other is not None and can_preempt(self.forest, record, other)

        def fits_without(victims: Collection[PodInfo]) -> bool:
            dry = state.clone()
            for victim in victims:
                other = self.pods.get(victim.key)
                if other is not None:
                    dry.remove_pod(other)
            return dry.fits(record)

        return VictimRules(eligible, fits_without, INSUFFICIENT_QUOTA)

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        record = self.pods.get(pod.key)
        if record is not None:
            self.forest.reserve(record)
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        record = self.pods.get(pod.key)
        if record is not None:
            self.forest.unreserve(record)

    # --- the controller --------------------------------------------------------------------

    async def ensure_builtin_quotas(self, client: ApiClient) -> None:
        """Create the root, system and default quotas that do not exist yet."""
        for quota in builtin_quotas(self.args):
            meta = quota["metadata"]
            try:
                await client.create(res.ELASTIC_QUOTAS, quota, meta["namespace"])
            except AlreadyExistsError:
                continue
            except KubeError as err:
                log.warning("ElasticQuota %s/%s not created: %s", meta["namespace"], meta["name"], err)

    def status_patches(self) -> dict[str, dict[str, Any]]:
        """Each quota whose written status differs from its figures, with the merge patch."""
        out = {}
        for name, quota in self.quotas.items():
            summary = self.forest.summary(name)
            if summary is None:
                continue
            patch = status_patch(quota, summary)
            if patch is not None:
                out[name] = patch
        return out

    async def controller(self, client: ApiClient) -> None:
        """Create the built-in quotas, then write statuses and revoke overuse (until cancelled)."""
        await self.ensure_builtin_quotas(client)
        last_revoke = 0.0
        while True:
            await asyncio.sleep(STATUS_INTERVAL_S)
            # the runtimes both below judge by follow the nodes even while no pod is scheduled
            self.sync_total()
            for name, patch in self.status_patches().items():
                namespace = str((self.quotas[name].get("metadata") or {}).get("namespace") or "")
                try:
                    await client.patch(res.ELASTIC_QUOTAS, name, patch, namespace)
                except NotFoundError:
                    continue
                except KubeError as err:
                    log.warning("ElasticQuota %s status not written: %s", name, err)
            now = time.monotonic()
            if self.revoker.enabled and now - last_revoke >= self.args.revoke_pod_interval:
                last_revoke = now
                for victim in self.revoker.tick(time.time()):
                    await self._evict(client, victim)

    async def _evict(self, client: ApiClient, pod: QuotaPod) -> None:
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        }
        try:
            await client.create_subresource(res.PODS, pod.name, "eviction", eviction, pod.namespace)
            log.info("evicted %s: its quota is used past its runtime", pod.key)
        except NotFoundError:
            return
        except KubeError as err:
            log.warning("evicting %s for quota overuse failed: %s", pod.key, err)
