"""NodeUnschedulable: a cordoned node (``spec.unschedulable``) takes only pods that
tolerate ``node.kubernetes.io/unschedulable:NoSchedule``."""

from __future__ import annotations

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.podinfo import PodInfo

NAME = "NodeUnschedulable"
TAINT_KEY = "node.kubernetes.io/unschedulable"
REASON = "node(s) were unschedulable"
#: 1 -> 0: a cordoned row fails
_INVERT = bytes.maketrans(b"\x00\x01", b"\x01\x00")


def _tolerated(pod: PodInfo) -> bool:
    return any(t.tolerates(TAINT_KEY, "", "NoSchedule") for t in pod.tolerations)


class NodeUnschedulable:
    NAME = NAME
    PREEMPTION_HELPS = False

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        cordoned = cluster.unschedulable
        if cordoned.find(1, 0, cluster.table.count) < 0 or _tolerated(pod):
            return None
        return bytes(cluster.unschedulable[: cluster.table.count]).translate(_INVERT)

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        return {REASON: rejected.count(1)}

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        return REASON if node.unschedulable and not _tolerated(pod) else None
