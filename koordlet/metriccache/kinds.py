"""The metric kinds the collectors write and the reporters and strategies read.

Names and label names are upstream's (``kl/metriccache/metric_resources.go``), so a
query reads the same series upstream's would. CPU is in cores unless the name says
otherwise (``node_be`` is in milli-cores, as upstream), memory in bytes, throttling and
PSI as ratios and percentages.
"""

from __future__ import annotations

from koordlet.metriccache.cache import MetricKind

NODE_CPU_USAGE = MetricKind("node_cpu_usage")
NODE_MEMORY_USAGE = MetricKind("node_memory_usage")
NODE_MEMORY_USAGE_WITH_PAGE_CACHE = MetricKind("node_memory_usage_with_page_cache")
NODE_NUMA_CPU_USAGE = MetricKind("node_numa_cpu_usage", ("numa_node_id",))
NODE_NUMA_MEMORY_USAGE = MetricKind("node_numa_memory_usage", ("numa_node_id",))

#: per GPU: the summed SM utilisation of its processes (percent: 100 = one whole GPU) and
#: their used memory, and the GPU's memory (bytes)
_GPU_LABELS = ("gpu_minor", "gpu_device_uuid")
NODE_GPU_CORE_USAGE = MetricKind("node_gpu_core_usage", _GPU_LABELS)
NODE_GPU_MEMORY_USAGE = MetricKind("node_gpu_memory_usage", _GPU_LABELS)
NODE_GPU_MEMORY_TOTAL = MetricKind("node_gpu_memory_total", _GPU_LABELS)

POD_CPU_USAGE = MetricKind("pod_cpu_usage", ("pod_uid",))
POD_MEMORY_USAGE = MetricKind("pod_memory_usage", ("pod_uid",))
POD_MEMORY_USAGE_WITH_PAGE_CACHE = MetricKind("pod_memory_usage_with_page_cache", ("pod_uid",))
POD_CPU_THROTTLED = MetricKind("pod_cpu_throttled", ("pod_uid",))
CONTAINER_CPU_USAGE = MetricKind("container_cpu_usage", ("container_id",))
CONTAINER_MEMORY_USAGE = MetricKind("container_memory_usage", ("container_id",))
CONTAINER_MEMORY_USAGE_WITH_PAGE_CACHE = MetricKind(
    "container_memory_usage_with_page_cache", ("container_id",)
)
CONTAINER_CPU_THROTTLED = MetricKind("container_cpu_throttled", ("container_id",))

SYS_CPU_USAGE = MetricKind("sys_cpu_usage")
SYS_MEMORY_USAGE = MetricKind("sys_memory_usage")
SYS_NUMA_CPU_USAGE = MetricKind("sys_numa_cpu_usage", ("numa_node_id",))
SYS_NUMA_MEMORY_USAGE = MetricKind("sys_numa_memory_usage", ("numa_node_id",))

#: milli-cores; be_resource=cpu, be_allocation=real-limit|request|usage
NODE_BE = MetricKind("node_be", ("be_resource", "be_allocation"))
BE_REAL_LIMIT, BE_REQUEST, BE_USAGE = "real-limit", "request", "usage"

HOST_APPLICATION_CPU_USAGE = MetricKind("host_application_cpu_usage", ("host_app_name",))
HOST_APPLICATION_MEMORY_USAGE = MetricKind("host_application_memory_usage", ("host_app_name",))
HOST_APPLICATION_MEMORY_USAGE_WITH_PAGE_CACHE = MetricKind(
    "host_application_memory_usage_with_page_cache", ("host_app_name",)
)

_PSI_LABELS = ("psi_resource", "psi_precision", "psi_degree")
CONTAINER_PSI = MetricKind("container_psi", ("container_id", *_PSI_LABELS))
POD_PSI = MetricKind("pod_psi", ("pod_uid", *_PSI_LABELS))
CONTAINER_PSI_CPU_FULL_SUPPORTED = MetricKind("container_psi_cpu_full_supported", ("container_id",))
POD_PSI_CPU_FULL_SUPPORTED = MetricKind("pod_psi_cpu_full_supported", ("pod_uid",))

#: key-value facts
NODE_CPU_INFO = "node_cpu_info"
NODE_NUMA_INFO = "node_numa_info"

#: perf counts over the CPI window (cpi_resource=cycle|instruction), summed over CPUs
CONTAINER_CPI = MetricKind("container_cpi", ("pod_uid", "container_id", "cpi_resource"))
CPI_CYCLE, CPI_INSTRUCTION = "cycle", "instruction"

#: resctrl monitoring of the QoS groups (qos=LSR|LS|BE): LLC occupancy in bytes, memory
#: bandwidth in bytes per second (mb_type=mbm_local_bytes|mbm_total_bytes)
RESCTRL_RESOURCE_LLC = MetricKind("resctrl_resource_llc", ("qos", "cache_id"))
RESCTRL_RESOURCE_MB = MetricKind("resctrl_resource_mb", ("qos", "cache_id", "mb_type"))

#: kidled cold pages (bytes) and memory usage without them
NODE_MEMORY_COLD_PAGE_SIZE = MetricKind("node_memory_cold_page_size")
POD_MEMORY_COLD_PAGE_SIZE = MetricKind("pod_memory_cold_page_size", ("pod_uid",))
CONTAINER_MEMORY_COLD_PAGE_SIZE = MetricKind("container_memory_cold_page_size", ("container_id",))
NODE_MEMORY_WITH_HOT_PAGE_USAGE = MetricKind("node_memory_with_hot_page_usage")
POD_MEMORY_WITH_HOT_PAGE_USAGE = MetricKind("pod_memory_with_hot_page_usage", ("pod_uid",))
CONTAINER_MEMORY_WITH_HOT_PAGE_USAGE = MetricKind("container_memory_with_hot_page_usage", ("container_id",))
HOST_APPLICATION_MEMORY_COLD_PAGE_SIZE = MetricKind(
    "host_application_memory_cold_page_size", ("host_app_name",)
)
HOST_APPLICATION_MEMORY_WITH_HOT_PAGE_USAGE = MetricKind(
    "host_application_memory_with_hot_page_usage", ("host_app_name",)
)

#: key-value: the node's disks, partitions, volume groups, logical volumes and mount points
NODE_LOCAL_STORAGE_INFO = "node_local_storage_info"
