"""LoadAwareScheduling's filter and score over the node table.

Each node's load (:mod:`.usage`) is recomputed only when something about the node changed
(its NodeMetric, the pods placed on it, its object) or its report expired; the cluster
tells the plug-in which node. A pod's answer depends on the node's load and on the pod's
estimate alone, and most pods share their estimate with many others (same requests), so
the plug-in keeps, per (estimate, prod or not), the filter's byte mask and the score of
every row, and updates the rows of the changed nodes in them: a pod of a known estimate
costs no loop over the nodes. DaemonSet pods pass the filter, as upstream's.
"""

from __future__ import annotations

import heapq
import time
from array import array
from collections.abc import Callable, Collection, Sequence
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.kernel.twin import Extra
from controlplane.scheduler.plugins.interface import CycleState, final_row_scores
from controlplane.scheduler.plugins.loadaware.args import NAME, LoadAwareArgs, load_aware_args
from controlplane.scheduler.plugins.loadaware.estimate import Estimate, estimate_pod
from controlplane.scheduler.plugins.loadaware.usage import (
    PROD,
    FilterProfile,
    NodeLoad,
    node_load,
    node_parts,
    still_estimated,
)
from controlplane.scheduler.podinfo import PodInfo

#: (estimate, prod pod) -> row arrays kept at once; past it the least recently used goes
MAX_CACHED = 64

Key = tuple[Estimate, bool]


def _daemon_set(pod: PodInfo) -> bool:
    return pod.controller is not None and pod.controller.kind == "DaemonSet"


class LoadAwareScheduling:
    NAME = NAME
    #: upstream rejects as Unschedulable, so preemption tries the node; its dry run removes
    #: victims from the node's pods only, not from the plug-in's assign cache or the
    #: NodeMetric, and the node is rejected again (:meth:`rejects_without`)
    PREEMPTION_HELPS = True
    reverse = False

    def __init__(self, args: LoadAwareArgs | None = None, clock: Callable[[], float] = time.time) -> None:
        self.args = args or load_aware_args(None)
        self.clock = clock
        #: (resource index, weight) of the scored resources
        self.weights = tuple(
            (i, self.args.resource_weights[name])
            for i, name in enumerate(self.args.resources)
            if name in self.args.resource_weights
        )
        self._cluster: Cluster | None = None
        self._loads: dict[str, NodeLoad] = {}
        self._dirty: set[str] = set()
        self._resized = False
        #: (expiry time, node, its report's update time): reports turning stale
        self._expiries: list[tuple[float, str, float]] = []
        #: pod key -> when it was first seen placed (its assume time until PodScheduled says)
        self._first_seen: dict[str, float] = {}
        self._estimates: dict[str, tuple[PodInfo, Estimate]] = {}
        #: node -> (the NodeInfo they came from, its allocatable and filter profile)
        self._parts: dict[str, tuple[NodeInfo, tuple[Estimate, FilterProfile]]] = {}
        #: node -> the estimates of the pods placed on (or taken off) it since the last
        #: refresh, summed for every class and for the prod ones
        self._moved: dict[str, tuple[list[int], list[int]]] = {}
        #: node -> the keys of the pods its current load counts
        self._included: dict[str, set[str]] = {}
        self._masks: dict[Key, bytearray] = {}
        self._scores: dict[Key, array[int]] = {}

    # --- keeping the loads current -------------------------------------------------------

    def _bind(self, cluster: Cluster) -> None:
        if self._cluster is cluster:
            return
        self._cluster = cluster
        cluster.subscribe(self._changed)
        self._loads.clear()
        self._dirty = set(cluster.nodes)
        self._resized = True

    def _changed(self, node: str | None, pod: PodInfo | None = None, sign: int = 0) -> None:
        if node is None:
            self._resized = True
            self._dirty.update(self._cluster.nodes if self._cluster is not None else ())
            self._dirty.update(self._loads)
        elif pod is None or node in self._dirty or not self._shift(node, pod, sign):
            self._dirty.add(node)

    def _shift(self, node: str, pod: PodInfo, sign: int) -> bool:
        """Account a pod placed on (or taken off) a node whose load is current, without
        recomputing it: possible when the report has no usage for the pod and it is still
        estimated (a pod just assumed, or its binding confirmed), so that it only adds its
        estimate. False when the node's load must be recomputed instead."""
        cluster, included = self._cluster, self._included.get(node)
        if cluster is None or node not in self._loads or included is None or pod.reservation:
            return False
        if (pod.key in included) != (sign < 0):
            return False
        record = cluster.node_metrics.get(node)
        if record is not None:
            self._first_seen.setdefault(pod.key, self.clock())
            if pod.key in record.pods or not still_estimated(pod, record, False, self._first_seen, self.args):
                return False
            # summed per node and applied at the next refresh: a binding's confirmation
            # (taken off, placed again) cancels out
            moved = self._moved.get(node)
            if moved is None:
                width = len(self.args.resources)
                moved = self._moved[node] = ([0] * width, [0] * width)
            for i, value in enumerate(self._estimate(pod)):
                moved[0][i] += sign * value
                if pod.priority_class == PROD:
                    moved[1][i] += sign * value
        if sign > 0:
            included.add(pod.key)
        else:
            included.discard(pod.key)
        return True

    def _update_row(self, load: NodeLoad) -> None:
        for (estimate, prod), mask in self._masks.items():
            mask[load.row] = load.passes(estimate, prod, self.args)
        for (estimate, prod), scores in self._scores.items():
            scores[load.row] = load.score(estimate, prod, self.args, self.weights)

    def refresh(self, cluster: Cluster) -> None:
        """Recompute the loads of the nodes that changed or whose report expired, and their
        rows in the kept masks and scores."""
        self._bind(cluster)
        now = self.clock()
        while self._expiries and self._expiries[0][0] <= now:
            _, node, updated = heapq.heappop(self._expiries)
            record = cluster.node_metrics.get(node)
            if record is not None and record.update_time == updated:
                self._dirty.add(node)
        moved, self._moved = self._moved, {}
        for name, (delta, prod_delta) in moved.items():
            load = self._loads.get(name)
            if name in self._dirty or load is None or not (any(delta) or any(prod_delta)):
                continue
            load = self._loads[name] = load.shifted(tuple(delta), tuple(prod_delta))
            self._update_row(load)
        if not self._dirty:
            return
        if self._resized:
            self._masks.clear()
            self._scores.clear()
            self._resized = False
        dirty, self._dirty = self._dirty, set()
        for name in dirty:
            info = cluster.nodes.get(name)
            if info is None:
                self._loads.pop(name, None)
                self._parts.pop(name, None)
                self._included.pop(name, None)
                continue
            load = self._load(cluster, info, now)
            self._loads[name] = load
            self._update_row(load)
        if len(self._first_seen) > 2 * len(cluster.placed) + 1024:
            self._first_seen = {k: t for k, t in self._first_seen.items() if k in cluster.placed}
        if len(self._estimates) > 2 * len(cluster.placed) + 1024:
            self._estimates = {k: e for k, e in self._estimates.items() if k in cluster.placed}

    def _load(self, cluster: Cluster, info: NodeInfo, now: float) -> NodeLoad:
        record = cluster.node_metrics.get(info.name)
        pods = []
        for key in cluster.on_node.get(info.name, ()):
            pod = cluster.placed[key][2]
            if pod.reservation:
                continue  # reserve pods hold room; they use nothing
            pods.append(pod)
            self._first_seen.setdefault(key, now)
        self._included[info.name] = {pod.key for pod in pods}
        if record is not None and record.update_time is not None:
            heapq.heappush(
                self._expiries,
                (record.update_time + self.args.node_metric_expiration_s, info.name, record.update_time),
            )
        parts = self._parts.get(info.name)
        if parts is None or parts[0] is not info:
            parts = self._parts[info.name] = (info, node_parts(info, self.args))
        return node_load(info, record, pods, self._first_seen, self.args, now, self._estimate, parts[1])

    def _estimate(self, pod: PodInfo) -> Estimate:
        """The pod's estimate, computed once per pod record."""
        kept = self._estimates.get(pod.key)
        if kept is not None and kept[0] is pod:
            return kept[1]
        estimate = estimate_pod(pod, self.args)
        self._estimates[pod.key] = (pod, estimate)
        return estimate

    def load_of(self, cluster: Cluster, node: str) -> NodeLoad | None:
        self.refresh(cluster)
        return self._loads.get(node)

    # --- per estimate ----------------------------------------------------------------------

    def _key(self, pod: PodInfo) -> Key:
        return self._estimate(pod), pod.priority_class == PROD

    @staticmethod
    def _make_room(store: dict[Key, Any]) -> None:
        """Drop the least recently used entry when ``store`` is full."""
        if len(store) >= MAX_CACHED:
            del store[next(iter(store))]

    def _mask(self, cluster: Cluster, key: Key) -> bytearray:
        mask = self._masks.pop(key, None)
        if mask is None:
            self._make_room(self._masks)
            estimate, prod = key
            mask = bytearray(b"\x01" * cluster.table.count)
            for load in self._loads.values():
                mask[load.row] = load.passes(estimate, prod, self.args)
        self._masks[key] = mask  # most recently used last
        return mask

    def _row_scores(self, cluster: Cluster, key: Key) -> array[int]:
        scores = self._scores.pop(key, None)
        if scores is None:
            self._make_room(self._scores)
            estimate, prod = key
            scores = array("q", bytes(8 * cluster.table.count))
            for load in self._loads.values():
                scores[load.row] = load.score(estimate, prod, self.args, self.weights)
        self._scores[key] = scores
        return scores

    # --- filter --------------------------------------------------------------------------

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        if _daemon_set(pod):
            return None
        self.refresh(cluster)
        if not self._loads:
            return None
        return bytes(self._mask(cluster, self._key(pod)))

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        estimate, prod = self._key(pod)
        out: dict[str, int] = {}
        for load in self._loads.values():
            if load.row < len(rejected) and rejected[load.row]:
                why = load.failing(estimate, prod, self.args)
                if why is not None:
                    out[why] = out.get(why, 0) + 1
        return out

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        if _daemon_set(pod):
            return None
        load = self.load_of(cluster, node.name)
        if load is None:
            return None
        estimate, prod = self._key(pod)
        return load.failing(estimate, prod, self.args)

    # --- preemption's dry run ---------------------------------------------------------------

    def applies(self, pod: PodInfo, cluster: Cluster) -> bool:
        self.refresh(cluster)
        return bool(self._loads) and not _daemon_set(pod)

    def rejects_without(
        self, pod: PodInfo, cluster: Cluster, node: str, removed: Collection[str]
    ) -> str | None:
        """Upstream's verdict with the victims gone: unchanged, as its usage and assign
        cache do not see the dry run."""
        load = self.load_of(cluster, node)
        if load is None:
            return None
        estimate, prod = self._key(pod)
        return load.failing(estimate, prod, self.args)

    # --- reserve -------------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        """The pod is assumed on ``node`` (the cluster already counts it there): it is
        estimated from now until its PodScheduled time is known (upstream's assign cache)."""
        self._first_seen.setdefault(pod.key, self.clock())
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """The pod will not bind there; the cluster takes it off the node, which the load
        follows."""
        self._first_seen.pop(pod.key, None)

    # --- score ---------------------------------------------------------------------------

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        self.refresh(cluster)
        if not self._loads:
            return None  # no node reports: every node scores 0
        # upstream has no NormalizeScore: the score is final
        return final_row_scores(NAME, weight, array("q", self._row_scores(cluster, self._key(pod))))

    def raw_score(self, pod: PodInfo, node: NodeInfo) -> int:
        cluster = self._cluster
        if cluster is None:
            return 0
        load = self.load_of(cluster, node.name)
        if load is None:
            return 0
        estimate, prod = self._key(pod)
        return load.score(estimate, prod, self.args, self.weights)

    def window_scores(self, pod: PodInfo, cluster: Cluster, rows: Sequence[int]) -> list[int]:
        """The final scores of ``rows`` (``simulate``)."""
        self.refresh(cluster)
        scores = self._row_scores(cluster, self._key(pod))
        return [scores[row] if row < len(scores) else 0 for row in rows]
