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
        #: The duration's children by label values: ``labels()`` validates and locks on every call.
        #: Label values come from fixed sets (types, plug-in names, the four operations).
        self._durations: dict[tuple[str, str, str, str, bool], Histogram] = {}
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

    def observe(
        self,
        webhook_type: str,
        object_type: str,
        operation: str,
        plugin: str,
        rejected: bool,
        seconds: float,
    ) -> None:
        key = (webhook_type, object_type, operation, plugin, rejected)
        child = self._durations.get(key)
        if child is None:
            status = STATUS_REJECTED if rejected else STATUS_ALLOWED
            child = self.duration.labels(webhook_type, object_type, operation, plugin, status)
            self._durations[key] = child
        child.observe(seconds * 1000.0)

    def set_shared_weight(self, quota: str, weights: dict[str, int]) -> None:
        for resource, value in weights.items():
            self.quota_shared_weight.labels(quota, resource).set(value)

    def forget_shared_weight(self, quota: str, resources: list[str]) -> None:
        for resource in resources:
            try:
                self.quota_shared_weight.remove(quota, resource)
            except KeyError:
                continue
