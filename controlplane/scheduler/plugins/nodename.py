"""NodeName: a pod that names its node (``spec.nodeName``) fits only there."""

from __future__ import annotations

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.podinfo import PodInfo

NAME = "NodeName"
REASON = "node(s) didn't match the requested node name"


class NodeName:
    NAME = NAME
    PREEMPTION_HELPS = False

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        if not pod.node_name:
            return None
        out = bytearray(cluster.table.count)
        info = cluster.nodes.get(pod.node_name)
        if info is not None:
            out[info.row] = 1
        return bytes(out)

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        return {REASON: rejected.count(1)}

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        return REASON if pod.node_name and pod.node_name != node.name else None
