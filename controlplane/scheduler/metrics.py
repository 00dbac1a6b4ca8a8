"""koord-scheduler's Prometheus metrics, under kube-scheduler's names so that its dashboards
work unchanged: scheduling attempts by result and their durations, pending pods by queue,
the end-to-end scheduling duration, the durations of each extension point and (for one
cycle in ten, as upstream samples them) of each plug-in, Permit waits, preemption, and the
leader gauge. The histograms are :class:`~koordinator.metrics.histogram.LoopHistogram`:
observed and scraped on the scheduler's loop only."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics import MetricWrapperBase

from koordinator.metrics.histogram import LoopHistogram

SCHEDULED, UNSCHEDULABLE, ERROR = "scheduled", "unschedulable", "error"
#: upstream's pluginMetricsSamplePercent: plug-in durations are measured in one cycle of ten
PLUGIN_SAMPLE_EVERY = 10
#: kube-scheduler's buckets: exponential from 1 ms (attempts) and from 10 ms (end to end)
_ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
_SLI_BUCKETS = tuple(0.01 * 2**i for i in range(20))


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        reg = self.registry
        self.schedule_attempts = Counter(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be "
            "scheduled, while 'error' means an internal scheduler problem.",
            ["result", "profile"],
            registry=reg,
        )
        self.attempt_duration = LoopHistogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ["result", "profile"],
            buckets=_ATTEMPT_BUCKETS,
            registry=reg,
        )
        self.pending_pods = Gauge(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; "
            "'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
            "unschedulablePods.",
            ["queue"],
            registry=reg,
        )
        self.pod_scheduling_sli_duration = LoopHistogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue "
            "and might involve multiple scheduling attempts.",
            ["attempts"],
            buckets=_SLI_BUCKETS,
            registry=reg,
        )
        self.extension_point_duration = LoopHistogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"],
            buckets=tuple(0.0001 * 2**i for i in range(12)),
            registry=reg,
        )
        self.plugin_duration = LoopHistogram(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point.",
            ["plugin", "extension_point", "status"],
            buckets=tuple(0.00001 * 1.5**i for i in range(20)),
            registry=reg,
        )
        self.permit_wait_duration = LoopHistogram(
            "scheduler_permit_wait_duration_seconds",
            "Duration of waiting on permit.",
            ["result"],
            buckets=_ATTEMPT_BUCKETS,
            registry=reg,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts", "Total preemption attempts in the cluster till now", registry=reg
        )
        self.preemption_victims = LoopHistogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            [],
            buckets=tuple(float(2**i) for i in range(7)),
            registry=reg,
        )
        self.is_leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=reg,
        )

    def of(self, metric: MetricWrapperBase | LoopHistogram, *values: str) -> Any:
        """``metric.labels(*values)``, looked up once: the client library's lookup costs
        more than the observation itself on the per-pod path."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def record_pending(self, counts: dict[str, int]) -> None:
        for queue, count in counts.items():
            self.pending_pods.labels(queue).set(count)
