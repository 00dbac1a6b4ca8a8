"""The noderesource controller: keeps every node's batch, mid and device resources up to date.

Watches (upstream's): Nodes (a change of anything the calculation reads -- not kubelet
heartbeats), NodeMetrics (any status change; a deleted NodeMetric also forgets when the
node was last written, so the next result is written at once), the
``colocation-config``, ``cpu-normalization-config`` and ``resource-amplification-config``
keys of the slo-controller-config (every node), NodeResourceTopologies (created with CPU
basic info or cpu/memory zones, or a change of either) and, with a device
plug-in enabled, Device objects (named after their node: created, deleted, or ``spec``
changed -- a change of labels alone is picked up by the node's next reconcile). Pods are
read from the cache at reconcile time; their changes reach the node with the next
NodeMetric report.

Plug-ins (``--noderesource-plugins``, upstream's names): CPUNormalization,
ResourceAmplification, MidResource, BatchResource, GPUDeviceResource, RDMADeviceResource,
all on by default. A disabled plug-in's resources (labels, annotations) are left on the
node as they are.

Reconcile of one node:

0. CPUNormalization (:mod:`.normalization`) and ResourceAmplification
   (:mod:`.amplification`): the ``cpu-normalization-ratio`` and
   ``resource-amplification-ratio`` annotations, from their own config keys and the
   NodeResourceTopology's ``cpu-basic-info``, whatever the colocation config says (a key
   broken since the manager started leaves its annotation as it is);
1. the device plug-ins (:mod:`.devices`): the node's device resources and GPU labels from
   its Device object. They read neither the colocation config nor the NodeMetric, so they
   run whatever those say -- colocation disabled, NodeMetric missing or stale, even a
   colocation config broken since the manager started (upstream's reconcile stops before
   its plug-ins in that case, and leaves device resources alone while colocation is
   disabled);
2. batch and mid: nothing while the colocation config is unavailable (broken since the
   manager started); otherwise :func:`~.calculator.calculate` on the cached Node,
   NodeMetric and the node's pods (batch-cpu scaled by the normalization ratio the node
   carries after this reconcile), and :func:`~.sync.decide` whether to write;
3. the writes, on the resourceVersion of the cached Node the decisions were made on: a
   write decided on an old version (a paused former leader's, or one racing a kubelet
   status update) gets a Conflict and the node is reconciled again on a newer version,
   never overwriting newer values. First one metadata merge patch when labels (GPU model
   and driver version) or annotations (the two ratios; ``originExtendedAllocatable`` on
   nodes with third-party batch allocations) change, then one JSON merge patch of ``nodes/status``
   that sets (or removes, with ``null``) batch-cpu, batch-memory, mid-cpu and mid-memory
   (when batch and mid are written) and the changed device resources, in ``capacity`` and
   ``allocatable`` together, on the version the metadata patch made;
4. BatchResource's NUMA level (:mod:`.numalevel`): the zones' batch-cpu/batch-memory in the
   node's NodeResourceTopology (merge patch of ``zones`` on the version read; zeroed
   while the node's batch resources are removed);
5. the key comes back when the NodeMetric would turn stale (so a silent koordlet leads to
   degradation without any event) or when a pending small change falls due.

Removing batch or mid resources from a node that had them (colocation disabled,
NodeMetric stale) is also told as an Event on the Node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from controlplane.manager.controllers.context import FIELD_MANAGER, ControllerContext
from controlplane.manager.controllers.metrics import FAILED, SUCCEEDED, UNIT_BYTE, UNIT_INTEGER
from controlplane.manager.controllers.noderesource import amplification, batch, mid, normalization
from controlplane.manager.controllers.noderesource.amplification import calculate_amplification
from controlplane.manager.controllers.noderesource.calculator import (
    Calculation,
    StrategyResolver,
    calculate,
    origin_annotation,
    selector_keys,
)
from controlplane.manager.controllers.noderesource.devices import (
    GPU_NAME,
    RDMA_NAME,
    DeviceChanges,
    DeviceView,
    device_changes,
    device_quantity,
    device_view,
)
from controlplane.manager.controllers.noderesource.normalization import (
    calculate_normalization,
    held_ratio,
    ratio_value,
)
from controlplane.manager.controllers.noderesource.numalevel import (
    NRTView,
    calculate_zone_batch,
    nrt_view,
    reset_quantities,
    updated_zones,
    zone_quantities,
)
from controlplane.manager.controllers.noderesource.plugins import PLUGINS
from controlplane.manager.controllers.noderesource.sync import decide, status_patch
from controlplane.manager.controllers.noderesource.views import (
    EXTENDED_RESOURCES,
    NodeMetricView,
    NodeView,
    PodView,
    node_metric_view,
    node_view,
    pod_view,
)
from controlplane.reactor import Result, TemporaryError
from koordinator.api.extension.node import (
    ANNOTATION_CPU_NORMALIZATION_RATIO,
    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
    ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE,
)
from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY
from koordinator.api.quantity import Quantity
from koordinator.api.sloconfig.config import (
    COLOCATION_CONFIG_KEY,
    CPU_NORMALIZATION_CONFIG_KEY,
    RESOURCE_AMPLIFICATION_CONFIG_KEY,
    SLOControllerConfig,
    cpu_normalization_strategy_for_node,
    resource_amplification_strategy_for_node,
)
from koordinator.api.sloconfig.types import CPUNormalizationStrategy, ResourceAmplificationStrategy
from koordinator.kube import resources as res
from koordinator.kube.errors import ConflictError, NotFoundError
from koordinator.kube.events import NORMAL, WARNING
from koordinator.kube.informer import Consumer, Tombstone

__all__ = ["NAME", "NodeResourceController"]

log = logging.getLogger(__name__)

NAME = "noderesource"
POD_NODE_INDEX = "node"
REASON_RESET = "NodeResourceReset"
#: how long after the NodeMetric's deadline the node is looked at again
_RECHECK_SLACK_S = 1.0


@dataclass(frozen=True, slots=True)
class SyncRecord:
    """The last batch and mid write to a node: when, what, and the node's resourceVersions
    before its last patch (while the cache still shows one of them, it has not seen the
    write: a metadata patch followed by a status patch makes two versions)."""

    time: float
    written: Mapping[str, Quantity]
    versions_before: frozenset[str]


@dataclass(frozen=True, slots=True)
class MetaRecord:
    """The last annotation write of CPUNormalization and ResourceAmplification to a node
    (``None`` removes) and the node's resourceVersions before its last patch."""

    annotations: Mapping[str, str | None]
    versions_before: frozenset[str]


@dataclass(frozen=True, slots=True)
class MetaChanges:
    """The annotations to write (``None`` removes) and the CPU normalization ratio batch-cpu
    is scaled by: the one the node carries once they are written (``None``: none, or the
    CPUNormalization plug-in is not run)."""

    annotations: dict[str, str | None]
    ratio: float | None


@dataclass(frozen=True, slots=True)
class ZoneRecord:
    """The last NodeResourceTopology write: when, and the object's resourceVersion before it."""

    time: float
    version_before: str


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """The last device write to a node and the node's resourceVersions before its last patch."""

    changes: DeviceChanges
    versions_before: frozenset[str]


#: the plug-in computing each batch and mid resource
_RESOURCE_PLUGIN = {BATCH_CPU: batch.NAME, BATCH_MEMORY: batch.NAME, MID_CPU: mid.NAME, MID_MEMORY: mid.NAME}
#: EnableSyncGPUSharedResource: GPUDeviceResource also writes koordinator.sh/gpu.shared
GATE_SYNC_GPU_SHARED = "EnableSyncGPUSharedResource"


_STRATEGY_CACHE_LIMIT = 10000


class NodeStrategies:
    """The ``cpu-normalization-config`` and ``resource-amplification-config`` strategies of
    nodes under one parsed config, memoised by the labels their node entries select on
    (every node of a cluster without node entries shares one pair; treat them as read-only)."""

    def __init__(self, config: SLOControllerConfig) -> None:
        self.config = config
        keys: set[str] = set()
        for entry in config.cpu_normalization.node_configs:
            keys |= selector_keys(entry.node_selector)
        for other in config.resource_amplification.node_configs:
            keys |= selector_keys(other.node_selector)
        self._keys = tuple(sorted(keys))
        self._cache: dict[
            tuple[object, ...], tuple[CPUNormalizationStrategy, ResourceAmplificationStrategy]
        ] = {}

    def for_node(self, node: NodeView) -> tuple[CPUNormalizationStrategy, ResourceAmplificationStrategy]:
        labels = node.labels
        key = tuple((name, labels.get(name)) for name in self._keys)
        found = self._cache.get(key)
        if found is None:
            source = {"metadata": {"labels": {name: labels[name] for name in self._keys if name in labels}}}
            found = (
                cpu_normalization_strategy_for_node(self.config, source),
                resource_amplification_strategy_for_node(self.config, source),
            )
            if len(self._cache) >= _STRATEGY_CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = found
        return found


def _pod_node(pod: PodView) -> list[str]:
    return [pod.node] if pod.node else []


class NodeResourceController:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.reactor = ctx.controller(NAME, self.reconcile)
        factory = ctx.factory
        self.nodes = factory.informer(res.NODES).add_consumer(
            node_view,
            name="noderesource-nodes",
            on_add=lambda node: self.reactor.enqueue(node.name),
            on_update=self._node_updated,
            on_delete=self._node_deleted,
        )
        self.node_metrics = factory.informer(res.NODE_METRICS).add_consumer(
            node_metric_view,
            name="noderesource-nodemetrics",
            on_add=lambda metric: self.reactor.enqueue(metric.name),
            on_update=self._metric_updated,
            on_delete=self._metric_deleted,
        )
        self.pods = factory.informer(res.PODS).add_consumer(
            pod_view, name="noderesource-pods", indexers={POD_NODE_INDEX: _pod_node}
        )
        self.plugins = frozenset(PLUGINS if ctx.noderesource_plugins is None else ctx.noderesource_plugins)
        #: the batch and mid resources of the enabled plug-ins
        self.owned = tuple(name for name in EXTENDED_RESOURCES if _RESOURCE_PLUGIN[name] in self.plugins)
        self.devices: Consumer[DeviceView] | None = None
        if self.plugins & {GPU_NAME, RDMA_NAME}:
            self.devices = factory.informer(res.DEVICES).add_consumer(
                partial(device_view, sync_gpu_shared=ctx.gates.enabled(GATE_SYNC_GPU_SHARED)),
                name="noderesource-devices",
                on_add=self._device_added,
                on_update=self._device_updated,
                on_delete=self._device_deleted,
            )
        #: the NodeResourceTopologies: CPU basic info (CPUNormalization), zones (BatchResource)
        self.nrts: Consumer[NRTView] | None = None
        if self.plugins & {normalization.NAME, batch.NAME}:
            self.nrts = factory.informer(res.NODE_RESOURCE_TOPOLOGIES).add_consumer(
                nrt_view,
                name="noderesource-nrts",
                on_add=self._nrt_added,
                on_update=self._nrt_updated,
                on_delete=self._nrt_deleted,
            )
        ctx.config.subscribe(self._config_changed)
        self._records: dict[str, SyncRecord] = {}
        self._device_records: dict[str, DeviceRecord] = {}
        self._meta_records: dict[str, MetaRecord] = {}
        self._zone_records: dict[str, ZoneRecord] = {}
        #: the last reason each node's annotation could not be computed (logged when it changes)
        self._meta_errors: dict[tuple[str, str], str] = {}
        self._resolver: StrategyResolver | None = None
        self._strategies: NodeStrategies | None = None
        self._waiting_for_config = False

    # --- events --------------------------------------------------------------------------------

    def _node_updated(self, old: NodeView, new: NodeView) -> None:
        if old.identity() != new.identity():
            self.reactor.enqueue(new.name)

    def _node_deleted(self, node: NodeView | Tombstone[NodeView]) -> None:
        name = node.key if isinstance(node, Tombstone) else node.name
        self._forget(name)
        self.ctx.metrics.forget_allocatable(name)

    def _forget(self, name: str) -> None:
        self._records.pop(name, None)
        self._device_records.pop(name, None)
        self._meta_records.pop(name, None)
        self._zone_records.pop(name, None)
        for plugin in (normalization.NAME, amplification.NAME):
            self._meta_errors.pop((name, plugin), None)

    def _nrt_added(self, nrt: NRTView) -> None:
        # upstream: a NodeResourceTopology with CPU basic info or with cpu/memory zones
        if nrt.basic_info is not None or nrt.has_cpu_memory:
            self.reactor.enqueue(nrt.name)

    def _nrt_updated(self, old: NRTView, new: NRTView) -> None:
        # the batch entries this controller writes change neither key
        if old.basic_info_key() != new.basic_info_key() or old.cpu_memory_key() != new.cpu_memory_key():
            self.reactor.enqueue(new.name)

    def _nrt_deleted(self, nrt: NRTView | Tombstone[NRTView]) -> None:
        self._zone_records.pop(nrt.key if isinstance(nrt, Tombstone) else nrt.name, None)

    def _device_added(self, device: DeviceView) -> None:
        if device.problem:
            log.warning(
                "noderesource: device resources of node %s left as they are: %s", device.name, device.problem
            )
        self.reactor.enqueue(device.name)

    def _device_updated(self, old: DeviceView, new: DeviceView) -> None:
        # upstream's handler: only a spec change counts (labels alone do not enqueue)
        if old.spec != new.spec:
            self._device_added(new)

    def _device_deleted(self, device: DeviceView | Tombstone[DeviceView]) -> None:
        self.reactor.enqueue(device.key if isinstance(device, Tombstone) else device.name)

    def _metric_updated(self, old: NodeMetricView, new: NodeMetricView) -> None:
        if old != new:
            self.reactor.enqueue(new.name)

    def _metric_deleted(self, metric: NodeMetricView | Tombstone[NodeMetricView]) -> None:
        name = metric.key if isinstance(metric, Tombstone) else metric.name
        self._records.pop(name, None)
        self.reactor.enqueue(name)

    def _config_changed(self, keys: set[str]) -> None:
        if COLOCATION_CONFIG_KEY in keys:
            self._resolver = None
        if keys & {COLOCATION_CONFIG_KEY, CPU_NORMALIZATION_CONFIG_KEY, RESOURCE_AMPLIFICATION_CONFIG_KEY}:
            self.enqueue_all()

    def enqueue_all(self) -> None:
        self.reactor.enqueue_all(self.nodes.store.keys())

    def resolver(self) -> StrategyResolver:
        config = self.ctx.config.config
        if self._resolver is None or self._resolver.config is not config:
            self._resolver = StrategyResolver(config)
        return self._resolver

    # --- reconcile -------------------------------------------------------------------------------

    async def run(self) -> None:
        await self.reactor.run()

    async def reconcile(self, name: str) -> Result | None:
        ctx = self.ctx
        available = ctx.config.colocation_available
        if not available:
            if not self._waiting_for_config:
                log.error(
                    "noderesource: colocation-config has never been valid since the manager started; "
                    "batch and mid resources are left as they are until it is fixed"
                )
                self._waiting_for_config = True
            ctx.metrics.node_resource_reconcile.inc(FAILED, "configUnavailable")
        else:
            self._waiting_for_config = False
        node = self.nodes.store.get(name)
        if node is None:
            self._forget(name)
            return None
        now = ctx.clock.time()
        devices = self._device_changes(node)
        meta = self._meta_changes(node)
        if not available:
            if devices or meta.annotations:
                await self._write_guarded(node, None, {}, devices, now, meta)
            return None
        metric = self.node_metrics.store.get(name)
        store = self.pods.store
        pods = [pod for key in store.index_keys(POD_NODE_INDEX, name) if (pod := store.get(key)) is not None]
        calc = calculate(
            ctx.config.config,
            node,
            metric,
            pods,
            now,
            resolver=self.resolver(),
            # the ratio the node holds after this reconcile; none (being removed): unscaled
            cpu_normalization_ratio=meta.ratio if meta.ratio is not None else 1.0,
        )
        self._record_metrics(node.name, calc)
        full = calc.desired()
        desired = {resource: full[resource] for resource in self.owned}
        record = self._records.get(name)
        current = None
        if record is not None and node.resource_version in record.versions_before:
            current = record.written  # our last write has not reached the cache yet
        decision = decide(
            node,
            desired,
            last_update=record.time if record is not None else None,
            now=now,
            strategy=calc.strategy,
            current=current,
        )
        written = decision.write or bool(devices) or bool(meta.annotations)
        if written and not await self._write_guarded(
            node, calc if decision.write else None, desired, devices, now, meta
        ):
            return None
        if batch.NAME in self.plugins:
            await self._sync_zones(node, calc, metric, pods, meta.ratio, now)
        if not decision.write and record is None:
            # the node already holds the result: count it as written now for the time threshold
            self._records[name] = SyncRecord(now, _present(desired), frozenset({node.resource_version}))
        ctx.metrics.node_resource_reconcile.inc(SUCCEEDED, "updated" if written else "unchanged")
        return self._recheck(calc, desired, metric, now)

    def _device_changes(self, node: NodeView) -> DeviceChanges:
        """What the device plug-ins change on ``node`` (nothing when none is enabled)."""
        if self.devices is None:
            return DeviceChanges()
        device = self.devices.store.get(node.name)
        metrics = self.ctx.metrics
        for plugin in (GPU_NAME, RDMA_NAME):
            if plugin in self.plugins:
                if device is None:
                    metrics.node_resource_plugin.inc(plugin, SUCCEEDED, "deviceNotFound")
                elif device.problem:
                    metrics.node_resource_plugin.inc(plugin, FAILED, "invalidDevice")
                else:
                    metrics.node_resource_plugin.inc(plugin, SUCCEEDED, "calculated")
        allocatable, capacity, labels = node.device_allocatable, node.device_capacity, node.labels
        record = self._device_records.get(node.name)
        if record is not None:
            if node.resource_version in record.versions_before:
                # our last write has not reached the cache yet: the node holds what it wrote
                allocatable = _applied(allocatable, record.changes.resources)
                capacity = _applied(capacity, record.changes.resources)
                labels = {**labels, **record.changes.labels}
            else:
                del self._device_records[node.name]
        return device_changes(
            device, allocatable=allocatable, capacity=capacity, labels=labels, plugins=self.plugins
        )

    async def _write_guarded(
        self,
        node: NodeView,
        calc: Calculation | None,
        desired: dict[str, Quantity | None],
        devices: DeviceChanges,
        now: float,
        meta: MetaChanges,
    ) -> bool:
        """:meth:`_write`, its failures counted; ``False`` when the node is gone."""
        try:
            await self._write(node, calc, desired, devices, now, meta)
        except NotFoundError:
            self._forget(node.name)
            return False
        except ConflictError as exc:
            self.ctx.metrics.node_resource_reconcile.inc(FAILED, "updateNodeFailed")
            raise TemporaryError(
                f"node {node.name} changed since resourceVersion {node.resource_version}: {exc}"
            ) from exc
        except Exception:
            self.ctx.metrics.node_resource_reconcile.inc(FAILED, "updateNodeFailed")
            raise
        return True

    def _recheck(
        self,
        calc: Calculation,
        desired: dict[str, Quantity | None],
        metric: NodeMetricView | None,
        now: float,
    ) -> Result | None:
        """When to look at the node again without any event: staleness, or a change falling due."""
        delays: list[float] = []
        strategy = calc.strategy
        if calc.enabled and not calc.degraded and metric is not None and metric.update_time is not None:
            deadline = metric.update_time + (strategy.degrade_time_minutes or 0) * 60
            delays.append(deadline - now + _RECHECK_SLACK_S)
        record = self._records.get(calc.node)
        if record is not None and calc.enabled:
            due = record.time + (strategy.update_time_threshold_seconds or 0)
            if _present(desired) != record.written:
                delays.append(due - now + _RECHECK_SLACK_S)
        positive = [d for d in delays if d > 0]
        return Result(requeue_after=min(positive)) if positive else None

    async def _write(
        self,
        node: NodeView,
        calc: Calculation | None,
        desired: dict[str, Quantity | None],
        devices: DeviceChanges,
        now: float,
        meta: MetaChanges,
    ) -> None:
        """Write ``desired`` (batch and mid, when ``calc`` is given), ``devices`` and the
        ``meta`` annotations to ``node``."""
        client = self.ctx.client
        # every patch is conditional on the version the decision was made on (see the module doc)
        version = node.resource_version
        before = {version}  # the versions the node has until the last patch is made
        metadata: dict[str, Any] = {}
        annotations: dict[str, str | None] = dict(meta.annotations)
        if calc is not None and calc.origin_batch is not None:
            origin = origin_annotation(calc.origin_batch)
            if origin != node.origin_annotation:
                annotations[ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE] = origin
        if annotations:
            metadata["annotations"] = annotations
        if devices.labels:
            metadata["labels"] = dict(devices.labels)
        if metadata:
            patched = await client.patch(
                res.NODES,
                node.name,
                {"metadata": {**metadata, "resourceVersion": version}},
                field_manager=FIELD_MANAGER,
            )
            version = str((patched.get("metadata") or {}).get("resourceVersion") or "")
        values: dict[str, Quantity | None] = dict(desired) if calc is not None else {}
        for resource, amount in devices.resources.items():
            values[resource] = device_quantity(resource, amount) if amount is not None else None
        if values:
            before.add(version)
            await client.patch(
                res.NODES,
                node.name,
                status_patch(values, version),
                subresource="status",
                field_manager=FIELD_MANAGER,
            )
        versions_before = frozenset(before)
        if meta.annotations:
            self._meta_records[node.name] = MetaRecord(dict(meta.annotations), versions_before)
            log.info(
                "noderesource: node %s: %s",
                node.name,
                ", ".join(
                    f"annotation {k}={v if v is not None else 'removed'}" for k, v in meta.annotations.items()
                ),
            )
        if devices:
            self._device_records[node.name] = DeviceRecord(devices, versions_before)
            log.info(
                "noderesource: node %s: %s",
                node.name,
                ", ".join(
                    [f"{n}={a if a is not None else 'removed'}" for n, a in devices.resources.items()]
                    + [f"label {k}={v}" for k, v in devices.labels.items()]
                ),
            )
        if calc is None:
            return
        self._records[node.name] = SyncRecord(now, _present(desired), versions_before)
        removed = [n for n, q in desired.items() if q is None and n in node.allocatable_ext]
        log.info(
            "noderesource: node %s: %s",
            node.name,
            ", ".join(f"{n}={q if q is not None else 'removed'}" for n, q in desired.items()),
        )
        if removed:
            why = calc.degraded or calc.reset_message
            await self.ctx.recorder.record(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "uid": node.uid}},
                WARNING if calc.degraded else NORMAL,
                REASON_RESET,
                f"removed {', '.join(removed)}: {why}",
                kind="Node",
            )

    def _meta_error(self, node: str, plugin: str, error: str) -> None:
        """Count a plug-in failure; log it when the node's reason changes (not every minute)."""
        self.ctx.metrics.node_resource_plugin.inc(plugin, FAILED, "calculateFailed")
        key = (node, plugin)
        if self._meta_errors.get(key) != error:
            self._meta_errors[key] = error
            log.warning("noderesource: %s of node %s left as it is: %s", plugin, node, error)

    def _meta_changes(self, node: NodeView) -> MetaChanges:
        """The annotations CPUNormalization and ResourceAmplification change on ``node``.

        Each runs when enabled and its config key is usable (a key broken since the
        manager started leaves the annotation as it is), whatever the colocation config
        says: both have their own ``enable``.
        """
        current: dict[str, str | None] = {
            ANNOTATION_CPU_NORMALIZATION_RATIO: node.normalization_annotation,
            ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: node.amplification_annotation,
        }
        record = self._meta_records.get(node.name)
        if record is not None:
            if node.resource_version in record.versions_before:
                current.update(record.annotations)  # our last write has not reached the cache yet
            else:
                del self._meta_records[node.name]
        cache = self.ctx.config
        if self._strategies is None or self._strategies.config is not cache.config:
            self._strategies = NodeStrategies(cache.config)
        normalization_strategy, amplification_strategy = self._strategies.for_node(node)
        changes: dict[str, str | None] = {}
        ratio_text = current[ANNOTATION_CPU_NORMALIZATION_RATIO]
        if (
            normalization.NAME in self.plugins
            and cache.synced
            and not cache.is_unavailable(CPU_NORMALIZATION_CONFIG_KEY)
        ):
            nrt = self.nrts.store.get(node.name) if self.nrts is not None else None
            result = calculate_normalization(
                normalization_strategy,
                node.labels,
                nrt.basic_info if nrt is not None else None,
                (nrt.basic_info_problem or "") if nrt is not None else "NodeResourceTopology not found",
            )
            if result.error:
                self._meta_error(node.name, normalization.NAME, result.error)
            else:
                self._meta_errors.pop((node.name, normalization.NAME), None)
                status = "disabled" if result.disabled else "calculated"
                self.ctx.metrics.node_resource_plugin.inc(normalization.NAME, SUCCEEDED, status)
            held = held_ratio(ratio_text, result)
            if held != ratio_text:
                changes[ANNOTATION_CPU_NORMALIZATION_RATIO] = held
                ratio_text = held
        ratio = ratio_value(ratio_text)
        if (
            amplification.NAME in self.plugins
            and cache.synced
            and not cache.is_unavailable(RESOURCE_AMPLIFICATION_CONFIG_KEY)
        ):
            amplified = calculate_amplification(amplification_strategy, ratio)
            if amplified.error:
                self._meta_error(node.name, amplification.NAME, amplified.error)
            else:
                self._meta_errors.pop((node.name, amplification.NAME), None)
                self.ctx.metrics.node_resource_plugin.inc(amplification.NAME, SUCCEEDED, "calculated")
                if amplified.annotation != current[ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO]:
                    changes[ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO] = amplified.annotation
        # batch-cpu is scaled by the ratio the plug-in holds in this reconcile, as upstream's
        # plug-in scales it; left out of --noderesource-plugins, an annotation nothing
        # refreshes any more scales nothing
        return MetaChanges(changes, ratio if normalization.NAME in self.plugins else None)

    async def _sync_zones(
        self,
        node: NodeView,
        calc: Calculation,
        metric: NodeMetricView | None,
        pods: list[PodView],
        ratio: float | None,
        now: float,
    ) -> None:
        """Write the zones' batch resources into the node's NodeResourceTopology (see :mod:`.numalevel`)."""
        nrt = self.nrts.store.get(node.name) if self.nrts is not None else None
        if nrt is None or not nrt.has_cpu_memory:
            return
        record = self._zone_records.get(node.name)
        if record is not None and nrt.resource_version == record.version_before:
            return  # our last write has not reached the cache yet
        strategy = calc.strategy
        if calc.batch is None or metric is None:
            desired = {zone.name: reset_quantities() for zone in nrt.zones}
            add = False
        else:
            zone_batch = calculate_zone_batch(strategy, node, metric, pods, nrt.zones)
            desired = {name: zone_quantities(amounts, ratio) for name, amounts in zone_batch.items()}
            add = True
        period = strategy.update_time_threshold_seconds or 0
        force = record is None or now > record.time + period
        zones = updated_zones(
            nrt.zones_json, desired, threshold=strategy.resource_diff_threshold or 0.0, force=force, add=add
        )
        if zones is None:
            if record is None:
                self._zone_records[node.name] = ZoneRecord(now, "")
            return
        try:
            await self.ctx.client.patch(
                res.NODE_RESOURCE_TOPOLOGIES,
                node.name,
                {"metadata": {"resourceVersion": nrt.resource_version}, "zones": zones},
                field_manager=FIELD_MANAGER,
            )
        except NotFoundError:
            return
        except ConflictError as exc:
            self.ctx.metrics.node_resource_reconcile.inc(FAILED, "updateNodeResourceTopology")
            raise TemporaryError(
                f"NodeResourceTopology {node.name} changed since "
                f"resourceVersion {nrt.resource_version}: {exc}"
            ) from exc
        self._zone_records[node.name] = ZoneRecord(now, nrt.resource_version)
        self.ctx.metrics.node_resource_reconcile.inc(SUCCEEDED, "updateNodeResourceTopology")
        log.info(
            "noderesource: NodeResourceTopology %s: %s",
            node.name,
            "; ".join(
                f"{zone}: " + ", ".join(f"{n}={q}" for n, q in values.items())
                for zone, values in desired.items()
            ),
        )

    def _record_metrics(self, node: str, calc: Calculation) -> None:
        metrics = self.ctx.metrics
        for plugin, result, names in (
            (batch.NAME, calc.batch, (BATCH_CPU, BATCH_MEMORY)),
            (mid.NAME, calc.mid, (MID_CPU, MID_MEMORY)),
        ):
            if plugin not in self.plugins:
                continue
            if result is None:
                reason = "disabled" if not calc.enabled else "degraded"
                metrics.node_resource_plugin.inc(plugin, SUCCEEDED, reason)
                for resource in names:
                    metrics.forget_allocatable(node, resource)
                continue
            metrics.node_resource_plugin.inc(plugin, SUCCEEDED, "calculated")
            metrics.record_allocatable(node, names[0], result.cpu / 1000, UNIT_INTEGER)
            metrics.record_allocatable(node, names[1], float(result.memory), UNIT_BYTE)


def _present(desired: Mapping[str, Quantity | None]) -> dict[str, Quantity]:
    return {name: value for name, value in desired.items() if value is not None}


def _applied(amounts: Mapping[str, int], changes: Mapping[str, int | None]) -> dict[str, int]:
    """``amounts`` after a status write of ``changes`` (``None`` removes)."""
    out = {name: value for name, value in amounts.items() if name not in changes}
    out.update((name, value) for name, value in changes.items() if value is not None)
    return out
