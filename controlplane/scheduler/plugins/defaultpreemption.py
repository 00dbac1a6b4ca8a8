"""DefaultPreemption (PostFilter): when no node fits a pod, find a node where evicting pods
of lower priority would make room, and the fewest and least important such pods.

Upstream's algorithm (``pkg/scheduler/framework/preemption``), on the scheduler's cluster:

* A pod with ``preemptionPolicy: Never`` preempts nothing, nor does one whose nominated
  node still has lower-priority pods terminating (it waits for its earlier victims).
* Only nodes rejected for something eviction can change are tried (resources, pod count,
  host ports); nodes a filter rejects for good (cordoned, taints, affinity, node name)
  are "not helpful". At least 100 nodes or 10% are tried, from a random offset.
* On a node: every pod of lower priority is removed; if the pod still does not fit, the
  node is no candidate. Then, most important first (higher priority, then started
  earlier), each is put back while the pod still fits; those that cannot be are the victims.
* The node chosen: fewest victims' highest priority, then the smallest sum of priorities,
  then the fewest victims, then the latest start among the most important victims.

PodDisruptionBudgets are not considered yet (upstream reprieves the pods whose eviction
would violate one first and prefers nodes with fewer violations).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.kernel.table import PodVector
from controlplane.scheduler.kernel.twin import fits
from controlplane.scheduler.plugins.nodeports import busy_rows
from controlplane.scheduler.podinfo import PodInfo
from koordinator.kube.timeutil import parse_time

NAME = "DefaultPreemption"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."
#: upstream's DefaultPreemptionArgs defaults
MIN_CANDIDATE_NODES_PERCENTAGE = 10
MIN_CANDIDATE_NODES_ABSOLUTE = 100
_PRIORITY_OFFSET = 1 << 31  # math.MaxInt32 + 1, as upstream sums priorities


@dataclass(frozen=True)
class Candidate:
    node: str
    #: most important first
    victims: tuple[PodInfo, ...]


@dataclass
class Outcome:
    candidate: Candidate | None
    #: appended to the FitError text when there is no candidate (upstream's PostFilter message)
    message: str


def num_candidates(nodes: int) -> int:
    n = nodes * MIN_CANDIDATE_NODES_PERCENTAGE // 100
    n = max(n, MIN_CANDIDATE_NODES_ABSOLUTE)
    return min(n, nodes)


def _more_important(pod: PodInfo) -> tuple[int, float]:
    """Sort key: higher priority first, then started earlier (the creation time here)."""
    return (-pod.priority, _started(pod))


def _fits_on(cluster: Cluster, row: int, pod: PodInfo, vector: PodVector) -> bool:
    return fits(cluster.table, row, vector) and not busy_rows(pod, cluster) >> row & 1


def select_victims(
    cluster: Cluster, node: str, pod: PodInfo, vector: PodVector
) -> tuple[PodInfo, ...] | None:
    """The victims on ``node`` (None when evicting every lower-priority pod is not enough).
    The node's accounting is left as it was found."""
    row = cluster.nodes[node].row
    lower = sorted(
        (
            placed
            for key in cluster.on_node.get(node, ())
            if (placed := cluster.placed[key][2]).priority < pod.priority
        ),
        key=_more_important,
    )
    out: dict[str, PodVector] = {}  # removed from the node's accounting right now

    def take(victim: PodInfo) -> None:
        out[victim.key] = cluster.placed[victim.key][1]
        cluster.account(row, out[victim.key], victim.host_ports, -1)

    def give_back(victim: PodInfo) -> None:
        cluster.account(row, out.pop(victim.key), victim.host_ports, 1)

    try:
        for victim in lower:
            take(victim)
        if not _fits_on(cluster, row, pod, vector):
            return None
        victims = []
        for victim in lower:  # most important first: each stays if the pod still fits
            give_back(victim)
            if not _fits_on(cluster, row, pod, vector):
                take(victim)
                victims.append(victim)
        return tuple(victims)
    finally:
        for victim in lower:
            if victim.key in out:
                give_back(victim)


def pick_one(candidates: list[Candidate]) -> Candidate:
    """Upstream's ``pickOneNodeForPreemption`` (without PodDisruptionBudgets)."""

    def rank(c: Candidate) -> tuple[int, int, int, float]:
        if not c.victims:
            return (-(1 << 62), 0, 0, 0.0)
        highest = c.victims[0].priority
        total = sum(v.priority + _PRIORITY_OFFSET for v in c.victims)
        earliest = min(_started(v) for v in c.victims if v.priority == highest)
        return (highest, total, len(c.victims), -earliest)  # the latest earliest start wins

    return min(candidates, key=rank)


def _started(pod: PodInfo) -> float:
    try:
        return parse_time(pod.creation)
    except ValueError:
        return 0.0


def preempt(cluster: Cluster, pod: PodInfo, vector: PodVector, static: bytes, rng: random.Random) -> Outcome:
    """A candidate for ``pod``, or the message saying why there is none. ``static`` is the
    mask of the filters eviction cannot change (1: the node passes them)."""
    if pod.preemption_policy == "Never":
        return Outcome(None, NEVER)
    if pod.nominated_node and any(
        (placed := cluster.placed[key][2]).terminating and placed.priority < pod.priority
        for key in cluster.on_node.get(pod.nominated_node, ())
    ):
        return Outcome(None, TERMINATING)  # its victims are still going: wait, preempt no more
    rows = [i for i, ok in enumerate(static) if ok and cluster.by_row[i] is not None]
    not_helpful = len(cluster.nodes) - len(rows)
    wanted = num_candidates(len(rows))
    candidates: list[Candidate] = []
    no_victims = 0
    offset = rng.randrange(len(rows)) if rows else 0
    for j in range(len(rows)):
        if len(candidates) >= wanted:
            break
        node = cluster.by_row[rows[(offset + j) % len(rows)]]
        assert node is not None
        victims = select_victims(cluster, node.name, pod, vector)
        if victims is None:
            no_victims += 1
        else:
            candidates.append(Candidate(node.name, victims))
    if candidates:
        return Outcome(pick_one(candidates), "")
    histogram = {NOT_HELPFUL: not_helpful, NO_VICTIMS: no_victims}
    reasons = ", ".join(sorted(f"{n} {r}" for r, n in histogram.items() if n))
    return Outcome(None, f"0/{len(cluster.nodes)} nodes are available: {reasons}.")
