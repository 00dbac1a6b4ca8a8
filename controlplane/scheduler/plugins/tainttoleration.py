"""TaintToleration (filter): a node's NoSchedule and NoExecute taints must all be tolerated.

Nodes share few distinct taint sets, so the pod's tolerations are checked once per set
(the cluster's taint-group column) and the verdicts spread over the rows with one
``bytes.translate``. The reason names the node's first untolerated taint, as upstream's
``node(s) had untolerated taint {key: value}``.
"""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.scheduler.cluster import MAX_TAINT_GROUPS, PREFER_NO_SCHEDULE, Cluster, NodeInfo, Taint
from controlplane.scheduler.kernel.twin import Extra
from controlplane.scheduler.plugins.interface import rows_mask
from controlplane.scheduler.podinfo import PodInfo

NAME = "TaintToleration"


def first_untolerated(pod: PodInfo, taints: tuple[Taint, ...]) -> Taint | None:
    for taint in taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(
            t.tolerates(taint.key, taint.value, taint.effect) for t in pod.tolerations
        ):
            return taint
    return None


def reason(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def intolerable_prefer_taints(pod: PodInfo, taints: Iterable[Taint]) -> list[Taint]:
    """Upstream's ``countIntolerableTaintsPreferNoSchedule``: the PreferNoSchedule taints no
    toleration with effect PreferNoSchedule (or none) tolerates."""
    tolerations = [t for t in pod.tolerations if t.effect in ("", PREFER_NO_SCHEDULE)]
    return [
        taint
        for taint in taints
        if taint.effect == PREFER_NO_SCHEDULE
        and not any(t.tolerates(taint.key, taint.value, taint.effect) for t in tolerations)
    ]


class TaintToleration:
    """The filter, and the score: fewer intolerable PreferNoSchedule taints is better
    (normalized in reverse over the window, as upstream)."""

    NAME = NAME
    PREEMPTION_HELPS = False
    reverse = True

    def __init__(self) -> None:
        #: the last pod's verdicts per taint set (the mask, then the reasons when it fails)
        self._cache: tuple[PodInfo, int, list[Taint | None]] | None = None

    def _verdicts(self, pod: PodInfo, cluster: Cluster) -> list[Taint | None]:
        """The first taint of each taint set the pod does not tolerate. Taint sets are only
        ever added, so the verdicts hold while their number does."""
        cached = self._cache
        if cached is not None and cached[0] is pod and cached[1] == len(cluster.taint_sets):
            return cached[2]
        verdicts = [first_untolerated(pod, taints) for taints in cluster.taint_sets]
        self._cache = (pod, len(cluster.taint_sets), verdicts)
        return verdicts

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        verdicts = self._verdicts(pod, cluster)
        overflow = len(cluster.taint_sets) >= MAX_TAINT_GROUPS
        if all(v is None for v in verdicts) and not overflow:
            return None
        lookup = bytes(1 if v is None else 0 for v in verdicts).ljust(256, b"\x01")
        out = bytearray(bytes(cluster.taint_group[: cluster.table.count]).translate(lookup))
        if overflow:  # nodes beyond the group limit, one by one
            for row, group in enumerate(cluster.taint_group[: cluster.table.count]):
                node = cluster.by_row[row]
                if group == MAX_TAINT_GROUPS and node is not None:
                    out[row] = 0 if first_untolerated(pod, node.taints) else 1
        return bytes(out)

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        counts: dict[str, int] = {}
        verdicts = self._verdicts(pod, cluster)
        groups = bytes(cluster.taint_group[: cluster.table.count])
        for group, taint in enumerate(verdicts):
            if taint is None or group == MAX_TAINT_GROUPS:
                continue
            select = bytes(1 if g == group else 0 for g in range(256))
            hits = groups.translate(select)
            n = (int.from_bytes(hits, "little") & int.from_bytes(rejected, "little")).bit_count()
            if n:
                counts[reason(taint)] = counts.get(reason(taint), 0) + n
        if len(cluster.taint_sets) >= MAX_TAINT_GROUPS:  # nodes beyond the group limit
            for row, group in enumerate(groups):
                node = cluster.by_row[row]
                if group == MAX_TAINT_GROUPS and rejected[row] and node is not None:
                    why = self.explain(pod, node, cluster)
                    if why:
                        counts[why] = counts.get(why, 0) + 1
        return counts

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        intolerable = intolerable_prefer_taints(pod, cluster.prefer_taints)
        n = cluster.table.count
        return Extra(NAME, weight, True, [(rows_mask(cluster.prefer_taints[t], n), 1) for t in intolerable])

    def raw_score(self, pod: PodInfo, node: NodeInfo) -> int:
        return len(intolerable_prefer_taints(pod, node.taints))

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        taint = first_untolerated(pod, node.taints)
        return None if taint is None else reason(taint)
