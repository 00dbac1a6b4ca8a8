"""The noderesource controller: keeps every node's batch and mid resources up to date.

Watches (upstream's): Nodes (a change of anything the calculation reads -- not kubelet
heartbeats), NodeMetrics (any status change; a deleted NodeMetric also forgets when the
node was last written, so the next result is written at once) and the
``colocation-config`` key of the slo-controller-config (every node). Pods are read from the
cache at reconcile time; their changes reach the node with the next NodeMetric report.

Reconcile of one node:

1. nothing while the colocation config is unavailable (broken since the manager started);
2. :func:`~.calculator.calculate` on the cached Node, NodeMetric and the node's pods;
3. :func:`~.sync.decide` whether to write; if so, one JSON merge patch of ``nodes/status``
   sets (or removes, with ``null``) batch-cpu, batch-memory, mid-cpu and mid-memory in
   ``capacity`` and ``allocatable`` together, on the resourceVersion of the cached Node the
   decision was made on: a write decided on an old version (a paused former leader's, or
   one racing a kubelet status update) gets a Conflict and the node is reconciled again on
   a newer version, never overwriting newer values. Nodes with third-party batch
   allocations also get their ``originExtendedAllocatable`` annotation in a metadata patch
   just before, on the same version (the status patch then follows on the version it made);
4. the key comes back when the NodeMetric would turn stale (so a silent koordlet leads to
   degradation without any event) or when a pending small change falls due.

Removing resources from a node that had them (colocation disabled, NodeMetric stale) is
also told as an Event on the Node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from controlplane.manager.controllers.context import FIELD_MANAGER, ControllerContext
from controlplane.manager.controllers.metrics import FAILED, SUCCEEDED, UNIT_BYTE, UNIT_INTEGER
from controlplane.manager.controllers.noderesource import batch, mid
from controlplane.manager.controllers.noderesource.calculator import (
    Calculation,
    StrategyResolver,
    calculate,
    origin_annotation,
)
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
from koordinator.api.extension.node import ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE
from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY
from koordinator.api.quantity import Quantity
from koordinator.api.sloconfig.config import COLOCATION_CONFIG_KEY
from koordinator.kube import resources as res
from koordinator.kube.errors import ConflictError, NotFoundError
from koordinator.kube.events import NORMAL, WARNING
from koordinator.kube.informer import Tombstone

__all__ = ["NAME", "NodeResourceController"]

log = logging.getLogger(__name__)

NAME = "noderesource"
POD_NODE_INDEX = "node"
REASON_RESET = "NodeResourceReset"
#: how long after the NodeMetric's deadline the node is looked at again
_RECHECK_SLACK_S = 1.0


@dataclass(frozen=True, slots=True)
class SyncRecord:
    """The last write to a node: when, what, and the node's resourceVersion just before it
    (while the cache still shows that version, it has not seen the write)."""

    time: float
    written: Mapping[str, Quantity]
    version_before: str


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
        ctx.config.subscribe(self._config_changed)
        self._records: dict[str, SyncRecord] = {}
        self._resolver: StrategyResolver | None = None
        self._waiting_for_config = False

    # --- events --------------------------------------------------------------------------------

    def _node_updated(self, old: NodeView, new: NodeView) -> None:
        if old.identity() != new.identity():
            self.reactor.enqueue(new.name)

    def _node_deleted(self, node: NodeView | Tombstone[NodeView]) -> None:
        name = node.key if isinstance(node, Tombstone) else node.name
        self._records.pop(name, None)
        self.ctx.metrics.forget_allocatable(name)

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
        if not ctx.config.colocation_available:
            if not self._waiting_for_config:
                log.error(
                    "noderesource: colocation-config has never been valid since the manager started; "
                    "node resources are left as they are until it is fixed"
                )
                self._waiting_for_config = True
            ctx.metrics.node_resource_reconcile.inc(FAILED, "configUnavailable")
            return None
        self._waiting_for_config = False
        node = self.nodes.store.get(name)
        if node is None:
            self._records.pop(name, None)
            return None
        metric = self.node_metrics.store.get(name)
        store = self.pods.store
        pods = [pod for key in store.index_keys(POD_NODE_INDEX, name) if (pod := store.get(key)) is not None]
        now = ctx.clock.time()
        calc = calculate(ctx.config.config, node, metric, pods, now, resolver=self.resolver())
        self._record_metrics(node.name, calc)
        desired = calc.desired()
        record = self._records.get(name)
        current = None
        if record is not None and node.resource_version == record.version_before:
            current = record.written  # our last write has not reached the cache yet
        decision = decide(
            node,
            desired,
            last_update=record.time if record is not None else None,
            now=now,
            strategy=calc.strategy,
            current=current,
        )
        if decision.write:
            try:
                await self._write(node, calc, desired, now)
            except NotFoundError:
                self._records.pop(name, None)
                return None
            except ConflictError as exc:
                ctx.metrics.node_resource_reconcile.inc(FAILED, "updateNodeFailed")
                raise TemporaryError(
                    f"node {name} changed since resourceVersion {node.resource_version}: {exc}"
                ) from exc
            except Exception:
                ctx.metrics.node_resource_reconcile.inc(FAILED, "updateNodeFailed")
                raise
        elif record is None:
            # the node already holds the result: count it as written now for the time threshold
            self._records[name] = SyncRecord(now, _present(desired), node.resource_version)
        ctx.metrics.node_resource_reconcile.inc(SUCCEEDED, "updated" if decision.write else "unchanged")
        return self._recheck(calc, desired, metric, now)

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
        self, node: NodeView, calc: Calculation, desired: dict[str, Quantity | None], now: float
    ) -> None:
        client = self.ctx.client
        # every patch is conditional on the version the decision was made on (see the module doc)
        version = node.resource_version
        if calc.origin_batch is not None:
            origin = origin_annotation(calc.origin_batch)
            if origin != node.origin_annotation:
                annotation = {"annotations": {ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE: origin}}
                patched = await client.patch(
                    res.NODES,
                    node.name,
                    {"metadata": {**annotation, "resourceVersion": version}},
                    field_manager=FIELD_MANAGER,
                )
                version = str((patched.get("metadata") or {}).get("resourceVersion") or "")
        await client.patch(
            res.NODES,
            node.name,
            status_patch(desired, version),
            subresource="status",
            field_manager=FIELD_MANAGER,
        )
        self._records[node.name] = SyncRecord(now, _present(desired), node.resource_version)
        removed = [n for n in EXTENDED_RESOURCES if desired[n] is None and n in node.allocatable_ext]
        log.info(
            "noderesource: node %s: %s",
            node.name,
            ", ".join(
                f"{n}={desired[n] if desired[n] is not None else 'removed'}" for n in EXTENDED_RESOURCES
            ),
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

    def _record_metrics(self, node: str, calc: Calculation) -> None:
        metrics = self.ctx.metrics
        for plugin, result, names in (
            (batch.NAME, calc.batch, (BATCH_CPU, BATCH_MEMORY)),
            (mid.NAME, calc.mid, (MID_CPU, MID_MEMORY)),
        ):
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
