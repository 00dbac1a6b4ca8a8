"""Prometheus metrics of work queues and controllers, under client-go's and controller-runtime's names.

Work queues, labelled ``name`` (the controller's name):
``workqueue_depth``, ``workqueue_adds_total``, ``workqueue_retries_total``,
``workqueue_queue_duration_seconds`` (added -> picked up), ``workqueue_work_duration_seconds``
(picked up -> done), ``workqueue_unfinished_work_seconds`` (summed age of the reconciles in
progress) and ``workqueue_longest_running_processor_seconds``.

Controllers, labelled ``controller``: ``controller_runtime_reconcile_total`` with ``result``
(``success``, ``error``, ``requeue``, ``requeue_after``),
``controller_runtime_reconcile_errors_total``,
``controller_runtime_terminal_reconcile_errors_total`` (permanent failures),
``controller_runtime_reconcile_time_seconds``, ``controller_runtime_max_concurrent_reconciles``
and ``controller_runtime_active_workers``.

One :class:`ReactorMetrics` per registry; every queue and controller of a process shares it.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ReactorMetrics"]

_QUEUE_BUCKETS = tuple(1e-8 * 10**n for n in range(10))
_RECONCILE_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.15,
    0.2,
    0.25,
    0.3,
    0.35,
    0.4,
    0.45,
    0.5,
    0.6,
    0.7,
    0.8,
    0.9,
    1.0,
    1.25,
    1.5,
    1.75,
    2.0,
    2.5,
    3.0,
    3.5,
    4.0,
    4.5,
    5.0,
    6.0,
    7.0,
    8.0,
    9.0,
    10.0,
    15.0,
    20.0,
    25.0,
    30.0,
    40.0,
    50.0,
    60.0,
)

RESULT_SUCCESS = "success"
RESULT_ERROR = "error"
RESULT_REQUEUE = "requeue"
RESULT_REQUEUE_AFTER = "requeue_after"


class ReactorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.depth = Gauge("workqueue_depth", "Current depth of workqueue", ["name"], registry=r)
        self.adds = Counter(
            "workqueue_adds", "Total number of adds handled by workqueue", ["name"], registry=r
        )
        self.retries = Counter(
            "workqueue_retries", "Total number of retries handled by workqueue", ["name"], registry=r
        )
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            ["name"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            ["name"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.unfinished_work = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by "
            "work_duration",
            ["name"],
            registry=r,
        )
        self.longest_running = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            ["name"],
            registry=r,
        )
        self.reconcile_total = Counter(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=_RECONCILE_BUCKETS,
            registry=r,
        )
        self.max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=r,
        )

    def watch_queue(self, name: str, unfinished: Callable[[], float], longest: Callable[[], float]) -> None:
        """Compute the two in-progress gauges of queue ``name`` at scrape time."""
        self.unfinished_work.labels(name).set_function(unfinished)
        self.longest_running.labels(name).set_function(longest)
