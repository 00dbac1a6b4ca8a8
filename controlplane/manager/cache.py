"""The running manager's cluster view: informer caches behind the webhooks' ClusterReader.

Only the collections the enabled webhooks read are watched:

* pod mutating / reservation mutating: Namespaces, PriorityClasses,
  ClusterColocationProfiles (and ElasticQuotaProfiles with ``MultiQuotaTree``);
* pod validating and both quota webhooks: ElasticQuotas, fed into the
  :class:`~controlplane.manager.webhooks.elasticquota.topology.QuotaTopology`;
* ConfigMap validating: Nodes; node validating and the enhanced pod validator: the
  ConfigMaps of the configuration namespace.

A Namespace or PriorityClass the cache has not seen yet (created a moment before the
pod) is fetched from the apiserver instead of being treated as missing. Pods are never
cached here: the quota webhooks need them only for rare checks (deleting a quota,
turning a quota into a parent) and list them with a label selector.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.manager.webhooks.context import ClusterError
from controlplane.manager.webhooks.elasticquota.topology import QuotaTopology
from koordinator.api.features import FeatureGates
from koordinator.api.selectors import label_selector
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import ApiConnectionError, ApiError, NotFoundError
from koordinator.kube.informer import Consumer, InformerFactory, Tombstone
from koordinator.kube.resources import (
    CLUSTER_COLOCATION_PROFILES,
    ELASTIC_QUOTA_PROFILES,
    ELASTIC_QUOTAS,
    Resource,
)

__all__ = ["InformerCluster"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class InformerCluster:
    """ClusterReader over informer caches, registered on a shared :class:`InformerFactory`."""

    def __init__(
        self,
        client: ApiClient,
        factory: InformerFactory,
        gates: FeatureGates,
        topology: QuotaTopology,
        *,
        config_namespace: str,
        watch: bool = True,
    ) -> None:
        """``watch=False`` registers no informer (no webhook is served): every read goes to the API."""
        self.client = client
        self.topology = topology
        self.config_namespace = config_namespace
        self._namespaces: Consumer[Obj] | None = None
        self._priority_classes: Consumer[Obj] | None = None
        self._profiles: Consumer[Obj] | None = None
        self._quota_profiles: Consumer[Obj] | None = None
        self._nodes: Consumer[Obj] | None = None
        self._config_maps: Consumer[Obj] | None = None
        if watch:
            self._watch(factory, gates)

    def _watch(self, factory: InformerFactory, gates: FeatureGates) -> None:
        topology, config_namespace = self.topology, self.config_namespace
        pod_mutating = gates.enabled("PodMutatingWebhook")
        reservation = gates.enabled("ReservationMutatingWebhook")
        quotas = any(
            gates.enabled(g)
            for g in ("PodValidatingWebhook", "ElasticMutatingWebhook", "ElasticValidatingWebhook")
        ) or (pod_mutating and gates.enabled("MultiQuotaTree"))
        if pod_mutating:
            self._namespaces = factory.informer(res.NAMESPACES).add_consumer(name="webhook-namespaces")
        if pod_mutating or reservation:
            self._priority_classes = factory.informer(res.PRIORITY_CLASSES).add_consumer(
                name="webhook-priorityclasses"
            )
            self._profiles = factory.informer(CLUSTER_COLOCATION_PROFILES).add_consumer(
                name="webhook-profiles"
            )
        if pod_mutating and gates.enabled("MultiQuotaTree"):
            self._quota_profiles = factory.informer(ELASTIC_QUOTA_PROFILES).add_consumer(
                name="webhook-quotaprofiles"
            )
        if quotas:
            factory.informer(ELASTIC_QUOTAS).add_consumer(
                name="webhook-quota-topology",
                on_add=topology.upsert,
                on_update=lambda _old, new: topology.upsert(new),
                on_delete=self._quota_deleted,
            )
        if gates.enabled("ConfigMapValidatingWebhook"):
            self._nodes = factory.informer(res.NODES).add_consumer(name="webhook-nodes")
        if gates.enabled("NodeValidatingWebhook") or (
            gates.enabled("PodValidatingWebhook") and gates.enabled("EnablePodEnhancedValidator")
        ):
            self._config_maps = factory.informer(res.CONFIG_MAPS, namespace=config_namespace).add_consumer(
                name="webhook-configmaps"
            )

    def _quota_deleted(self, obj: Obj | Tombstone[Obj]) -> None:
        if isinstance(obj, Tombstone):
            name = obj.key.rpartition("/")[2]
        else:
            name = str((obj.get("metadata") or {}).get("name") or "")
        if name:
            self.topology.remove(name)

    async def _get(self, consumer: Consumer[Obj] | None, resource: Resource, name: str) -> Obj | None:
        if consumer is not None:
            cached = consumer.store.get(name)
            if cached is not None:
                return cached
        try:
            return await self.client.get(resource, name)
        except NotFoundError:
            return None
        except (ApiError, ApiConnectionError) as exc:
            raise ClusterError(f"cannot read {resource.kind} {name}: {exc}") from exc

    async def namespace(self, name: str) -> Obj | None:
        return await self._get(self._namespaces, res.NAMESPACES, name)

    async def priority_class(self, name: str) -> Obj | None:
        return await self._get(self._priority_classes, res.PRIORITY_CLASSES, name)

    def colocation_profiles(self) -> Sequence[Obj]:
        return self._profiles.store.values() if self._profiles is not None else []

    def elastic_quota_profiles(self) -> Sequence[Obj]:
        return self._quota_profiles.store.values() if self._quota_profiles is not None else []

    def nodes(self) -> Sequence[Obj]:
        return self._nodes.store.values() if self._nodes is not None else []

    def config_map(self, namespace: str, name: str) -> Obj | None:
        if self._config_maps is None or namespace != self.config_namespace:
            return None
        return self._config_maps.store.get(f"{namespace}/{name}")

    async def pods(self, namespace: str | None = None, labels: Mapping[str, str] | None = None) -> list[Obj]:
        try:
            listed = await self.client.list_all(res.PODS, namespace, label_selector=label_selector(labels))
        except (ApiError, ApiConnectionError) as exc:
            raise ClusterError(f"cannot list pods: {exc}") from exc
        items = listed.get("items") or []
        return [item for item in items if isinstance(item, dict)]

    async def pod(self, namespace: str, name: str) -> Obj | None:
        try:
            return await self.client.get(res.PODS, name, namespace)
        except NotFoundError:
            return None
        except (ApiError, ApiConnectionError) as exc:
            raise ClusterError(f"cannot read pod {namespace}/{name}: {exc}") from exc
