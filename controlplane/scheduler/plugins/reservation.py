"""Reservation: capacity held ahead of time for the pods that own it (Koordinator's
``plugins/reservation`` and its controller), the scheduler's side of
:mod:`controlplane.scheduler.reservation`.

* A Reservation (``scheduling.koordinator.sh/v1alpha1``) not yet placed becomes a **reserve
  pod** queued like a pod (priority from its template, else ``koordinator.sh/priority``,
  else the highest); **Bind** writes the Reservation's status instead of binding a pod
  (``nodeName``, phase Available, Scheduled and Ready conditions, ``allocatable``). An
  Available reservation holds on its node what its owners have not taken yet: its reserve
  pod is placed there with ``allocatable - allocated`` as requests, the part its
  ``node.koordinator.sh/reservation`` annotation keeps back (``reserved``) included.
* A pod its **owners** match (object, controller -- any of the pod's owner references --,
  label selector; ``reservation-affinity`` name, selector and tolerations; not
  ``reservation-ignored``) sees the matched reservations' room less ``reserved`` given
  back on their nodes while it is scheduled (upstream's BeforePreFilter transformer); a
  pod with reservation affinity fits only where a reservation matches ("node(s) no
  reservations match reservation affinity"); a ``Restricted`` reservation's resources
  come only from it ("Reservation(s) Insufficient cpu"). The match is made once per cycle
  and again after any change of a reservation, an owner or the cluster (a requeued pod
  never uses a reservation that ended meanwhile). **Score** (weight 5000 in the profile):
  among the nodes that pass every filter, the one whose matched reservations hold the
  smallest non-zero ``reservation-order`` gets 1000, the others the MostAllocated score
  (over its allocatable) of the reservation Reserve would put the pod in there;
  normalized. **Reserve** assigns the pod to the best reservation on the chosen node;
  **PreBind** writes ``scheduling.koordinator.sh/reservation-allocated`` ``{"name","uid"}``.
* The controller (leading scheduler): status ``currentOwners`` and ``allocated`` from the
  owners the pod informer saw bound into it (``spec.nodeName`` and ``reservation-allocated``;
  a pod only assumed at Reserve, whose binding may still fail, is not one), with
  ``allocateOnce`` Succeeded after its first owner; expiry (``ttl``, ``expires``, its node
  gone: Failed, reason Expired), and garbage collection ``gcDurationSeconds`` after it
  ended.

A reserve pod preempts lower-priority pods only with ``enablePreemption`` (off by default,
as upstream), and a reservation is never a victim of preemption; its scheduling Events go to
the Reservation. Not built: preempting reservations, pre-allocation, reservations' CPUs and
devices for NodeNUMAResource and DeviceShare, operating-mode pods, resizing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.kernel.table import CPU, PodVector
from controlplane.scheduler.kernel.twin import Extra, normalized
from controlplane.scheduler.plugins.args import ArgsError, boolean
from controlplane.scheduler.plugins.interface import (
    RESERVE_POD_PATCH,
    CycleState,
    Handle,
    PodPatch,
    QueueNotifier,
    follow,
    passing_mask,
    reasons_by_node,
    row_scores,
    rows_mask,
)
from controlplane.scheduler.podinfo import PodInfo, pod_info, pod_object
from controlplane.scheduler.queue import ClusterEvent
from controlplane.scheduler.reservation import lifecycle
from controlplane.scheduler.reservation.fit import fits_reservation
from controlplane.scheduler.reservation.info import ALLOCATE_POLICY_RESTRICTED, ReservationInfo
from controlplane.scheduler.reservation.messages import (
    ERR_REASON_RESERVATION_AFFINITY,
    ERR_REASON_RESERVATION_INACTIVE,
)
from controlplane.scheduler.reservation.phases import is_available, is_expired, is_failed, is_succeeded
from controlplane.scheduler.reservation.prebind import reservation_allocated_value
from controlplane.scheduler.reservation.reservepod import ReservationError, reserve_pod, validate_reservation
from controlplane.scheduler.reservation.scoring import NO_ORDER, most_preferred_by_order, score_reservation
from controlplane.scheduler.reservation.transformer import PodContext, classify
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.reservation import (
    ANNOTATION_RESERVATION_AFFINITY,
    ANNOTATION_RESERVATION_ALLOCATED,
    get_reservation_allocated,
)
from koordinator.api.resourcelist import ResourceList
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import ConflictError, KubeError, NotFoundError
from koordinator.kube.informer.factory import InformerFactory

log = logging.getLogger(__name__)

NAME = "Reservation"
#: a Reservation came, changed or went: its owners may fit now
RESERVATION_CHANGE = ClusterEvent("Reservation", "*")
#: the node that holds the most preferred (ordered) reservation
MOST_PREFERRED_SCORE = 1000
_STATE_KEY = "Reservation/assigned"

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class ReservationArgs:
    enable_preemption: bool = False
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100
    controller_workers: int = 1
    gc_duration_s: float = lifecycle.DEFAULT_GC_DURATION_S
    gc_interval_s: float = 60.0
    resync_interval_s: float = 60.0
    disable_garbage_collection: bool = False


_INT_FIELDS = {
    "minCandidateNodesPercentage": ("min_candidate_nodes_percentage", 0, 100),
    "minCandidateNodesAbsolute": ("min_candidate_nodes_absolute", 0, None),
    "controllerWorkers": ("controller_workers", 1, None),
    "gcDurationSeconds": ("gc_duration_s", 1, None),
    "gcIntervalSeconds": ("gc_interval_s", 1, None),
    "resyncIntervalSeconds": ("resync_interval_s", 1, None),
}
_KNOWN = {
    "apiVersion",
    "kind",
    "enablePreemption",
    "disableGarbageCollection",
    "ignoredResources",
    "ignoredResourceGroups",
    "preAllocationConfig",
    "reservationSelectorIndex",
    *_INT_FIELDS,
}


def reservation_args(raw: Mapping[str, Any] | None, path: str = NAME) -> ReservationArgs:
    """ReservationArgs with upstream's defaults; ``ignoredResources``,
    ``ignoredResourceGroups``, ``preAllocationConfig`` and ``reservationSelectorIndex`` are
    accepted and have nothing to act on here."""
    raw = raw or {}
    unknown = set(raw) - _KNOWN
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {sorted(unknown)}")
    values: dict[str, Any] = {
        "enable_preemption": boolean(raw, "enablePreemption", path),
        "disable_garbage_collection": boolean(raw, "disableGarbageCollection", path),
    }
    for key, (attr, low, high) in _INT_FIELDS.items():
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            bound = f"[{low}, {high}]" if high else f"at least {low}"
            raise ArgsError(f"{path}.{key}: Invalid value: {value!r}: must be an integer {bound}")
        values[attr] = float(value) if attr.endswith("_s") else value
    return ReservationArgs(**values)


def _owner_key(owner: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The index key of one owner entry: its ``object``'s UID or name, else its
    ``controller``'s UID or name, else the first of its selector's ``matchLabels`` (every
    part of an entry must hold, so one is enough to find its candidates); None when the
    entry names none of them."""
    obj = owner.get("object") or {}
    if obj.get("uid"):
        return ("object-uid", str(obj["uid"]))
    if obj.get("name") and obj.get("namespace"):
        return ("object", str(obj["namespace"]), str(obj["name"]))
    if obj.get("name"):
        return ("object-name", str(obj["name"]))
    controller = owner.get("controller") or {}
    if controller.get("uid"):
        return ("controller-uid", str(controller["uid"]))
    if controller.get("name"):
        return ("controller", str(controller["name"]))
    labels = (owner.get("labelSelector") or {}).get("matchLabels") or {}
    if labels:
        key = min(labels)
        return ("label", str(key), str(labels[key]))
    return None


def _owner_view(pod: PodInfo) -> tuple[Any, ...]:
    """What the controller's owner sync reads of a bound owner."""
    return (
        pod.namespace,
        pod.name,
        pod.node_name,
        pod.requests,
        pod.annotations.get(ANNOTATION_RESERVATION_ALLOCATED),
    )


def _ints(resources: ResourceList) -> dict[str, int]:
    """Positive amounts in the table's units (CPU in milli-cores), ``pods`` apart."""
    out = {}
    for name, quantity in resources.items():
        if name == "pods":
            continue
        value = quantity.milli_value() if name == CPU else quantity.value()
        if value > 0:
            out[name] = value
    return out


@dataclass
class _Matched:
    """The reservations a pod may use, by node, for its scheduling cycle."""

    pod: PodInfo
    ctx: PodContext
    by_node: dict[str, list[ReservationInfo]]


@dataclass(frozen=True)
class _MatchKey:
    """What a cached match was computed from: the pod's record (the same object for one
    cycle), the plug-in's generation (reservations and their owners) and the cluster's
    (nodes and placed pods). A requeued pod's next cycle finds at least one of them moved
    when anything it was matched against changed."""

    pod: PodInfo
    generation: int
    cluster_generation: int

    def holds(self, pod: PodInfo, generation: int, cluster_generation: int) -> bool:
        return (
            self.pod is pod
            and self.generation == generation
            and self.cluster_generation == cluster_generation
        )


class Reservation:
    NAME = NAME
    PREEMPTION_HELPS = False
    reverse = False

    def __init__(self, args: ReservationArgs | None = None, clock: Callable[[], float] = time.time) -> None:
        self.args = args or reservation_args(None)
        #: DefaultPreemption may evict pods for a reserve pod (``enablePreemption``)
        self.reserve_pods_preempt = self.args.enable_preemption
        self.clock = clock
        #: reservation name -> its info (owners assigned included)
        self.infos: dict[str, ReservationInfo] = {}
        #: owner pod UID -> (reservation name, the pod): assigned at Reserve (assumed, maybe
        #: never bound) or seen bound; what scheduling counts in the reservation
        self.owners: dict[str, tuple[str, PodInfo]] = {}
        #: reservation name -> UID -> the owner pods the informer saw bound into it (spec.nodeName
        #: set, ``reservation-allocated`` naming it): all the controller writes as its owners
        self._bound: dict[str, dict[str, PodInfo]] = {}
        #: owner pod UID -> the reservation :attr:`_bound` has it under
        self._bound_in: dict[str, str] = {}
        #: reservation UID -> name
        self._by_uid: dict[str, str] = {}
        #: bumped on every change of a reservation or of its owners (the match cache's key)
        self._generation = 0
        #: reservation name -> the reserve pod handed to the scheduler last
        self.reserve_pods: dict[str, PodInfo] = {}
        self._handle: Handle | None = None
        self._notifier = QueueNotifier(RESERVATION_CHANGE)
        #: the last match computed, with what it was computed from (None: no reservation
        #: concerned the pod)
        self._matched: _Matched | None = None
        self._match_key: _MatchKey | None = None
        self._cluster: Cluster | None = None
        #: owner key -> the reservations one of whose owner entries names it; reservations
        #: with an entry no key names (a selector of expressions only) are always checked
        self._by_owner: dict[tuple[str, ...], set[str]] = {}
        self._unindexed: set[str] = set()
        #: the controller's work: reservations whose object or owners changed since it last
        #: looked, and when each is due for expiry or collection otherwise
        self._changed: set[str] = set()
        self._due: dict[str, float] = {}

    # --- wiring ----------------------------------------------------------------------------

    def bind_handle(self, handle: Handle) -> None:
        self._handle = handle
        self._notifier.handle = handle
        for info in self.infos.values():
            self._sync_reserve_pod(info)

    def attach(self, factory: InformerFactory, name: str) -> None:
        follow(factory, res.RESERVATIONS, name, self.on_reservation, self.on_reservation_deleted)

    def take_object(self, obj: Obj) -> None:
        """An object ``simulate`` was given: Reservations (only placed ones hold room there)."""
        if obj.get("kind") == "Reservation":
            self.on_reservation(obj)

    def on_reservation(self, reservation: Obj) -> None:
        name = str((reservation.get("metadata") or {}).get("name") or "")
        try:
            validate_reservation(reservation)
        except ReservationError as err:
            log.warning("Reservation %s ignored: %s", name, err)
            return
        info = ReservationInfo.from_reservation(reservation)
        for uid, (owner, pod) in self.owners.items():
            if owner == name and uid:
                info.add_assigned_pod(pod_object(pod))
        self._unindex(name)
        previous = self.infos.get(name)
        if previous is not None and self._by_uid.get(previous.uid) == name:
            del self._by_uid[previous.uid]
        self.infos[name] = info
        if info.uid:
            self._by_uid[info.uid] = name
        self._generation += 1
        self._index(name, info)
        self._changed.add(name)
        self._due[name] = self._deadline(reservation)
        self._sync_reserve_pod(info)
        self._notifier.notify()

    def on_reservation_deleted(self, name: str) -> None:
        info = self.infos.pop(name, None)
        if info is not None and self._by_uid.get(info.uid) == name:
            del self._by_uid[info.uid]
        self._generation += 1
        self._unindex(name)
        self._changed.discard(name)
        self._due.pop(name, None)
        self._drop_reserve_pod(name)
        self._notifier.notify()

    # --- the owner index: a pod is matched only against the reservations that may own it --

    def _index(self, name: str, info: ReservationInfo) -> None:
        for owner in info.owners:
            key = _owner_key(owner)
            if key is None:
                self._unindexed.add(name)
            else:
                self._by_owner.setdefault(key, set()).add(name)

    def _unindex(self, name: str) -> None:
        self._unindexed.discard(name)
        for key in [k for k, names in self._by_owner.items() if name in names]:
            self._by_owner[key].discard(name)
            if not self._by_owner[key]:
                del self._by_owner[key]

    def _candidates(self, pod: PodInfo) -> set[str]:
        """The reservations whose owners may match ``pod`` (a superset: each is checked)."""
        found = set(self._unindexed)
        keys: list[tuple[str, ...]] = [
            ("object-uid", pod.uid),
            ("object", pod.namespace, pod.name),
            ("object-name", pod.name),
        ]
        if pod.controller is not None:
            keys += [("controller-uid", pod.controller.uid), ("controller", pod.controller.name)]
        for ref in pod.owner_refs:  # an owner's controller may name any owner reference
            keys += [("controller-uid", ref.uid), ("controller", ref.name)]
        keys += [("label", k, v) for k, v in pod.labels.items()]
        for key in keys:
            names = self._by_owner.get(key)
            if names:
                found |= names
        return found

    def _drop_reserve_pod(self, name: str) -> None:
        pod = self.reserve_pods.pop(name, None)
        if pod is not None and self._handle is not None and self._handle.reserve_pods is not None:
            self._handle.reserve_pods.remove_reserve_pod(pod.key)

    def _sync_reserve_pod(self, info: ReservationInfo) -> None:
        """Queue the reservation's reserve pod, place it with what is left of it, or take it
        away once the reservation ended."""
        sink = self._handle.reserve_pods if self._handle is not None else None
        if sink is None:
            return
        reservation = info.reservation
        if is_failed(reservation) or is_succeeded(reservation) or is_expired(reservation) or info.terminating:
            self._drop_reserve_pod(info.name)
            return
        try:
            pod = dataclasses.replace(pod_info(reserve_pod(reservation)), reservation=info.name)
        except ValueError as err:
            log.warning("Reservation %s ignored: %s", info.name, err)
            return
        if is_available(reservation) and info.node_name:
            # what its owners have not taken, ``reserved`` included: that part is kept from
            # every pod (owners get back only :meth:`ReservationInfo.remaining`)
            pod = dataclasses.replace(pod, requests=_ints(info.held()), node_name=info.node_name)
        elif pod.node_name:
            return  # placed per its status but not Available: nothing to hold
        if self.reserve_pods.get(info.name) == pod:
            return
        self.reserve_pods[info.name] = pod
        sink.add_reserve_pod(pod)

    # --- owners ------------------------------------------------------------------------------

    def on_pod(self, old: PodInfo | None, new: PodInfo | None) -> None:
        """Bound pods with ``reservation-allocated`` count in their reservation (restored after
        a restart) and are its owners for the controller; deleted ones leave it."""
        if new is None:
            if old is not None:
                self._forget_bound(old.uid)
                self._unassign(old.uid)
            return
        if new.reservation:
            return
        name = self._allocated_to(new) if new.node_name else None
        if name is None:
            self._forget_bound(new.uid)
            return
        self._remember_bound(name, new)
        if new.uid not in self.owners:
            self._assign(name, new)

    def _allocated_to(self, pod: PodInfo) -> str | None:
        """The reservation the pod's ``reservation-allocated`` names (by UID, else its name)."""
        if ANNOTATION_RESERVATION_ALLOCATED not in pod.annotations:
            return None
        try:
            record = get_reservation_allocated(pod.annotations)
        except AnnotationError:
            return None
        if record is None:
            return None
        return self._by_uid.get(record.uid, record.name)

    def _remember_bound(self, name: str, pod: PodInfo) -> None:
        """The informer saw ``pod`` bound into reservation ``name``."""
        before = self._bound_in.get(pod.uid)
        if before is not None and before != name:
            self._forget_bound(pod.uid)
        owners = self._bound.setdefault(name, {})
        known = owners.get(pod.uid)
        owners[pod.uid] = pod
        self._bound_in[pod.uid] = name
        if known is None or _owner_view(known) != _owner_view(pod):
            self._changed.add(name)

    def _forget_bound(self, uid: str) -> None:
        name = self._bound_in.pop(uid, None)
        if name is None:
            return
        owners = self._bound.get(name)
        if owners is not None:
            owners.pop(uid, None)
            if not owners:
                del self._bound[name]
        self._changed.add(name)

    def _assign(self, name: str, pod: PodInfo) -> None:
        self.owners[pod.uid] = (name, pod)
        self._changed.add(name)
        self._generation += 1
        info = self.infos.get(name)
        if info is not None:
            info.add_assigned_pod(pod_object(pod))
            self._sync_reserve_pod(info)

    def _unassign(self, uid: str) -> None:
        found = self.owners.pop(uid, None)
        if found is None:
            return
        name, pod = found
        self._changed.add(name)
        self._generation += 1
        info = self.infos.get(name)
        if info is not None:
            info.remove_assigned_pod(pod_object(pod))
            self._sync_reserve_pod(info)
            self._notifier.notify()

    # --- the pod's view of the nodes ---------------------------------------------------------

    def _match(self, pod: PodInfo, cluster: Cluster) -> _Matched | None:
        """The reservations ``pod`` may use, by node (None: no reservation concerns it);
        computed once per cycle, again whenever a reservation, an owner or the cluster
        changed since."""
        self._cluster = cluster
        key = self._match_key
        if key is not None and key.holds(pod, self._generation, cluster.generation):
            return self._matched
        self._matched = None
        self._match_key = _MatchKey(pod, self._generation, cluster.generation)
        if pod.reservation or not self.infos:
            return None
        if not self._candidates(pod) and ANNOTATION_RESERVATION_AFFINITY not in pod.annotations:
            return None  # no reservation may own it, and it asks for none
        obj = pod_object(pod)
        try:
            ctx = PodContext.of(obj)
        except (ReservationError, AnnotationError):
            return None
        by_node: dict[str, list[ReservationInfo]] = {}
        for name in sorted(self._candidates(pod)):
            info = self.infos[name]
            node = cluster.nodes.get(info.node_name) if info.node_name else None
            if node is None or not info.is_available() or info.parse_error is not None:
                continue
            if info.allocate_once and info.allocated_pods > 0:
                continue
            if classify(ctx, info, node.labels).usable:
                by_node.setdefault(info.node_name, []).append(info)
        if not by_node and ctx.affinity is None:
            return None
        self._matched = _Matched(pod, ctx, by_node)
        return self._matched

    def restore(self, pod: PodInfo, cluster: Cluster) -> list[tuple[str, PodVector]]:
        """The room of the reservations the pod may use, given back on their nodes: what
        their owners may still take (:meth:`ReservationInfo.remaining`), ``reserved`` kept."""
        matched = self._match(pod, cluster)
        if matched is None:
            return []
        table = cluster.table
        return [
            (node, table.pod_vector(_ints(info.remaining())))
            for node, infos in matched.by_node.items()
            for info in infos
            if self.reserve_pods.get(info.name) is not None
        ]

    def _node_verdict(self, matched: _Matched, node: str) -> str | None:
        """Why the node fails the pod as far as reservations go (None: it passes)."""
        infos = matched.by_node.get(node)
        if not infos:
            return ERR_REASON_RESERVATION_AFFINITY if matched.ctx.affinity is not None else None
        restricted = [i for i in infos if i.allocate_policy == ALLOCATE_POLICY_RESTRICTED]
        if not restricted or len(restricted) < len(infos):
            return None  # some reservation takes the rest from the node
        reasons = [r for info in restricted for r in fits_reservation(matched.ctx.requests, info)]
        fits_one = any(not fits_reservation(matched.ctx.requests, info) for info in restricted)
        return None if fits_one else (reasons[0] if reasons else None)

    # --- the points ------------------------------------------------------------------------

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        matched = self._match(pod, cluster)
        if matched is None:
            return None
        # only the nodes with a matched reservation can differ: with reservation affinity
        # the others all fail, without it they all pass
        passing = rejected = 0
        for node in matched.by_node:
            info = cluster.nodes.get(node)
            if info is None:
                continue
            if self._node_verdict(matched, node) is None:
                passing |= 1 << info.row
            else:
                rejected |= 1 << info.row
        if matched.ctx.affinity is not None:
            return rows_mask(passing, cluster.table.count)
        return passing_mask(rejected, cluster.table.count) if rejected else None

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        matched = self._match(pod, cluster)
        if matched is None:
            return {}
        return reasons_by_node(cluster, rejected, lambda info: self._node_verdict(matched, info.name))

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        matched = self._match(pod, cluster)
        return self._node_verdict(matched, node.name) if matched is not None else None

    def _cycle_match(self, pod: PodInfo) -> _Matched | None:
        """The match of ``pod``'s cycle while no reservation or owner changed since (its
        Reserve follows the placement, which moves only the cluster's generation)."""
        key = self._match_key
        if key is None or key.pod is not pod or key.generation != self._generation:
            return None
        return self._matched

    def _scores(self, matched: _Matched, nodes: Iterable[str]) -> dict[str, int]:
        """Raw scores of ``nodes`` (feasible nodes with a matched reservation, in the order
        upstream's PreScore is given them): 1000 for the first whose matched reservations
        hold the smallest non-zero ``reservation-order``, else the MostAllocated score of
        the reservation Reserve would nominate there (0 without one)."""
        nodes = list(nodes)
        preferred, best = None, NO_ORDER
        for node in nodes:
            _, order = most_preferred_by_order(matched.by_node.get(node, ()))
            if order < best:
                preferred, best = node, order
        scores = {}
        for node in nodes:
            if node == preferred:
                scores[node] = MOST_PREFERRED_SCORE
                continue
            nominated = self._nominate(matched, node)
            scores[node] = score_reservation(matched.ctx.requests, nominated) if nominated is not None else 0
        return scores

    def _feasible_nodes(
        self, matched: _Matched, cluster: Cluster, feasible: Callable[[int], bool] | None
    ) -> list[str]:
        """The nodes with a matched reservation that the pod may be placed on (this
        plug-in's verdict, and ``feasible`` of their rows when the framework tells), by row:
        two nodes whose best order is the same go to the lower row (upstream: the first in
        the scoring window; the window here is all feasible nodes, not only those sampled)."""
        found = []
        for node in matched.by_node:
            info = cluster.nodes.get(node)
            if info is None or self._node_verdict(matched, node) is not None:
                continue
            if feasible is None or feasible(info.row):
                found.append((info.row, node))
        return [node for _, node in sorted(found)]

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        return self.extra_among(pod, cluster, weight, None)

    def extra_among(
        self, pod: PodInfo, cluster: Cluster, weight: int, feasible: Callable[[int], bool] | None
    ) -> Extra | None:
        """:meth:`extra` knowing which rows pass every filter: the most preferred node is
        chosen among those (upstream's PreScore sees only feasible nodes). Only the few
        rows holding a matched reservation are asked."""
        matched = self._match(pod, cluster)
        if matched is None or not matched.by_node:
            return None
        scores = array("q", bytes(8 * cluster.table.count))
        for node, score in self._scores(matched, self._feasible_nodes(matched, cluster, feasible)).items():
            scores[cluster.nodes[node].row] = score
        return row_scores(self.NAME, weight, scores)

    def window_scores(self, pod: PodInfo, cluster: Cluster, rows: Sequence[int]) -> list[int]:
        """The normalized scores of ``rows``, the feasible window in visiting order
        (``simulate``, the extender): the most preferred node is the window's."""
        matched = self._match(pod, cluster)
        if matched is None or not matched.by_node:
            return [0] * len(rows)
        names = [info.name if (info := cluster.by_row[row]) is not None else "" for row in rows]
        scores = self._scores(matched, [n for n in names if n in matched.by_node])
        raws = [scores.get(name, 0) for name in names]
        highest = max(raws, default=0)
        return [normalized(raw, highest, False) for raw in raws]

    def raw_score(self, pod: PodInfo, node: NodeInfo) -> int:
        matched = self._cycle_match(pod)
        if matched is None or self._cluster is None:
            return 0
        return self._scores(matched, self._feasible_nodes(matched, self._cluster, None)).get(node.name, 0)

    def _nominate(self, matched: _Matched, node: str) -> ReservationInfo | None:
        """The reservation the pod goes into on ``node``: the smallest non-zero order, then
        the highest score, then the name."""
        infos = [i for i in matched.by_node.get(node, ()) if not self._restricted_misfit(matched, i)]
        if not infos:
            return None
        preferred, _ = most_preferred_by_order(infos)
        if preferred is not None:
            return preferred
        return min(infos, key=lambda i: (-score_reservation(matched.ctx.requests, i), i.name))

    @staticmethod
    def _restricted_misfit(matched: _Matched, info: ReservationInfo) -> bool:
        return info.allocate_policy == ALLOCATE_POLICY_RESTRICTED and bool(
            fits_reservation(matched.ctx.requests, info)
        )

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        matched = self._cycle_match(pod)
        if matched is None or pod.reservation:
            return None
        info = self._nominate(matched, node)
        if info is None:
            return ERR_REASON_RESERVATION_AFFINITY if matched.ctx.affinity is not None else None
        current = self.infos.get(info.name)
        if current is None or current.uid != info.uid or not current.is_available():
            return ERR_REASON_RESERVATION_INACTIVE
        state[_STATE_KEY] = (info.name, current.uid)
        self._assign(info.name, dataclasses.replace(pod, node_name=node))
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        if state.pop(_STATE_KEY, None) is not None:
            self._unassign(pod.uid)

    def forget_pod(self, pod: PodInfo, node: str) -> None:
        self._unassign(pod.uid)

    def modify(self, state: CycleState, pod: PodInfo, node: str, patch: PodPatch) -> str | None:
        assigned = state.get(_STATE_KEY)
        if isinstance(assigned, tuple):
            patch.annotations[ANNOTATION_RESERVATION_ALLOCATED] = reservation_allocated_value(*assigned)
        return None

    async def bind(self, client: ApiClient, state: CycleState, pod: PodInfo, node: str) -> bool:
        """Bind a reserve pod: the Reservation's status says where it is, and it is Available
        (with the PreBind changes other plug-ins made, on its metadata); other pods are left
        to the next binder."""
        if not pod.reservation:
            return False
        patch = state.get(RESERVE_POD_PATCH)
        if isinstance(patch, dict):
            await client.patch(res.RESERVATIONS, pod.reservation, patch)
        current = await client.get(res.RESERVATIONS, pod.reservation)
        try:
            bound = lifecycle.bind(current, node, self.clock())
        except ReservationError as err:
            raise KubeError(f"Reservation {pod.reservation}: {err}") from None
        await client.replace_status(res.RESERVATIONS, bound)
        return True

    def describe(self, pod: PodInfo) -> tuple[str, Any] | None:
        """``simulate``'s report of the reservation the pod went into."""
        found = self.owners.get(pod.uid)
        if found is None:
            return None
        info = self.infos.get(found[0])
        return "reservation", {"name": found[0], "uid": info.uid if info is not None else ""}

    # --- the controller ----------------------------------------------------------------------

    def _owner_objects(self, name: str) -> list[dict[str, Any]]:
        """The owners the controller writes: pods the informer saw bound with
        ``reservation-allocated`` naming the reservation (upstream lists them from its pod
        informer), never those only assumed at Reserve, whose binding may still fail."""
        return [pod_object(pod) for pod in self._bound.get(name, {}).values()]

    def _deadline(self, reservation: Obj) -> float:
        """When the controller must look at the reservation again though nothing changed:
        its expiry, or once ended its collection (infinity: never)."""
        try:
            deadline = lifecycle.expiry_deadline(reservation)
        except ReservationError:
            deadline = None
        if deadline is None and not self.args.disable_garbage_collection:
            deadline = lifecycle.cleanup_deadline(reservation, self.args.gc_duration_s)
        return math.inf if deadline is None else deadline

    def pending_writes(self, now: float, nodes: Mapping[str, Any]) -> list[tuple[str, str, Obj | None]]:
        """What the controller writes now: (reservation, ``status`` or ``delete``, the new
        object): expiries, owner syncs and garbage collection. Only the reservations that
        changed, are due, or whose node is gone are looked at."""
        out: list[tuple[str, str, Obj | None]] = []
        for name, info in list(self.infos.items()):
            reservation = info.reservation
            node_exists = not info.node_name or info.node_name in nodes
            if name not in self._changed and now <= self._due.get(name, math.inf) and node_exists:
                continue
            self._changed.discard(name)
            if not self.args.disable_garbage_collection and lifecycle.should_garbage_collect(
                reservation, now, gc_duration_s=self.args.gc_duration_s, node_exists=node_exists
            ):
                out.append((name, "delete", None))
                continue
            if lifecycle.should_expire(reservation, now, node_exists=node_exists):
                out.append((name, "status", lifecycle.set_expired(reservation, now)))
                continue
            if is_available(reservation):
                synced = lifecycle.sync_owners(reservation, self._owner_objects(name), now)
                if synced is not None:
                    out.append((name, "status", synced))
        return out

    async def controller(self, client: ApiClient) -> None:
        """Write expiries, owners and deletions each second (until cancelled)."""
        while True:
            await asyncio.sleep(1.0)
            cluster_nodes = self._nodes()
            for name, action, obj in self.pending_writes(self.clock(), cluster_nodes):
                try:
                    if action == "delete":
                        await client.delete(res.RESERVATIONS, name)
                    elif obj is not None:
                        await client.replace_status(res.RESERVATIONS, dict(obj))
                except (NotFoundError, ConflictError):
                    continue  # gone, or changed meanwhile: the next round sees the new one
                except KubeError as err:
                    log.warning("Reservation %s not updated: %s", name, err)
                    self._changed.add(name)  # looked at again next round

    def _nodes(self) -> Mapping[str, Any]:
        """The nodes the scheduler knows (its cluster, as the last cycle saw it); before any
        cycle, every reservation's node counts as present."""
        if self._cluster is None:
            return {info.node_name: None for info in self.infos.values()}
        return self._cluster.nodes
