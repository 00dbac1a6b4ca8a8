"""NodeVolumeLimits (filter): a node takes no more CSI volumes per driver than its CSINode
allows (``spec.drivers[].allocatable.count``).

Upstream's ``CSILimits`` (``plugins/nodevolumelimits/csi.go``, v1.34): the pod's claims
(``persistentVolumeClaim`` and generic ephemeral volumes) count as CSI volumes, each
resolved to its driver and a unique volume (the bound PV's ``driver/volumeHandle``; an
unbound claim, or one whose PV is missing, as a volume of its class's provisioner); the
placed pods' volumes on the node count once each, however many pods share them, and so
does a new volume already attached there. A node fails when, for a driver it has a limit
for, attached plus new volumes exceed it: "node(s) exceed max volume count". A missing
claim, or an ephemeral one not controlled by the pod, fails every node with upstream's
lookup text. Nodes without a CSINode, or without a limit for the driver, always pass.

The cluster's volume view keeps, per driver, the rows of the nodes with a limit grouped
by free slots, so the rows that cannot take the pod's ``n`` new volumes are a few ORs; only
the nodes where one of the pod's volumes is attached already are counted one by one.

Left out, as documented in the module docstring of
:mod:`controlplane.scheduler.volumes`: in-tree volumes and their CSI migration, and the
VolumeAttachment objects newer releases also count. DefaultPreemption here does not recount
volumes, so evicting pods is not offered for this plug-in's rejections.
"""

from __future__ import annotations

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.plugins.interface import bits_of, passing_mask
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.volumes import ClaimError, Volumes

NAME = "NodeVolumeLimits"
REASON = "node(s) exceed max volume count"


def _by_driver(new: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for unique, driver in new.items():
        out.setdefault(driver, []).append(unique)
    return out


def _exceeds(volumes: Volumes, node: str, driver: str, uniques: list[str]) -> bool:
    limit = volumes.limit(node, driver)
    if limit is None:
        return False
    attached = volumes.attached(node, driver)
    fresh = sum(1 for unique in uniques if unique not in attached)
    return len(attached) + fresh > limit


class NodeVolumeLimits:
    NAME = NAME
    PREEMPTION_HELPS = False

    def _verdict(self, pod: PodInfo, cluster: Cluster) -> tuple[str, int] | None:
        """(reason, the rows it rejects), or None when it rejects no node."""
        if not pod.volumes:
            return None
        volumes = cluster.volumes
        try:
            new = volumes.new_attachments(pod)
        except ClaimError as err:
            return str(err), (1 << cluster.table.count) - 1
        over = 0
        for driver, uniques in _by_driver(new).items():
            rows = volumes.short_rows(driver, len(uniques))
            # where one of them is attached already it takes no new slot: count those nodes
            for node in set().union(*(volumes.nodes_with(u) for u in uniques)):
                info = cluster.nodes.get(node)
                if info is None:
                    continue
                if _exceeds(volumes, node, driver, uniques):
                    rows |= 1 << info.row
                else:
                    rows &= ~(1 << info.row)
            over |= rows
        return (REASON, over) if over else None

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        verdict = self._verdict(pod, cluster)
        if verdict is None:
            return None
        n = cluster.table.count
        return passing_mask(verdict[1], n)

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        verdict = self._verdict(pod, cluster)
        if verdict is None:
            return {}
        count = (bits_of(rejected) & verdict[1]).bit_count()
        return {verdict[0]: count} if count else {}

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        if not pod.volumes:
            return None
        try:
            new = cluster.volumes.new_attachments(pod)
        except ClaimError as err:
            return str(err)
        for driver, uniques in _by_driver(new).items():
            if _exceeds(cluster.volumes, node.name, driver, uniques):
                return REASON
        return None
