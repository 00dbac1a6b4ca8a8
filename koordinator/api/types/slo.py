"""``slo.koordinator.sh/v1alpha1``: NodeSLO (per-node QoS policy) and NodeMetric (per-node usage report).

The NodeSLO strategy types are also the building blocks of the ``slo-controller-config``
ConfigMap (:mod:`koordinator.api.sloconfig`). Bounds declared on the fields are the upstream
validation ranges (struct ``validate`` tags and kubebuilder markers); cross-field ordering
rules (threshold above its lower bound, CAT end above start) are CEL rules.
"""

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from koordinator.api.model import JSON, IntOrString, Model, Rule, field
from koordinator.api.quantity import Quantity
from koordinator.api.types.core import DATE_TIME, DURATION_PATTERN, Resource, ResourceList
from koordinator.api.types.scheduling import DeviceInfo

__all__ = [
    "CPUQOS",
    "AggregatePolicy",
    "AggregatedUsage",
    "BlkIOQOS",
    "BlkIOQOSCfg",
    "BlockCfg",
    "CPUBurstConfig",
    "CPUBurstStrategy",
    "CPUQOSCfg",
    "CgroupPath",
    "HostApplicationMetricInfo",
    "HostApplicationSpec",
    "IOCfg",
    "MemoryQOS",
    "MemoryQOSCfg",
    "NUMAMetricInfo",
    "NetworkQOS",
    "NetworkQOSCfg",
    "NodeMetric",
    "NodeMetricCollectPolicy",
    "NodeMetricInfo",
    "NodeMetricSpec",
    "NodeMetricStatus",
    "NodeSLO",
    "NodeSLOSpec",
    "NodeSLOStatus",
    "PodMetricInfo",
    "ReclaimableMetric",
    "ResctrlQOS",
    "ResctrlQOSCfg",
    "ResourceMap",
    "ResourceQOS",
    "ResourceQOSPolicies",
    "ResourceQOSStrategy",
    "ResourceThresholdStrategy",
    "SystemStrategy",
]

GROUP = "slo.koordinator.sh"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

QOS_CLASSES = ("LSE", "LSR", "LS", "BE", "SYSTEM")
PRIORITY_CLASSES = ("koord-prod", "koord-mid", "koord-batch", "koord-free")


def _percent(json: str, description: str = "", *, low: int = 0, high: int = 100) -> int | None:
    result: int | None = field(json, minimum=low, maximum=high, format="int64", description=description)
    return result


def _ordered(high: str, low: str) -> Rule:
    """``high`` must exceed ``low`` when both are set."""
    return Rule(
        f"!has(self.{high}) || !has(self.{low}) || self.{high} > self.{low}",
        message=f"{high} must be greater than {low}",
    )


# ---- resourceUsedThresholdWithBE ---------------------------------------------------------------


@dataclass
class ResourceThresholdStrategy(Model):
    __api_description__ = "When and how BE pods are suppressed or evicted as node usage rises."
    __api_rules__ = (
        _ordered("memoryEvictThresholdPercent", "memoryEvictLowerPercent"),
        _ordered("cpuEvictBESatisfactionUpperPercent", "cpuEvictBESatisfactionLowerPercent"),
        _ordered("cpuEvictThresholdPercent", "cpuEvictLowerPercent"),
    )

    enable: bool | None = field("enable", description="Turns the BE suppress/evict strategies on.")
    cpu_suppress_threshold_percent: int | None = _percent(
        "cpuSuppressThresholdPercent", "Node CPU usage (percent) above which BE pods are suppressed."
    )
    cpu_suppress_min_percent: int | None = _percent(
        "cpuSuppressMinPercent", "The least CPU (percent of the node) BE pods keep under suppression."
    )
    memory_evict_threshold_percent: int | None = _percent(
        "memoryEvictThresholdPercent", "Node memory usage (percent) that triggers BE eviction."
    )
    memory_evict_lower_percent: int | None = _percent(
        "memoryEvictLowerPercent", "Eviction stops below this usage (default threshold - 2)."
    )
    cpu_evict_be_satisfaction_lower_percent: int | None = _percent(
        "cpuEvictBESatisfactionLowerPercent", "BE CPU satisfaction below which BE pods are evicted.", high=60
    )
    cpu_evict_be_satisfaction_upper_percent: int | None = _percent(
        "cpuEvictBESatisfactionUpperPercent", "Satisfaction that eviction tries to restore."
    )
    cpu_evict_be_usage_threshold_percent: int | None = _percent(
        "cpuEvictBEUsageThresholdPercent", "BE CPU usage of its limit needed before evicting (default 90)."
    )
    cpu_evict_threshold_percent: int | None = _percent(
        "cpuEvictThresholdPercent", "Node CPU usage that triggers CPUEvict."
    )
    cpu_evict_lower_percent: int | None = _percent("cpuEvictLowerPercent", "CPUEvict stops below this usage.")
    cpu_evict_time_window_seconds: int | None = field(
        "cpuEvictTimeWindowSeconds",
        minimum=0,
        exclusive_minimum=True,
        format="int64",
        description="Window of the averaged CPU usage used by CPU eviction.",
    )
    cpu_suppress_policy: str = field(
        "cpuSuppressPolicy",
        default="",
        enum=("cpuset", "cfsQuota"),
        description="How BE CPU is suppressed: cpuset (default) or cfsQuota.",
    )
    cpu_evict_policy: str = field(
        "cpuEvictPolicy",
        default="",
        enum=("evictByRealLimit", "evictByAllocatable"),
        description="BE CPU limit used by eviction: evictByRealLimit (default) or evictByAllocatable.",
    )
    allocatable_evict_priority_threshold: int | None = field(
        "allocatableEvictPriorityThreshold",
        format="int32",
        description="Pods up to this priority may be evicted.",
    )
    cpu_allocatable_evict_threshold_percent: int | None = _percent("cpuAllocatableEvictThresholdPercent")
    cpu_allocatable_evict_lower_percent: int | None = _percent("cpuAllocatableEvictLowerPercent")
    memory_allocatable_evict_threshold_percent: int | None = _percent(
        "memoryAllocatableEvictThresholdPercent"
    )
    memory_allocatable_evict_lower_percent: int | None = _percent("memoryAllocatableEvictLowerPercent")
    evict_enabled_priority_threshold: int | None = field(
        "evictEnabledPriorityThreshold",
        format="int32",
        description="CPUEvict/MemoryEvict consider pods up to this priority.",
    )


# ---- resourceQOSStrategy ------------------------------------------------------------------------


@dataclass
class CPUQOS(Model):
    group_identity: int | None = field(
        "groupIdentity", minimum=-1, maximum=2, format="int64", description="bvt group identity (-1..2)."
    )
    sched_idle: int | None = field(
        "schedIdle", minimum=0, maximum=1, format="int64", description="cpu.idle of the class (0 or 1)."
    )
    core_expeller: bool | None = field(
        "coreExpeller", description="Expel SCHED_IDLE pods from sibling SMT threads (core scheduling)."
    )


@dataclass
class CPUQOSCfg(CPUQOS):
    enable: bool | None = field("enable")


@dataclass
class MemoryQOS(Model):
    min_limit_percent: int | None = _percent("minLimitPercent", "memory.min as percent of the request.")
    low_limit_percent: int | None = _percent("lowLimitPercent", "memory.low as percent of the request.")
    throttling_percent: int | None = _percent(
        "throttlingPercent", "memory.high between request and limit, in percent (0 = unlimited)."
    )
    wmark_ratio: int | None = _percent("wmarkRatio", "memory.wmark_ratio (Anolis).")
    wmark_scale_permill: int | None = field(
        "wmarkScalePermill", minimum=1, maximum=1000, format="int64", description="memory.wmark_scale_factor."
    )
    wmark_min_adj: int | None = field(
        "wmarkMinAdj", minimum=-25, maximum=50, format="int64", description="memory.wmark_min_adj (Anolis)."
    )
    priority_enable: int | None = field("priorityEnable", minimum=0, maximum=1, format="int64")
    priority: int | None = field("priority", minimum=0, maximum=12, format="int64")
    oom_kill_group: int | None = field("oomKillGroup", minimum=0, maximum=1, format="int64")


@dataclass
class MemoryQOSCfg(MemoryQOS):
    enable: bool | None = field("enable")


@dataclass
class ResctrlQOS(Model):
    __api_rules__ = (_ordered("catRangeEndPercent", "catRangeStartPercent"),)

    cat_range_start_percent: int | None = _percent("catRangeStartPercent", "Start of the LLC ways, percent.")
    cat_range_end_percent: int | None = _percent("catRangeEndPercent", "End of the LLC ways, percent.")
    mba_percent: int | None = _percent("mbaPercent", "Memory bandwidth, percent.")


@dataclass
class ResctrlQOSCfg(ResctrlQOS):
    enable: bool | None = field("enable")


@dataclass
class IOCfg(Model):
    read_iops: int | None = field("readIOPS", minimum=0, format="int64")
    write_iops: int | None = field("writeIOPS", minimum=0, format="int64")
    read_bps: int | None = field("readBPS", minimum=0, format="int64")
    write_bps: int | None = field("writeBPS", minimum=0, format="int64")
    io_weight_percent: int | None = _percent("ioWeightPercent", "blkio cost weight, 1..100.", low=1)
    read_latency_percent: int | None = _percent("readLatencyPercent")
    write_latency_percent: int | None = _percent("writeLatencyPercent")
    read_latency: int | None = field("readLatency", format="int64", description="Read latency target, µs.")
    write_latency: int | None = field("writeLatency", format="int64", description="Write latency target, µs.")
    enable_user_model: bool | None = field("enableUserModel")
    model_read_bps: int | None = field("modelReadBPS", minimum=1, format="int64")
    model_write_bps: int | None = field("modelWriteBPS", minimum=1, format="int64")
    model_read_seq_iops: int | None = field("modelReadSeqIOPS", minimum=1, format="int64")
    model_write_seq_iops: int | None = field("modelWriteSeqIOPS", minimum=1, format="int64")
    model_read_rand_iops: int | None = field("modelReadRandIOPS", minimum=1, format="int64")
    model_write_rand_iops: int | None = field("modelWriteRandIOPS", minimum=1, format="int64")


@dataclass
class BlockCfg(Model):
    name: str = field("name", default="")
    block_type: str = field("type", default="", enum=("device", "volumegroup", "podvolume"))
    io_cfg: IOCfg = field("ioCfg", factory=IOCfg, omitempty=False)


@dataclass
class BlkIOQOS(Model):
    blocks: list[BlockCfg] = field("blocks", factory=list)


@dataclass
class BlkIOQOSCfg(BlkIOQOS):
    enable: bool | None = field("enable")


@dataclass
class NetworkQOS(Model):
    ingress_request: IntOrString | None = field(
        "ingressRequest",
        schema_default=0,
        description="Guaranteed ingress: percent (int) or bandwidth (string).",
    )
    ingress_limit: IntOrString | None = field("ingressLimit", schema_default=100)
    egress_request: IntOrString | None = field("egressRequest", schema_default=0)
    egress_limit: IntOrString | None = field("egressLimit", schema_default=100)


@dataclass
class NetworkQOSCfg(NetworkQOS):
    enable: bool | None = field("enable")


@dataclass
class ResourceQOS(Model):
    cpu_qos: CPUQOSCfg | None = field("cpuQOS")
    memory_qos: MemoryQOSCfg | None = field("memoryQOS")
    blkio_qos: BlkIOQOSCfg | None = field("blkioQOS")
    resctrl_qos: ResctrlQOSCfg | None = field("resctrlQOS")
    network_qos: NetworkQOSCfg | None = field("networkQOS")


@dataclass
class ResourceQOSPolicies(Model):
    cpu_policy: str | None = field("cpuPolicy", description="groupIdentity (default) or coreSched.")
    net_qos_policy: str | None = field("netQOSPolicy", description="tc (default) or terway-qos.")


@dataclass
class ResourceQOSStrategy(Model):
    policies: ResourceQOSPolicies | None = field("policies")
    lsr_class: ResourceQOS | None = field("lsrClass", description="For LSE and LSR pods.")
    ls_class: ResourceQOS | None = field("lsClass", description="For LS pods.")
    be_class: ResourceQOS | None = field("beClass", description="For BE pods.")
    system_class: ResourceQOS | None = field("systemClass", description="For SYSTEM pods.")
    cgroup_root: ResourceQOS | None = field("cgroupRoot", description="For the root cgroup.")

    def classes(self) -> dict[str, ResourceQOS | None]:
        """The per-class configs by JSON name, in upstream order."""
        return {
            "lsrClass": self.lsr_class,
            "lsClass": self.ls_class,
            "beClass": self.be_class,
            "systemClass": self.system_class,
            "cgroupRoot": self.cgroup_root,
        }


# ---- cpuBurstStrategy / systemStrategy / hostApplications --------------------------------------


@dataclass
class CPUBurstConfig(Model):
    policy: str = field(
        "policy",
        default="",
        enum=("none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"),
        description="none, cpuBurstOnly, cfsQuotaBurstOnly or auto.",
    )
    cpu_burst_percent: int | None = field(
        "cpuBurstPercent",
        minimum=1,
        maximum=10000,
        format="int64",
        description="cpu.cfs_burst_us, percent of limit.",
    )
    cfs_quota_burst_percent: int | None = field(
        "cfsQuotaBurstPercent",
        minimum=100,
        format="int64",
        description="Ceiling of scaled cfs quota, percent.",
    )
    cfs_quota_burst_period_seconds: int | None = field(
        "cfsQuotaBurstPeriodSeconds",
        minimum=-1,
        format="int64",
        description="Burst time budget; -1 = unlimited.",
    )


@dataclass
class CPUBurstStrategy(CPUBurstConfig):
    share_pool_threshold_percent: int | None = _percent(
        "sharePoolThresholdPercent", "Share-pool usage above which burst quota scales down."
    )


@dataclass
class SystemStrategy(Model):
    min_free_kbytes_factor: int | None = field(
        "minFreeKbytesFactor", minimum=0, exclusive_minimum=True, format="int64"
    )
    watermark_scale_factor: int | None = field(
        "watermarkScaleFactor", minimum=0, exclusive_minimum=True, maximum=400, format="int64"
    )
    memcg_reap_background: int | None = field("memcgReapBackGround", minimum=0, maximum=1, format="int64")
    total_network_bandwidth: Quantity = field(
        "totalNetworkBandwidth",
        factory=Quantity,
        omitempty=False,
        description="Total NIC bandwidth; 0 reads it from the host.",
    )
    sched_group_identity_enabled: int | None = field(
        "schedGroupIdentityEnabled", minimum=0, maximum=1, format="int64"
    )
    sched_idle_saver_wmark: int | None = field("schedIdleSaverWmark", format="int64")
    page_cache_limit_enabled: int | None = field(
        "pageCacheLimitEnabled", minimum=0, maximum=1, format="int64"
    )
    sched_features: dict[str, bool] = field("schedFeatures", factory=dict)


@dataclass
class CgroupPath(Model):
    base: str = field(
        "base",
        default="",
        enum=("CgroupRoot", "Kubepods", "KubepodsBurstable", "KubepodsBesteffort"),
        description="The cgroup the path is relative to.",
    )
    parent_dir: str = field("parentDir", default="")
    relative_path: str = field("relativePath", default="")


@dataclass
class HostApplicationSpec(Model):
    name: str = field("name", default="")
    priority: str = field("priority", default="", enum=PRIORITY_CLASSES)
    qos: str = field("qos", default="", enum=QOS_CLASSES)
    cgroup_path: CgroupPath | None = field("cgroupPath")
    strategy: JSON | None = field("strategy", schemaless=True)


# ---- NodeSLO -------------------------------------------------------------------------------------


@dataclass
class NodeSLOSpec(Model):
    resource_used_threshold_with_be: ResourceThresholdStrategy | None = field("resourceUsedThresholdWithBE")
    resource_qos_strategy: ResourceQOSStrategy | None = field("resourceQOSStrategy")
    cpu_burst_strategy: CPUBurstStrategy | None = field("cpuBurstStrategy")
    system_strategy: SystemStrategy | None = field("systemStrategy")
    extensions: JSON | None = field(
        "extensions", schemaless=True, description="Third-party extension configs."
    )
    host_applications: list[HostApplicationSpec] = field("hostApplications", factory=list)


@dataclass
class NodeSLOStatus(Model):
    __api_description__ = "Empty: the koordlet reports nothing back on the NodeSLO."


@dataclass
class NodeSLO(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "NodeSLO"
    __api_description__ = "The QoS policy of one node, named after the node."

    spec: NodeSLOSpec | None = field("spec")
    status: NodeSLOStatus | None = field("status")


# ---- NodeMetric ----------------------------------------------------------------------------------


@dataclass
class AggregatePolicy(Model):
    durations: list[str] = field(
        "durations",
        factory=list,
        item_pattern=DURATION_PATTERN,
        description="Aggregation windows (5m, 10m ...).",
    )


@dataclass
class NodeMetricCollectPolicy(Model):
    aggregate_duration_seconds: int | None = field("aggregateDurationSeconds", format="int64")
    report_interval_seconds: int | None = field("reportIntervalSeconds", format="int64")
    node_aggregate_policy: AggregatePolicy | None = field("nodeAggregatePolicy")
    node_memory_collect_policy: str | None = field(
        "nodeMemoryCollectPolicy",
        enum=("usageWithoutPageCache", "usageWithHotPageCache", "usageWithPageCache"),
        description="Which memory counter is reported as usage.",
    )


@dataclass
class NodeMetricSpec(Model):
    metric_collect_policy: NodeMetricCollectPolicy | None = field("metricCollectPolicy")


@dataclass
class ResourceMap(Model):
    resources: ResourceList = field("resources", factory=dict)
    devices: list[DeviceInfo] = field("devices", factory=list)


@dataclass
class AggregatedUsage(Model):
    usage: dict[str, ResourceMap] = field(
        "usage", factory=dict, description="Keyed by avg, p50, p90, p95, p99."
    )
    duration: str | None = field("duration", pattern=DURATION_PATTERN)


@dataclass
class NUMAMetricInfo(Model):
    numa_node_id: int = field("numaNodeID", default=0, omitempty=False, format="int32")
    node_usage: ResourceMap | None = field("nodeUsage")
    system_usage: ResourceMap | None = field("systemUsage")


@dataclass
class NodeMetricInfo(Model):
    node_usage: ResourceMap | None = field("nodeUsage")
    aggregated_node_usages: list[AggregatedUsage] = field("aggregatedNodeUsages", factory=list)
    system_usage: ResourceMap | None = field("systemUsage")
    aggregated_system_usages: list[AggregatedUsage] = field("aggregatedSystemUsages", factory=list)
    numa_usages: list[NUMAMetricInfo] = field("numaUsages", factory=list)


@dataclass
class PodMetricInfo(Model):
    name: str = field("name", default="")
    namespace: str = field("namespace", default="")
    pod_usage: ResourceMap | None = field("podUsage")
    priority: str = field("priority", default="")
    qos: str = field("qos", default="")
    extensions: JSON | None = field("extensions", schemaless=True)


@dataclass
class HostApplicationMetricInfo(Model):
    name: str = field("name", default="")
    usage: ResourceMap | None = field("usage")
    priority: str = field("priority", default="")
    qos: str = field("qos", default="")


@dataclass
class ReclaimableMetric(Model):
    resource: ResourceMap | None = field("resource")


@dataclass
class NodeMetricStatus(Model):
    update_time: str | None = field(
        "updateTime", format=DATE_TIME, description="When the koordlet last reported."
    )
    node_metric: NodeMetricInfo | None = field("nodeMetric")
    pods_metric: list[PodMetricInfo] = field("podsMetric", factory=list)
    host_application_metric: list[HostApplicationMetricInfo] = field("hostApplicationMetric", factory=list)
    prod_reclaimable_metric: ReclaimableMetric | None = field("prodReclaimableMetric")
    prod_peak_metric: ReclaimableMetric | None = field("prodPeakMetric")


@dataclass
class NodeMetric(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "NodeMetric"
    __api_description__ = "Resource usage of one node and its pods, reported by the koordlet."

    spec: NodeMetricSpec | None = field("spec")
    status: NodeMetricStatus | None = field("status")
