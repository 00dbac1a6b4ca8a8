"""StatesInformer: what the koordlet knows about its node, and who to tell when it changes.

* pods from the kubelet (:class:`PodsInformer`, with PLEG for early resyncs);
* the Node, its NodeSLO and its NodeMetric spec from the apiserver, each through a shared
  informer restricted to this node by ``metadata.name`` (upstream's field selectors); the
  Node's batch and mid allocatable are recorded each time it is seen;
* the NodeSLO spec is merged onto upstream's defaults section by section, with disabled
  classes reset, before anyone sees it; a NodeSLO that fails validation is refused and
  the last good spec stays in force, which a Warning Event on the Node says (reason
  ``NodeSLORefused``, with the validation errors); a deleted NodeSLO puts the defaults
  back in force, which a Warning Event on the Node says too (reason ``NodeSLODeleted``).
  The Events are on the Node, as upstream's koordlet records its own, so that
  ``kubectl describe node`` shows them (a deleted NodeSLO has nothing to describe).

In standalone mode there is no apiserver: the Node is described from the host and the
NodeSLO is the defaults.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from koordinator.api.model import ModelError
from koordinator.api.schema import validator_for
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeMetricSpec, NodeSLOSpec
from koordinator.kube import resources as res
from koordinator.kube.events import WARNING, EventRecorder
from koordinator.kube.informer import InformerFactory, Tombstone
from koordlet.metrics import KoordletMetrics
from koordlet.statesinformer.callbacks import CallbackRunner, CallbackType
from koordlet.statesinformer.nodemetric import HostApplication, host_applications_of
from koordlet.statesinformer.pleg import PodLifecycleEvents
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.statesinformer.pods import PodsInformer, PodsSource
from koordlet.statesinformer.resourcesummary import record_node_allocatable
from koordlet.system import proc
from koordlet.system.cgroup.cgroupfs import CgroupFS

log = logging.getLogger(__name__)

_METADATA_KEYS = ("labels", "annotations")
#: Event reasons about the NodeSLO, recorded on the Node
NODE_SLO_REFUSED = "NodeSLORefused"
NODE_SLO_DELETED = "NodeSLODeleted"


def _metadata(node: Mapping[str, Any] | None) -> tuple[Any, ...]:
    meta = (node or {}).get("metadata") or {}
    return tuple(meta.get(k) for k in _METADATA_KEYS)


class StatesInformer:
    def __init__(
        self,
        node_name: str,
        cgroups: CgroupFS,
        pods_source: PodsSource,
        *,
        factory: InformerFactory | None = None,
        metrics: KoordletMetrics | None = None,
        standalone_node: Mapping[str, Any] | None = None,
        standalone_node_slo: NodeSLOSpec | None = None,
        kubelet_sync_interval: float = 10.0,
        enable_pleg: bool = True,
        recorder: EventRecorder | None = None,
    ) -> None:
        if factory is None and standalone_node is None:
            raise ValueError("a states informer needs an apiserver (factory) or a standalone node")
        self.node_name = node_name
        self.cgroups = cgroups
        self.metrics = metrics
        self.factory = factory
        self.callbacks = CallbackRunner(self)
        self.pods = PodsInformer(
            pods_source,
            cgroups.layout,
            interval=kubelet_sync_interval,
            on_change=lambda: self.callbacks.signal(CallbackType.ALL_PODS),
            on_resync=lambda: self.pleg.refresh(),
            keep_on_empty=factory is not None,
            metrics=metrics,
        )
        self.pleg = PodLifecycleEvents(cgroups, lambda uid: self.pods.trigger(f"new pod cgroup {uid}"))
        self.enable_pleg = enable_pleg
        self._node: Mapping[str, Any] | None = standalone_node
        self._node_slo = merge_node_slo_spec(standalone_node_slo)
        self._node_slo_raw: Mapping[str, Any] | None = None
        #: resourceVersion of the NodeSLO in force (None: the defaults)
        self._node_slo_version: str | None = None
        self.recorder = recorder
        self._recording: set[asyncio.Task[Any]] = set()
        self._node_metric_spec: NodeMetricSpec | None = None
        self._node_metric_seen = False
        self._numa_nodes: list[int] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        if factory is not None:
            selector = f"metadata.name={node_name}"
            factory.informer(res.NODES, field_selector=selector).add_consumer(
                name="koordlet-node",
                on_add=self._on_node,
                on_update=lambda _o, n: self._on_node(n),
                on_delete=self._on_node_deleted,
            )
            factory.informer(res.NODE_SLOS, field_selector=selector).add_consumer(
                name="koordlet-nodeslo",
                on_add=self._on_node_slo,
                on_update=lambda _o, n: self._on_node_slo(n),
                on_delete=self._on_node_slo_deleted,
            )
            factory.informer(res.NODE_METRICS, field_selector=selector).add_consumer(
                name="koordlet-nodemetric",
                on_add=self._on_node_metric,
                on_update=lambda _o, n: self._on_node_metric(n),
                on_delete=lambda _obj: self._on_node_metric(None),
            )

    # --- the states ----------------------------------------------------------------------

    def get_all_pods(self) -> list[PodMeta]:
        return self.pods.get_all_pods()

    def get_pod(self, uid: str) -> PodMeta | None:
        return self.pods.get_pod(uid)

    def get_node(self) -> Mapping[str, Any] | None:
        return self._node

    def get_node_slo(self) -> NodeSLOSpec:
        """The merged NodeSLO spec (defaults when the node has no NodeSLO)."""
        return self._node_slo

    def get_node_metric_spec(self) -> NodeMetricSpec | None:
        return self._node_metric_spec

    @property
    def node_metric_exists(self) -> bool:
        return self._node_metric_seen

    def host_applications(self) -> list[HostApplication]:
        return host_applications_of(list(self._node_slo.host_applications))

    def numa_nodes(self) -> list[int]:
        if self._numa_nodes is None:
            self._numa_nodes = proc.numa_nodes(self.cgroups.paths) or [0]
        return self._numa_nodes

    def register_callback(self, kind: CallbackType, name: str, callback: Any) -> None:
        self.callbacks.register(kind, name, callback)

    # --- handlers ------------------------------------------------------------------------

    def _on_node(self, node: Mapping[str, Any]) -> None:
        changed = _metadata(node) != _metadata(self._node)
        self._node = node
        if self.metrics is not None:
            record_node_allocatable(self.metrics, node)
        if changed:
            self.callbacks.signal(CallbackType.NODE_METADATA)

    def _on_node_deleted(self, _obj: Any) -> None:
        log.warning("node %s was deleted; keeping its last known state", self.node_name)

    def _on_node_slo(self, obj: Mapping[str, Any] | Tombstone[Any] | None) -> None:
        raw = None if obj is None or isinstance(obj, Tombstone) else (obj.get("spec") or {})
        if raw == self._node_slo_raw:
            return
        version = None if obj is None or isinstance(obj, Tombstone) else _resource_version(obj)
        try:
            if raw is not None:
                self._validate(raw)
            spec = NodeSLOSpec.from_dict(raw) if raw is not None else None
            merged = merge_node_slo_spec(spec)
        except (ModelError, ValueError) as err:
            self._refused(version, str(err))
            return
        self._node_slo_raw = raw
        self._node_slo_version = version
        self._node_slo = merged
        self.callbacks.signal(CallbackType.NODE_SLO_SPEC)

    def _on_node_slo_deleted(self, _obj: Any) -> None:
        if self._node_slo_raw is None:
            return  # the defaults were in force already (no NodeSLO was ever accepted)
        was = _version_text(self._node_slo_version)
        self._on_node_slo(None)
        message = (
            f"NodeSLO {self.node_name} was deleted: the koordlet reverted to the default NodeSLO spec "
            f"(the spec of NodeSLO {self.node_name}{was} was in force until now)"
        )
        log.warning("%s", message)
        self._record(NODE_SLO_DELETED, message)

    def _refused(self, version: str | None, errors: str) -> None:
        """Log and record the refusal of a NodeSLO, and which spec stays in force."""
        kept = (
            f"keeping the last good spec (NodeSLO {self.node_name}{_version_text(self._node_slo_version)})"
            if self._node_slo_raw is not None
            else "keeping the default spec (no valid NodeSLO seen yet)"
        )
        refused = f"NodeSLO {self.node_name}{_version_text(version)} refused, {kept}: "
        log.error("%s%s", refused, errors)
        self._record(NODE_SLO_REFUSED, refused + errors)

    def _record(self, reason: str, message: str) -> None:
        """A Warning Event on this Node, its message cut to what the apiserver keeps
        (written in the background; never raises)."""
        if self.recorder is None:
            return
        node = self._node or {"metadata": {"name": self.node_name, "uid": self.node_name}}
        task = asyncio.get_running_loop().create_task(
            self.recorder.record(node, WARNING, reason, message, kind="Node"), name=f"event-{reason}"
        )
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)

    def _validate(self, spec: Mapping[str, Any]) -> None:
        """The CRD's own rules (percentages within 0-100 ...), checked again here: an
        object stored without the CRD's validation must not reach the host."""
        obj = {
            "apiVersion": res.NODE_SLOS.api_version,
            "kind": "NodeSLO",
            "metadata": {"name": self.node_name},
        }
        validator = validator_for(res.NODE_SLOS.api_version, "NodeSLO")
        errors = validator.validate({**obj, "spec": spec}) if validator is not None else []
        if errors:
            raise ValueError("; ".join(str(e) for e in errors))

    def _on_node_metric(self, obj: Mapping[str, Any] | Tombstone[Any] | None) -> None:
        if obj is None or isinstance(obj, Tombstone):
            self._node_metric_seen = False
            self._node_metric_spec = None
            return
        self._node_metric_seen = True
        try:
            self._node_metric_spec = NodeMetricSpec.from_dict(obj.get("spec") or {})
        except ModelError as err:
            log.error("NodeMetric %s spec ignored: %s", self.node_name, err)

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def has_synced(self) -> bool:
        if not self.pods.has_synced:
            return False
        return self.factory is None or all(i.has_synced for i in self.factory.informers)

    async def start(self) -> None:
        if self.factory is not None:
            self.factory.start()
        self._tasks.append(asyncio.create_task(self.pods.run(), name="pods-informer"))
        if self.enable_pleg:
            self.pleg.start()

    async def wait_synced(self) -> None:
        if self.factory is not None:
            await self.factory.wait_for_sync()
        await self.pods.wait_synced()
        self.callbacks.start()
        for kind in CallbackType:
            self.callbacks.signal(kind)

    async def stop(self) -> None:
        self.pleg.stop()
        tasks = [*self._tasks, *self._recording]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.callbacks.stop()
        if self.factory is not None:
            await self.factory.stop()


def _resource_version(obj: Mapping[str, Any]) -> str | None:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return str(version) if version else None


def _version_text(version: str | None) -> str:
    return f" at resourceVersion {version}" if version else ""
