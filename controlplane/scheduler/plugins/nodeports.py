"""NodePorts (filter): a pod's host ports must be free on the node: no placed pod there uses
the same protocol and port on the same host IP, or on every address (``0.0.0.0``) on
either side. The cluster keeps, per protocol and port, the rows using it as bit sets."""

from __future__ import annotations

from collections.abc import Collection

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.plugins.interface import passing_mask
from controlplane.scheduler.podinfo import PodInfo

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"


def busy_rows(pod: PodInfo, cluster: Cluster) -> int:
    """The rows where one of the pod's host ports is taken (a bit set)."""
    busy = 0
    for protocol, ip, port in pod.host_ports:
        busy |= cluster.rows_using_port(protocol, port, ip)
    return busy


class NodePorts:
    NAME = NAME
    PREEMPTION_HELPS = True

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        if not pod.host_ports:
            return None
        n = cluster.table.count
        return passing_mask(busy_rows(pod, cluster), n)

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        return {REASON: rejected.count(1)}

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        return REASON if pod.host_ports and busy_rows(pod, cluster) >> node.row & 1 else None

    def applies(self, pod: PodInfo, cluster: Cluster) -> bool:
        return bool(pod.host_ports)

    def rejects_without(
        self, pod: PodInfo, cluster: Cluster, node: str, removed: Collection[str]
    ) -> str | None:
        """Why ``node`` fails once the placed pods ``removed`` are gone: preemption takes
        them off the node's accounting, so the port index already leaves them out."""
        return self.explain(pod, cluster.nodes[node], cluster)
