"""The slo-controller's Prometheus metrics, under upstream's exact names.

* ``slo_controller_node_resource_reconcile_count``, ``slo_controller_nodemetric_reconcile_count``,
  ``slo_controller_nodeslo_reconcile_count`` (counters: ``status`` succeeded/failed,
  ``reason``);
* ``slo_controller_nodemetric_spec_parse_count``, ``slo_controller_nodeslo_spec_parse_count``
  (counters: ``status``, ``reason``);
* ``slo_controller_node_resource_run_plugin_status`` (counter: ``plugin``, ``status``,
  ``reason``);
* ``slo_controller_node_extended_resource_allocatable_internal`` (gauge: ``node``,
  ``resource``, ``unit``): batch/mid CPU in cores (unit ``integer``, as upstream labels it)
  and memory in bytes (unit ``byte``), the series of a deleted node removed;
* ``koordinator_manager_is_leader`` (gauge): 1 while this replica holds the lease.

Upstream's counters carry no ``_total`` suffix, and dashboards query them by these names.
Python's client appends one, so these counters come from a collector of their own
(:class:`GoCounter`), whose families the manager's metrics server writes under their plain
names (:func:`koordinator.metrics.exposition.render_python_client`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from koordinator.metrics.exposition import GoCounterFamily

__all__ = ["FAILED", "SUCCEEDED", "GoCounter", "SLOControllerMetrics"]

SUCCEEDED = "succeeded"
FAILED = "failed"
UNIT_INTEGER = "integer"
UNIT_BYTE = "byte"


class GoCounter(Collector):
    """A labelled counter exposed under its plain name, as Go's client writes counters."""

    def __init__(self, name: str, documentation: str, labels: Iterable[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = tuple(labels)
        self._values: dict[tuple[str, ...], float] = {}

    def inc(self, *values: str, amount: float = 1.0) -> None:
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name} takes labels {self.labels}")
        self._values[values] = self._values.get(values, 0.0) + amount

    def value(self, *values: str) -> float:
        return self._values.get(values, 0.0)

    def collect(self) -> Iterator[Metric]:
        metric = GoCounterFamily(self.name, self.documentation, "counter")
        for values, amount in sorted(self._values.items()):
            metric.add_sample(self.name, dict(zip(self.labels, values, strict=True)), amount)
        yield metric

    def describe(self) -> Iterator[Metric]:
        yield GoCounterFamily(self.name, self.documentation, "counter")


class SLOControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)

        def counter(name: str, doc: str, labels: Iterable[str]) -> GoCounter:
            collector = GoCounter(f"slo_controller_{name}", doc, labels)
            self.registry.register(collector)
            return collector

        self.node_resource_reconcile = counter(
            "node_resource_reconcile_count",
            "reconcile count of node resource controller",
            ["status", "reason"],
        )
        self.node_resource_plugin = counter(
            "node_resource_run_plugin_status",
            "run plugin status of node resource controller",
            ["plugin", "status", "reason"],
        )
        self.nodemetric_reconcile = counter(
            "nodemetric_reconcile_count", "reconcile count of nodemetric controller", ["status", "reason"]
        )
        self.nodemetric_spec_parse = counter(
            "nodemetric_spec_parse_count", "spec parse count of nodemetric controller", ["status", "reason"]
        )
        self.nodeslo_reconcile = counter(
            "nodeslo_reconcile_count", "reconcile count of nodeslo controller", ["status", "reason"]
        )
        self.nodeslo_spec_parse = counter(
            "nodeslo_spec_parse_count", "spec parse count of nodeslo controller", ["status", "reason"]
        )
        self.extended_allocatable = Gauge(
            "slo_controller_node_extended_resource_allocatable_internal",
            "the internal allocatable of node extended resources calculated by the slo-controller",
            ["node", "resource", "unit"],
            registry=self.registry,
        )
        self.is_leader = Gauge(
            "koordinator_manager_is_leader",
            "whether this koord-manager replica is the leader (1) or not (0)",
            registry=self.registry,
        )
        self._series: dict[str, dict[tuple[str, str, str], Gauge]] = {}

    def record_allocatable(self, node: str, resource: str, value: float, unit: str) -> None:
        series = self._series.setdefault(node, {})
        labels = (node, resource, unit)
        child = series.get(labels)
        if child is None:
            child = series[labels] = self.extended_allocatable.labels(*labels)
        child.set(value)

    def forget_allocatable(self, node: str, resource: str | None = None) -> None:
        """Remove a node's series (one resource, or all of them)."""
        for labels in list(self._series.get(node, ())):
            if resource is not None and labels[1] != resource:
                continue
            with contextlib.suppress(KeyError):
                self.extended_allocatable.remove(*labels)
            del self._series[node][labels]
        if not self._series.get(node):
            self._series.pop(node, None)
