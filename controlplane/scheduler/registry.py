"""The one table of scheduler plug-ins: each name, the extension points it serves, its
default weight as a score plug-in, and how its args are validated.

Upstream's default profile enables more plug-ins than are built here; a configuration that
names one that is not built is refused with a clear error rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.informers import NODE_METRICS
from controlplane.scheduler.plugins import (
    coscheduling,
    defaultbinder,
    defaultprebind,
    deviceshare,
    elasticquota,
    fitplus,
    imagelocality,
    interpodaffinity,
    nodeaffinity,
    nodenumaresource,
    noderesources,
    nodevolumelimits,
    podtopologyspread,
    reservation,
    scarceresource,
    schedulinggates,
    schedulinghint,
    volumebinding,
)
from controlplane.scheduler.plugins.coscheduling import GANG_CHANGE, Coscheduling
from controlplane.scheduler.plugins.defaultbinder import DefaultBinder
from controlplane.scheduler.plugins.defaultprebind import DefaultPreBind
from controlplane.scheduler.plugins.deviceshare import DEVICE_CHANGE, DeviceShare
from controlplane.scheduler.plugins.elasticquota import QUOTA_CHANGE, ElasticQuota
from controlplane.scheduler.plugins.fitplus import NodeResourcesFitPlus
from controlplane.scheduler.plugins.imagelocality import ImageLocality
from controlplane.scheduler.plugins.interpodaffinity import InterPodAffinity
from controlplane.scheduler.plugins.loadaware import args as loadaware_args
from controlplane.scheduler.plugins.loadaware.plugin import LoadAwareScheduling
from controlplane.scheduler.plugins.nodename import NodeName
from controlplane.scheduler.plugins.nodenumaresource import NRT_CHANGE, NodeNUMAResource
from controlplane.scheduler.plugins.nodeports import NodePorts
from controlplane.scheduler.plugins.nodeunschedulable import NodeUnschedulable
from controlplane.scheduler.plugins.nodevolumelimits import NodeVolumeLimits
from controlplane.scheduler.plugins.podtopologyspread import PodTopologySpread
from controlplane.scheduler.plugins.reservation import RESERVATION_CHANGE, Reservation
from controlplane.scheduler.plugins.scarceresource import ScarceResourceAvoidance
from controlplane.scheduler.plugins.schedulinggates import SchedulingGates
from controlplane.scheduler.plugins.schedulinghint import SchedulingHint
from controlplane.scheduler.plugins.tainttoleration import TaintToleration
from controlplane.scheduler.plugins.volumebinding import VolumeBinding
from controlplane.scheduler.queue import (
    ASSIGNED_POD_ADD,
    ASSIGNED_POD_DELETE,
    ASSIGNED_POD_LABEL,
    CSI_NODE_ADD,
    CSI_NODE_UPDATE,
    NODE_ADD,
    NODE_ALLOCATABLE,
    NODE_DELETE,
    NODE_LABEL,
    NODE_METRIC_CHANGE,
    NODE_TAINT,
    POD_GATES_REMOVED,
    PV_ADD,
    PV_UPDATE,
    PVC_ADD,
    PVC_UPDATE,
    STORAGE_CLASS_ADD,
    STORAGE_CLASS_UPDATE,
    ClusterEvent,
)

FILTER, SCORE, QUEUE_SORT, BIND, POST_FILTER = "filter", "score", "queueSort", "bind", "postFilter"
PRE_FILTER = "preFilter"
PRE_ENQUEUE, RESERVE, PERMIT, PRE_BIND, POST_BIND = "preEnqueue", "reserve", "permit", "preBind", "postBind"
#: the extension points whose plug-ins run in profile order (score has weights instead)
ORDERED_POINTS = (PRE_ENQUEUE, PRE_FILTER, FILTER, POST_FILTER, RESERVE, PERMIT, PRE_BIND, BIND, POST_BIND)


@dataclass(frozen=True)
class PluginSpec:
    name: str
    points: frozenset[str]
    #: the weight upstream's default profile gives it as a score plug-in
    default_weight: int = 1
    #: the plug-in object, from its parsed args: a byte-mask filter, a normalized score
    #: plug-in when it scores, and the methods of the other points it serves (None: the
    #: kernel runs it, or the framework itself does its part)
    factory: Callable[[Any], Any] | None = None
    #: validates and defaults its args (raises the plug-in module's ArgsError)
    args: Callable[[Mapping[str, Any] | None, str], object] | None = None
    #: cluster events that may make a pod it rejected schedulable (upstream's EventsToRegister)
    events: frozenset[ClusterEvent] = frozenset()
    #: the optional informers it reads (:data:`controlplane.scheduler.informers.OPTIONAL_FEEDS`)
    feeds: frozenset[str] = frozenset()


REGISTRY: dict[str, PluginSpec] = {
    spec.name: spec
    for spec in (
        PluginSpec("PrioritySort", frozenset({QUEUE_SORT})),
        PluginSpec(
            schedulinggates.NAME,
            frozenset({PRE_ENQUEUE}),
            factory=lambda _: SchedulingGates(),
            events=frozenset({POD_GATES_REMOVED}),
        ),
        PluginSpec(
            "NodeUnschedulable",
            frozenset({FILTER}),
            factory=lambda _: NodeUnschedulable(),
            events=frozenset({NODE_ADD, NODE_TAINT}),
        ),
        PluginSpec(
            "NodeName", frozenset({FILTER}), factory=lambda _: NodeName(), events=frozenset({NODE_ADD})
        ),
        PluginSpec(
            "TaintToleration",
            frozenset({FILTER, SCORE}),
            default_weight=3,
            factory=lambda _: TaintToleration(),
            events=frozenset({NODE_ADD, NODE_TAINT}),
        ),
        PluginSpec(
            nodeaffinity.NAME,
            frozenset({PRE_FILTER, FILTER, SCORE}),
            default_weight=2,
            factory=nodeaffinity.NodeAffinity,
            args=nodeaffinity.added_affinity,
            events=frozenset({NODE_ADD, NODE_LABEL}),
        ),
        PluginSpec(
            "NodePorts",
            frozenset({PRE_FILTER, FILTER}),
            factory=lambda _: NodePorts(),
            events=frozenset({NODE_ADD, ASSIGNED_POD_DELETE}),
        ),
        PluginSpec(
            noderesources.FIT,
            frozenset({PRE_FILTER, FILTER, SCORE}),
            args=noderesources.fit_args,
            events=frozenset({NODE_ADD, NODE_ALLOCATABLE, ASSIGNED_POD_DELETE}),
        ),
        PluginSpec(
            nodevolumelimits.NAME,
            frozenset({FILTER}),
            factory=lambda _: NodeVolumeLimits(),
            # CSINode updates too: a raised attach limit (upstream's MutableCSINodeAllocatableCount)
            events=frozenset({CSI_NODE_ADD, CSI_NODE_UPDATE, ASSIGNED_POD_DELETE, PVC_ADD}),
        ),
        PluginSpec(
            volumebinding.NAME,
            # upstream's score is off unless StorageCapacityScoring configures it: not built
            frozenset({PRE_FILTER, FILTER, RESERVE, PRE_BIND}),
            factory=VolumeBinding,
            args=volumebinding.volume_binding_args,
            events=frozenset(
                {
                    STORAGE_CLASS_ADD,
                    STORAGE_CLASS_UPDATE,
                    PVC_ADD,
                    PVC_UPDATE,
                    PV_ADD,
                    PV_UPDATE,
                    NODE_ADD,
                    NODE_LABEL,
                    NODE_TAINT,
                    CSI_NODE_ADD,
                    CSI_NODE_UPDATE,
                }
            ),
        ),
        PluginSpec(
            podtopologyspread.NAME,
            frozenset({PRE_FILTER, FILTER, SCORE}),
            default_weight=2,
            factory=PodTopologySpread,
            args=podtopologyspread.spread_args,
            events=frozenset(
                {
                    ASSIGNED_POD_ADD,
                    ASSIGNED_POD_LABEL,
                    ASSIGNED_POD_DELETE,
                    NODE_ADD,
                    NODE_DELETE,
                    NODE_LABEL,
                    NODE_TAINT,
                }
            ),
        ),
        PluginSpec(
            interpodaffinity.NAME,
            frozenset({PRE_FILTER, FILTER, SCORE}),
            default_weight=2,
            factory=InterPodAffinity,
            args=interpodaffinity.affinity_args,
            events=frozenset(
                {ASSIGNED_POD_ADD, ASSIGNED_POD_LABEL, ASSIGNED_POD_DELETE, NODE_ADD, NODE_LABEL}
            ),
        ),
        PluginSpec(noderesources.BALANCED, frozenset({SCORE}), args=noderesources.balanced_args),
        PluginSpec(
            loadaware_args.NAME,
            frozenset({FILTER, SCORE, RESERVE}),
            factory=LoadAwareScheduling,
            args=loadaware_args.load_aware_args,
            events=frozenset({NODE_METRIC_CHANGE, ASSIGNED_POD_DELETE}),
            feeds=frozenset({NODE_METRICS}),
        ),
        PluginSpec(imagelocality.NAME, frozenset({SCORE}), factory=lambda _: ImageLocality()),
        PluginSpec(
            fitplus.NAME, frozenset({SCORE}), factory=NodeResourcesFitPlus, args=fitplus.fit_plus_args
        ),
        PluginSpec(
            scarceresource.NAME,
            frozenset({SCORE}),
            factory=ScarceResourceAvoidance,
            args=scarceresource.scarce_args,
        ),
        PluginSpec("DefaultPreemption", frozenset({POST_FILTER})),
        PluginSpec(schedulinghint.NAME, frozenset({PRE_FILTER}), factory=lambda _: SchedulingHint()),
        PluginSpec(
            elasticquota.NAME,
            frozenset({PRE_FILTER, POST_FILTER, RESERVE}),
            factory=ElasticQuota,
            args=elasticquota.args,
            events=frozenset({QUOTA_CHANGE, ASSIGNED_POD_DELETE, NODE_ADD, NODE_ALLOCATABLE}),
        ),
        PluginSpec(
            coscheduling.NAME,
            frozenset({PRE_ENQUEUE, PRE_FILTER, POST_FILTER, SCORE, RESERVE, PERMIT, PRE_BIND, POST_BIND}),
            factory=Coscheduling,
            args=coscheduling.args,
            events=frozenset({GANG_CHANGE}),
        ),
        PluginSpec(
            reservation.NAME,
            # PreFilter and PostFilter: upstream's points; here the pod's view of the nodes
            # is restored before PreFilter (Framework.restored), and preemption is not built
            frozenset({PRE_FILTER, FILTER, POST_FILTER, SCORE, RESERVE, PRE_BIND, BIND}),
            default_weight=5000,
            factory=Reservation,
            args=reservation.reservation_args,
            events=frozenset({RESERVATION_CHANGE, ASSIGNED_POD_DELETE, NODE_ADD}),
        ),
        PluginSpec(
            nodenumaresource.NAME,
            frozenset({PRE_FILTER, FILTER, SCORE, RESERVE, PRE_BIND}),
            factory=NodeNUMAResource,
            args=nodenumaresource.numa_args,
            events=frozenset({NRT_CHANGE, ASSIGNED_POD_DELETE, NODE_ADD, NODE_LABEL}),
        ),
        PluginSpec(
            deviceshare.NAME,
            frozenset({PRE_FILTER, FILTER, SCORE, RESERVE, PRE_BIND}),
            factory=DeviceShare,
            args=deviceshare.device_share_args,
            events=frozenset({DEVICE_CHANGE, ASSIGNED_POD_DELETE, NODE_ADD}),
        ),
        PluginSpec(defaultprebind.NAME, frozenset({PRE_BIND}), factory=lambda _: DefaultPreBind()),
        PluginSpec(defaultbinder.NAME, frozenset({BIND}), factory=lambda _: DefaultBinder()),
    )
}

#: upstream's default profile (multiPoint, in its order), limited to what is built here
DEFAULT_PLUGINS: tuple[tuple[str, int], ...] = (
    (schedulinggates.NAME, 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 0),
    (nodeaffinity.NAME, 0),
    ("NodePorts", 0),
    (noderesources.FIT, 1),
    (nodevolumelimits.NAME, 0),
    (volumebinding.NAME, 0),
    (podtopologyspread.NAME, 0),
    (interpodaffinity.NAME, 0),
    (noderesources.BALANCED, 1),
    (imagelocality.NAME, 1),
    ("DefaultPreemption", 0),
    (defaultbinder.NAME, 0),
)


def plugin_events() -> dict[str, frozenset[ClusterEvent]]:
    """Each plug-in's registered events, for the scheduling queue."""
    return {name: spec.events for name, spec in REGISTRY.items() if spec.events}
