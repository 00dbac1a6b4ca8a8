"""BatchResource: ``kubernetes.io/batch-cpu`` and ``batch-memory``, what batch pods may use.

Per resource, with every term floored at zero at the end::

    safetyMargin   = capacity * (100 - reclaimThresholdPercent) / 100
    nodeReserved   = max(capacity - allocatable (kubelet), node.koordinator.sh/reservation)
    systemUsed     = NodeMetric systemUsage + usage of host applications above batch priority
    sys'           = max(systemUsed, nodeReserved)

    usage           = capacity - safetyMargin - sys'         - sum(HP used)
    request         = capacity - safetyMargin - nodeReserved - sum(HP requests)
    maxUsageRequest = capacity - safetyMargin - sys'         - sum(max(HP request, HP used))

"HP" (high priority) pods are the Running and Pending pods whose priority class (with its
default) is neither batch nor free. A pod's *used* is its NodeMetric usage, or its request
when the koordlet has not reported it yet; an LSE pod counts its CPU request (its CPUs are
not shared) and its memory usage. Usage reported for pods that are no longer listed, or
no longer Running or Pending (a pod that just finished: as upstream, only an active pod
claims its metric), counts as HP usage ("dangling" metrics) unless the koordlet reported
them as batch or free; it leaves the NodeMetric with the koordlet's next report.

CPU follows ``cpuCalculatePolicy`` (``usage`` or ``maxUsageRequest``), memory
``memoryCalculatePolicy`` (``usage``, ``request`` or ``maxUsageRequest``).
``batchCPUThresholdPercent``/``batchMemoryThresholdPercent``, when set, cap the result at
that share of capacity. The results are batch-cpu in milli-cores and batch-memory in bytes.

Fixed upstream bug: under ``maxUsageRequest`` upstream leaves HP pods that have no metric
yet (typically just scheduled) out of ``sum(max(request, used))`` at node level -- its
NUMA-level path counts them -- so a node that just received a large prod pod offers its
request to batch pods as well until the koordlet reports it. Here such a pod counts with
its request, as under the ``usage`` policy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controlplane.manager.controllers.noderesource.steps import Trace, format_cpu, format_memory
from controlplane.manager.controllers.noderesource.views import (
    CPUMemory,
    NodeMetricView,
    NodeView,
    PodView,
    scale_milli,
    scale_value,
)
from koordinator.api.extension.priority import DEFAULT_PRIORITY_VALUE, PriorityClass, priority_class_by_name
from koordinator.api.extension.qos import QoSClass
from koordinator.api.sloconfig.types import ColocationStrategy

__all__ = ["NAME", "BatchAllocatable", "calculate_batch", "host_apps_above", "safety_margin"]

NAME = "BatchResource"
POLICY_USAGE = "usage"
POLICY_REQUEST = "request"
POLICY_MAX_USAGE_REQUEST = "maxUsageRequest"

_LOW_PRIORITY = frozenset({PriorityClass.BATCH.value, PriorityClass.FREE.value})
_LOW_PRIORITY_CLASSES = frozenset({PriorityClass.BATCH, PriorityClass.FREE})


@dataclass(frozen=True, slots=True)
class BatchAllocatable:
    #: milli-cores
    cpu: int
    #: bytes
    memory: int


def safety_margin(strategy: ColocationStrategy, capacity: CPUMemory) -> CPUMemory:
    """``capacity * (100 - reclaimThresholdPercent) / 100`` with upstream's float rounding.
    A percent above 100 (a node's ``colocation-strategy`` annotation or ``cpu-reclaim-ratio``
    label above 1) counts as 100: a negative margin would hand out more than the node has."""
    cpu_percent = min(strategy.cpu_reclaim_threshold_percent or 0, 100)
    memory_percent = min(strategy.memory_reclaim_threshold_percent or 0, 100)
    return CPUMemory(
        scale_milli(capacity.cpu, (100 - cpu_percent) / 100),
        scale_value(capacity.memory, (100 - memory_percent) / 100),
    )


def host_apps_above(metric: NodeMetricView, tier: PriorityClass) -> tuple[CPUMemory, list[str]]:
    """Usage of the host applications whose priority is above ``tier`` (they eat the node's reserve)."""
    floor = DEFAULT_PRIORITY_VALUE[tier]
    total = CPUMemory()
    names = []
    for app in metric.host_apps:
        if DEFAULT_PRIORITY_VALUE[priority_class_by_name(app.priority)] <= floor:
            continue
        total = total + CPUMemory(app.cpu, app.memory)
        names.append(app.name)
    return total, names


def by_policy(
    strategy: ColocationStrategy, by_usage: CPUMemory, by_request: CPUMemory, by_max: CPUMemory
) -> tuple[int, int]:
    """(milli-cores, bytes): the results the strategy's CPU and memory calculate policies
    pick (CPU: usage or maxUsageRequest; memory: usage, request or maxUsageRequest)."""
    cpu = (by_max if strategy.cpu_calculate_policy == POLICY_MAX_USAGE_REQUEST else by_usage).milli_cpu
    memory_policy = strategy.memory_calculate_policy
    if memory_policy == POLICY_REQUEST:
        return cpu, by_request.memory_bytes
    if memory_policy == POLICY_MAX_USAGE_REQUEST:
        return cpu, by_max.memory_bytes
    return cpu, by_usage.memory_bytes


def _cap(result: int, capacity_milli_or_value: int, percent: int | None) -> int:
    return result if percent is None else min(result, capacity_milli_or_value)


def calculate_batch(
    strategy: ColocationStrategy,
    node: NodeView,
    metric: NodeMetricView,
    pods: Iterable[PodView],
    trace: Trace | None = None,
) -> BatchAllocatable:
    """batch-cpu (milli-cores) and batch-memory (bytes) of a node whose NodeMetric is fresh."""
    # The pod loop runs for every pod of every node on each recompute: plain integers only.
    hp_req_cpu = hp_req_mem = hp_used_cpu = hp_used_mem = hp_max_cpu = hp_max_mem = 0
    hp_count = unreported = 0
    usages = metric.pods
    listed: set[str] = set()
    get_usage = usages.get
    low = _LOW_PRIORITY_CLASSES
    lse = QoSClass.LSE
    for key, _, active, priority, qos, req_cpu, req_mem, _ in pods:
        if not active:
            continue
        used = get_usage(key)
        if used is not None:
            listed.add(key)
        if priority in low:
            continue
        hp_count += 1
        hp_req_cpu += req_cpu
        hp_req_mem += req_mem
        if used is None:
            unreported += 1
            hp_used_cpu += req_cpu
            hp_used_mem += req_mem
            # upstream leaves these out of the max(request, used) sum; see the module docstring
            hp_max_cpu += req_cpu
            hp_max_mem += req_mem
            continue
        used_cpu, used_mem, _ = used
        # an LSE pod's CPUs are its own: it counts its request whatever it uses
        hp_used_cpu += req_cpu if qos is lse else used_cpu
        hp_used_mem += used_mem
        hp_max_cpu += req_cpu if req_cpu > used_cpu else used_cpu
        hp_max_mem += req_mem if req_mem > used_mem else used_mem
    dangling_cpu = dangling_mem = dangling_count = 0
    if len(listed) != len(usages):
        for key, used in usages.items():
            if key in listed or used.priority in _LOW_PRIORITY:
                continue
            dangling_count += 1
            dangling_cpu += used.cpu
            dangling_mem += used.memory
    hp_request = CPUMemory(hp_req_cpu, hp_req_mem)
    hp_used = CPUMemory(hp_used_cpu + dangling_cpu, hp_used_mem + dangling_mem)
    hp_max = CPUMemory(hp_max_cpu + dangling_cpu, hp_max_mem + dangling_mem)

    capacity = node.capacity
    margin = safety_margin(strategy, capacity)
    host_apps, host_app_names = host_apps_above(metric, PriorityClass.BATCH)
    system_used = metric.system_usage + host_apps
    node_reserved = node.kubelet_reserved.max(node.annotation_reserved)
    system_or_reserved = system_used.max(node_reserved)

    by_usage = (capacity - margin - system_or_reserved - hp_used).floor()
    by_request = (capacity - margin - node_reserved - hp_request).floor()
    by_max = (capacity - margin - system_or_reserved - hp_max).floor()

    cpu_policy = strategy.cpu_calculate_policy or POLICY_USAGE
    memory_policy = strategy.memory_calculate_policy or POLICY_USAGE
    cpu, memory = by_policy(strategy, by_usage, by_request, by_max)
    uncapped_cpu, uncapped_memory = cpu, memory
    cpu_cap_percent = strategy.batch_cpu_threshold_percent
    memory_cap_percent = strategy.batch_memory_threshold_percent
    cpu_cap = scale_milli(capacity.cpu, (cpu_cap_percent or 0) / 100) // 10**6
    memory_cap = scale_value(capacity.memory, (memory_cap_percent or 0) / 100) // 10**9
    cpu = _cap(cpu, cpu_cap, cpu_cap_percent)
    memory = _cap(memory, memory_cap, memory_cap_percent)

    if trace is not None:
        _explain(
            trace,
            strategy,
            node,
            metric,
            capacity=capacity,
            margin=margin,
            host_apps=host_apps,
            host_app_names=host_app_names,
            system_used=system_used,
            node_reserved=node_reserved,
            system_or_reserved=system_or_reserved,
            hp_request=hp_request,
            hp_used=hp_used,
            hp_max=hp_max,
            counts=(hp_count, unreported, dangling_count, CPUMemory(dangling_cpu, dangling_mem)),
            policies=(cpu_policy, memory_policy),
            by=(by_usage, by_request, by_max),
            uncapped=(uncapped_cpu, uncapped_memory),
            caps=(cpu_cap, memory_cap),
            result=(cpu, memory),
        )
    return BatchAllocatable(cpu, memory)


def _formula(policy: str, resource: str) -> str:
    if policy == POLICY_REQUEST:
        return f"capacity - safetyMargin - nodeReserved - podsHPRequest ({resource} policy request)"
    if policy == POLICY_MAX_USAGE_REQUEST:
        return (
            f"capacity - safetyMargin - max(systemUsed, nodeReserved) - podsHPMaxUsedRequest "
            f"({resource} policy maxUsageRequest)"
        )
    return f"capacity - safetyMargin - max(systemUsed, nodeReserved) - podsHPUsed ({resource} policy usage)"


def _explain(
    trace: Trace,
    strategy: ColocationStrategy,
    node: NodeView,
    metric: NodeMetricView,
    *,
    capacity: CPUMemory,
    margin: CPUMemory,
    host_apps: CPUMemory,
    host_app_names: list[str],
    system_used: CPUMemory,
    node_reserved: CPUMemory,
    system_or_reserved: CPUMemory,
    hp_request: CPUMemory,
    hp_used: CPUMemory,
    hp_max: CPUMemory,
    counts: tuple[int, int, int, CPUMemory],
    policies: tuple[str, str],
    by: tuple[CPUMemory, CPUMemory, CPUMemory],
    uncapped: tuple[int, int],
    caps: tuple[int, int],
    result: tuple[int, int],
) -> None:
    hp_count, unreported, dangling_count, dangling = counts
    cpu_policy, memory_policy = policies
    by_usage, by_request, by_max = by
    trace.amounts("batch.capacity", capacity, "node status.capacity")
    trace.amounts(
        "batch.safetyMargin",
        margin,
        f"capacity x (100 - reclaimThresholdPercent)/100: cpu {strategy.cpu_reclaim_threshold_percent}%, "
        f"memory {strategy.memory_reclaim_threshold_percent}%",
    )
    trace.amounts(
        "batch.kubeletReserved",
        node.kubelet_reserved,
        "capacity - allocatable (raw-allocatable when amplified)",
    )
    trace.amounts(
        "batch.annotationReserved",
        node.annotation_reserved,
        "node annotation node.koordinator.sh/reservation",
    )
    trace.amounts("batch.nodeReserved", node_reserved, "max(kubeletReserved, annotationReserved)")
    trace.amounts("batch.systemUsage", metric.system_usage, "NodeMetric status.nodeMetric.systemUsage")
    trace.amounts(
        "batch.hostApplications",
        host_apps,
        "host applications above batch priority: " + (", ".join(host_app_names) or "none"),
    )
    trace.amounts("batch.systemUsed", system_used, "systemUsage + hostApplications")
    trace.amounts("batch.systemUsedOrReserved", system_or_reserved, "max(systemUsed, nodeReserved)")
    trace.amounts(
        "batch.podsHPRequest",
        hp_request,
        f"requests of {hp_count} running/pending pod(s) neither batch nor free",
    )
    trace.amounts(
        "batch.podsHPUsed",
        hp_used,
        f"their NodeMetric usage (request for {unreported} pod(s) not reported yet; LSE pods count "
        f"their CPU request) + {dangling_count} dangling pod metric(s) "
        f"({format_cpu(dangling.milli_cpu)}, {format_memory(dangling.memory_bytes)})",
    )
    trace.amounts("batch.podsHPMaxUsedRequest", hp_max, "sum of max(request, used) over the same pods")
    trace.values("batch.byUsage", by_usage.milli_cpu, by_usage.memory_bytes, _formula(POLICY_USAGE, "any"))
    trace.values("batch.byRequest", None, by_request.memory_bytes, _formula(POLICY_REQUEST, "memory"))
    trace.values(
        "batch.byMaxUsageRequest",
        by_max.milli_cpu,
        by_max.memory_bytes,
        _formula(POLICY_MAX_USAGE_REQUEST, "any"),
    )
    trace.values(
        "batch.policy",
        uncapped[0],
        uncapped[1],
        f"cpuCalculatePolicy {cpu_policy}, memoryCalculatePolicy {memory_policy}",
    )
    cpu_percent = strategy.batch_cpu_threshold_percent
    memory_percent = strategy.batch_memory_threshold_percent
    trace.values(
        "batch.threshold",
        caps[0] if cpu_percent is not None else None,
        caps[1] if memory_percent is not None else None,
        "capacity x batchCPUThresholdPercent / batchMemoryThresholdPercent: "
        f"{'unset' if cpu_percent is None else f'{cpu_percent}%'} / "
        f"{'unset' if memory_percent is None else f'{memory_percent}%'}",
    )
    trace.values("batch.result", result[0], result[1], "kubernetes.io/batch-cpu, kubernetes.io/batch-memory")
