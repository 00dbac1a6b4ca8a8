"""CPUNormalization: LS pods' CFS quota scaled by the node's CPU normalization ratio.

The slo-controller writes ``node.koordinator.sh/cpu-normalization-ratio`` on nodes whose
CPUs are faster than the cluster's baseline. On such a node a CPU limit buys more work
than elsewhere, so the pods that share CPUs (QoS LS, or no Koordinator QoS and no cpuset in
their ``resource-status``) get the quota of their limits divided by the ratio, rounded up:
``ceil(quota / ratio)`` where the ratio is above 1, the quota of the limits where it is not
(which also brings a quota back when the ratio falls). The quota of the limits is the
kubelet's (``MilliCPUToQuota``, 100 ms period, at least 1 ms): per container, its CPU
limit; per pod, as the kubelet sizes the pod cgroup (see :func:`pod_limit_milli`). A pod or
container without a CPU limit has no quota and is left alone. A ratio of -1 turns the hook
off for the node.

Normalization turned off: upstream's slo-controller writes ``1.00`` on every node, ours
removes the annotation; this hook treats no annotation as upstream's koordlet treats
``1.00`` (the limits' quota), so with either manager the quotas come back.

As upstream, nothing is done while the CPUBurst gate is on (that strategy owns LS quotas),
and a malformed ratio keeps the last good one. Two deliberate differences:

* upstream computes a pod's quota from the containers that have limits even when one has
  none, and so writes a quota on a pod cgroup the kubelet left unlimited (throttling the
  container without a limit); here such a pod keeps no quota, as the kubelet set it;
* upstream adjusts only in its reconciler (its NRI and proxy requests carry no original
  resources); here the quota comes from the pod spec in every transport, so a container
  created through NRI or the runtime proxy starts with its normalized quota instead of
  getting it at the next reconcile.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.node import get_cpu_normalization_ratio
from koordinator.api.extension.numa import get_resource_status
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.quantity import Quantity, QuantityError
from koordinator.api.resourcelist import ResourceListError, pod_limits
from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.hooks.batchresource import milli_to_quota
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts, PodContext
from koordlet.statesinformer.podmeta import PodMeta

NAME = "CPUNormalization"
#: the gate of the strategy that owns LS quotas while it is on
CPU_BURST_GATE = "CPUBurst"
#: the annotation value that turns the hook off for the node
DISABLED = -1.0
#: the ratio of a node without the annotation (normalization off: the limits' quota)
UNSET = 1.0

log = logging.getLogger(__name__)


def _cpu_limit_milli(container: Mapping[str, Any]) -> int | None:
    """The container's CPU limit in milli-cores; None without one (or an unparsable one)."""
    raw = ((container.get("resources") or {}).get("limits") or {}).get("cpu")
    if raw is None:
        return None
    try:
        milli = Quantity.parse(str(raw)).milli_value()
    except QuantityError:
        return None
    return milli if milli > 0 else None


def pod_limit_milli(pod: Mapping[str, Any]) -> int | None:
    """The pod's CPU limit as the kubelet sizes the pod cgroup: None when a container
    (an init container too) has none, as the kubelet then sets no pod quota; else the
    pod's effective CPU limit (:func:`~koordinator.api.resourcelist.pod_limits`: app
    containers and sidecars, or an init container with the sidecars started before it,
    plus the overhead)."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    if not spec.get("containers") or any(_cpu_limit_milli(c) is None for c in containers):
        return None
    try:
        return pod_limits(pod)["cpu"].milli_value()
    except ResourceListError:
        return None


def shares_cpus(pod: PodMeta) -> bool:
    """LS, or no Koordinator QoS and no cpuset of its own (upstream's isPodCPUShare)."""
    qos = get_pod_qos_class_raw(pod.pod)
    if qos is QoSClass.NONE:
        try:
            return not get_resource_status(pod.annotations).cpuset
        except (AnnotationError, ValueError):
            return True
    return qos is QoSClass.LS


def normalized(quota: int, ratio: float) -> int:
    """``ceil(quota / ratio)`` where the ratio is above 1; the quota itself otherwise."""
    return math.ceil(quota / ratio) if ratio > 1 else quota


class CPUNormalization(HookBase):
    NAME = NAME
    GATE = NAME

    def __init__(self) -> None:
        #: the last ratio read from the node (a malformed annotation keeps it)
        self._ratio = DISABLED
        #: the malformed annotation last warned about (one warning, not one per pod)
        self._warned: str | None = None

    def _current_ratio(self, node: NodeFacts) -> float:
        annotations = ((node.node or {}).get("metadata") or {}).get("annotations")
        try:
            ratio = get_cpu_normalization_ratio(annotations)
        except AnnotationError as err:
            if str(err) != self._warned:
                self._warned = str(err)
                kept = (
                    "normalization stays off"
                    if self._ratio == DISABLED
                    else f"keeping the ratio {self._ratio}"
                )
                log.warning("%s: %s; %s", NAME, err, kept)
            return self._ratio
        self._warned = None
        self._ratio = UNSET if ratio is None else ratio
        return self._ratio

    def _applies(self, node: NodeFacts, pod: PodMeta) -> float | None:
        """The ratio to apply to ``pod``, or None when the hook leaves it alone."""
        if node.gates.enabled(CPU_BURST_GATE) or not shares_cpus(pod):
            return None
        ratio = self._current_ratio(node)
        return None if ratio == DISABLED else ratio

    def pod(self, ctx: PodContext) -> None:
        ratio = self._applies(ctx.node, ctx.pod)
        milli = None if ratio is None else pod_limit_milli(ctx.pod.pod)
        if ratio is not None and milli is not None:
            ctx.response.resources.cfs_quota = normalized(milli_to_quota(milli), ratio)

    def container(self, ctx: ContainerContext) -> None:
        if ctx.container.init:
            return
        ratio = self._applies(ctx.node, ctx.pod)
        if ratio is None:
            return
        specs: Iterable[Mapping[str, Any]] = (ctx.pod.pod.get("spec") or {}).get("containers") or ()
        spec = next((c for c in specs if c.get("name") == ctx.container.name), None)
        milli = None if spec is None else _cpu_limit_milli(spec)
        if milli is not None:
            ctx.response.resources.cfs_quota = normalized(milli_to_quota(milli), ratio)
