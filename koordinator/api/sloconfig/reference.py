"""The user reference of ``slo-controller-config``: the generated parts of docs/slo-controller-config.md.

The page is prose with generated blocks between ``<!-- BEGIN GENERATED <name> -->`` and
``<!-- END GENERATED <name> -->`` lines. Every block is rendered here from the code itself:

* the field tables from the models of :mod:`.types` (JSON names, types, ranges, enums, the
  ordering rules) and the defaults of :mod:`.config` and :mod:`.nodeslo`;
* the feature gates named in them from :mod:`koordinator.api.features` (with their defaults);
* the worked example by running the functions the slo-controller runs
  (:func:`~.config.parse_config`, :func:`~.config.colocation_strategy_for_node`,
  :func:`~.config.node_slo_spec_for_node` ...) and the koordlet's NodeSLO merge.

What the code cannot say -- what a field means, and which component of this release acts on
it -- is kept in :data:`FIELDS`, one entry per field. The tests check that every field of
every model has an entry, that the modules an entry names as readers still read the field,
that the keys said to be unused are still not read, and that the page equals the output::

    python -m koordinator.api.sloconfig.reference            # rewrite the generated blocks
    python -m koordinator.api.sloconfig.reference --check    # exit 1 when the page is stale
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from koordinator.api.extension.node import (
    ANNOTATION_NETWORK_BANDWIDTH,
    ANNOTATION_NODE_COLOCATION_STRATEGY,
    LABEL_CPU_RECLAIM_RATIO,
    LABEL_MEMORY_RECLAIM_RATIO,
    LABEL_MID_STATIC_CPU_RESERVED_RATIO,
    LABEL_MID_STATIC_MEMORY_RESERVED_RATIO,
)
from koordinator.api.features import CONTROL_PLANE_FEATURES, KOORDLET_FEATURES
from koordinator.api.model import Model, Slot, TypeDesc, model_fields
from koordinator.api.selectors import label_selector_matches
from koordinator.api.sloconfig.config import (
    CONFIG_KEYS,
    CONFIG_NAME,
    CONFIG_NAMESPACE,
    REASON_COLOCATION_INVALID,
    REASON_SLO_INVALID,
    SLOControllerConfig,
    colocation_strategy_for_node,
    cpu_burst_strategy_for_node,
    default_colocation_strategy,
    invalid_key_event,
    kept_outcome,
    node_metric_spec_for_node,
    node_slo_spec_for_node,
    parse_config,
    resource_threshold_strategy_for_node,
    system_strategy_for_node,
    unavailable_outcome,
)
from koordinator.api.sloconfig.nodeslo import (
    default_cpu_burst_strategy,
    default_resource_qos_strategy,
    default_resource_threshold_strategy,
    default_system_strategy,
    merge_node_slo_spec,
)
from koordinator.api.sloconfig.types import (
    ColocationCfg,
    ColocationStrategy,
    CPUBurstCfg,
    CPUNormalizationCfg,
    CPUNormalizationStrategy,
    HostApplicationCfg,
    ModelRatioCfg,
    NodeColocationCfg,
    NodeCPUBurstCfg,
    NodeCPUNormalizationCfg,
    NodeHostApplicationCfg,
    NodeResourceAmplificationCfg,
    NodeResourceQOSStrategy,
    NodeResourceThresholdStrategy,
    NodeSystemStrategy,
    ResourceAmplificationCfg,
    ResourceAmplificationStrategy,
    ResourceQOSCfg,
    ResourceThresholdCfg,
    SystemCfg,
)
from koordinator.api.types.core import DURATION_PATTERN, LabelSelector
from koordinator.api.types.slo import (
    CPUQOS,
    AggregatePolicy,
    BlkIOQOS,
    BlkIOQOSCfg,
    BlockCfg,
    CgroupPath,
    CPUBurstConfig,
    CPUBurstStrategy,
    CPUQOSCfg,
    HostApplicationSpec,
    IOCfg,
    MemoryQOS,
    MemoryQOSCfg,
    NetworkQOS,
    NetworkQOSCfg,
    ResctrlQOS,
    ResctrlQOSCfg,
    ResourceQOS,
    ResourceQOSPolicies,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
)

__all__ = [
    "DOC_PATH",
    "FIELDS",
    "KEYS",
    "RATIO_LABELS",
    "WEBHOOK_CHECKED_KEYS",
    "FieldDoc",
    "KeyDoc",
    "Row",
    "blocks",
    "event_message",
    "main",
    "positive_colocation_fields",
    "rows",
    "update",
    "validity_rules",
]

#: The page, relative to the repository root (where ``make`` and this command run).
DOC_PATH = Path("docs/slo-controller-config.md")
COMMAND = "python -m koordinator.api.sloconfig.reference"
#: The upstream behaviour this release follows.
UPSTREAM = "Koordinator upstream main at commit a7a1b76 (2026-07-24)"

_BEGIN = re.compile(r"^<!-- BEGIN GENERATED (?P<name>[\w:.-]+) .*-->$")
_END = "<!-- END GENERATED {name} -->"


# ---- what the code cannot say: meaning and use of each field --------------------------------------


@dataclass(frozen=True)
class FieldDoc:
    """What a field means and what this release does with it.

    ``readers`` name the modules that read the field (``"pkg.module"``, or
    ``"pkg.module:token"`` when the module reads it under another name than the field's
    Python attribute); the tests check that they still do. ``{gate:Name}`` in ``use`` is
    rendered as the gate with its default.
    """

    meaning: str
    use: str
    acted_on: bool = True
    readers: tuple[str, ...] = ()


def _used(meaning: str, use: str, *readers: str) -> FieldDoc:
    return FieldDoc(meaning, use, True, readers)


def _unused(meaning: str, why: str = "") -> FieldDoc:
    return FieldDoc(meaning, "**Not acted on** in this release." + (f" {why}" if why else ""), False)


_SELECTOR = _used(
    "The nodes this entry applies to. A node takes the **first** entry in list order whose "
    "selector matches its labels.",
    "Used to pick the entry (slo-controller).",
    "koordinator.api.sloconfig.config",
)
_NAME = _used(
    "A name for the entry, used in messages.",
    "Checked only with `--node-strategy-name-need-check` (controller and webhook).",
    "controlplane.manager.webhooks.configmap.sloconfig:_entry_name",
)
_COLOCATION = "controlplane.manager.controllers.noderesource"
_BATCH = f"{_COLOCATION}.batch"
_MID = f"{_COLOCATION}.mid"
_SYNC = f"{_COLOCATION}.sync"
_CALC = f"{_COLOCATION}.calculator"
_NORMALIZATION = f"{_COLOCATION}.normalization"
_AMPLIFICATION = f"{_COLOCATION}.amplification"
_CONFIG = "koordinator.api.sloconfig.config"
_REPORTER = "koordlet.statesinformer.nodemetric"
_SUPPRESS = "koordlet.qosmanager.strategies.cpu_suppress"
_CPU_EVICT = "koordlet.qosmanager.strategies.cpu_evict"
_MEM_EVICT = "koordlet.qosmanager.strategies.memory_evict"
_EVICTION = "koordlet.qosmanager.strategies.eviction"
_BURST = "koordlet.qosmanager.strategies.cpu_burst"
_RESCTRL = "koordlet.qosmanager.strategies.resctrl"
_CGRECONCILE = "koordlet.qosmanager.strategies.cgroup_reconcile"
_BLKIO = "koordlet.qosmanager.strategies.blkio"
_SYSCONFIG = "koordlet.qosmanager.strategies.system_config"
_GROUP_IDENTITY = "koordlet.runtimehooks.hooks.groupidentity"
_TC = "koordlet.runtimehooks.hooks.tc"
_HOST_APPS = "koordlet.metricsadvisor.collectors.hostapplication"

_NODEMETRIC_FIELD = (
    "Copied into every node's NodeMetric `spec.metricCollectPolicy.{target}` when the node's "
    "colocation strategy is valid and enabled (otherwise the default is written); the koordlet "
    "{effect}."
)
_SYSCTL = (
    "SystemConfig strategy ({{gate:SystemConfig}}): {what}; a value out of range is skipped, as is "
    "a file this kernel lacks."
)

#: (declaring model, JSON name) -> documentation.
FIELDS: dict[tuple[type[Model], str], FieldDoc] = {
    # ---- colocation-config
    (ColocationStrategy, "enable"): _used(
        "Turns colocation on: batch and mid resources on the nodes, and the colocation "
        "`metric*` settings in the NodeMetrics.",
        "noderesource controller: a node gets batch/mid resources only when the cluster value "
        "**and** the node's value are `true`; otherwise they are removed from the node. A node "
        "entry can therefore switch colocation off for some nodes, not on. nodemetric controller: "
        "see the `metric*` fields.",
        f"{_CALC}:enable",
        _CONFIG,
    ),
    (ColocationStrategy, "metricAggregateDurationSeconds"): _used(
        "Window over which the koordlet averages usage for the NodeMetric report.",
        _NODEMETRIC_FIELD.format(target="aggregateDurationSeconds", effect="uses at least 60 s"),
        _CONFIG,
        f"{_REPORTER}:aggregate_duration_seconds",
    ),
    (ColocationStrategy, "metricReportIntervalSeconds"): _used(
        "How often the koordlet writes the NodeMetric status.",
        _NODEMETRIC_FIELD.format(target="reportIntervalSeconds", effect="uses at least 30 s"),
        _CONFIG,
        f"{_REPORTER}:report_interval_seconds",
    ),
    (AggregatePolicy, "durations"): _used(
        "Windows of the aggregated usages (avg, p50, p90, p95, p99) in the NodeMetric status.",
        _NODEMETRIC_FIELD.format(
            target="nodeAggregatePolicy",
            effect="reports `aggregatedNodeUsages` and `aggregatedSystemUsages` for each window",
        ),
        f"{_CONFIG}:metric_aggregate_policy",
        f"{_REPORTER}:node_aggregate_policy",
    ),
    (ColocationStrategy, "metricMemoryCollectPolicy"): _used(
        "Which memory counter the koordlet reports as usage.",
        _NODEMETRIC_FIELD.format(
            target="nodeMemoryCollectPolicy",
            effect="reports memory without page cache for `usageWithoutPageCache`, with it for "
            "`usageWithPageCache` (needs the koordlet's `--enable-pagecache-collector`, otherwise "
            "no memory is reported); `usageWithHotPageCache` is accepted but this koordlet has no "
            "hot-page collector and reports memory without page cache",
        ),
        _CONFIG,
        f"{_REPORTER}:node_memory_collect_policy",
    ),
    (ColocationStrategy, "cpuReclaimThresholdPercent"): _used(
        "Share of the node's CPU that batch resources may use: safety margin = capacity x "
        "(100 - percent) / 100; a percent above 100 (from a node annotation or ratio label) "
        "counts as 100, never a negative margin.",
        "noderesource controller, `kubernetes.io/batch-cpu`.",
        _BATCH,
    ),
    (ColocationStrategy, "cpuCalculatePolicy"): _used(
        "How batch CPU is computed: `usage` = capacity - margin - max(system used, reserved) - "
        "used by high-priority pods; `maxUsageRequest` counts max(request, used) of each "
        "high-priority pod.",
        "noderesource controller, `kubernetes.io/batch-cpu`.",
        _BATCH,
    ),
    (ColocationStrategy, "memoryReclaimThresholdPercent"): _used(
        "Share of the node's memory that batch resources may use (safety margin as for CPU).",
        "noderesource controller, `kubernetes.io/batch-memory`.",
        _BATCH,
    ),
    (ColocationStrategy, "memoryCalculatePolicy"): _used(
        "How batch memory is computed: `usage`, `maxUsageRequest` (as for CPU) or `request` = "
        "capacity - margin - reserved - requests of high-priority pods.",
        "noderesource controller, `kubernetes.io/batch-memory`.",
        _BATCH,
    ),
    (ColocationStrategy, "degradeTimeMinutes"): _used(
        "A NodeMetric older than this (or missing, or never reported) removes the node's "
        "batch and mid resources.",
        "noderesource controller.",
        _CALC,
    ),
    (ColocationStrategy, "updateTimeThresholdSeconds"): _used(
        "A small change of the node's batch/mid resources is written at most this often.",
        "noderesource controller.",
        _SYNC,
    ),
    (ColocationStrategy, "resourceDiffThreshold"): _used(
        "A change larger than this fraction of the current value (or a resource appearing or "
        "disappearing) is written at once.",
        "noderesource controller.",
        _SYNC,
    ),
    (ColocationStrategy, "midReclaimMode"): _used(
        "Unset: mid resources from the prod-reclaimable metric (dynamic); `static`: a fixed "
        "share of capacity (`midStatic*ReservedPercent`).",
        "noderesource controller, `kubernetes.io/mid-cpu` and `mid-memory`.",
        _MID,
    ),
    (ColocationStrategy, "midCPUThresholdPercent"): _used(
        "Upper bound of `kubernetes.io/mid-cpu`, percent of capacity.",
        "noderesource controller.",
        _MID,
    ),
    (ColocationStrategy, "midMemoryThresholdPercent"): _used(
        "Upper bound of `kubernetes.io/mid-memory`, percent of capacity.",
        "noderesource controller.",
        _MID,
    ),
    (ColocationStrategy, "midUnallocatedPercent"): _used(
        "Share of the node's unallocated capacity added to the mid resources (dynamic mode).",
        "noderesource controller.",
        _MID,
    ),
    (ColocationStrategy, "midStaticCPUReservedPercent"): _used(
        "`kubernetes.io/mid-cpu` in `static` mode, percent of capacity.",
        "noderesource controller.",
        _MID,
    ),
    (ColocationStrategy, "midStaticMemoryReservedPercent"): _used(
        "`kubernetes.io/mid-memory` in `static` mode, percent of capacity.",
        "noderesource controller.",
        _MID,
    ),
    (ColocationStrategy, "batchCPUThresholdPercent"): _used(
        "Caps `kubernetes.io/batch-cpu` at this share of capacity; unset: no cap.",
        "noderesource controller.",
        _BATCH,
    ),
    (ColocationStrategy, "batchMemoryThresholdPercent"): _used(
        "Caps `kubernetes.io/batch-memory` at this share of capacity; unset: no cap.",
        "noderesource controller.",
        _BATCH,
    ),
    (ColocationCfg, "nodeConfigs"): _used(
        "Per-node overrides of the fields above.", "slo-controller.", f"{_CONFIG}:node_configs"
    ),
    (NodeColocationCfg, "name"): _NAME,
    (NodeColocationCfg, "nodeSelector"): _SELECTOR,
    # ---- resource-threshold-config
    (ResourceThresholdCfg, "clusterStrategy"): _used(
        "The cluster-wide strategy.", "slo-controller.", f"{_CONFIG}:cluster_strategy"
    ),
    (ResourceThresholdCfg, "nodeStrategies"): _used(
        "Per-node overrides.", "slo-controller.", f"{_CONFIG}:node_strategies"
    ),
    (NodeResourceThresholdStrategy, "name"): _NAME,
    (NodeResourceThresholdStrategy, "nodeSelector"): _SELECTOR,
    (ResourceThresholdStrategy, "enable"): _used(
        "The NodeSLO switch of BE suppression and of every eviction feature.",
        "koordlet: CPUSuppress ({gate:BECPUSuppress}) and the eviction features BECPUEvict, "
        "CPUEvict, CPUAllocatableEvict, BEMemoryEvict, MemoryEvict, MemoryAllocatableEvict act "
        "only when it is `true`; `false` undoes suppression (BE quota unlimited, full cpuset).",
        _SUPPRESS,
        "koordinator.api.sloconfig.nodeslo:threshold.enable",
    ),
    (ResourceThresholdStrategy, "cpuSuppressThresholdPercent"): _used(
        "Node CPU usage (percent of capacity) that non-BE pods, host applications and the "
        "system may reach; BE pods get the rest.",
        "koordlet CPUSuppress ({gate:BECPUSuppress}).",
        _SUPPRESS,
    ),
    (ResourceThresholdStrategy, "cpuSuppressMinPercent"): _used(
        "The least CPU (percent of capacity) BE pods keep while suppressed; unset: no floor.",
        "koordlet CPUSuppress ({gate:BECPUSuppress}).",
        _SUPPRESS,
    ),
    (ResourceThresholdStrategy, "memoryEvictThresholdPercent"): _used(
        "Node memory usage (percent of capacity) at which pods are evicted.",
        "koordlet BEMemoryEvict ({gate:BEMemoryEvict}): BE pods; MemoryEvict ({gate:MemoryEvict}): "
        "pods labelled `koordinator.sh/eviction-enabled=true`.",
        _MEM_EVICT,
    ),
    (ResourceThresholdStrategy, "memoryEvictLowerPercent"): _used(
        "Eviction releases memory until usage is back to this percent; unset: threshold - 2.",
        "koordlet BEMemoryEvict, MemoryEvict.",
        _MEM_EVICT,
    ),
    (ResourceThresholdStrategy, "cpuEvictBESatisfactionLowerPercent"): _used(
        "BE CPU satisfaction (BE CPU limit / BE CPU requests) at or below which BE pods are evicted.",
        "koordlet BECPUEvict ({gate:BECPUEvict}); required by it, with the upper percent.",
        _CPU_EVICT,
    ),
    (ResourceThresholdStrategy, "cpuEvictBESatisfactionUpperPercent"): _used(
        "Satisfaction that BE CPU eviction restores.",
        "koordlet BECPUEvict ({gate:BECPUEvict}); required by it; must be below 100 there.",
        _CPU_EVICT,
    ),
    (ResourceThresholdStrategy, "cpuEvictBEUsageThresholdPercent"): _used(
        "BE pods are evicted for CPU only while they use at least this percent of their limit; unset: 90.",
        "koordlet BECPUEvict ({gate:BECPUEvict}).",
        _CPU_EVICT,
    ),
    (ResourceThresholdStrategy, "cpuEvictThresholdPercent"): _used(
        "Node CPU usage (percent) at which pods labelled `koordinator.sh/eviction-enabled=true` are evicted.",
        "koordlet CPUEvict ({gate:CPUEvict}); required by it.",
        _CPU_EVICT,
    ),
    (ResourceThresholdStrategy, "cpuEvictLowerPercent"): _used(
        "CPUEvict releases CPU until usage is back to this percent; unset: threshold - 2.",
        "koordlet CPUEvict ({gate:CPUEvict}).",
        _CPU_EVICT,
    ),
    (ResourceThresholdStrategy, "cpuEvictTimeWindowSeconds"): _used(
        "Window of the averaged usage that CPU eviction looks at (at least the collect interval).",
        "koordlet BECPUEvict and CPUEvict.",
        _CPU_EVICT,
    ),
    (ResourceThresholdStrategy, "cpuSuppressPolicy"): _used(
        "How BE CPU is suppressed: `cpuset` (a set of CPUs) or `cfsQuota` (a CFS quota on the BE cgroup).",
        "koordlet CPUSuppress ({gate:BECPUSuppress}); with `cfsQuota` (and `enable`) the "
        "BatchResource hook ({gate:BatchResource}) leaves BE quotas unlimited.",
        _SUPPRESS,
        "koordlet.runtimehooks.hooks.batchresource",
    ),
    (ResourceThresholdStrategy, "cpuEvictPolicy"): _used(
        "The BE CPU limit BE CPU eviction uses: `evictByRealLimit` (the BE cgroups' cpuset and "
        "quota) or `evictByAllocatable` (the node's `kubernetes.io/batch-cpu`).",
        "koordlet BECPUEvict ({gate:BECPUEvict}).",
        _CPU_EVICT,
    ),
    (ResourceThresholdStrategy, "allocatableEvictPriorityThreshold"): _used(
        "Pods up to this priority are candidates of the allocatable evictions.",
        "koordlet CPUAllocatableEvict ({gate:CPUAllocatableEvict}), MemoryAllocatableEvict "
        "({gate:MemoryAllocatableEvict}); required by both (unset: nothing is evicted).",
        _EVICTION,
    ),
    (ResourceThresholdStrategy, "cpuAllocatableEvictThresholdPercent"): _used(
        "Batch/mid CPU requested above this percent of the node's batch/mid allocatable triggers eviction.",
        "koordlet CPUAllocatableEvict ({gate:CPUAllocatableEvict}); required by it.",
        _EVICTION,
    ),
    (ResourceThresholdStrategy, "cpuAllocatableEvictLowerPercent"): _used(
        "CPUAllocatableEvict releases requests down to this percent.",
        "koordlet CPUAllocatableEvict ({gate:CPUAllocatableEvict}); required by it.",
        _EVICTION,
    ),
    (ResourceThresholdStrategy, "memoryAllocatableEvictThresholdPercent"): _used(
        "Memory requested by pods up to the priority threshold above this percent of allocatable "
        "triggers eviction.",
        "koordlet MemoryAllocatableEvict ({gate:MemoryAllocatableEvict}); required by it.",
        _EVICTION,
    ),
    (ResourceThresholdStrategy, "memoryAllocatableEvictLowerPercent"): _used(
        "MemoryAllocatableEvict releases requests down to this percent (below the threshold).",
        "koordlet MemoryAllocatableEvict ({gate:MemoryAllocatableEvict}); required by it.",
        _EVICTION,
    ),
    (ResourceThresholdStrategy, "evictEnabledPriorityThreshold"): _used(
        "CPUEvict and MemoryEvict consider pods labelled `koordinator.sh/eviction-enabled=true` "
        "up to this priority.",
        "koordlet CPUEvict ({gate:CPUEvict}), MemoryEvict ({gate:MemoryEvict}); required by both.",
        _CPU_EVICT,
        _MEM_EVICT,
    ),
    # ---- resource-qos-config
    (ResourceQOSCfg, "clusterStrategy"): _used(
        "The cluster-wide strategy.", "slo-controller.", f"{_CONFIG}:cluster_strategy"
    ),
    (ResourceQOSCfg, "nodeStrategies"): _used(
        "Per-node overrides.", "slo-controller.", f"{_CONFIG}:node_strategies"
    ),
    (NodeResourceQOSStrategy, "name"): _NAME,
    (NodeResourceQOSStrategy, "nodeSelector"): _SELECTOR,
    (ResourceQOSPolicies, "cpuPolicy"): _used(
        "CPU QoS mechanism: `groupIdentity` (unset means it) or `coreSched`.",
        "The GroupIdentity hook ({gate:GroupIdentity}) runs only under `groupIdentity`. This "
        "release has no core-scheduling hook: `coreSched` (or any other value) turns CPU QoS off.",
        _GROUP_IDENTITY,
    ),
    (ResourceQOSPolicies, "netQOSPolicy"): _used(
        "Network QoS mechanism: `tc` (unset means it) or `terway-qos`.",
        "The TCNetworkQoS hook ({gate:TCNetworkQoS}) runs only under `tc`. This release has no "
        "Terway hook: `terway-qos` (or any other value) turns network QoS off.",
        _TC,
    ),
    (ResourceQOSStrategy, "lsrClass"): _used(
        "Settings of LSE and LSR pods.", "See the class settings below.", _GROUP_IDENTITY
    ),
    (ResourceQOSStrategy, "lsClass"): _used("Settings of LS pods.", "See below.", _GROUP_IDENTITY),
    (ResourceQOSStrategy, "beClass"): _used("Settings of BE pods.", "See below.", _GROUP_IDENTITY),
    (ResourceQOSStrategy, "systemClass"): _used(
        "Settings of SYSTEM pods.", "Only `memoryQOS` is acted on.", f"{_CGRECONCILE}:system_class"
    ),
    (ResourceQOSStrategy, "cgroupRoot"): _used(
        "Settings of the root cgroup.", "Only `blkioQOS` is acted on.", f"{_BLKIO}:cgroup_root"
    ),
    (CPUQOSCfg, "enable"): _used(
        "Turns the class's CPU QoS on. A disabled `lsrClass`/`lsClass`/`beClass` is reset by the "
        "koordlet to group identity 0.",
        "GroupIdentity hook ({gate:GroupIdentity}) for `lsrClass`, `lsClass`, `beClass`; "
        "`systemClass` and `cgroupRoot`: not acted on.",
        _GROUP_IDENTITY,
    ),
    (CPUQOS, "groupIdentity"): _used(
        "The class's `cpu.bvt_warp_ns` (group identity, Alibaba Cloud Linux / Anolis kernels): "
        "2 high, -1 low (SCHED_IDLE-like).",
        "GroupIdentity hook ({gate:GroupIdentity}): pods of the class and the kube-QoS cgroups "
        "(`lsClass` -> burstable, `beClass` -> besteffort); an LS pod may override it with "
        "`koordinator.sh/cpuQOS`. On mainline kernels (no bvt) only a negative `beClass` value "
        "matters: BE pods get `cpu.idle=1` (the besteffort cgroup does not: the kubelet writes its shares).",
        _GROUP_IDENTITY,
    ),
    (CPUQOS, "schedIdle"): _used(
        "1 runs the class as SCHED_IDLE (`cpu.idle`).",
        "`beClass` only, on mainline kernels (GroupIdentity hook in `cpu.idle` mode); ignored "
        "where the kernel has bvt and for the other classes.",
        _GROUP_IDENTITY,
    ),
    (CPUQOS, "coreExpeller"): _unused(
        "Core scheduling: expel SCHED_IDLE tasks from sibling hyper-threads.",
        "There is no core-scheduling hook.",
    ),
    (MemoryQOSCfg, "enable"): _used(
        "Turns the class's memory QoS on. A disabled `lsrClass`/`lsClass`/`beClass` is reset by "
        'the koordlet to the "none" values (no protection, `memory.high` unlimited); '
        "`systemClass` is not reset, so its values apply whatever `enable` says (as upstream).",
        "CgroupReconcile ({gate:CgroupReconcile}) for `lsrClass`, `lsClass`, `beClass`, "
        "`systemClass`; `cgroupRoot`: not acted on.",
        "koordinator.api.sloconfig.nodeslo:memory_qos.enable",
    ),
    (MemoryQOS, "minLimitPercent"): _used(
        "`memory.min` = request x percent / 100 (pods and containers; kube-QoS cgroups get the sums).",
        "CgroupReconcile ({gate:CgroupReconcile}); needs cgroup v2 or Anolis.",
        _CGRECONCILE,
    ),
    (MemoryQOS, "lowLimitPercent"): _used(
        "`memory.low` = request x percent / 100 (raised to `memory.min` when lower).",
        "CgroupReconcile ({gate:CgroupReconcile}); needs cgroup v2 or Anolis.",
        _CGRECONCILE,
    ),
    (MemoryQOS, "throttlingPercent"): _used(
        "Container `memory.high` = request + (limit - request) x percent / 100 (limit: the node's "
        "allocatable when unset); 0: unlimited.",
        "CgroupReconcile ({gate:CgroupReconcile}); needs cgroup v2 or Anolis.",
        _CGRECONCILE,
    ),
    (MemoryQOS, "wmarkRatio"): _used(
        "`memory.wmark_ratio` (asynchronous reclaim watermark, Anolis).",
        "CgroupReconcile ({gate:CgroupReconcile}) where the kernel has the file.",
        _CGRECONCILE,
    ),
    (MemoryQOS, "wmarkScalePermill"): _used(
        "`memory.wmark_scale_factor` (Anolis).",
        "CgroupReconcile ({gate:CgroupReconcile}) where the kernel has the file.",
        _CGRECONCILE,
    ),
    (MemoryQOS, "wmarkMinAdj"): _used(
        "`memory.wmark_min_adj` (global minimum watermark adjustment, Anolis).",
        "CgroupReconcile ({gate:CgroupReconcile}) where the kernel has the file.",
        _CGRECONCILE,
    ),
    (MemoryQOS, "priorityEnable"): _used(
        "`memory.use_priority_oom` (Anolis).",
        "CgroupReconcile ({gate:CgroupReconcile}) where the kernel has the file.",
        _CGRECONCILE,
    ),
    (MemoryQOS, "priority"): _used(
        "`memory.priority` (OOM priority, Anolis).",
        "CgroupReconcile ({gate:CgroupReconcile}) where the kernel has the file.",
        _CGRECONCILE,
    ),
    (MemoryQOS, "oomKillGroup"): _used(
        "`memory.oom.group`: kill the whole cgroup on OOM.",
        "CgroupReconcile ({gate:CgroupReconcile}) where the kernel has the file.",
        _CGRECONCILE,
    ),
    (ResctrlQOSCfg, "enable"): _used(
        "Turns the class's LLC/memory-bandwidth partitioning on (its pods' tasks join the class's "
        "resctrl group). A disabled `lsrClass`/`lsClass`/`beClass` is reset to the whole cache "
        "and 100 % bandwidth.",
        "ResctrlReconcile ({gate:RdtResctrl}) for `lsrClass`, `lsClass`, `beClass` (groups LSR, "
        "LS, BE); needs `cat_l3` and `mba` and a mounted resctrl. `systemClass`, `cgroupRoot`: "
        "not acted on.",
        _RESCTRL,
    ),
    (ResctrlQOS, "catRangeStartPercent"): _used(
        "Start of the class's share of the LLC ways, percent.",
        "ResctrlReconcile ({gate:RdtResctrl}).",
        _RESCTRL,
    ),
    (ResctrlQOS, "catRangeEndPercent"): _used(
        "End of the class's share of the LLC ways, percent.",
        "ResctrlReconcile ({gate:RdtResctrl}).",
        _RESCTRL,
    ),
    (ResctrlQOS, "mbaPercent"): _used(
        "The class's memory bandwidth, percent (Intel: rounded up to tens).",
        "ResctrlReconcile ({gate:RdtResctrl}).",
        _RESCTRL,
    ),
    (BlkIOQOSCfg, "enable"): _used(
        "Turns the block I/O settings of `blocks` on (disabled: the disks are reset).",
        "BlkIOReconcile ({gate:BlkIOReconcile}) for `beClass` (throttles and weights of the BE "
        "cgroup) and `cgroupRoot` (iocost); `lsrClass`/`lsClass` are only noted as unsupported "
        "(as upstream); `systemClass`: not acted on.",
        _BLKIO,
    ),
    (BlkIOQOS, "blocks"): _used(
        "The disks and their settings.", "BlkIOReconcile ({gate:BlkIOReconcile}).", _BLKIO
    ),
    (BlockCfg, "name"): _used(
        "The disk: a device (`/dev/sdb`), a volume group name, or a pod volume name.",
        "BlkIOReconcile ({gate:BlkIOReconcile}); volume groups without an active logical volume "
        "and PVC-backed pod volumes are skipped with a note.",
        _BLKIO,
    ),
    (BlockCfg, "type"): _used(
        "How `name` is read.", "BlkIOReconcile ({gate:BlkIOReconcile}).", f"{_BLKIO}:block_type"
    ),
    (IOCfg, "readIOPS"): _used(
        "Read IOPS limit (0: unlimited).", "BlkIOReconcile, `beClass` throttles.", _BLKIO
    ),
    (IOCfg, "writeIOPS"): _used(
        "Write IOPS limit (0: unlimited).", "BlkIOReconcile, `beClass` throttles.", _BLKIO
    ),
    (IOCfg, "readBPS"): _used(
        "Read bytes/s limit (0: unlimited).", "BlkIOReconcile, `beClass` throttles.", _BLKIO
    ),
    (IOCfg, "writeBPS"): _used(
        "Write bytes/s limit (0: unlimited).", "BlkIOReconcile, `beClass` throttles.", _BLKIO
    ),
    (IOCfg, "ioWeightPercent"): _used(
        "I/O weight, 1..100 (unset: 100).",
        "BlkIOReconcile, `beClass` weight (`blkio.cost.weight` / `io.weight`).",
        _BLKIO,
    ),
    (IOCfg, "readLatencyPercent"): _used(
        "iocost read latency percentile (unset: 95).", "BlkIOReconcile, `cgroupRoot` (iocost).", _BLKIO
    ),
    (IOCfg, "writeLatencyPercent"): _used(
        "iocost write latency percentile (unset: 95).", "BlkIOReconcile, `cgroupRoot` (iocost).", _BLKIO
    ),
    (IOCfg, "readLatency"): _used(
        "iocost read latency target, µs (unset: 3000).", "BlkIOReconcile, `cgroupRoot` (iocost).", _BLKIO
    ),
    (IOCfg, "writeLatency"): _used(
        "iocost write latency target, µs (unset: 3000).", "BlkIOReconcile, `cgroupRoot` (iocost).", _BLKIO
    ),
    (IOCfg, "enableUserModel"): _used(
        "Use the `model*` values as the iocost cost model (else `ctrl=auto`).",
        "BlkIOReconcile, `cgroupRoot` (iocost).",
        _BLKIO,
    ),
    (IOCfg, "modelReadBPS"): _used("iocost model `rbps`.", "BlkIOReconcile, `cgroupRoot`.", _BLKIO),
    (IOCfg, "modelWriteBPS"): _used("iocost model `wbps`.", "BlkIOReconcile, `cgroupRoot`.", _BLKIO),
    (IOCfg, "modelReadSeqIOPS"): _used("iocost model `rseqiops`.", "BlkIOReconcile, `cgroupRoot`.", _BLKIO),
    (IOCfg, "modelWriteSeqIOPS"): _used("iocost model `wseqiops`.", "BlkIOReconcile, `cgroupRoot`.", _BLKIO),
    (IOCfg, "modelReadRandIOPS"): _used("iocost model `rrandiops`.", "BlkIOReconcile, `cgroupRoot`.", _BLKIO),
    (IOCfg, "modelWriteRandIOPS"): _used(
        "iocost model `wrandiops`.", "BlkIOReconcile, `cgroupRoot`.", _BLKIO
    ),
    (NetworkQOSCfg, "enable"): _used(
        "Turns the class's network QoS on.",
        "TCNetworkQoS hook ({gate:TCNetworkQoS}) for `lsClass` and `beClass` (HTB classes 1:3 "
        "and 1:4; LSR/LSE pods share the LS class); `lsrClass`, `systemClass`, `cgroupRoot`: not "
        "acted on.",
        _TC,
    ),
    (NetworkQOS, "ingressRequest"): _unused(
        "Guaranteed ingress bandwidth: a percent of the total (integer) or bits/s (quantity string).",
        "Only egress is shaped.",
    ),
    (NetworkQOS, "ingressLimit"): _unused(
        "Ingress bandwidth limit, percent or bits/s.", "Only egress is shaped."
    ),
    (NetworkQOS, "egressRequest"): _used(
        "Guaranteed egress bandwidth: a percent of the total (integer) or bits/s (quantity string).",
        "TCNetworkQoS hook ({gate:TCNetworkQoS}): the HTB rate of the class.",
        _TC,
    ),
    (NetworkQOS, "egressLimit"): _used(
        "Egress bandwidth limit, percent or bits/s.",
        "TCNetworkQoS hook ({gate:TCNetworkQoS}): the HTB ceil of the class (0: the total).",
        _TC,
    ),
    # ---- cpu-burst-config
    (CPUBurstCfg, "clusterStrategy"): _used(
        "The cluster-wide strategy.", "slo-controller.", f"{_CONFIG}:cluster_strategy"
    ),
    (CPUBurstCfg, "nodeStrategies"): _used(
        "Per-node overrides.", "slo-controller.", f"{_CONFIG}:node_strategies"
    ),
    (NodeCPUBurstCfg, "name"): _NAME,
    (NodeCPUBurstCfg, "nodeSelector"): _SELECTOR,
    (CPUBurstConfig, "policy"): _used(
        "`none`; `cpuBurstOnly` (kernel CFS burst); `cfsQuotaBurstOnly` (scale the CFS quota "
        "while throttled); `auto` (both).",
        "koordlet CPUBurst ({gate:CPUBurst}) for LS and unlabelled pods; a pod's "
        "`koordinator.sh/cpuBurst` annotation overrides this field and the next three.",
        _BURST,
    ),
    (CPUBurstConfig, "cpuBurstPercent"): _used(
        "`cpu.cfs_burst_us` (v2 `cpu.max.burst`) = limit x percent / 100 of a period (capped at the quota).",
        "koordlet CPUBurst ({gate:CPUBurst}), policies `cpuBurstOnly` and `auto`; where the kernel "
        "has the file.",
        _BURST,
    ),
    (CPUBurstConfig, "cfsQuotaBurstPercent"): _used(
        "Ceiling of the scaled CFS quota, percent of the limit.",
        "koordlet CPUBurst ({gate:CPUBurst}), policies `cfsQuotaBurstOnly` and `auto`.",
        _BURST,
    ),
    (CPUBurstConfig, "cfsQuotaBurstPeriodSeconds"): _used(
        "How long a container may run above its limit: a token bucket of period x "
        "(cfsQuotaBurstPercent - 100); -1: unlimited.",
        "koordlet CPUBurst ({gate:CPUBurst}).",
        _BURST,
    ),
    (CPUBurstStrategy, "sharePoolThresholdPercent"): _used(
        "Share-pool CPU usage at which quotas are scaled down (90 % of it: no more scaling up).",
        "koordlet CPUBurst ({gate:CPUBurst}).",
        _BURST,
    ),
    # ---- system-config
    (SystemCfg, "clusterStrategy"): _used(
        "The cluster-wide strategy.", "slo-controller.", f"{_CONFIG}:cluster_strategy"
    ),
    (SystemCfg, "nodeStrategies"): _used(
        "Per-node overrides.", "slo-controller.", f"{_CONFIG}:node_strategies"
    ),
    (NodeSystemStrategy, "name"): _NAME,
    (NodeSystemStrategy, "nodeSelector"): _SELECTOR,
    (SystemStrategy, "minFreeKbytesFactor"): _used(
        "`/proc/sys/vm/min_free_kbytes` = memory capacity (KiB) x factor / 10000.",
        _SYSCTL.format(what="the result must lie within 10 MiB..10 GiB"),
        _SYSCONFIG,
    ),
    (SystemStrategy, "watermarkScaleFactor"): _used(
        "`/proc/sys/vm/watermark_scale_factor`.",
        _SYSCTL.format(what="10..400"),
        _SYSCONFIG,
    ),
    (SystemStrategy, "memcgReapBackGround"): _used(
        "`/sys/kernel/mm/memcg_reaper/reap_background` (Anolis).",
        _SYSCTL.format(what="0 or 1"),
        _SYSCONFIG,
    ),
    (SystemStrategy, "totalNetworkBandwidth"): _used(
        "The node's total network bandwidth, bits/s; 0: the link speed read from sysfs.",
        "TCNetworkQoS hook ({gate:TCNetworkQoS}): the HTB root rate and the base of percents. "
        "The node annotation `node.koordinator.sh/network-bandwidth` overrides it.",
        _TC,
    ),
    (SystemStrategy, "schedGroupIdentityEnabled"): _used(
        "`/proc/sys/kernel/sched_group_identity_enabled` (Anolis).",
        _SYSCTL.format(what="0 or 1"),
        _SYSCONFIG,
    ),
    (SystemStrategy, "schedIdleSaverWmark"): _used(
        "`/proc/sys/kernel/sched_idle_saver_wmark`, ns (Anolis).",
        _SYSCTL.format(what="0 or more"),
        _SYSCONFIG,
    ),
    (SystemStrategy, "pageCacheLimitEnabled"): _used(
        "`/sys/kernel/mm/pagecache_limit/enabled` (Anolis).",
        _SYSCTL.format(what="0 or 1"),
        _SYSCONFIG,
    ),
    (SystemStrategy, "schedFeatures"): _used(
        "Scheduler features to turn on (`true`) or off (`false`) in `/sys/kernel/debug/sched_features`.",
        "SystemConfig strategy ({gate:SystemConfig}): one `NAME` or `NO_NAME` write per feature whose "
        "state differs; names the kernel does not list are skipped.",
        _SYSCONFIG,
    ),
    # ---- host-application-config
    (HostApplicationCfg, "applications"): _used(
        "The host applications of every node without a matching node entry.",
        "nodeslo controller: NodeSLO `spec.hostApplications`.",
        f"{_CONFIG}:applications",
    ),
    (HostApplicationCfg, "nodeConfigs"): _used(
        "Per-node lists: a matching entry's `applications` **replace** the cluster list.",
        "nodeslo controller.",
        f"{_CONFIG}:node_configs",
    ),
    (NodeHostApplicationCfg, "name"): _NAME,
    (NodeHostApplicationCfg, "nodeSelector"): _SELECTOR,
    (NodeHostApplicationCfg, "applications"): _used(
        "The host applications of the matching nodes.", "nodeslo controller.", f"{_CONFIG}:applications"
    ),
    (HostApplicationSpec, "name"): _used(
        "The application's name (its metric label, and its cgroup directory by default).",
        "koordlet HostApplicationCollector (usage into the NodeMetric `hostApplicationMetric`), CPUSuppress.",
        _HOST_APPS,
        _SUPPRESS,
    ),
    (HostApplicationSpec, "priority"): _used(
        "The application's priority class.",
        "Reported with its usage in the NodeMetric; the noderesource controller counts the usage "
        "of applications above `koord-batch` as system usage for batch resources (above "
        "`koord-mid` for mid). Unset: not counted.",
        _REPORTER,
        f"{_BATCH}:priority",
    ),
    (HostApplicationSpec, "qos"): _used(
        "The application's QoS class.",
        "koordlet: without `cgroupPath`, LSE/LSR/LS applications live in "
        "`host-latency-sensitive/<name>`, BE in `host-best-effort/<name>`, others in `<name>`; "
        "CPUSuppress counts an application as BE only with `qos: BE` and `cgroupPath.base: "
        "KubepodsBesteffort`.",
        _HOST_APPS,
        _SUPPRESS,
    ),
    (CgroupPath, "base"): _used(
        "The cgroup the path is relative to.",
        "koordlet HostApplicationCollector, CPUSuppress.",
        _HOST_APPS,
        _SUPPRESS,
    ),
    (CgroupPath, "parentDir"): _used(
        "Directory under the base.", "koordlet HostApplicationCollector.", _HOST_APPS
    ),
    (CgroupPath, "relativePath"): _used(
        "The application's directory under `parentDir`.", "koordlet HostApplicationCollector.", _HOST_APPS
    ),
    (HostApplicationSpec, "strategy"): _unused("Per-application QoS settings (free-form JSON)."),
    # ---- cpu-normalization-config
    (CPUNormalizationStrategy, "enable"): _used(
        "Turns CPU normalization on (a `cpu-normalization-ratio` annotation per node from its CPU model).",
        "noderesource CPUNormalization: the node label `node.koordinator.sh/cpu-normalization-enabled` "
        "overrides it; disabled, the annotation holds `1.00`.",
        _NORMALIZATION,
    ),
    (CPUNormalizationStrategy, "defaultRatio"): _unused(
        "Ratio of CPU models not listed in `ratioModel`.",
        "Upstream accepts it and never uses it either: a model without an entry gets no ratio.",
    ),
    (CPUNormalizationStrategy, "ratioModel"): _used(
        "Ratios per CPU model name (the `cpuModel` of the NodeResourceTopology's `cpu-basic-info`).",
        "noderesource CPUNormalization: a model without an entry leaves the node's ratio as it is.",
        _NORMALIZATION,
    ),
    (ModelRatioCfg, "baseRatio"): _used(
        "Ratio with hyper-threading and turbo off.",
        "CPUNormalization; the ratio must lie in [1, 5].",
        _NORMALIZATION,
    ),
    (ModelRatioCfg, "hyperThreadEnabledRatio"): _used(
        "Ratio with hyper-threading on.", "CPUNormalization; the ratio must lie in [1, 5].", _NORMALIZATION
    ),
    (ModelRatioCfg, "turboEnabledRatio"): _used(
        "Ratio with turbo on.", "CPUNormalization; the ratio must lie in [1, 5].", _NORMALIZATION
    ),
    (ModelRatioCfg, "hyperThreadTurboEnabledRatio"): _used(
        "Ratio with hyper-threading and turbo on.",
        "CPUNormalization; the ratio must lie in [1, 5].",
        _NORMALIZATION,
    ),
    (CPUNormalizationCfg, "nodeConfigs"): _used(
        "Per-node overrides, merged over the cluster fields.",
        "CPUNormalization.",
        f"{_CONFIG}:cpu_normalization_strategy_for_node",
    ),
    (NodeCPUNormalizationCfg, "name"): _NAME,
    (NodeCPUNormalizationCfg, "nodeSelector"): _SELECTOR,
    # ---- resource-amplification-config
    (ResourceAmplificationStrategy, "enable"): _used(
        "Turns resource amplification on (a `resource-amplification-ratio` annotation per node).",
        "noderesource ResourceAmplification; disabled, the annotation holds only the CPU "
        "normalization ratio (as `cpu`), or is removed.",
        _AMPLIFICATION,
    ),
    (ResourceAmplificationStrategy, "resourceAmplificationRatio"): _used(
        "Ratio per resource name (`cpu`, `memory` ...).",
        "ResourceAmplification: `cpu` is multiplied by the node's CPU normalization ratio; the "
        "node webhook amplifies `cpu`/`memory` allocatable by the ratios above 1.",
        _AMPLIFICATION,
    ),
    (ResourceAmplificationCfg, "nodeConfigs"): _used(
        "Per-node overrides, merged over the cluster fields.",
        "ResourceAmplification.",
        f"{_CONFIG}:resource_amplification_strategy_for_node",
    ),
    (NodeResourceAmplificationCfg, "name"): _NAME,
    (NodeResourceAmplificationCfg, "nodeSelector"): _SELECTOR,
}

#: ConfigMap rules that are not in the models' schemas (``config._extra_checks``).
_EXTRA_RULES: dict[tuple[type[Model], str], str] = {
    (ResourceAmplificationStrategy, "resourceAmplificationRatio"): "every value ≥ 1",
}


# ---- the keys ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyDoc:
    """One data key of the ConfigMap."""

    key: str
    shape: str
    reaches: str
    #: the strategy model and the default strategy (None: no per-field defaults)
    strategy: type[Model]
    defaults: Callable[[], Model] | None


KEYS: tuple[KeyDoc, ...] = (
    KeyDoc(
        "colocation-config",
        "inline cluster fields + `nodeConfigs`",
        "koord-manager: noderesource (batch/mid resources on Nodes), nodemetric (NodeMetric "
        "`spec.metricCollectPolicy`)",
        ColocationStrategy,
        default_colocation_strategy,
    ),
    KeyDoc(
        "resource-threshold-config",
        "`clusterStrategy` + `nodeStrategies`",
        "NodeSLO `resourceUsedThresholdWithBE` -> koordlet CPUSuppress, CPU/memory evictions",
        ResourceThresholdStrategy,
        default_resource_threshold_strategy,
    ),
    KeyDoc(
        "resource-qos-config",
        "`clusterStrategy` + `nodeStrategies`",
        "NodeSLO `resourceQOSStrategy` -> koordlet GroupIdentity, ResctrlReconcile, "
        "CgroupReconcile, BlkIOReconcile, TCNetworkQoS",
        ResourceQOSStrategy,
        default_resource_qos_strategy,
    ),
    KeyDoc(
        "cpu-burst-config",
        "`clusterStrategy` + `nodeStrategies`",
        "NodeSLO `cpuBurstStrategy` -> koordlet CPUBurst",
        CPUBurstStrategy,
        default_cpu_burst_strategy,
    ),
    KeyDoc(
        "system-config",
        "`clusterStrategy` + `nodeStrategies`",
        "NodeSLO `systemStrategy` -> koordlet SystemConfig, TCNetworkQoS",
        SystemStrategy,
        default_system_strategy,
    ),
    KeyDoc(
        "host-application-config",
        "`applications` + `nodeConfigs`",
        "NodeSLO `hostApplications` -> koordlet HostApplicationCollector, CPUSuppress; "
        "noderesource (through the NodeMetric)",
        HostApplicationSpec,
        None,
    ),
    KeyDoc(
        "cpu-normalization-config",
        "inline cluster fields + `nodeConfigs`",
        "noderesource CPUNormalization (node annotation `cpu-normalization-ratio`; batch-cpu scaled)",
        CPUNormalizationStrategy,
        lambda: CPUNormalizationStrategy(enable=False),
    ),
    KeyDoc(
        "resource-amplification-config",
        "inline cluster fields + `nodeConfigs`",
        "noderesource ResourceAmplification (node annotation `resource-amplification-ratio`) -> "
        "node status webhook",
        ResourceAmplificationStrategy,
        lambda: ResourceAmplificationStrategy(enable=False),
    ),
)

#: The keys the ConfigMap webhook checks (its ``CHECKED_KEYS``, which a test compares).
WEBHOOK_CHECKED_KEYS = (
    "colocation-config",
    "resource-threshold-config",
    "resource-qos-config",
    "system-config",
    "cpu-burst-config",
)


def _webhook_entry_models() -> set[type[Model]]:
    """The models of the node entries of :data:`WEBHOOK_CHECKED_KEYS`."""
    out: set[type[Model]] = set()
    for key in WEBHOOK_CHECKED_KEYS:
        for slot in model_fields(CONFIG_KEYS[key]):
            item = slot.type.item
            if slot.type.kind == "list" and item is not None and item.model is not None:
                out.add(item.model)
    return out


#: Node labels the slo-controller reads as colocation percentages (ratio x 100).
RATIO_LABELS: dict[str, str] = {
    LABEL_CPU_RECLAIM_RATIO: "cpuReclaimThresholdPercent",
    LABEL_MEMORY_RECLAIM_RATIO: "memoryReclaimThresholdPercent",
    LABEL_MID_STATIC_CPU_RESERVED_RATIO: "midStaticCPUReservedPercent",
    LABEL_MID_STATIC_MEMORY_RESERVED_RATIO: "midStaticMemoryReservedPercent",
}


# ---- rows -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One documented field: its dotted JSON path, declaring model and slot."""

    path: str
    owner: type[Model]
    slot: Slot

    @property
    def doc(self) -> FieldDoc:
        try:
            return FIELDS[(self.owner, self.slot.info.json)]
        except KeyError:
            raise KeyError(
                f"no FieldDoc for {self.owner.__name__}.{self.slot.info.json}: add it to FIELDS in {__name__}"
            ) from None


def _declaring(model: type[Model], attr: str) -> type[Model]:
    """The class of ``model``'s hierarchy that declares the field ``attr``."""
    for cls in model.__mro__:
        if issubclass(cls, Model) and attr in inspect.get_annotations(cls):
            return cls
    raise TypeError(f"{model.__name__}.{attr} is declared by no model class")


#: Models rendered as one row (their fields are in a table of their own).
_SEPARATE = (
    ResourceQOS,
    NodeColocationCfg,
    NodeResourceThresholdStrategy,
    NodeResourceQOSStrategy,
    NodeCPUBurstCfg,
    NodeSystemStrategy,
    NodeHostApplicationCfg,
    NodeCPUNormalizationCfg,
    NodeResourceAmplificationCfg,
    HostApplicationSpec,
    ResourceThresholdStrategy,
    ResourceQOSStrategy,
    CPUBurstStrategy,
    SystemStrategy,
)


def rows(model: type[Model], prefix: str = "", *, own_only: bool = False) -> list[Row]:
    """The rows of ``model``: nested models flattened into dotted paths, except :data:`_SEPARATE`."""
    out: list[Row] = []
    for slot in model_fields(model):
        owner = _declaring(model, slot.attr)
        if own_only and owner is not model:
            continue
        path = f"{prefix}{slot.info.json}"
        nested, suffix = _nested(slot.type)
        if nested is not None and nested is not LabelSelector and nested not in _SEPARATE:
            out += rows(nested, f"{path}{suffix}.")
        else:
            out.append(Row(path, owner, slot))
    return out


def _nested(desc: TypeDesc) -> tuple[type[Model] | None, str]:
    if desc.kind == "model":
        return desc.model, ""
    if desc.kind == "list" and desc.item is not None and desc.item.kind == "model":
        return desc.item.model, "[]"
    if desc.kind == "map" and desc.item is not None and desc.item.kind == "model":
        return desc.item.model, ".<name>"
    return None, ""


# ---- cells -------------------------------------------------------------------------------------


def _type(desc: TypeDesc) -> str:
    kind = desc.kind
    if kind == "model":
        return "label selector" if desc.model is LabelSelector else "object"
    if kind == "list":
        assert desc.item is not None
        return f"list of {_type(desc.item)}"
    if kind == "map":
        assert desc.item is not None
        return f"map of string to {_type(desc.item)}"
    return {
        "str": "string",
        "int": "integer",
        "float": "number",
        "bool": "boolean",
        "quantity": "quantity",
        "intstr": "integer or string",
        "json": "object (any JSON)",
    }[kind]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


_ORDER_RULE = re.compile(r"^(?P<high>\w+) must be greater than (?P<low>\w+)$")


def _allowed(row: Row) -> str:
    info = row.slot.info
    parts: list[str] = []
    if info.enum:
        parts.append("one of " + ", ".join(f"`{v}`" for v in info.enum))
    low, high = info.minimum, info.maximum
    if low is not None and high is not None and not info.exclusive_minimum and not info.exclusive_maximum:
        parts.append(f"{_number(low)} to {_number(high)}")
    else:
        if low is not None:
            parts.append(f"{'>' if info.exclusive_minimum else '≥'} {_number(low)}")
        if high is not None:
            parts.append(f"{'<' if info.exclusive_maximum else '≤'} {_number(high)}")
    if info.item_pattern == DURATION_PATTERN:
        parts.append("Go durations (`30s`, `5m`, `1h`)")
    for rule in row.owner.__api_rules__:
        match = _ORDER_RULE.match(rule.message)
        if match and match["high"] == info.json:
            parts.append(f"> `{match['low']}` when both are set")
        elif match and match["low"] == info.json:
            parts.append(f"< `{match['high']}` when both are set")
    if row.slot.type.kind == "model" and row.slot.type.model is LabelSelector:
        parts.append(
            "an entry without a valid one selects no node (skipped), `{}` selects every node"
            + ("; the webhook refuses both" if row.owner in _webhook_entry_models() else "")
            + " (see [Two shapes](#two-shapes))"
        )
    if info.json == "name" and row.owner.__name__.startswith("Node"):
        parts.append("with `--node-strategy-name-need-check`: required and unique")
    if row.slot.type.kind == "quantity":
        parts.append("a quantity (`10G`, `500M`)")
    if row.slot.type.kind == "intstr":
        parts.append("an integer percent or a quantity string")
    if extra := _EXTRA_RULES.get((row.owner, info.json)):
        parts.append(extra)
    if parts:
        return "; ".join(parts)
    return {"bool": "`true` or `false`", "str": "any string", "int": "any integer"}.get(
        row.slot.type.kind, "—"
    )


def _value(value: Any) -> str:
    if value is None:
        return "unset"
    return f"`{json.dumps(value, separators=(',', ':'), ensure_ascii=False).strip(chr(34))}`"


def _lookup(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, Mapping):
            return None
        data = data.get(part)
    return data


def _default(row: Row, defaults: Model | None, prefix: str = "") -> str:
    info = row.slot.info
    if "[]" in row.path or "<name>" in row.path:
        return "—"
    if row.slot.type.kind == "model":
        return "—"
    path = row.path.removeprefix(prefix)
    value = _lookup(defaults.to_dict(), path) if defaults is not None else None
    if value is None and row.slot.type.kind in ("model", "list", "map"):
        return "—"
    text = _value(value)
    if info.schema_default is not None:
        text += f"; `{info.schema_default}` when the object is written (NodeSLO CRD default)"
    return text


def _class_defaults(row: Row) -> str:
    """A ResourceQOS field's default in each class of the koordlet's default strategy."""
    if "[]" in row.path:
        return "—"
    path = row.path.removeprefix("<class>.")
    by_value: dict[str, list[str]] = {}
    for name, qos in default_resource_qos_strategy().classes().items():
        value = _lookup(qos.to_dict(), path) if qos is not None else None
        by_value.setdefault(_value(value), []).append(f"`{name}`")
    if len(by_value) == 1:
        text = next(iter(by_value))
        text = text if text == "unset" else f"{text} (every class)"
    else:
        text = "; ".join(f"{', '.join(names)}: {value}" for value, names in by_value.items())
    if row.slot.info.schema_default is not None:
        text += f"; `{row.slot.info.schema_default}` when the object is written (NodeSLO CRD default)"
    return text


def _gates(text: str) -> str:
    def gate(match: re.Match[str]) -> str:
        name = match["name"]
        spec = KOORDLET_FEATURES.get(name) or CONTROL_PLANE_FEATURES[name]
        return f"gate `{name}`, {'on' if spec.default else 'off'} by default"

    return re.sub(r"\{gate:(?P<name>\w+)\}", gate, text)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in line) + " |" for line in body]
    return "\n".join(lines)


_HEADER = ("Field", "Type", "Default", "Allowed", "Meaning", "This release")


def _field_table(table_rows: Sequence[Row], default: Callable[[Row], str]) -> str:
    body = []
    for row in table_rows:
        doc = row.doc
        use = _gates(doc.use)
        body.append(
            (
                f"`{row.path}`",
                _type(row.slot.type),
                default(row),
                _allowed(row),
                doc.meaning,
                use,
            )
        )
    return _table(_HEADER, body)


# ---- blocks -------------------------------------------------------------------------------------

Defaults = Callable[[Row], str]


@dataclass(frozen=True)
class _Table:
    intro: str
    rows: list[Row]
    default: Defaults


def _no_default(row: Row) -> str:
    return _default(row, None)


def _entry_model(top: Sequence[Row], path: str) -> type[Model]:
    model = _nested(next(r for r in top if r.path == path).slot.type)[0]
    assert model is not None
    return model


def _tables(key: KeyDoc) -> list[_Table]:
    """The tables of one key, in page order."""
    model = CONFIG_KEYS[key.key]
    defaults = key.defaults() if key.defaults is not None else None

    def default(row: Row) -> str:
        return _default(row, defaults)

    def cluster_default(row: Row) -> str:
        return _default(row, defaults, "clusterStrategy.")

    top = rows(model)
    if key.strategy is HostApplicationSpec:
        return [
            _Table("Top level:", top, _no_default),
            _Table(
                "Each application (in `applications` and in `nodeConfigs[].applications`):",
                rows(HostApplicationSpec, "applications[]."),
                _no_default,
            ),
            _Table(
                "Each `nodeConfigs[]` entry:",
                rows(_entry_model(top, "nodeConfigs"), "nodeConfigs[].", own_only=True),
                _no_default,
            ),
        ]
    if key.strategy in (ColocationStrategy, CPUNormalizationStrategy, ResourceAmplificationStrategy):
        return [
            _Table("Top level (the cluster strategy, and the node entries):", top, default),
            _Table(
                "Each `nodeConfigs[]` entry: the fields below, plus any field of the top level "
                "except `nodeConfigs`, merged onto the cluster values:",
                rows(_entry_model(top, "nodeConfigs"), "nodeConfigs[].", own_only=True),
                _no_default,
            ),
        ]
    if key.strategy is ResourceQOSStrategy:
        origin = (
            "defaults: the koordlet's; the slo-controller writes only what the ConfigMap sets, and "
            "the koordlet merges it onto these"
        )
    else:
        origin = "defaults: the slo-controller's, which the koordlet applies too"
    tables = [
        _Table("Top level:", top, _no_default),
        _Table(f"`clusterStrategy` ({origin}):", rows(key.strategy, "clusterStrategy."), cluster_default),
        _Table(
            "Each `nodeStrategies[]` entry: the fields below, plus any field of `clusterStrategy`, "
            "merged onto the cluster strategy:",
            rows(_entry_model(top, "nodeStrategies"), "nodeStrategies[].", own_only=True),
            _no_default,
        ),
    ]
    if key.strategy is ResourceQOSStrategy:
        tables.append(
            _Table(
                "Each class (`lsrClass`, `lsClass`, `beClass`, `systemClass`, `cgroupRoot`; the "
                "defaults are the koordlet's, per class):",
                rows(ResourceQOS, "<class>."),
                _class_defaults,
            )
        )
    return tables


def _key_rows(key: KeyDoc) -> list[Row]:
    """Every row of a key's tables."""
    return [row for table in _tables(key) for row in table.rows]


def _status(key: KeyDoc) -> str:
    used = [row.doc.acted_on for row in _key_rows(key)]
    if all(used):
        return "**used**"
    if any(used):
        return "**used** (a few fields not acted on)"
    return "**accepted and validated, not acted on**"


def _keys_block() -> str:
    if [k.key for k in KEYS] != list(CONFIG_KEYS):
        raise ValueError("KEYS must list every ConfigMap key, in the order of CONFIG_KEYS")
    body = [(f"`{k.key}`", k.shape, _status(k), k.reaches) for k in KEYS]
    return _table(("Key", "Shape", "In this release", "What acts on it"), body)


def _fields_block(key: KeyDoc) -> str:
    return "\n\n".join(f"{t.intro}\n\n{_field_table(t.rows, t.default)}" for t in _tables(key))


#: The rules of ``ColocationStrategy.is_valid``, in the order the page lists them.
_ABOVE_0, _AT_LEAST_0, _PERCENT, _NOT_EMPTY = "above 0", "0 or more", "0 to 100", "not empty"


def _validity_rule(row: Row) -> str | None:
    """The rule ``ColocationStrategy.is_valid`` holds a field to, found by trying values on the defaults."""

    def valid(value: Any) -> bool:
        strategy = default_colocation_strategy()
        setattr(strategy, row.slot.attr, value)
        return strategy.is_valid()

    kind = row.slot.type.kind
    if kind == "str":
        return None if valid("") else _NOT_EMPTY
    if kind not in ("int", "float"):
        return None
    if not valid(0):
        return _ABOVE_0
    if not valid(-1):
        return _AT_LEAST_0 if valid(101) else _PERCENT
    if not valid(101):
        raise ValueError(f"{row.path}: a rule with only an upper bound has no wording here")
    return None


def validity_rules() -> dict[str, list[str]]:
    """Rule -> the colocation fields ``ColocationStrategy.is_valid`` holds to it (set fields only)."""
    out: dict[str, list[str]] = {rule: [] for rule in (_ABOVE_0, _AT_LEAST_0, _PERCENT, _NOT_EMPTY)}
    for row in rows(ColocationStrategy):
        if (rule := _validity_rule(row)) is not None:
            out[rule].append(row.path)
    return {rule: names for rule, names in out.items() if names}


def positive_colocation_fields() -> list[str]:
    """The colocation fields that must be above 0 once merged (``ColocationStrategy.is_valid``)."""
    return validity_rules().get(_ABOVE_0, [])


def _validity_block() -> str:
    rules = validity_rules()
    parts = [
        f"{', '.join(f'`{name}`' for name in names)} {'is' if len(names) == 1 else 'are'} {rule}"
        for rule, names in rules.items()
    ]
    listed = "; ".join(parts[:-1]) + ("; and " if len(parts) > 1 else "") + parts[-1]
    return (
        "A colocation strategy is valid (upstream's `IsColocationStrategyValid`) when, once merged "
        f"with the defaults, {listed}. A field that is unset passes."
    )


def _overrides_block() -> str:
    body = [
        (
            f"annotation `{ANNOTATION_NODE_COLOCATION_STRATEGY}`",
            "`colocation-config`",
            "JSON object with any colocation field (a key may differ from the field's name in "
            "case, as in Go), merged onto the node's strategy after the node entry (not "
            "range-checked; malformed JSON is ignored and logged).",
        )
    ]
    body += [
        (
            f"label `{label}`",
            "`colocation-config`",
            f"`{field}` = ratio x 100 (`0.55` -> 55), applied last; negative or unparsable values are "
            "ignored and logged.",
        )
        for label, field in RATIO_LABELS.items()
    ]
    body.append(
        (
            f"annotation `{ANNOTATION_NETWORK_BANDWIDTH}`",
            "`system-config`",
            "quantity, replaces `totalNetworkBandwidth` in the node's NodeSLO (unparsable values "
            "are ignored and logged).",
        )
    )
    return _table(("On the Node", "Key", "Effect"), body)


# ---- the worked example -------------------------------------------------------------------------

EXAMPLE: dict[str, Any] = {
    "colocation-config": {
        "enable": True,
        "cpuReclaimThresholdPercent": 70,
        "memoryReclaimThresholdPercent": 70,
        "memoryCalculatePolicy": "request",
        "nodeConfigs": [
            {
                "name": "gpu-pool",
                "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                "cpuReclaimThresholdPercent": 50,
            },
            {
                "name": "no-colocation",
                "nodeSelector": {"matchLabels": {"colocation": "off"}},
                "enable": False,
            },
        ],
    },
    "resource-threshold-config": {
        "clusterStrategy": {
            "enable": True,
            "cpuSuppressThresholdPercent": 70,
            "memoryEvictThresholdPercent": 80,
        },
        "nodeStrategies": [
            {
                "name": "gpu-pool",
                "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                "cpuSuppressThresholdPercent": 55,
                "cpuSuppressPolicy": "cfsQuota",
            }
        ],
    },
    "resource-qos-config": {
        "clusterStrategy": {
            "lsClass": {"cpuQOS": {"enable": True}},
            "beClass": {"cpuQOS": {"enable": True}, "resctrlQOS": {"enable": True, "catRangeEndPercent": 20}},
        }
    },
    "cpu-burst-config": {"clusterStrategy": {"policy": "auto", "cpuBurstPercent": 500}},
    "system-config": {
        "clusterStrategy": {"minFreeKbytesFactor": 100, "totalNetworkBandwidth": "10G"},
        "nodeStrategies": [
            {
                "name": "gpu-pool",
                "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                "watermarkScaleFactor": 150,
            }
        ],
    },
    "host-application-config": {
        "applications": [
            {
                "name": "nginx",
                "priority": "koord-prod",
                "qos": "LS",
                "cgroupPath": {"base": "CgroupRoot", "relativePath": "nginx"},
            }
        ]
    },
}

EXAMPLE_NODES: dict[str, dict[str, Any]] = {
    "worker-1": {"metadata": {"name": "worker-1", "labels": {"pool": "general"}}},
    "gpu-1": {
        "metadata": {
            "name": "gpu-1",
            "labels": {"pool": "gpu", LABEL_MEMORY_RECLAIM_RATIO: "0.55"},
            "annotations": {ANNOTATION_NODE_COLOCATION_STRATEGY: '{"cpuCalculatePolicy":"maxUsageRequest"}'},
        }
    },
    "batch-off-1": {"metadata": {"name": "batch-off-1", "labels": {"pool": "general", "colocation": "off"}}},
}

#: Mistakes made to the example to show what invalid input does.
BROKEN: dict[str, Any] = {
    "resource-threshold-config": {"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 170}},
    "cpu-burst-config": {"clusterStrategy": {"policy": "always"}},
}

#: The koordlet view shown for gpu-1 (JSON paths into the NodeSLO spec).
_KOORDLET_PATHS = (
    "resourceQOSStrategy.policies.cpuPolicy",
    "resourceQOSStrategy.lsClass.cpuQOS.groupIdentity",
    "resourceQOSStrategy.beClass.cpuQOS.groupIdentity",
    "resourceQOSStrategy.lsrClass.cpuQOS.groupIdentity",
    "resourceQOSStrategy.beClass.resctrlQOS.catRangeStartPercent",
    "resourceQOSStrategy.beClass.resctrlQOS.catRangeEndPercent",
    "resourceQOSStrategy.beClass.resctrlQOS.mbaPercent",
    "resourceQOSStrategy.beClass.memoryQOS.wmarkRatio",
    "systemStrategy.totalNetworkBandwidth",
)


def _data(example: Mapping[str, Any]) -> dict[str, str]:
    return {key: json.dumps(value, indent=2) for key, value in example.items()}


def _configmap_yaml(example: Mapping[str, Any]) -> str:
    lines = [
        "apiVersion: v1",
        "kind: ConfigMap",
        "metadata:",
        f"  name: {CONFIG_NAME}",
        f"  namespace: {CONFIG_NAMESPACE}",
        "data:",
    ]
    for key, text in _data(example).items():
        lines.append(f"  {key}: |")
        lines += [f"    {line}" for line in text.splitlines()]
    return "\n".join(lines)


def _example_config() -> SLOControllerConfig:
    config, errors = parse_config(_data(EXAMPLE))
    if errors:
        raise ValueError(f"the worked example does not validate: {[str(e) for e in errors]}")
    return config


def _node_without(node: Mapping[str, Any], *, annotations: bool, ratio_labels: bool) -> dict[str, Any]:
    meta = dict(node["metadata"])
    if annotations:
        meta.pop("annotations", None)
    if ratio_labels:
        meta["labels"] = {k: v for k, v in (meta.get("labels") or {}).items() if k not in RATIO_LABELS}
    return {"metadata": meta}


def _first_entry(config: SLOControllerConfig, node: Mapping[str, Any]) -> str | None:
    """The name of the colocation node entry that selects ``node`` (for the example's labels)."""
    labels = node["metadata"].get("labels") or {}
    for entry in config.colocation.node_configs:
        if entry.node_selector is not None and label_selector_matches(entry.node_selector.to_dict(), labels):
            return entry.name
    return None


def _colocation_sources(config: SLOControllerConfig, node: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """Each colocation field of ``node``: its value and the last layer that changed it.

    The layers are the real resolution run on the node stripped of its overrides: without
    the annotation and the ratio labels, then with the annotation, then the whole node.
    """
    entry = _first_entry(config, node)
    layers = [
        ("cluster", colocation_strategy_for_node(config, None).to_dict()),
        (
            f"node entry `{entry}`",
            colocation_strategy_for_node(
                config, _node_without(node, annotations=True, ratio_labels=True)
            ).to_dict(),
        ),
        (
            "annotation",
            colocation_strategy_for_node(
                config, _node_without(node, annotations=False, ratio_labels=True)
            ).to_dict(),
        ),
        ("label", colocation_strategy_for_node(config, node).to_dict()),
    ]
    out: dict[str, tuple[Any, str]] = {}
    for row in rows(ColocationStrategy):
        previous = _lookup(default_colocation_strategy().to_dict(), row.path)
        source = "default"
        for name, layer in layers:
            value = _lookup(layer, row.path)
            if value != previous:
                source = name
            previous = value
        out[row.path] = (previous, source)
    return out


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def event_message(errors: Mapping[str, Sequence[str]], last_good: Mapping[str, str]) -> str:
    """The Warning Events the slo-controller records for broken keys, one ``reason: message`` line each.

    ``last_good``: the raw last good value of each key the process knows one of (the others
    are unavailable).
    """
    return "\n".join(
        ": ".join(
            invalid_key_event(
                key,
                errors[key],
                kept_outcome(key, last_good[key]) if key in last_good else unavailable_outcome(key),
            )
        )
        for key in sorted(errors)
    )


def _example_block() -> str:
    config = _example_config()
    parts = ["```yaml", _configmap_yaml(EXAMPLE), "```", ""]
    parts.append(
        _table(
            ("Node", "Labels", "Annotations"),
            [
                (
                    f"`{name}`",
                    ", ".join(f"`{k}={v}`" for k, v in (node["metadata"].get("labels") or {}).items()),
                    ", ".join(f"`{k}: {v}`" for k, v in (node["metadata"].get("annotations") or {}).items())
                    or "—",
                )
                for name, node in EXAMPLE_NODES.items()
            ],
        )
    )
    parts.append("")
    parts.append(
        "Effective colocation strategy per node (what the noderesource and nodemetric controllers "
        "use; the layer that set each value in parentheses):"
    )
    parts.append("")
    sources = {name: _colocation_sources(config, node) for name, node in EXAMPLE_NODES.items()}
    body = []
    for row in rows(ColocationStrategy):
        cells = [f"`{row.path}`"]
        for name in EXAMPLE_NODES:
            value, source = sources[name][row.path]
            cells.append(_value(value) + ("" if source == "default" else f" ({source})"))
        body.append(cells)
    cluster_enable = bool(colocation_strategy_for_node(config, None).enable)
    body.append(
        ["batch/mid resources"]
        + [
            "computed" if cluster_enable and sources[name]["enable"][0] else "removed"
            for name in EXAMPLE_NODES
        ]
    )
    body.append(
        ["NodeMetric `metricCollectPolicy`"]
        + [
            _value(node_metric_spec_for_node(config, node).to_dict()["metricCollectPolicy"])
            for node in EXAMPLE_NODES.values()
        ]
    )
    parts.append(_table(["Field", *[f"`{n}`" for n in EXAMPLE_NODES]], body))
    gpu = EXAMPLE_NODES["gpu-1"]
    spec = node_slo_spec_for_node(config, gpu)
    parts += [
        "",
        "The NodeSLO spec the nodeslo controller computes for `gpu-1` (before the apiserver "
        "fills in the CRD defaults):",
        "",
        "```json",
        _pretty(spec.to_dict()),
        "```",
        "",
        "What the koordlet then acts on (the NodeSLO merged onto its defaults; disabled classes reset):",
        "",
    ]
    effective = merge_node_slo_spec(spec).to_dict()
    written = spec.to_dict()
    parts.append(
        _table(
            ("NodeSLO path", "written by the controller", "koordlet's value"),
            [(f"`{p}`", _value(_lookup(written, p)), _value(_lookup(effective, p))) for p in _KOORDLET_PATHS],
        )
    )
    cluster_bandwidth = system_strategy_for_node(config, None).total_network_bandwidth
    node_bandwidth = system_strategy_for_node(config, gpu).total_network_bandwidth
    if cluster_bandwidth != node_bandwidth:
        parts += [
            "",
            f"Note `systemStrategy.totalNetworkBandwidth`: {_value(str(node_bandwidth))} on `gpu-1` "
            f"although the cluster strategy says {_value(str(cluster_bandwidth))}. A node strategy "
            "always carries this field (see [Merging](#merging)), so the `gpu-pool` entry of "
            "`system-config` would have to repeat it.",
        ]
    # invalid input
    broken = dict(EXAMPLE)
    broken.update(BROKEN)
    kept, errors = parse_config(_data(broken), config)
    by_key: dict[str, list[str]] = {}
    for error in errors:
        by_key.setdefault(error.field.split(".", 1)[0], []).append(str(error))
    worker = EXAMPLE_NODES["worker-1"]
    removed = {k: v for k, v in _data(EXAMPLE).items() if k != "cpu-burst-config"}
    defaults_burst = cpu_burst_strategy_for_node(parse_config(removed, config)[0], worker)
    parts += [
        "",
        "#### Invalid input",
        "",
        "The same ConfigMap with two mistakes:",
        "",
        "```yaml",
        "data:",
        "\n".join(f"  {k}: '{json.dumps(v, separators=(',', ':'))}'" for k, v in BROKEN.items()),
        "```",
        "",
        "The slo-controller logs the errors and records one `Warning` Event per broken key on the "
        f"ConfigMap, with upstream's reasons (`{REASON_COLOCATION_INVALID}` for `colocation-config`, "
        f"`{REASON_SLO_INVALID}` for the others); reason and message of each:",
        "",
        "```text",
        event_message(by_key, _data(EXAMPLE)),
        "```",
        "",
        "Both keys keep their last good value -- `worker-1`'s `cpuSuppressThresholdPercent` stays "
        f"{_value(resource_threshold_strategy_for_node(kept, worker).cpu_suppress_threshold_percent)}, "
        f"its `cpuBurstStrategy.policy` stays {_value(cpu_burst_strategy_for_node(kept, worker).policy)} -- "
        "and the other keys apply as usual. Removing `cpu-burst-config` instead gives its defaults "
        f"(`policy` {_value(defaults_burst.policy)}).",
    ]
    return "\n".join(parts)


# ---- the page ------------------------------------------------------------------------------------


def blocks() -> dict[str, str]:
    """Every generated block by name."""
    out = {
        "keys": _keys_block(),
        "node-overrides": _overrides_block(),
        "colocation-validity": _validity_block(),
        "example": _example_block(),
    }
    for key in KEYS:
        out[f"fields:{key.key}"] = _fields_block(key)
    return out


def update(text: str, generated: Mapping[str, str]) -> str:
    """``text`` with the contents of every generated block replaced; every block must be present."""
    out: list[str] = []
    lines = iter(text.split("\n"))
    seen: set[str] = set()
    for line in lines:
        out.append(line)
        match = _BEGIN.match(line)
        if not match:
            continue
        name = match["name"]
        if name not in generated:
            raise ValueError(f"unknown generated block {name!r}")
        end = _END.format(name=name)
        for inner in lines:
            if inner == end:
                break
        else:
            raise ValueError(f"block {name!r} has no end marker {end!r}")
        out += ["", generated[name], "", end]
        seen.add(name)
    if missing := set(generated) - seen:
        raise ValueError(f"the page lacks the generated blocks {sorted(missing)}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Regenerate the tables of the slo-controller-config reference."
    )
    parser.add_argument("--doc", type=Path, default=DOC_PATH, help=f"the page (default {DOC_PATH})")
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when the page is stale")
    args = parser.parse_args(argv)
    path: Path = args.doc
    current = path.read_text(encoding="utf-8")
    wanted = update(current, blocks())
    if wanted == current:
        return 0
    if args.check:
        print(f"{path} is stale: run `{COMMAND}` and commit it", file=sys.stderr)
        return 1
    path.write_text(wanted, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
