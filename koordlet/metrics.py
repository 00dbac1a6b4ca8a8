"""The koordlet's Prometheus metrics: upstream's ``koordlet_*`` names and labels, on an
injectable registry, and a Go-compatible text rendering.

Dashboards built for Koordinator query these exact names. The Python client appends
``_total`` to counters and adds ``_created`` samples; Go's client does neither, so
:func:`render` writes counters under their plain names (``koordlet_pod_eviction``) and
omits ``_created``. The HTTP handler renders on the event loop in slices
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

import asyncio
import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

NAMESPACE = "koordlet"
CORE, BYTE, INTEGER = "core", "byte", "integer"

_CONTAINER = ("node", "container_id", "container_name", "pod_uid", "pod_name", "pod_namespace")
_PSI = ("psi_resource_type", "psi_precision", "psi_degree", "cpu_full_supported")
_MS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)

#: brings some gauges up to date before a scrape reads them; a generator that yields
#: between slices of its work, so a scrape on the event loop never stalls it
Refresher = Callable[[], Iterator[None]]


class ScrapeRefreshers:
    """A collector without metrics of its own: the refreshers of lazily kept gauges.

    Registered on the registry before every koordlet metric, so each scrape runs the
    refreshers before it reads the gauges they keep. A refresher that fails is logged;
    the scrape goes on with what the gauges hold.
    """

    def __init__(self) -> None:
        self._refreshers: list[Refresher] = []
        self._lock = threading.Lock()

    def add(self, refresher: Refresher) -> None:
        with self._lock:
            self._refreshers.append(refresher)

    def refresh(self) -> Iterator[None]:
        """Run every refresher, yielding whenever one does."""
        with self._lock:
            refreshers = list(self._refreshers)
        for refresher in refreshers:
            try:
                yield from refresher()
            except Exception:
                log.exception("refreshing metrics before a scrape failed")

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        for _ in self.refresh():
            pass
        return []


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


def _go_float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _render_family(family: Metric, out: list[str]) -> None:
    name, kind = family.name, family.type
    if kind == "unknown":
        kind = "untyped"
    samples = [s for s in family.samples if not s.name.endswith("_created")]
    if not samples:
        return
    doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
    for sample in samples:
        sample_name = name if kind == "counter" else sample.name
        if sample.labels:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items()))
            out.append(f"{sample_name}{{{labels}}} {_go_float(sample.value)}\n")
        else:
            out.append(f"{sample_name} {_go_float(sample.value)}\n")


#: series written between two yields of :func:`render_async` (about a millisecond of work)
RENDER_SLICE = 500


def _gauge_children(collector: Collector) -> list[tuple[Sequence[str], Gauge]] | None:
    """The children of a labelled gauge whose children all hold a value (none reads a
    function), or None for any other collector."""
    if type(collector) is not Gauge or not collector._labelnames or collector._labelvalues or collector._unit:
        return None
    with collector._lock:
        children = cast(list[tuple[Sequence[str], Gauge]], list(collector._metrics.items()))
    if any("_child_samples" in vars(child) for _, child in children):
        return None
    return children


def _render_gauge(
    gauge: Gauge, children: list[tuple[Sequence[str], Gauge]], out: list[str]
) -> Iterator[None]:
    """Write a labelled gauge straight from its children: what :func:`_render_family`
    writes for it, without building a Sample and a label dict per series. Yields every
    :data:`RENDER_SLICE` series."""
    if not children:
        return
    names = gauge._labelnames
    # Go sorts a series' labels by name; "{i}" is the i-th label value, escaped
    order = sorted(range(len(names)), key=names.__getitem__)
    template = gauge._name + "{{" + ",".join(f'{names[i]}="{{{i}}}"' for i in order) + "}} {value}\n"
    fmt = template.format
    doc = gauge._documentation.replace("\\", r"\\").replace("\n", r"\n")
    out.append(f"# HELP {gauge._name} {doc}\n# TYPE {gauge._name} gauge\n")
    for first in range(0, len(children), RENDER_SLICE):
        for values, child in children[first : first + RENDER_SLICE]:
            joined = "".join(values)
            if "\\" in joined or "\n" in joined or '"' in joined:
                values = tuple(map(_escape, values))
            out.append(fmt(*values, value=_go_float(child._value.get())))
        yield


def _collectors(registry: CollectorRegistry) -> list[Collector] | None:
    """The registry's collectors in the order ``registry.collect()`` visits them, or None
    when they cannot be listed (a registry with target info or of another kind)."""
    collectors = getattr(registry, "_collector_to_names", None)
    if type(registry) is not CollectorRegistry or not isinstance(collectors, dict) or registry._target_info:
        return None
    with registry._lock:
        return list(collectors)


def _render(registry: CollectorRegistry, out: list[str]) -> Iterator[None]:
    """Write the registry into ``out``, yielding after each family or slice of series.

    Labelled gauges (the per-pod and per-container series, nearly all of a busy node's)
    are written from their children directly; every other family goes through
    ``collect()``. Both paths write the same text.
    """
    collectors = _collectors(registry)
    if collectors is None:
        for family in registry.collect():
            _render_family(family, out)
            yield
        return
    for collector in collectors:
        if isinstance(collector, ScrapeRefreshers):
            yield from collector.refresh()
            continue
        children = _gauge_children(collector)
        if children is not None:
            yield from _render_gauge(cast(Gauge, collector), children, out)
            continue
        for family in collector.collect():
            _render_family(family, out)
        yield


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition format as Go's client writes it (counters without ``_total``)."""
    out: list[str] = []
    for _ in _render(registry, out):
        pass
    return "".join(out).encode()


async def render_async(registry: CollectorRegistry) -> bytes:
    """:func:`render` on the event loop, in slices: other tasks run between two slices,
    so a scrape never holds the loop for more than about a millisecond at a time (a
    worker thread would, through the GIL, hold it for whole switch intervals)."""
    out: list[str] = []
    for _ in _render(registry, out):
        await asyncio.sleep(0)
    return "".join(out).encode()
