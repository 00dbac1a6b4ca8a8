"""BatchResource: BE pods' CPU and memory cgroups from their batch resources.

For pods labelled ``koordinator.sh/qosClass=BE`` (pod and container levels), from
``kubernetes.io/batch-cpu`` (milli-cores) and ``kubernetes.io/batch-memory`` (bytes) —
read from the container specs, or from the ``node.koordinator.sh/extended-resource-spec``
annotation when the webhook recorded them there:

* ``cpu.shares = max(2, min(262144, requests * 1024 / 1000))`` (no request: 2);
* CFS quota = ``limits * 100000 / 1000`` µs, at least 1000, unlimited (-1) when a container
  has no limit, divided by the node's CPU normalization ratio when above 1 (rounded up),
  and unlimited while CPUSuppress runs with the ``cfsQuota`` policy (it owns the quota);
* memory limit = Σ limits, unlimited (-1) when a container has none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.node import get_cpu_normalization_ratio
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY, get_extended_resource_spec
from koordinator.api.quantity import Quantity, QuantityError
from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts, PodContext, Resources
from koordlet.statesinformer.podmeta import PodMeta

NAME = "BatchResource"
MIN_SHARES, MAX_SHARES = 2, 262144
MIN_QUOTA = 1000
CFS_PERIOD = 100_000
#: (container name, requests, limits)
Entry = tuple[str, Mapping[str, Any], Mapping[str, Any]]


def milli_to_shares(milli: int) -> int:
    """The kubelet's ``MilliCPUToShares``."""
    if milli == 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli * 1024 // 1000))


def milli_to_quota(milli: int) -> int:
    """The kubelet's ``MilliCPUToQuota`` (period 100 ms): -1 for no limit, at least 1000 µs."""
    if milli <= 0:
        return -1
    return max(MIN_QUOTA, milli * CFS_PERIOD // 1000)


def _value(resources: Mapping[str, Any] | None, name: str) -> int | None:
    raw = (resources or {}).get(name)
    if raw is None:
        return None
    try:
        return Quantity.parse(str(raw)).value()
    except QuantityError:
        return None


def _containers(pod: PodMeta) -> Iterable[Entry]:
    """(name, requests, limits) of each app container, annotation first (as upstream)."""
    try:
        spec = get_extended_resource_spec(pod.annotations)
    except (AnnotationError, ValueError):
        spec = None
    by_name = spec.containers if spec is not None else {}
    for container in (pod.pod.get("spec") or {}).get("containers") or ():
        name = str(container.get("name", ""))
        resources = container.get("resources") or {}
        if name in by_name:
            recorded = by_name[name]
            yield name, recorded.requests, recorded.limits
        else:
            yield name, resources.get("requests") or {}, resources.get("limits") or {}


def is_batch(pod: PodMeta) -> bool:
    return get_pod_qos_class_raw(pod.pod) is QoSClass.BE


def _suppress_owns_quota(node: NodeFacts) -> bool:
    threshold = node.node_slo.resource_used_threshold_with_be
    return bool(threshold and threshold.enable and threshold.cpu_suppress_policy == "cfsQuota")


def _quota(node: NodeFacts, quota: int) -> int:
    if _suppress_owns_quota(node):
        return -1
    try:
        ratio = get_cpu_normalization_ratio(((node.node or {}).get("metadata") or {}).get("annotations"))
    except (AnnotationError, ValueError):
        ratio = None
    if quota > 0 and ratio is not None and ratio > 1:
        return math.ceil(quota / ratio)
    return quota


def _resources(node: NodeFacts, entries: Iterable[Entry]) -> Resources:
    requests = 0
    limit_cpu, limit_memory = 0, 0
    unlimited_cpu = unlimited_memory = False
    count = 0
    for _, req, lim in entries:
        count += 1
        requests += _value(req, BATCH_CPU) or 0
        cpu = _value(lim, BATCH_CPU)
        memory = _value(lim, BATCH_MEMORY)
        if cpu is None or cpu <= 0:
            unlimited_cpu = True
        else:
            limit_cpu += cpu
        if memory is None or memory <= 0:
            unlimited_memory = True
        else:
            limit_memory += memory
    if count == 0:
        unlimited_cpu = unlimited_memory = True
    quota = -1 if unlimited_cpu else milli_to_quota(limit_cpu)
    return Resources(
        cpu_shares=milli_to_shares(requests),
        cfs_quota=_quota(node, quota),
        memory_limit=-1 if unlimited_memory else limit_memory,
    )


class BatchResource(HookBase):
    NAME = NAME
    GATE = NAME

    def pod(self, ctx: PodContext) -> None:
        if not is_batch(ctx.pod):
            return
        planned = _resources(ctx.node, _containers(ctx.pod))
        response = ctx.response.resources
        response.cpu_shares, response.cfs_quota, response.memory_limit = (
            planned.cpu_shares,
            planned.cfs_quota,
            planned.memory_limit,
        )

    def container(self, ctx: ContainerContext) -> None:
        if not is_batch(ctx.pod) or ctx.container.init:
            return
        mine = [c for c in _containers(ctx.pod) if c[0] == ctx.container.name]
        if not mine:
            return
        planned = _resources(ctx.node, mine)
        response = ctx.response.resources
        response.cpu_shares, response.cfs_quota, response.memory_limit = (
            planned.cpu_shares,
            planned.cfs_quota,
            planned.memory_limit,
        )
