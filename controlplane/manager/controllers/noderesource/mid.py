"""MidResource: ``kubernetes.io/mid-cpu`` and ``mid-memory``, what mid-priority pods may use.

``midReclaimMode: static``::

    mid = min(capacity * midStatic<R>ReservedPercent/100, capacity * mid<R>ThresholdPercent/100)

otherwise (dynamic, the default)::

    prodReclaimable = NodeMetric status.prodReclaimableMetric (0 when not reported)
    nodeUnused      = capacity - NodeMetric nodeUsage (0 when node usage is not reported)
    reserved        = max(kubeletReserved, annotationReserved,
                          systemUsage + usage of host applications above mid priority)
    unallocated     = max(capacity - reserved - sum(requests of running/pending pods that are
                          neither mid, batch nor free), 0)
    mid = min(min(prodReclaimable, nodeUnused) + unallocated * midUnallocatedPercent/100,
              capacity * mid<R>ThresholdPercent/100)

floored at zero; mid-cpu in milli-cores, mid-memory in bytes.

The threshold bounds the whole result, as upstream documents the formula. Upstream's code
applies it to the reclaimable part only and adds the unallocated share afterwards, so with
``midUnallocatedPercent`` above zero its mid resources can exceed ``mid<R>ThresholdPercent``
of the node; here they cannot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controlplane.manager.controllers.noderesource.batch import host_apps_above
from controlplane.manager.controllers.noderesource.steps import Trace
from controlplane.manager.controllers.noderesource.views import (
    CPUMemory,
    NodeMetricView,
    NodeView,
    PodView,
    scale_milli,
    scale_value,
)
from koordinator.api.extension.priority import PriorityClass
from koordinator.api.sloconfig.types import ColocationStrategy

__all__ = ["NAME", "MidAllocatable", "calculate_mid"]

NAME = "MidResource"
STATIC = "static"

_NOT_PROD = frozenset({PriorityClass.MID, PriorityClass.BATCH, PriorityClass.FREE})


@dataclass(frozen=True, slots=True)
class MidAllocatable:
    #: milli-cores
    cpu: int
    #: bytes
    memory: int


def _percent(value: int | None, default: int) -> float:
    return (default if value is None else value) / 100


def _trace_threshold(
    trace: Trace, cpu: int, memory: int, cpu_threshold: float, memory_threshold: float
) -> None:
    trace.values(
        "mid.threshold",
        cpu,
        memory,
        f"capacity x midCPUThresholdPercent {round(cpu_threshold * 100)}% / "
        f"midMemoryThresholdPercent {round(memory_threshold * 100)}%",
    )


def calculate_mid(
    strategy: ColocationStrategy,
    node: NodeView,
    metric: NodeMetricView,
    pods: Iterable[PodView],
    trace: Trace | None = None,
) -> MidAllocatable:
    """mid-cpu (milli-cores) and mid-memory (bytes) of a node whose NodeMetric is fresh."""
    capacity = node.capacity
    cpu_threshold = _percent(strategy.mid_cpu_threshold_percent, 100)
    memory_threshold = _percent(strategy.mid_memory_threshold_percent, 100)
    cap_cpu = scale_milli(capacity.cpu, cpu_threshold) // 10**6
    cap_memory = scale_value(capacity.memory, memory_threshold) // 10**9
    if strategy.mid_reclaim_mode == STATIC:
        static_cpu = scale_milli(capacity.cpu, _percent(strategy.mid_static_cpu_reserved_percent, 0)) // 10**6
        static_memory = (
            scale_value(capacity.memory, _percent(strategy.mid_static_memory_reserved_percent, 0)) // 10**9
        )
        cpu = max(min(static_cpu, cap_cpu), 0)
        memory = max(min(static_memory, cap_memory), 0)
        if trace is not None:
            trace.amounts("mid.capacity", capacity, "node status.capacity")
            trace.values(
                "mid.staticReserved",
                static_cpu,
                static_memory,
                f"capacity x midStaticCPUReservedPercent {strategy.mid_static_cpu_reserved_percent or 0}% / "
                f"midStaticMemoryReservedPercent {strategy.mid_static_memory_reserved_percent or 0}% "
                "(midReclaimMode static)",
            )
            _trace_threshold(trace, cap_cpu, cap_memory, cpu_threshold, memory_threshold)
            trace.values("mid.result", cpu, memory, "min(staticReserved, threshold)")
        return MidAllocatable(cpu, memory)

    reclaimable = metric.prod_reclaimable or CPUMemory()
    unused = (capacity - metric.node_usage) if metric.node_usage is not None else CPUMemory()
    host_apps, host_app_names = host_apps_above(metric, PriorityClass.MID)
    system_used = metric.system_usage + host_apps
    reserved = node.kubelet_reserved.max(node.annotation_reserved).max(system_used)
    prod_cpu = prod_memory = prod_count = 0
    not_prod = _NOT_PROD
    for _, _, active, priority, _, req_cpu, req_mem, _ in pods:
        if active and priority not in not_prod:
            prod_count += 1
            prod_cpu += req_cpu
            prod_memory += req_mem
    prod_allocated = CPUMemory(prod_cpu, prod_memory)
    unallocated = (capacity - reserved - prod_allocated).floor()
    unallocated_ratio = _percent(strategy.mid_unallocated_percent, 0)

    base_cpu = max(min(reclaimable.milli_cpu, unused.milli_cpu), 0)
    base_memory = max(min(reclaimable.memory_bytes, unused.memory_bytes), 0)
    share_cpu = scale_milli(unallocated.cpu, unallocated_ratio) // 10**6
    share_memory = scale_value(unallocated.memory, unallocated_ratio) // 10**9
    cpu = max(min(base_cpu + share_cpu, cap_cpu), 0)
    memory = max(min(base_memory + share_memory, cap_memory), 0)

    if trace is not None:
        trace.amounts("mid.capacity", capacity, "node status.capacity")
        trace.amounts(
            "mid.prodReclaimable",
            reclaimable,
            "NodeMetric status.prodReclaimableMetric"
            + ("" if metric.prod_reclaimable is not None else " (not reported: 0)"),
        )
        trace.amounts(
            "mid.nodeUnused",
            unused,
            "capacity - NodeMetric nodeUsage"
            + ("" if metric.node_usage is not None else " (node usage not reported: 0)"),
        )
        trace.amounts(
            "mid.systemUsed",
            system_used,
            "systemUsage + host applications above mid priority: " + (", ".join(host_app_names) or "none"),
        )
        trace.amounts("mid.reserved", reserved, "max(kubeletReserved, annotationReserved, systemUsed)")
        trace.amounts(
            "mid.prodAllocated",
            prod_allocated,
            f"requests of {prod_count} running/pending pod(s) neither mid, batch nor free",
        )
        trace.amounts("mid.unallocated", unallocated, "max(capacity - reserved - prodAllocated, 0)")
        trace.values(
            "mid.reclaimable",
            base_cpu,
            base_memory,
            "max(min(prodReclaimable, nodeUnused), 0)",
        )
        trace.values(
            "mid.unallocatedShare",
            share_cpu,
            share_memory,
            f"unallocated x midUnallocatedPercent {round(unallocated_ratio * 100)}%",
        )
        _trace_threshold(trace, cap_cpu, cap_memory, cpu_threshold, memory_threshold)
        trace.values(
            "mid.result",
            cpu,
            memory,
            "min(reclaimable + unallocatedShare, threshold): kubernetes.io/mid-cpu, kubernetes.io/mid-memory",
        )
    return MidAllocatable(cpu, memory)
