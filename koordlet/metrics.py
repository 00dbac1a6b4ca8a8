"""The koordlet's Prometheus metrics: upstream's ``koordlet_*`` names and labels, on an
injectable registry.

Dashboards built for Koordinator query these exact names. The Python client appends
``_total`` to counters and adds ``_created`` samples; Go's client does neither, so
:func:`render` (:mod:`koordinator.metrics.exposition`, shared with koord-manager) writes
counters under their plain names (``koordlet_pod_eviction``) and omits ``_created``.
Values are not written as Go writes them: integral values have no fractional part and
others are Python's shortest ``repr`` (``34359738368`` where Go writes ``3.4359738368e+10``),
the same numbers to Prometheus. The HTTP handler renders on the event loop in slices
(:func:`render_async`), so a scrape of thousands of series never stalls the loop.

Series labelled by pod or container are pruned with :func:`prune` (or replaced as a whole
with :func:`sync_gauge`) when the object goes away, where upstream lets "GC gauge vecs"
expire or resets the vector.

Gauges that would cost a hot loop too much to keep current (PSI: up to 18 series per pod
and container) are brought up to date only when something reads the registry: their
owner registers a refresher with :meth:`KoordletMetrics.on_scrape`, and every scrape
(:func:`render`, :func:`render_async`, ``registry.collect()``) runs the refreshers first.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from koordinator.metrics.exposition import RENDER_SLICE, Refresher, ScrapeRefreshers, render, render_async

__all__ = [
    "BYTE",
    "CORE",
    "INTEGER",
    "NAMESPACE",
    "RENDER_SLICE",
    "KoordletMetrics",
    "Refresher",
    "ScrapeRefreshers",
    "prune",
    "render",
    "render_async",
    "sync_gauge",
]

NAMESPACE = "koordlet"
CORE, BYTE, INTEGER = "core", "byte", "integer"

_CONTAINER = ("node", "container_id", "container_name", "pod_uid", "pod_name", "pod_namespace")
_PSI = ("psi_resource_type", "psi_precision", "psi_degree", "cpu_full_supported")
_MS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


class KoordletMetrics:
    """Every koordlet metric, registered on ``registry``; ``node`` fills the node label."""

    def __init__(self, registry: CollectorRegistry, node: str) -> None:
        self.registry = registry
        self.node = node
        self.refreshers = ScrapeRefreshers()
        registry.register(self.refreshers)  # first: scrapes refresh before they read

        def gauge(name: str, doc: str, labels: Iterable[str]) -> Gauge:
            return Gauge(name, doc, list(labels), namespace=NAMESPACE, registry=registry)

        def counter(name: str, doc: str, labels: Iterable[str]) -> Counter:
            return Counter(name, doc, list(labels), namespace=NAMESPACE, registry=registry)

        def histogram(name: str, doc: str, labels: Iterable[str], buckets: Iterable[float]) -> Histogram:
            return Histogram(
                name, doc, list(labels), namespace=NAMESPACE, registry=registry, buckets=tuple(buckets)
            )

        self.start_time = gauge("start_time", "the start time of koordlet", ["node"])
        self.collect_node_cpu_info_status = counter(
            "collect_node_cpu_info_status", "the count of CollectNodeCPUInfo status", ["node", "status"]
        )
        self.collect_node_numa_info_status = counter(
            "collect_node_numa_info_status", "the count of CollectNodeNUMAInfo status", ["node", "status"]
        )
        self.collect_node_local_storage_info_status = counter(
            "collect_node_local_storage_info_status",
            "the count of CollectNodeLocalStorageInfo status",
            ["node", "status"],
        )
        self.pod_eviction = counter(
            "pod_eviction", "Number of eviction launched by koordlet", ["node", "reason"]
        )
        self.node_used_cpu_cores = gauge(
            "node_used_cpu_cores", "Number of cpu cores used by node in realtime", ["node"]
        )
        self.node_used_memory_bytes = gauge(
            "node_used_memory_bytes", "Memory bytes used by node in realtime", ["node"]
        )
        self.be_suppress_cpu_cores = gauge(
            "be_suppress_cpu_cores", "Number of cores suppress by koordlet", ["node", "type"]
        )
        self.be_suppress_ls_used_cpu_cores = gauge(
            "be_suppress_ls_used_cpu_cores", "Number of cpu cores used by LS", ["node"]
        )
        self.be_suppress_be_used_cpu_cores = gauge(
            "be_suppress_be_used_cpu_cores", "Number of cpu cores used by BE", ["node"]
        )
        burst_labels = ("node", "pod_namespace", "pod_name", "container_id", "container_name")
        self.container_scaled_cfs_burst_us = gauge(
            "container_scaled_cfs_burst_us", "The maximum accumulated run-time(in microseconds)", burst_labels
        )
        self.container_scaled_cfs_quota_us = gauge(
            "container_scaled_cfs_quota_us",
            "Run-time replenished within a period (in microseconds)",
            burst_labels,
        )
        self.cpuset_share_pool_cpu_cores = gauge(
            "cpuset_share_pool_cpu_cores", "Number of cpu cores in the LS share pool", ["node"]
        )
        self.cpuset_be_share_pool_cpu_cores = gauge(
            "cpuset_be_share_pool_cpu_cores", "Number of cpu cores in the BE share pool", ["node"]
        )
        self.cpuset_share_pool_info = gauge(
            "cpuset_share_pool_info",
            "CPUSet share pool info, means this cpu id is in cpuset share pool",
            ["node", "cpu"],
        )
        self.cpuset_be_share_pool_info = gauge(
            "cpuset_be_share_pool_info",
            "CPUSet be share pool info, means this cpu id is in cpuset be share pool",
            ["node", "cpu"],
        )
        self.container_oom_score_adj = gauge(
            "container_oom_score_adj",
            "oom_score_adj of the container processes",
            ["node", "pod_name", "pod_namespace", "pod_uid", "container_name"],
        )
        predicted = ("node", "predictor", "resource", "unit")
        self.node_predicted_resource_reclaimable = gauge(
            "node_predicted_resource_reclaimable", "the node resource reclaimable by the predictor", predicted
        )
        self.node_predicted_resource_peak = gauge(
            "node_predicted_resource_peak", "the node resource peak by the predictor", predicted
        )
        usage = ("node", "resource", "unit")
        numa_usage = ("node", "numa_node_id", "resource", "unit")
        self.node_metric_node_usage = gauge("node_metric_node_usage", "the node usage in NodeMetric", usage)
        self.node_metric_system_usage = gauge(
            "node_metric_system_usage", "the system usage in NodeMetric", usage
        )
        self.node_metric_numa_node_usage = gauge(
            "node_metric_numa_node_usage", "the NUMA node usage in NodeMetric", numa_usage
        )
        self.node_metric_numa_system_usage = gauge(
            "node_metric_numa_system_usage", "the NUMA system usage in NodeMetric", numa_usage
        )
        self.resource_update_duration_milliseconds = histogram(
            "resource_update_duration_milliseconds",
            "time cost of resource update",
            ["type", "status"],
            _MS_BUCKETS,
        )
        self.kubelet_request_duration_seconds = histogram(
            "kubelet_request_duration_seconds",
            "time cost of kubelet request",
            ["verb", "path", "code"],
            (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.runtime_hook_invoked_duration_milliseconds = histogram(
            "runtime_hook_invoked_duration_milliseconds",
            "time cost of runtime hook invocations",
            ["node", "hook", "stage", "status"],
            _MS_BUCKETS,
        )
        self.runtime_hook_reconciler_invoked_duration_milliseconds = histogram(
            "runtime_hook_reconciler_invoked_duration_milliseconds",
            "time cost of runtime hook reconciler invocations",
            ["node", "level", "resource_type", "status"],
            _MS_BUCKETS,
        )
        self.host_application_resource_usage = gauge(
            "host_application_resource_usage",
            "resource usage of host applications",
            ["node", "host_application_name", "resource", "priority_class", "qos"],
        )
        self.node_resource_allocatable = gauge(
            "node_resource_allocatable", "the node allocatable of resources updated by koordinator", usage
        )
        self.node_priority_resource_reclaimable = gauge(
            "node_priority_resource_reclaimable",
            "the node resource reclaimable of a priority",
            ("node", "priority", "resource", "unit"),
        )
        self.node_resource_priority_reclaimable_status = gauge(
            "node_resource_priority_reclaimable_status",
            "whether the priority reclaimable is valid",
            ["node", "priority"],
        )
        request_labels = (
            "node",
            "resource",
            "unit",
            "pod_uid",
            "pod_name",
            "pod_namespace",
            "container_id",
            "container_name",
        )
        self.container_resource_requests = gauge(
            "container_resource_requests",
            "the container requests of resources updated by koordinator",
            request_labels,
        )
        self.container_resource_limits = gauge(
            "container_resource_limits",
            "the container limits of resources updated by koordinator",
            request_labels,
        )
        self.container_cpi = gauge(
            "container_cpi", "Container cpi collected by koordlet", (*_CONTAINER, "cpi_field")
        )
        self.container_psi = gauge(
            "container_psi", "Container psi collected by koordlet", (*_CONTAINER, *_PSI)
        )
        self.pod_psi = gauge(
            "pod_psi",
            "Pod psi collected by koordlet",
            ("node", "pod_uid", "pod_name", "pod_namespace", *_PSI),
        )
        self.resctrl_llc_occupancy = gauge(
            "resctrl_llc_occupancy",
            "resctrl default qos(LSR, LS, BE) llc occupancy",
            ["node", "cache_id", "qos"],
        )
        self.resctrl_memory_bandwidth = gauge(
            "resctrl_memory_bandwidth",
            "resctrl default qos(LSR, LS, BE) memory bandwidth",
            ["node", "cache_id", "qos", "mb_type"],
        )

    def on_scrape(self, refresher: Refresher) -> None:
        """Run ``refresher`` before every scrape reads the registry."""
        self.refreshers.add(refresher)


def prune(metric: MetricWrapperBase, keep: set[tuple[str, ...]]) -> None:
    """Remove the series of ``metric`` whose label values are not in ``keep``."""
    stale = [labels for labels in list(metric._metrics) if labels not in keep]
    for labels in stale:
        metric.remove(*labels)


def sync_gauge(gauge: Gauge, series: Iterable[tuple[tuple[str, ...], float]]) -> Iterator[None]:
    """Make ``gauge`` hold exactly ``series`` (label values, all strings, and a value):
    each is set, every other series removed. Yields every :data:`RENDER_SLICE` series."""
    children = cast(dict[tuple[str, ...], Gauge], gauge._metrics)
    keep: set[tuple[str, ...]] = set()
    for count, (labels, value) in enumerate(series, 1):
        child = children.get(labels)
        if child is None:
            child = gauge.labels(*labels)
        child.set(value)
        keep.add(labels)
        if count % RENDER_SLICE == 0:
            yield
    if len(children) > len(keep):
        prune(gauge, keep)
