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
from typing import Any, NamedTuple

from controlplane.manager.controllers.context import FIELD_MANAGER, ControllerContext
from controlplane.manager.controllers.metrics import FAILED, SUCCEEDED
from controlplane.manager.controllers.noderesource.calculator import StrategyResolver
from controlplane.manager.controllers.noderesource.views import NodeView
from controlplane.reactor import Result, TemporaryError
from koordinator.api.extension.node import ANNOTATION_NODE_COLOCATION_STRATEGY
from koordinator.api.sloconfig.config import COLOCATION_CONFIG_KEY, node_metric_spec_for_node
from koordinator.api.types.slo import API_VERSION
from koordinator.kube import resources as res
from koordinator.kube.client import PatchType, Preconditions
from koordinator.kube.errors import AlreadyExistsError, ConflictError, NotFoundError
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


class ObjectSpec(NamedTuple):
    """A NodeMetric or NodeSLO as the controllers keep it: identity and spec."""

    name: str
    uid: str
    spec: Obj


def node_meta(node: Obj) -> NodeMeta:
    meta = node.get("metadata") or {}
    return NodeMeta(
        str(meta.get("name") or ""),
        dict(meta.get("labels") or {}),
        (meta.get("annotations") or {}).get(ANNOTATION_NODE_COLOCATION_STRATEGY),
    )


def object_spec(obj: Obj) -> ObjectSpec:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    return ObjectSpec(
        str(meta.get("name") or ""), str(meta.get("uid") or ""), spec if isinstance(spec, dict) else {}
    )


def spec_patch(spec: Obj) -> list[Obj]:
    """A JSON patch replacing the whole spec (``add`` replaces an existing member)."""
    return [{"op": "add", "path": "/spec", "value": spec}]


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

    async def reconcile(self, name: str) -> Result | None:
        ctx = self.ctx
        if not ctx.config.colocation_available:
            ctx.metrics.nodemetric_reconcile.inc(FAILED, "configUnavailable")
            return None
        node = self.nodes.store.get(name)
        current = self.node_metrics.store.get(name)
        client = ctx.client
        try:
            if node is None:
                if current is not None:
                    await client.delete(res.NODE_METRICS, name, preconditions=Preconditions(uid=current.uid))
                    log.info("nodemetric: deleted NodeMetric %s (node gone)", name)
                return None
            spec = self.desired_spec(node)
            ctx.metrics.nodemetric_spec_parse.inc(
                FAILED if ctx.config.in_error(COLOCATION_CONFIG_KEY) else SUCCEEDED, "nodeMetricSpec"
            )
            if current is None:
                body = {
                    "apiVersion": API_VERSION,
                    "kind": "NodeMetric",
                    "metadata": {"name": name},
                    "spec": spec,
                }
                await client.create(res.NODE_METRICS, body, field_manager=FIELD_MANAGER)
                log.info("nodemetric: created NodeMetric %s", name)
            elif current.spec != spec:
                await client.patch(
                    res.NODE_METRICS,
                    name,
                    spec_patch(spec),
                    patch_type=PatchType.JSON,
                    field_manager=FIELD_MANAGER,
                )
                log.info("nodemetric: updated the spec of NodeMetric %s", name)
        except AlreadyExistsError:
            ctx.metrics.nodemetric_reconcile.inc(FAILED, "alreadyExists")
            raise TemporaryError(f"NodeMetric {name} exists but is not in the cache yet") from None
        except (NotFoundError, ConflictError) as exc:
            if node is None:
                return None  # already gone, or replaced by a NodeMetric of a new node: the watch tells
            ctx.metrics.nodemetric_reconcile.inc(FAILED, "updateFailed")
            raise TemporaryError(f"NodeMetric {name}: {exc}") from exc
        except Exception:
            ctx.metrics.nodemetric_reconcile.inc(FAILED, "updateFailed")
            raise
        ctx.metrics.nodemetric_reconcile.inc(SUCCEEDED, "reconciled")
        return None
