"""Prometheus metrics of the admission webhooks, with upstream's names and labels.

* ``koord_manager_webhook_webhook_duration_milliseconds`` (histogram, buckets 0.001 ms
  doubling 20 times) with ``webhook_type`` (``mutate``/``validate``), ``object_type``
  (``pod``, ``node``, ``configmap``, ``elasticquota``, ``reservation``), ``operation``,
  ``plugin_name`` and ``status`` (``allowed``/``rejected``): one observation per plug-in
  step of every admission.
* ``koord_manager_webhook_quota_shared_weight`` (gauge) per ``elasticquota_name`` and
  ``resource_name``.
* ``koord_manager_webhook_binding_admission_decisions_total`` (counter) per ``decision``.

Metrics live on an injectable :class:`~prometheus_client.CollectorRegistry` so tests and
several managers in one process do not collide.
"""

from __future__ import annotations

import bisect
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "CONFIG_MAP",
    "ELASTIC_QUOTA",
    "MUTATING",
    "NODE",
    "POD",
    "RESERVATION",
    "STATUS_ALLOWED",
    "STATUS_REJECTED",
    "VALIDATING",
    "StepSeries",
    "WebhookMetrics",
]

SUBSYSTEM = "koord_manager_webhook"
MUTATING = "mutate"
VALIDATING = "validate"
POD = "pod"
NODE = "node"
CONFIG_MAP = "configmap"
ELASTIC_QUOTA = "elasticquota"
RESERVATION = "reservation"
STATUS_ALLOWED = "allowed"
STATUS_REJECTED = "rejected"

DURATION_BUCKETS = tuple(0.001 * 2**n for n in range(20))


class _Observer:
    """Observes into one histogram child as ``Histogram.observe`` does, in fewer steps.

    The bucket is found by bisection over the child's upper bounds (the first bound not
    below the value, as ``observe`` scans for) and the child's own sum and bucket counters
    are incremented. A child that does not have that layout (another version of the
    client) is observed through ``observe`` itself.
    """

    __slots__ = ("_bounds", "_buckets", "_child", "_sum")

    def __init__(self, child: Histogram) -> None:
        self._child = child
        bounds: Any = getattr(child, "_upper_bounds", None)
        buckets: Any = getattr(child, "_buckets", None)
        total: Any = getattr(child, "_sum", None)
        usable = (
            isinstance(bounds, list)
            and isinstance(buckets, list)
            and len(bounds) == len(buckets)
            and all(hasattr(value, "inc") for value in (*buckets, total))
        )
        self._bounds: list[float] | None = bounds if usable else None
        self._buckets: list[Any] = buckets if usable else []
        self._sum: Any = total

    def observe(self, amount: float) -> None:
        bounds = self._bounds
        if bounds is None or amount != amount:  # NaN: leave it to the client
            self._child.observe(amount)
            return
        self._sum.inc(amount)
        self._buckets[bisect.bisect_left(bounds, amount)].inc(1)


class StepSeries:
    """The duration series of one plug-in step, allowed and rejected (made on first use)."""

    __slots__ = ("_allowed", "_histogram", "_labels", "_rejected")

    def __init__(self, histogram: Histogram, labels: tuple[str, str, str, str]) -> None:
        self._histogram = histogram
        self._labels = labels
        self._allowed: _Observer | None = None
        self._rejected: _Observer | None = None

    def observe(self, rejected: bool, seconds: float) -> None:
        observer = self._rejected if rejected else self._allowed
        if observer is None:
            status = STATUS_REJECTED if rejected else STATUS_ALLOWED
            observer = _Observer(self._histogram.labels(*self._labels, status))
            if rejected:
                self._rejected = observer
            else:
                self._allowed = observer
        observer.observe(seconds * 1000.0)


class WebhookMetrics:
    """The webhook collectors, registered on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.duration = Histogram(
            "webhook_duration_milliseconds",
            "webhook_duration_milliseconds",
            ["webhook_type", "object_type", "operation", "plugin_name", "status"],
            subsystem=SUBSYSTEM,
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        #: The steps' series by label values: ``labels()`` validates and locks on every call.
        #: Label values come from fixed sets (types, plug-in names, the four operations).
        self._steps: dict[tuple[str, str, str, str], StepSeries] = {}
        self.quota_shared_weight = Gauge(
            "quota_shared_weight",
            "The shared weight of the quota",
            ["elasticquota_name", "resource_name"],
            subsystem=SUBSYSTEM,
            registry=self.registry,
        )
        self.binding_decisions = Counter(
            "binding_admission_decisions",
            "Decisions of the pod binding admission webhook",
            ["decision"],
            subsystem=SUBSYSTEM,
            registry=self.registry,
        )

    def step(self, webhook_type: str, object_type: str, operation: str, plugin: str) -> StepSeries:
        """The two duration series (allowed, rejected) of one plug-in step, made once."""
        key = (webhook_type, object_type, operation, plugin)
        series = self._steps.get(key)
        if series is None:
            series = StepSeries(self.duration, key)
            self._steps[key] = series
        return series

    def observe(
        self,
        webhook_type: str,
        object_type: str,
        operation: str,
        plugin: str,
        rejected: bool,
        seconds: float,
    ) -> None:
        self.step(webhook_type, object_type, operation, plugin).observe(rejected, seconds)

    def set_shared_weight(self, quota: str, weights: dict[str, int]) -> None:
        for resource, value in weights.items():
            self.quota_shared_weight.labels(quota, resource).set(value)

    def forget_shared_weight(self, quota: str, resources: list[str]) -> None:
        for resource in resources:
            try:
                self.quota_shared_weight.remove(quota, resource)
            except KeyError:
                continue
