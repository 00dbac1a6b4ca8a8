"""The nodeslo controller: one NodeSLO per Node, the QoS policy its koordlet enforces.

Lifecycle as for NodeMetric: created when missing, the spec replaced when it differs,
deleted when the Node is gone. The spec (:func:`koordinator.api.sloconfig.node_slo_spec_for_node`):
``resourceUsedThresholdWithBE``, ``resourceQOSStrategy``, ``cpuBurstStrategy`` and
``systemStrategy`` are the cluster strategy of their ConfigMap key merged with the first
node strategy whose selector matches the node; the node annotation
``node.koordinator.sh/network-bandwidth`` overrides ``systemStrategy.totalNetworkBandwidth``;
``hostApplications`` come from the first matching node entry, else the cluster list. A key
of the ConfigMap that fails to parse keeps its last good value, so a typo in one strategy
does not reset the others. A broken key with no good value known at all (see
:mod:`.sloconfig`: a new leader that finds no persisted copy) is *unavailable*: the
NodeSLO section built from it (``resourceUsedThresholdWithBE`` for
``resource-threshold-config``, ...) is left as it is on every existing NodeSLO instead of
being reset to the defaults; a NodeSLO created meanwhile gets the defaults for it (no
configuration was running there).

The comparison with the stored spec applies the CRD's defaults to the computed spec first,
as the apiserver does when it stores it, so defaulted fields never look like a change.

Watches: Nodes (created, deleted, labels or the network-bandwidth annotation changed),
NodeSLOs (spec changed, deleted) and the slo-controller-config keys other than
``colocation-config`` (every node).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any, NamedTuple

from controlplane.manager.controllers.context import ControllerContext
from controlplane.manager.controllers.metrics import FAILED, SUCCEEDED
from controlplane.manager.controllers.pernode import ObjectSpec, converge_spec, object_spec
from controlplane.reactor import Result
from koordinator.api.extension.node import ANNOTATION_NETWORK_BANDWIDTH
from koordinator.api.openapi import model_schema
from koordinator.api.schema.structural import apply_defaults, prune
from koordinator.api.sloconfig.config import NODE_SLO_SPEC_FIELDS, node_slo_spec_for_node
from koordinator.api.types.slo import NodeSLOSpec
from koordinator.kube import resources as res
from koordinator.kube.informer import Tombstone

__all__ = ["NAME", "NodeSLOController", "stored_form"]

log = logging.getLogger(__name__)

NAME = "nodeslo"
NODE_SLO_KEYS = frozenset(NODE_SLO_SPEC_FIELDS)

Obj = dict[str, Any]
_SPEC_SCHEMA = model_schema(NodeSLOSpec)


class NodeLabels(NamedTuple):
    name: str
    labels: Mapping[str, str]
    bandwidth: str | None

    def as_node(self) -> Obj:
        meta: Obj = {"name": self.name, "labels": dict(self.labels)}
        if self.bandwidth is not None:
            meta["annotations"] = {ANNOTATION_NETWORK_BANDWIDTH: self.bandwidth}
        return {"metadata": meta}


def node_labels(node: Obj) -> NodeLabels:
    meta = node.get("metadata") or {}
    return NodeLabels(
        str(meta.get("name") or ""),
        dict(meta.get("labels") or {}),
        (meta.get("annotations") or {}).get(ANNOTATION_NETWORK_BANDWIDTH),
    )


def stored_form(spec: Obj) -> Obj:
    """``spec`` as the apiserver stores it: unknown fields pruned, CRD defaults filled in."""
    result: Obj = apply_defaults(prune(spec, _SPEC_SCHEMA), _SPEC_SCHEMA)
    return result


class NodeSLOController:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.reactor = ctx.controller(NAME, self.reconcile)
        enqueue = self.reactor.enqueue
        self.nodes = ctx.factory.informer(res.NODES).add_consumer(
            node_labels,
            name="nodeslo-nodes",
            on_add=lambda node: enqueue(node.name),
            on_update=lambda old, new: enqueue(new.name) if old != new else None,
            on_delete=self._deleted,
        )
        self.node_slos = ctx.factory.informer(res.NODE_SLOS).add_consumer(
            object_spec,
            name="nodeslo-nodeslos",
            on_add=lambda slo: enqueue(slo.name),
            on_update=lambda old, new: enqueue(new.name) if old.spec != new.spec else None,
            on_delete=self._deleted,
        )
        ctx.config.subscribe(self._config_changed)
        self._warned: set[tuple[str, str]] = set()

    def _deleted(self, obj: NodeLabels | ObjectSpec | Tombstone[Any]) -> None:
        self.reactor.enqueue(obj.key if isinstance(obj, Tombstone) else obj.name)

    def _config_changed(self, keys: set[str]) -> None:
        if keys & NODE_SLO_KEYS:
            self.enqueue_all()

    def enqueue_all(self) -> None:
        self.reactor.enqueue_all(set(self.nodes.store.keys()) | set(self.node_slos.store.keys()))

    async def run(self) -> None:
        await self.reactor.run()

    def desired_spec(self, node: NodeLabels) -> Obj:
        problems: list[str] = []
        spec = node_slo_spec_for_node(self.ctx.config.config, node.as_node(), problems).to_dict()
        for problem in problems:
            if (node.name, problem) not in self._warned:
                self._warned.add((node.name, problem))
                log.warning("nodeslo: node %s: %s", node.name, problem)
        return stored_form(spec)

    def _counted_spec(self, node: NodeLabels, current: ObjectSpec | None) -> Obj:
        """:meth:`desired_spec` with the sections of unavailable keys as ``current`` has them,
        counted in ``nodeslo_spec_parse``."""
        spec = self.desired_spec(node)
        config = self.ctx.config
        if current is not None:
            for key in sorted(NODE_SLO_KEYS & config.unavailable):
                section = NODE_SLO_SPEC_FIELDS[key]
                if section in current.spec:
                    spec[section] = current.spec[section]
                else:
                    spec.pop(section, None)
        failed = NODE_SLO_KEYS & set(config.errors)
        self.ctx.metrics.nodeslo_spec_parse.inc(FAILED if failed else SUCCEEDED, "nodeSLOSpec")
        return spec

    async def reconcile(self, name: str) -> Result | None:
        ctx = self.ctx
        if not ctx.config.synced:
            return None
        node = self.nodes.store.get(name)
        current = self.node_slos.store.get(name)
        await converge_spec(
            ctx,
            res.NODE_SLOS,
            name,
            current,
            None if node is None else partial(self._counted_spec, node, current),
            ctx.metrics.nodeslo_reconcile,
        )
        return None
