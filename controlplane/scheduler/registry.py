"""The one table of scheduler plug-ins: each name, the extension points it serves, its
default weight as a score plug-in, and how its args are validated.

Upstream's default profile enables more plug-ins than are built here; a configuration that
names one that is not built is refused with a clear error rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.plugins import nodeaffinity, noderesources
from controlplane.scheduler.plugins.interface import MaskFilter
from controlplane.scheduler.plugins.nodename import NodeName
from controlplane.scheduler.plugins.nodeports import NodePorts
from controlplane.scheduler.plugins.nodeunschedulable import NodeUnschedulable
from controlplane.scheduler.plugins.tainttoleration import TaintToleration
from controlplane.scheduler.queue import (
    ASSIGNED_POD_DELETE,
    NODE_ADD,
    NODE_ALLOCATABLE,
    NODE_LABEL,
    NODE_TAINT,
    ClusterEvent,
)

FILTER, SCORE, QUEUE_SORT, BIND, POST_FILTER = "filter", "score", "queueSort", "bind", "postFilter"


@dataclass(frozen=True)
class PluginSpec:
    name: str
    points: frozenset[str]
    #: the weight upstream's default profile gives it as a score plug-in
    default_weight: int = 1
    #: the plug-in object, from its parsed args: a byte-mask filter, and a normalized score
    #: plug-in when it also scores (None: the kernel runs it, or it neither filters nor scores)
    mask: Callable[[Any], MaskFilter] | None = None
    #: validates and defaults its args (raises the plug-in module's ArgsError)
    args: Callable[[Mapping[str, Any] | None, str], object] | None = None
    #: cluster events that may make a pod it rejected schedulable (upstream's EventsToRegister)
    events: frozenset[ClusterEvent] = frozenset()


REGISTRY: dict[str, PluginSpec] = {
    spec.name: spec
    for spec in (
        PluginSpec("PrioritySort", frozenset({QUEUE_SORT})),
        PluginSpec(
            "NodeUnschedulable",
            frozenset({FILTER}),
            mask=lambda _: NodeUnschedulable(),
            events=frozenset({NODE_ADD, NODE_TAINT}),
        ),
        PluginSpec("NodeName", frozenset({FILTER}), mask=lambda _: NodeName(), events=frozenset({NODE_ADD})),
        PluginSpec(
            "TaintToleration",
            frozenset({FILTER, SCORE}),
            default_weight=3,
            mask=lambda _: TaintToleration(),
            events=frozenset({NODE_ADD, NODE_TAINT}),
        ),
        PluginSpec(
            nodeaffinity.NAME,
            frozenset({FILTER, SCORE}),
            default_weight=2,
            mask=nodeaffinity.NodeAffinity,
            args=nodeaffinity.added_affinity,
            events=frozenset({NODE_ADD, NODE_LABEL}),
        ),
        PluginSpec(
            "NodePorts",
            frozenset({FILTER}),
            mask=lambda _: NodePorts(),
            events=frozenset({NODE_ADD, ASSIGNED_POD_DELETE}),
        ),
        PluginSpec(
            noderesources.FIT,
            frozenset({FILTER, SCORE}),
            args=noderesources.fit_args,
            events=frozenset({NODE_ADD, NODE_ALLOCATABLE, ASSIGNED_POD_DELETE}),
        ),
        PluginSpec(noderesources.BALANCED, frozenset({SCORE}), args=noderesources.balanced_args),
        PluginSpec("DefaultPreemption", frozenset({POST_FILTER})),
        PluginSpec("DefaultBinder", frozenset({BIND})),
    )
}

#: upstream's default profile (multiPoint, in its order), limited to what is built here
DEFAULT_PLUGINS: tuple[tuple[str, int], ...] = (
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 0),
    (nodeaffinity.NAME, 0),
    ("NodePorts", 0),
    (noderesources.FIT, 1),
    (noderesources.BALANCED, 1),
    ("DefaultPreemption", 0),
    ("DefaultBinder", 0),
)


def plugin_events() -> dict[str, frozenset[ClusterEvent]]:
    """Each plug-in's registered events, for the scheduling queue."""
    return {name: spec.events for name, spec in REGISTRY.items() if spec.events}
