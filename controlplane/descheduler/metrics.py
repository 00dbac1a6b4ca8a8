"""koord-descheduler's Prometheus metrics under upstream's names: the evictions by result,
strategy (the plug-in that asked), namespace and node, and the leader gauge."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["DeschedulerMetrics"]


class DeschedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.pods_evicted = Counter(
            "descheduler_pods_evicted",
            "Number of evicted pods, by the result, by the strategy, by the namespace, by the node name. "
            "'error' result means a pod could not be evicted",
            ["result", "strategy", "namespace", "node"],
            registry=self.registry,
        )
        self.is_leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=self.registry,
        )
