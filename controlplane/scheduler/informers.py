"""The informers that feed the scheduler's view of the cluster, other than pods: nodes,
namespaces (InterPodAffinity's namespaceSelector), PodDisruptionBudgets (DefaultPreemption)
and storage (PersistentVolumes, claims, StorageClasses, CSINodes: the volume plug-ins).
Each keeps its compact record in the cluster and tells the queue the cluster event it is,
so that the unschedulable pods a plug-in registered for it are tried again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeSpec, node_spec
from controlplane.scheduler.pdbs import PDBRecord, pdb_record
from controlplane.scheduler.queue import (
    CSI_NODE_ADD,
    CSI_NODE_UPDATE,
    NODE_ADD,
    NODE_ALLOCATABLE,
    NODE_DELETE,
    NODE_LABEL,
    NODE_METRIC_CHANGE,
    NODE_TAINT,
    PV_ADD,
    PV_UPDATE,
    PVC_ADD,
    PVC_UPDATE,
    STORAGE_CLASS_ADD,
    STORAGE_CLASS_UPDATE,
    ClusterEvent,
    SchedulingQueue,
)
from controlplane.scheduler.volumes import (
    PVCRecord,
    csi_node_record,
    pv_record,
    pvc_record,
    storage_class_record,
)
from koordinator.kube import resources as res
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.informer.informer import Tombstone
from koordinator.nodemetrics import NodeMetricRecord, node_metric_record_or_none

log = logging.getLogger(__name__)


#: the informers only some plug-ins need (their CRDs may not be installed otherwise)
NODE_METRICS = "nodemetrics"
OPTIONAL_FEEDS = frozenset({NODE_METRICS})


class ClusterFeed:
    def __init__(self, cluster: Cluster, queue: SchedulingQueue) -> None:
        self.cluster = cluster
        self.queue = queue

    def attach(self, factory: InformerFactory, feeds: frozenset[str] = frozenset()) -> None:
        """Register the consumers; ``feeds`` names the optional informers the enabled
        plug-ins read (:data:`OPTIONAL_FEEDS`)."""
        if NODE_METRICS in feeds:
            factory.informer(res.NODE_METRICS).add_consumer(
                node_metric_record_or_none,
                name="scheduler",
                on_add=self._node_metric_set,
                on_update=lambda _, new: self._node_metric_set(new),
                on_delete=self._node_metric_deleted,
            )
        factory.informer(res.NODES).add_consumer(
            _node_record,
            name="scheduler",
            on_add=self._node_added,
            on_update=self._node_updated,
            on_delete=self._node_deleted,
        )
        # InterPodAffinity's namespaceSelector reads namespace labels
        factory.informer(res.NAMESPACES).add_consumer(
            _namespace_record,
            name="scheduler",
            on_add=self._namespace_set,
            on_update=lambda _, ns: self._namespace_set(ns),
            on_delete=self._namespace_deleted,
        )
        # DefaultPreemption spares the pods they protect; no queue event (upstream registers none)
        factory.informer(res.POD_DISRUPTION_BUDGETS).add_consumer(
            pdb_record,
            name="scheduler",
            on_add=self.cluster.set_pdb,
            on_update=lambda _, new: self.cluster.set_pdb(new),
            on_delete=self._pdb_deleted,
        )
        # the volume plug-ins' view of storage (VolumeBinding, NodeVolumeLimits)
        volumes = self.cluster.volumes
        for resource, record, store, forget, added, updated in (
            (res.PERSISTENT_VOLUMES, pv_record, volumes.set_pv, volumes.delete_pv, PV_ADD, PV_UPDATE),
            (
                res.PERSISTENT_VOLUME_CLAIMS,
                pvc_record,
                volumes.set_pvc,
                volumes.delete_pvc,
                PVC_ADD,
                PVC_UPDATE,
            ),
            (
                res.STORAGE_CLASSES,
                storage_class_record,
                volumes.set_class,
                volumes.delete_class,
                STORAGE_CLASS_ADD,
                STORAGE_CLASS_UPDATE,
            ),
            (
                res.CSI_NODES,
                csi_node_record,
                volumes.set_csi_node,
                volumes.delete_csi_node,
                CSI_NODE_ADD,
                CSI_NODE_UPDATE,
            ),
        ):
            factory.informer(resource).add_consumer(
                record, name="scheduler", **self._storage_handlers(store, forget, added, updated)
            )

    def _storage_handlers(
        self,
        store: Callable[[Any], None],
        forget: Callable[[str], None],
        added: ClusterEvent,
        updated: ClusterEvent,
    ) -> dict[str, Any]:
        """A storage informer's handlers: keep the record, tell the queue (deletions move no
        pod, as upstream registers none)."""

        def on_add(record: Any) -> None:
            store(record)
            self.queue.on_event(added)

        def on_update(old: Any, new: Any) -> None:
            store(new)
            if old != new:
                self.queue.on_event(updated)

        def on_delete(record: Any) -> None:
            # the informer's key: "namespace/name" for a claim, the name for the others
            forget(record.key if isinstance(record, Tombstone | PVCRecord) else record.name)

        return {"on_add": on_add, "on_update": on_update, "on_delete": on_delete}

    def _pdb_deleted(self, pdb: PDBRecord | Tombstone[PDBRecord]) -> None:
        namespace, _, name = pdb.key.rpartition("/")
        self.cluster.remove_pdb(namespace, name)

    def _node_added(self, spec: NodeSpec | None) -> None:
        if spec is None:
            return
        self.cluster.set_node_spec(spec)
        self.queue.on_event(NODE_ADD)

    def _node_updated(self, old: NodeSpec | None, new: NodeSpec | None) -> None:
        if new is None:
            return
        self.cluster.set_node_spec(new)
        if old is None:
            self.queue.on_event(NODE_ADD)
            return
        if old.allocatable != new.allocatable or old.pods != new.pods:
            self.queue.on_event(NODE_ALLOCATABLE)
        if old.taints != new.taints or old.unschedulable != new.unschedulable:
            self.queue.on_event(NODE_TAINT)
        if old.labels != new.labels:
            self.queue.on_event(NODE_LABEL)

    def _node_deleted(self, spec: NodeSpec | Tombstone[NodeSpec | None] | None) -> None:
        name = spec.key if isinstance(spec, Tombstone) else spec.name if spec is not None else None
        if name:
            self.cluster.remove_node(name.rsplit("/", 1)[-1])
            self.queue.on_event(NODE_DELETE)

    def _node_metric_set(self, record: NodeMetricRecord | None) -> None:
        if record is not None:
            self.cluster.set_node_metric(record)
            self.queue.on_event(NODE_METRIC_CHANGE)

    def _node_metric_deleted(
        self, record: NodeMetricRecord | Tombstone[NodeMetricRecord | None] | None
    ) -> None:
        name = record.key if isinstance(record, Tombstone) else record.node if record is not None else None
        if name:
            self.cluster.remove_node_metric(name.rsplit("/", 1)[-1])
            self.queue.on_event(NODE_METRIC_CHANGE)

    def _namespace_set(self, ns: tuple[str, Mapping[str, str]]) -> None:
        self.cluster.set_namespace(*ns)

    def _namespace_deleted(
        self, ns: tuple[str, Mapping[str, str]] | Tombstone[tuple[str, Mapping[str, str]]]
    ) -> None:
        self.cluster.remove_namespace(ns.key if isinstance(ns, Tombstone) else ns[0])


def _node_record(obj: Mapping[str, Any]) -> NodeSpec | None:
    try:
        return node_spec(obj)
    except (ValueError, KeyError) as err:
        log.warning("node %s ignored: %s", (obj.get("metadata") or {}).get("name"), err)
        return None


def _namespace_record(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, str]]:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or ""), {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
