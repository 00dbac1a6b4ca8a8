"""NodeMetric reporting: the node's, system's, pods' and host applications' usage.

The koordlet never creates its NodeMetric (the slo-controller does); it writes the status
of the existing one through the status subresource, at ``reportIntervalSeconds`` and no
more than once every ten seconds (upstream's 0.1 qps limiter). Every value is the average
over ``aggregateDurationSeconds``; the node and system usages are also aggregated (avg,
p50, p90, p95, p99) over each duration of ``nodeAggregatePolicy``, with an entry left
without values while its samples span less than half the duration (cold start). Memory
follows ``nodeMemoryCollectPolicy``. CPU is written in milli-cores, memory in bytes.

The metric cache is reached through the narrow :class:`UsageQuerier` protocol (the
agent wires the cache's ``query``), asked by typed :class:`MetricKind`, so this layer
depends on the cache's kinds but not on its storage.

With the NodeMetricPromMetrics gate (the agent then hands the reporter its metrics),
each report also mirrors the node, system and per-NUMA usages it writes to
``koordlet_node_metric_{node,system,numa_node,numa_system}_usage`` (CPU in cores, memory
in bytes), replacing the previous report's series, as upstream resets and re-records them.

GPUs (upstream's ``collectNodeGPUMetric``): for each GPU the reporter is told of (minor,
uuid: the agent passes what the GPU collector has seen), ``nodeUsage.devices`` gets one
``gpu`` entry averaging ``node_gpu_core_usage`` and ``node_gpu_memory_usage`` over the
window: ``koordinator.sh/gpu-core`` the integer percent, ``gpu-memory`` the bytes used,
``gpu-memory-ratio`` the integer percent of ``node_gpu_memory_total`` (0 without a total).
A GPU without samples of both is left out; health is not set, as upstream leaves it.

Prediction (the agent hands the reporter a predictor factory): each report feeds a fresh
ProdReclaimable predictor the pods it reports usage for, and writes its result to
``prodReclaimableMetric.resource`` and its peak to ``prodPeakMetric.resource`` (CPU
milli-cores, memory bytes); both are left out while the predictor cannot tell.

Retention: the metric cache keeps samples for ``--tsdb-retention-duration`` (30 min here,
12 h upstream). A window longer than that would be computed from the part the cache still
holds and published as if it were the whole window, so it is reported as not available,
as a cold start is: an ``aggregatedNodeUsages``/``aggregatedSystemUsages`` entry longer
than the retention is left without values, and an ``aggregateDurationSeconds`` longer
than the retention leaves out every usage averaged over it (node, system, NUMA, pods,
host applications, GPUs). The reporter says so in one warning, naming the flag to raise,
until the windows change.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from koordinator.api.extension.device import DEVICE_TYPE_GPU
from koordinator.api.extension.priority import get_pod_priority_class_with_default
from koordinator.api.extension.resources import GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO
from koordinator.api.goparse import format_duration, parse_duration
from koordinator.api.quantity import Format, Quantity
from koordinator.api.sloconfig.config import default_node_metric_collect_policy
from koordinator.api.types.scheduling import DeviceInfo
from koordinator.api.types.slo import (
    AggregatedUsage,
    HostApplicationMetricInfo,
    NodeMetricCollectPolicy,
    NodeMetricInfo,
    NodeMetricSpec,
    NodeMetricStatus,
    NUMAMetricInfo,
    PodMetricInfo,
    ReclaimableMetric,
    ResourceMap,
)
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Now
from koordinator.kube.errors import ConflictError, NotFoundError
from koordinator.kube.timeutil import format_time
from koordlet.metriccache import MetricKind, kinds
from koordlet.metrics import BYTE, CORE, KoordletMetrics, prune
from koordlet.statesinformer.podmeta import PodMeta

log = logging.getLogger(__name__)

AGGREGATIONS = ("avg", "p50", "p90", "p95", "p99")
MIN_AGGREGATE_SECONDS = 60
MIN_REPORT_SECONDS = 30
MIN_UPDATE_GAP_SECONDS = 10.0  # 0.1 qps
_MEMORY_METRICS: dict[str, tuple[MetricKind, MetricKind, MetricKind]] = {
    "usageWithoutPageCache": (
        kinds.NODE_MEMORY_USAGE,
        kinds.POD_MEMORY_USAGE,
        kinds.HOST_APPLICATION_MEMORY_USAGE,
    ),
    "usageWithPageCache": (
        kinds.NODE_MEMORY_USAGE_WITH_PAGE_CACHE,
        kinds.POD_MEMORY_USAGE_WITH_PAGE_CACHE,
        kinds.HOST_APPLICATION_MEMORY_USAGE_WITH_PAGE_CACHE,
    ),
    "usageWithHotPageCache": (
        kinds.NODE_MEMORY_WITH_HOT_PAGE_USAGE,
        kinds.POD_MEMORY_WITH_HOT_PAGE_USAGE,
        kinds.HOST_APPLICATION_MEMORY_WITH_HOT_PAGE_USAGE,
    ),
}


class Aggregate(Protocol):
    def count(self) -> int: ...
    def value(self, aggregation: str) -> float: ...
    def time_range(self) -> float: ...


class UsageQuerier(Protocol):
    def __call__(self, kind: MetricKind, start: float, end: float, **labels: str) -> Aggregate: ...


class ProdPredictor(Protocol):
    """One report's ProdReclaimable predictor (``koordlet.prediction``, wired by the agent):
    fed the pods with usage, then asked for (milli-cores, bytes), None while it cannot tell."""

    def add_pod(self, pod: Mapping[str, Any]) -> None: ...
    def result(self) -> tuple[int, int] | None: ...
    def peak(self) -> tuple[int, int] | None: ...


def _reclaimable_metric(value: tuple[int, int] | None) -> ReclaimableMetric | None:
    """``prodReclaimableMetric``/``prodPeakMetric``: CPU in milli-cores, memory in bytes."""
    if value is None:
        return None
    cpu_milli, memory = value
    return ReclaimableMetric(
        resource=ResourceMap(
            resources={"cpu": Quantity.from_milli(cpu_milli), "memory": memory_quantity(memory)}
        )
    )


@dataclass(frozen=True)
class HostApplication:
    name: str
    priority: str
    qos: str


@dataclass(frozen=True)
class CollectPolicy:
    aggregate_seconds: int
    report_seconds: int
    durations: tuple[str, ...]
    memory_policy: str

    @classmethod
    def of(cls, spec: NodeMetricSpec | None) -> CollectPolicy:
        """The spec merged onto upstream's defaults, with the minimums applied."""
        default = default_node_metric_collect_policy()
        policy: NodeMetricCollectPolicy = (spec.metric_collect_policy if spec else None) or default
        aggregate = policy.aggregate_duration_seconds or default.aggregate_duration_seconds or 300
        report = policy.report_interval_seconds or default.report_interval_seconds or 60
        durations = policy.node_aggregate_policy or default.node_aggregate_policy
        memory = policy.node_memory_collect_policy or "usageWithoutPageCache"
        return cls(
            max(aggregate, MIN_AGGREGATE_SECONDS),
            max(report, MIN_REPORT_SECONDS),
            tuple(durations.durations if durations else ()),
            memory,
        )


def cpu_quantity(cores: float) -> Quantity:
    """Milli-cores, truncated as upstream does (``int64(cores * 1000)``), after absorbing the
    float error of averaging (sixty samples of 0.2 average to 0.19999999999999998)."""
    return Quantity.from_milli(math.floor(cores * 1000 + 1e-6))


def memory_quantity(value: float) -> Quantity:
    return Quantity.from_int(int(value), Format.BINARY_SI)


def _average(query: UsageQuerier, kind: MetricKind, start: float, end: float, **labels: str) -> float | None:
    result = query(kind, start, end, **labels)
    return result.value("avg") if result.count() else None


def _usage(
    query: UsageQuerier,
    cpu_kind: MetricKind,
    memory_kind: MetricKind,
    start: float,
    end: float,
    **labels: str,
) -> ResourceMap | None:
    cpu = _average(query, cpu_kind, start, end, **labels)
    memory = _average(query, memory_kind, start, end, **labels)
    if cpu is None and memory is None:
        return None
    resources: dict[str, Quantity] = {}
    if cpu is not None:
        resources["cpu"] = cpu_quantity(cpu)
    if memory is not None:
        resources["memory"] = memory_quantity(memory)
    return ResourceMap(resources=resources)


def _gpu_usages(
    query: UsageQuerier, gpus: Sequence[tuple[int, str]], start: float, end: float
) -> list[DeviceInfo]:
    devices = []
    for minor, uuid in sorted(set(gpus)):
        labels = {"gpu_minor": str(minor), "gpu_device_uuid": uuid}
        core = _average(query, kinds.NODE_GPU_CORE_USAGE, start, end, **labels)
        used = _average(query, kinds.NODE_GPU_MEMORY_USAGE, start, end, **labels)
        if core is None or used is None:
            continue
        total = _average(query, kinds.NODE_GPU_MEMORY_TOTAL, start, end, **labels)
        ratio = int(100 * used / total) if total else 0
        devices.append(
            DeviceInfo(
                type=DEVICE_TYPE_GPU,
                uuid=uuid,
                minor=minor,
                resources={
                    GPU_CORE: Quantity.from_int(int(core)),
                    GPU_MEMORY: memory_quantity(used),
                    GPU_MEMORY_RATIO: Quantity.from_int(ratio),
                },
            )
        )
    return devices


def _beyond(seconds: float, retention_seconds: float | None) -> bool:
    return retention_seconds is not None and seconds > retention_seconds


def windows_beyond_retention(policy: CollectPolicy, retention_seconds: float | None) -> list[str]:
    """The windows of ``policy`` longer than the metric cache keeps samples, as Go
    durations, longest first; empty when every one fits (or the retention is not known)."""
    windows = {policy.aggregate_seconds * 1_000_000_000}
    windows.update(parse_duration(text) for text in policy.durations)
    return [format_duration(n) for n in sorted(windows, reverse=True) if _beyond(n / 1e9, retention_seconds)]


def _aggregated(
    query: UsageQuerier,
    cpu_kind: MetricKind,
    memory_kind: MetricKind,
    durations: tuple[str, ...],
    now: float,
    retention_seconds: float | None = None,
) -> list[AggregatedUsage]:
    out = []
    for text in durations:
        nanos = parse_duration(text)
        seconds = nanos / 1e9
        entry = AggregatedUsage(duration=format_duration(nanos))
        if _beyond(seconds, retention_seconds):  # the cache cannot hold it: not available
            out.append(entry)
            continue
        cpu = query(cpu_kind, now - seconds, now)
        memory = query(memory_kind, now - seconds, now)
        # cold start: too short a history would misreport the percentiles
        if (
            cpu.count()
            and memory.count()
            and cpu.time_range() >= seconds / 2
            and memory.time_range() >= seconds / 2
        ):
            entry.usage = {
                agg: ResourceMap(
                    resources={
                        "cpu": cpu_quantity(cpu.value(agg)),
                        "memory": memory_quantity(memory.value(agg)),
                    }
                )
                for agg in AGGREGATIONS
            }
        out.append(entry)
    return out


def node_metric_status(
    query: UsageQuerier,
    policy: CollectPolicy,
    pods: list[PodMeta],
    host_apps: list[HostApplication],
    numa_nodes: list[int],
    now: float,
    gpus: Sequence[tuple[int, str]] = (),
    predictor: ProdPredictor | None = None,
    retention_seconds: float | None = None,
) -> NodeMetricStatus:
    """The NodeMetric status for the window ending at ``now``; ``gpus`` are the (minor,
    uuid) of the GPUs whose usage goes into ``nodeUsage.devices``. Windows longer than
    ``retention_seconds`` (how long the metric cache keeps samples) are left out."""
    start = now - policy.aggregate_seconds
    memory_policy = policy.memory_policy
    if (
        memory_policy == "usageWithHotPageCache"
        and not query(kinds.NODE_MEMORY_WITH_HOT_PAGE_USAGE, start, now).count()
    ):
        memory_policy = "usageWithoutPageCache"  # hot-page series exist only once the ColdPageCollector runs
    node_memory, pod_memory, app_memory = _MEMORY_METRICS.get(
        memory_policy, _MEMORY_METRICS["usageWithoutPageCache"]
    )
    node_metric = NodeMetricInfo(
        node_usage=_usage(query, kinds.NODE_CPU_USAGE, node_memory, start, now),
        aggregated_node_usages=_aggregated(
            query, kinds.NODE_CPU_USAGE, node_memory, policy.durations, now, retention_seconds
        ),
        system_usage=_usage(query, kinds.SYS_CPU_USAGE, kinds.SYS_MEMORY_USAGE, start, now),
        aggregated_system_usages=_aggregated(
            query, kinds.SYS_CPU_USAGE, kinds.SYS_MEMORY_USAGE, policy.durations, now, retention_seconds
        ),
    )
    devices = _gpu_usages(query, gpus, start, now)
    if devices:
        if node_metric.node_usage is None:
            node_metric.node_usage = ResourceMap()
        node_metric.node_usage.devices = devices
    for node_id in sorted(numa_nodes):
        label = str(node_id)
        numa_node = _usage(
            query, kinds.NODE_NUMA_CPU_USAGE, kinds.NODE_NUMA_MEMORY_USAGE, start, now, numa_node_id=label
        )
        numa_sys = _usage(
            query, kinds.SYS_NUMA_CPU_USAGE, kinds.SYS_NUMA_MEMORY_USAGE, start, now, numa_node_id=label
        )
        if numa_node is None and numa_sys is None:
            continue
        node_metric.numa_usages.append(
            NUMAMetricInfo(numa_node_id=node_id, node_usage=numa_node, system_usage=numa_sys)
        )
    status = NodeMetricStatus(update_time=format_time(now), node_metric=node_metric)
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        usage = _usage(query, kinds.POD_CPU_USAGE, pod_memory, start, now, pod_uid=pod.uid)
        if usage is None:
            continue
        if predictor is not None:  # as upstream: the pods with usage in the report
            predictor.add_pod(pod.pod)
        status.pods_metric.append(
            PodMetricInfo(
                name=pod.name,
                namespace=pod.namespace,
                pod_usage=usage,
                priority=str(get_pod_priority_class_with_default(pod.pod)),
                qos=str(pod.qos),
            )
        )
    if predictor is not None:
        status.prod_reclaimable_metric = _reclaimable_metric(predictor.result())
        status.prod_peak_metric = _reclaimable_metric(predictor.peak())
    for app in sorted(host_apps, key=lambda a: a.name):
        usage = _usage(
            query, kinds.HOST_APPLICATION_CPU_USAGE, app_memory, start, now, host_app_name=app.name
        )
        if usage is None:
            continue
        status.host_application_metric.append(
            HostApplicationMetricInfo(name=app.name, usage=usage, priority=app.priority, qos=app.qos)
        )
    if _beyond(policy.aggregate_seconds, retention_seconds):
        # averaged over what the cache still holds, not over the window: not available (the
        # predictor was still fed the pods: its models do not depend on the window)
        node_metric.node_usage = node_metric.system_usage = None
        node_metric.numa_usages = []
        status.pods_metric = []
        status.host_application_metric = []
    return status


def _usage_series(
    usage: ResourceMap | None, prefix: tuple[str, ...], out: dict[tuple[str, ...], float]
) -> None:
    if usage is None:
        return
    cpu = usage.resources.get("cpu")
    if cpu is not None:
        out[(*prefix, "cpu", CORE)] = cpu.milli_value() / 1000
    memory = usage.resources.get("memory")
    if memory is not None:
        out[(*prefix, "memory", BYTE)] = float(memory.value())


def record_usages(metrics: KoordletMetrics, status: NodeMetricStatus) -> None:
    """Mirror a status's node, system and NUMA usages to the ``node_metric_*`` gauges, from
    the quantities the status holds (not its rendered text); the series the status no
    longer has (a NUMA node without samples) are removed."""
    node_metric = status.node_metric or NodeMetricInfo()
    node = metrics.node
    node_series: dict[tuple[str, ...], float] = {}
    _usage_series(node_metric.node_usage, (node,), node_series)
    system_series: dict[tuple[str, ...], float] = {}
    _usage_series(node_metric.system_usage, (node,), system_series)
    numa_node: dict[tuple[str, ...], float] = {}
    numa_system: dict[tuple[str, ...], float] = {}
    for entry in node_metric.numa_usages:
        prefix = (node, str(entry.numa_node_id))
        _usage_series(entry.node_usage, prefix, numa_node)
        _usage_series(entry.system_usage, prefix, numa_system)
    wanted: list[tuple[Any, dict[tuple[str, ...], float]]] = [
        (metrics.node_metric_node_usage, node_series),
        (metrics.node_metric_system_usage, system_series),
        (metrics.node_metric_numa_node_usage, numa_node),
        (metrics.node_metric_numa_system_usage, numa_system),
    ]
    for gauge, series in wanted:
        for labels, value in series.items():
            gauge.labels(*labels).set(value)
        prune(gauge, set(series))


class NodeMetricStates(Protocol):
    node_name: str

    @property
    def node_metric_exists(self) -> bool: ...
    def get_node_metric_spec(self) -> NodeMetricSpec | None: ...
    def get_all_pods(self) -> list[PodMeta]: ...
    def host_applications(self) -> list[HostApplication]: ...
    def numa_nodes(self) -> list[int]: ...


class NodeMetricReporter:
    def __init__(
        self,
        client: ApiClient,
        states: NodeMetricStates,
        query: UsageQuerier,
        *,
        clock: Now = SYSTEM_CLOCK.time,
        metrics: KoordletMetrics | None = None,
        gpus: Callable[[], Sequence[tuple[int, str]]] | None = None,
        predictor: Callable[[], ProdPredictor] | None = None,
        retention_seconds: float | None = None,
    ) -> None:
        self.client = client
        self.states = states
        self.query = query
        self.clock = clock
        #: where reports mirror their usages (NodeMetricPromMetrics), or None
        self.metrics = metrics
        #: the (minor, uuid) of the GPUs to report the usage of, or None
        self.gpus = gpus
        #: a fresh ProdReclaimable predictor for each report (prediction), or None
        self.predictor = predictor
        #: how long the metric cache keeps samples (``--tsdb-retention-duration``), or None
        self.retention_seconds = retention_seconds
        self._beyond_retention: list[str] = []
        self._last_update = float("-inf")
        self.reports = 0

    async def report(self, *, force: bool = False) -> bool:
        """Write one status; False when there is no NodeMetric yet or the limiter refused
        (``force`` skips the limiter, for an explicit request)."""
        if not self.states.node_metric_exists:
            log.debug("NodeMetric %s does not exist yet; nothing reported", self.states.node_name)
            return False
        if not force and time.monotonic() - self._last_update < MIN_UPDATE_GAP_SECONDS:
            return False
        policy = CollectPolicy.of(self.states.get_node_metric_spec())
        self._warn_beyond_retention(policy)
        status = node_metric_status(
            self.query,
            policy,
            self.states.get_all_pods(),
            self.states.host_applications(),
            self.states.numa_nodes(),
            self.clock(),
            self.gpus() if self.gpus is not None else (),
            self.predictor() if self.predictor is not None else None,
            self.retention_seconds,
        )
        if self.metrics is not None:
            record_usages(self.metrics, status)
        body = status.to_dict()
        for _ in range(5):  # RetryOnConflict
            try:
                current = await self.client.get(res.NODE_METRICS, self.states.node_name)
                await self.client.replace_status(res.NODE_METRICS, {**current, "status": body})
                break
            except ConflictError:
                continue
            except NotFoundError:
                return False
        else:
            log.warning("NodeMetric %s: status update kept conflicting", self.states.node_name)
            return False
        self._last_update = time.monotonic()
        self.reports += 1
        return True

    def _warn_beyond_retention(self, policy: CollectPolicy) -> None:
        """One warning each time the set of windows the cache cannot hold changes."""
        beyond = windows_beyond_retention(policy, self.retention_seconds)
        if beyond and beyond != self._beyond_retention:
            log.warning(
                "NodeMetric %s: the windows %s are longer than the metric cache keeps samples (%s): "
                "reported as not available; raise --tsdb-retention-duration to at least %s",
                self.states.node_name,
                ", ".join(beyond),
                format_duration(int((self.retention_seconds or 0) * 1e9)),
                beyond[0],
            )
        self._beyond_retention = beyond

    async def run(self) -> None:
        while True:
            policy = CollectPolicy.of(self.states.get_node_metric_spec())
            try:
                await self.report()
            except Exception:
                log.exception("NodeMetric report failed")
            await asyncio.sleep(policy.report_seconds)


def host_applications_of(spec_apps: list[Any]) -> list[HostApplication]:
    return [HostApplication(a.name, a.priority, a.qos) for a in spec_apps]
