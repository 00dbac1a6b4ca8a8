"""The nodemetric controller: one NodeMetric per Node, carrying the koordlet's collect policy.

Reconcile of a node name:

* neither Node nor NodeMetric: nothing;
* the Node is gone: the NodeMetric is deleted (only the one the cache saw, by uid);
* no NodeMetric: one is created, named after the node, with the spec below;
* otherwise the spec is replaced when it differs.

The spec's ``metricCollectPolicy`` is the default (300 s aggregation, 60 s reports,
5m/10m/30m windows, memory without page cache) unless the node's colocation strategy is
valid and enabled, in which case its metric fields are used
(:func:`koordinator.api.sloconfig.node_metric_spec_for_node`). While the colocation config
is unavailable (broken since the manager started) nothing is created or changed; when it
breaks later, its last good value keeps being used.

Watches: Nodes (created, deleted, labels or the colocation-strategy annotation changed),
NodeMetrics (spec changed, deleted) and ``colocation-config`` (every node).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any, NamedTuple

from controlplane.manager.controllers.context import ControllerContext
from controlplane.manager.controllers.metrics import FAILED, SUCCEEDED
from controlplane.manager.controllers.noderesource.calculator import StrategyResolver
from controlplane.manager.controllers.noderesource.views import NodeView
from controlplane.manager.controllers.pernode import ObjectSpec, converge_spec, object_spec
from controlplane.reactor import Result
from koordinator.api.extension.node import ANNOTATION_NODE_COLOCATION_STRATEGY
from koordinator.api.sloconfig.config import COLOCATION_CONFIG_KEY, node_metric_spec_for_node
from koordinator.kube import resources as res
from koordinator.kube.informer import Tombstone

__all__ = ["NAME", "NodeMetricController"]

log = logging.getLogger(__name__)

NAME = "nodemetric"

Obj = dict[str, Any]


class NodeMeta(NamedTuple):
    name: str
    labels: Mapping[str, str]
    strategy_annotation: str | None

    def view(self) -> NodeView:
        return NodeView(name=self.name, labels=self.labels, strategy_annotation=self.strategy_annotation)


def node_meta(node: Obj) -> NodeMeta:
    meta = node.get("metadata") or {}
    return NodeMeta(
        str(meta.get("name") or ""),
        dict(meta.get("labels") or {}),
        (meta.get("annotations") or {}).get(ANNOTATION_NODE_COLOCATION_STRATEGY),
    )


class NodeMetricController:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.reactor = ctx.controller(NAME, self.reconcile)
        enqueue = self.reactor.enqueue
        self.nodes = ctx.factory.informer(res.NODES).add_consumer(
            node_meta,
            name="nodemetric-nodes",
            on_add=lambda node: enqueue(node.name),
            on_update=lambda old, new: enqueue(new.name) if old != new else None,
            on_delete=self._deleted,
        )
        self.node_metrics = ctx.factory.informer(res.NODE_METRICS).add_consumer(
            object_spec,
            name="nodemetric-nodemetrics",
            on_add=lambda metric: enqueue(metric.name),
            on_update=lambda old, new: enqueue(new.name) if old.spec != new.spec else None,
            on_delete=self._deleted,
        )
        ctx.config.subscribe(self._config_changed)
        self._resolver: StrategyResolver | None = None
        self._specs: dict[tuple[object, ...], Obj] = {}

    def _deleted(self, obj: NodeMeta | ObjectSpec | Tombstone[Any]) -> None:
        self.reactor.enqueue(obj.key if isinstance(obj, Tombstone) else obj.name)

    def _config_changed(self, keys: set[str]) -> None:
        if COLOCATION_CONFIG_KEY in keys:
            self.enqueue_all()

    def enqueue_all(self) -> None:
        self.reactor.enqueue_all(set(self.nodes.store.keys()) | set(self.node_metrics.store.keys()))

    async def run(self) -> None:
        await self.reactor.run()

    def desired_spec(self, node: NodeMeta) -> Obj:
        """The NodeMetric spec for ``node``, memoised per colocation-strategy inputs."""
        config = self.ctx.config.config
        if self._resolver is None or self._resolver.config is not config:
            self._resolver = StrategyResolver(config)
            self._specs.clear()
        view = node.view()
        key = self._resolver.key(view)
        spec = self._specs.get(key)
        if spec is None:
            problems: list[str] = []
            spec = node_metric_spec_for_node(config, self._resolver.source(view), problems).to_dict()
            for problem in problems:
                log.warning("nodemetric: node %s: %s", node.name, problem)
            self._specs[key] = spec
        return spec

    def _counted_spec(self, node: NodeMeta) -> Obj:
        """:meth:`desired_spec`, counted in ``nodemetric_spec_parse``."""
        spec = self.desired_spec(node)
        failed = self.ctx.config.in_error(COLOCATION_CONFIG_KEY)
        self.ctx.metrics.nodemetric_spec_parse.inc(FAILED if failed else SUCCEEDED, "nodeMetricSpec")
        return spec

    async def reconcile(self, name: str) -> Result | None:
        ctx = self.ctx
        if not ctx.config.colocation_available:
            ctx.metrics.nodemetric_reconcile.inc(FAILED, "configUnavailable")
            return None
        node = self.nodes.store.get(name)
        await converge_spec(
            ctx,
            res.NODE_METRICS,
            name,
            self.node_metrics.store.get(name),
            None if node is None else partial(self._counted_spec, node),
            ctx.metrics.nodemetric_reconcile,
        )
        return None
