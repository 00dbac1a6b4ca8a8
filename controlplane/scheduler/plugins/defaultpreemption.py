"""DefaultPreemption (PostFilter): when no node fits a pod, find a node where evicting pods
of lower priority would make room, and the fewest and least important such pods, sparing
those a PodDisruptionBudget protects.

Upstream's algorithm (``pkg/scheduler/framework/preemption`` and
``plugins/defaultpreemption``, v1.34), on the scheduler's cluster:

* A pod with ``preemptionPolicy: Never`` preempts nothing, nor does one whose nominated
  node still has lower-priority pods terminating (it waits for its earlier victims).
* Only nodes rejected for something eviction can change are tried (resources, pod count,
  host ports, topology spread skew, pod anti-affinity); nodes a filter rejects for good
  (cordoned, taints, node affinity, node name, a missing topology label, required pod
  affinity) are "not helpful". At least 100 nodes or 10% are wanted as candidates, tried from a
  random offset; the search stops once that many were found and one of them violates no
  PodDisruptionBudget (at most that many of each kind are kept).
* On a node: a node without lower-priority pods has "No preemption victims found"; every
  pod of lower priority is removed, and if the pod still does not fit (resources, or one
  of the profile's :class:`EvictionCheck` filters asked with those pods gone), the node
  keeps the failing filter's reasons. The lower-priority pods are split by
  :func:`~controlplane.scheduler.pdbs.split_by_pdb_violation` (most important first:
  higher priority, then started earlier), and put back one by one while the pod still
  fits, those whose eviction would violate a PDB first; the rest are the victims (most
  important first), and the violating ones among them the node's PDB violations.
* The node chosen: fewest PDB violations, then the lowest highest victim priority, then
  the smallest sum of priorities, then the fewest victims, then the latest start among
  the most important victims.

PDBs are best effort, as upstream: a violating victim is evicted when nothing else makes
room. The scheduler never updates a PDB (the victims are deleted, not evicted through the
Eviction API).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.kernel.table import PodVector
from controlplane.scheduler.kernel.twin import FIRST_RESOURCE, TOO_MANY_PODS, node_fails
from controlplane.scheduler.pdbs import split_by_pdb_violation
from controlplane.scheduler.plugins import nodeports
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
    #: how many victims' eviction violates a PodDisruptionBudget
    pdb_violations: int = 0


@dataclass
class Outcome:
    candidate: Candidate | None
    #: appended to the FitError text when there is no candidate (upstream's PostFilter message)
    message: str
    #: the pod was eligible and no node was found: its nomination, if any, is void
    #: (upstream's PostFilterResult with an empty nominated node)
    clears_nomination: bool = False


def num_candidates(nodes: int) -> int:
    n = nodes * MIN_CANDIDATE_NODES_PERCENTAGE // 100
    n = max(n, MIN_CANDIDATE_NODES_ABSOLUTE)
    return min(n, nodes)


def _more_important(pod: PodInfo) -> tuple[int, float]:
    """Sort key: higher priority first, then started earlier (the creation time here)."""
    return (-pod.priority, _started(pod))


class EvictionCheck(Protocol):
    """A filter whose rejection evicting pods can lift (NodePorts, PodTopologySpread's skew,
    InterPodAffinity's anti-affinity): asked again with the victims gone."""

    NAME: str

    def applies(self, pod: PodInfo, cluster: Cluster) -> bool:
        """Whether it can reject ``pod`` at all."""
        ...

    def rejects_without(
        self, pod: PodInfo, cluster: Cluster, node: str, removed: Collection[str]
    ) -> str | None:
        """Why ``node`` fails once the placed pods ``removed`` are gone (None: it passes)."""
        ...


@dataclass(frozen=True)
class VictimRules:
    """A plug-in's say in preemption (ElasticQuota's quota-scoped preemption): which of the
    lower-priority pods may go at all, and whether the preemptor fits its own limits (its
    quota) once a set of victims is gone, with the reason a node fails when it does not."""

    eligible: Callable[[PodInfo], bool]
    fits_without: Callable[[Collection[PodInfo]], bool]
    reason: str


@dataclass(frozen=True)
class Checks:
    """The profile's eviction checks, in filter order: those before NodeResourcesFit and
    those after it (upstream runs the filters in order and stops at the first failure)."""

    before_fit: Sequence[EvictionCheck] = (nodeports.NodePorts(),)
    after_fit: Sequence[EvictionCheck] = ()

    def for_pod(self, pod: PodInfo, cluster: Cluster) -> Checks:
        """Only the checks that can reject this pod (none, for most pods: then victims are
        chosen by resources alone)."""
        return Checks(
            [c for c in self.before_fit if c.applies(pod, cluster)],
            [c for c in self.after_fit if c.applies(pod, cluster)],
        )


def _rejections(
    cluster: Cluster, node: str, pod: PodInfo, vector: PodVector, removed: Collection[str], checks: Checks
) -> list[str]:
    """Why the node rejects the pod with the ``removed`` pods gone (empty: it fits): the
    reasons of the first filter that fails."""
    for check in checks.before_fit:
        if reason := check.rejects_without(pod, cluster, node, removed):
            return [reason]
    table = cluster.table
    fails = node_fails(table, cluster.nodes[node].row, vector)
    if fails:
        return [
            "Too many pods"
            if code == TOO_MANY_PODS
            else f"Insufficient {table.resources[code - FIRST_RESOURCE]}"
            for code in fails
        ]
    for check in checks.after_fit:
        if reason := check.rejects_without(pod, cluster, node, removed):
            return [reason]
    return []


class _OnTable:
    """A node's state while victims are tried: pods taken off the cluster's own accounting,
    so that the eviction checks see the node as it would be (put back afterwards)."""

    def __init__(self, cluster: Cluster, node: str, pod: PodInfo, vector: PodVector, checks: Checks) -> None:
        self.cluster, self.node, self.pod, self.vector, self.checks = cluster, node, pod, vector, checks
        self.row = cluster.nodes[node].row
        self.out: dict[str, PodVector] = {}

    def take(self, victim: PodInfo) -> None:
        self.out[victim.key] = self.cluster.placed[victim.key][1]
        self.cluster.account(self.row, self.out[victim.key], victim.host_ports, -1)

    def give_back(self, victim: PodInfo) -> None:
        self.cluster.account(self.row, self.out.pop(victim.key), victim.host_ports, 1)

    def rejections(self) -> list[str]:
        return _rejections(self.cluster, self.node, self.pod, self.vector, self.out.keys(), self.checks)

    def restore(self) -> None:
        for key, vector in list(self.out.items()):
            victim = self.cluster.placed[key][2]
            self.cluster.account(self.row, vector, victim.host_ports, 1)
        self.out.clear()


class _Resources:
    """The same for a pod only resources keep off the node (no eviction check applies to
    it, the common case): the node's free resources as a list, nothing else touched."""

    def __init__(self, cluster: Cluster, node: str, vector: PodVector) -> None:
        self.cluster = cluster
        table = cluster.table
        row = cluster.nodes[node].row
        self.width = width = min(table.width, len(vector.req))
        base = row * table.width
        self.need = vector.req
        self.free = [table.alloc[base + r] - table.req[base + r] for r in range(width)]
        self.free_pods = table.pods_alloc[row] - table.pods[row]

    def _add(self, victim: PodInfo, sign: int) -> None:
        req = self.cluster.placed[victim.key][1].req
        free = self.free
        for r in range(min(self.width, len(req))):
            free[r] += sign * req[r]
        self.free_pods += sign

    def take(self, victim: PodInfo) -> None:
        self._add(victim, 1)

    def give_back(self, victim: PodInfo) -> None:
        self._add(victim, -1)

    def rejections(self) -> list[str]:
        out = ["Too many pods"] if self.free_pods < 1 else []
        resources = self.cluster.table.resources
        for r in range(self.width):
            want = self.need[r]
            if want > 0 and want > self.free[r]:
                out.append(f"Insufficient {resources[r]}")
        return out

    def restore(self) -> None:
        """Nothing to undo: the cluster was never touched."""


def select_victims(
    cluster: Cluster,
    node: str,
    pod: PodInfo,
    vector: PodVector,
    checks: Checks = Checks(),
    rules: VictimRules | None = None,
) -> Candidate | list[str]:
    """The victims on ``node`` and their PDB violations, or why the node is no candidate
    (upstream's status for it: no lower-priority pod, or the filter's reasons when evicting
    every one of them is not enough). The node's accounting is left as it was found.
    ``checks``: best only those that apply to the pod (:meth:`Checks.for_pod`)."""
    lower = sorted(
        (
            placed
            for key in cluster.on_node.get(node, ())
            if (placed := cluster.placed[key][2]).priority < pod.priority
            # a Reservation's room is never taken by preemption (not built, as upstream's
            # reservation preemption)
            and not placed.reservation
            and (rules is None or rules.eligible(placed))
        ),
        key=_more_important,
    )
    if not lower:
        return [NO_VICTIMS]
    state: _OnTable | _Resources = (
        _OnTable(cluster, node, pod, vector, checks)
        if checks.before_fit or checks.after_fit
        else _Resources(cluster, node, vector)
    )

    #: the pods taken off the node so far, by key (the rules' dry run)
    taken: dict[str, PodInfo] = {}

    def fits_limits() -> bool:
        return rules is None or rules.fits_without(taken.values())

    def reprieved(victim: PodInfo) -> bool:
        state.give_back(victim)
        del taken[victim.key]
        if state.rejections() or not fits_limits():
            state.take(victim)
            taken[victim.key] = victim
            return False
        return True

    try:
        for victim in lower:
            state.take(victim)
            taken[victim.key] = victim
        rejections = state.rejections()
        if rejections:
            return rejections
        if not fits_limits():
            assert rules is not None
            return [rules.reason]
        violating, others = split_by_pdb_violation(lower, cluster.pdbs)
        victims = [v for v in violating if not reprieved(v)]  # most important first
        pdb_violations = len(victims)
        victims += [v for v in others if not reprieved(v)]
        if violating and others:
            victims.sort(key=_more_important)
        return Candidate(node, tuple(victims), pdb_violations)
    finally:
        state.restore()


def pick_one(candidates: list[Candidate]) -> Candidate:
    """Upstream's ``pickOneNodeForPreemption``: the first of the best."""

    def rank(c: Candidate) -> tuple[int, int, int, int, float]:
        highest = c.victims[0].priority
        total = sum(v.priority + _PRIORITY_OFFSET for v in c.victims)
        earliest = min(_started(v) for v in c.victims if v.priority == highest)
        # the latest earliest start wins
        return (c.pdb_violations, highest, total, len(c.victims), -earliest)

    return min(candidates, key=rank)


def _started(pod: PodInfo) -> float:
    return _parsed_time(pod.creation)


@functools.lru_cache(maxsize=65536)
def _parsed_time(text: str) -> float:
    """A creation timestamp in seconds (0 when unparsable), parsed once: preemption sorts
    the pods of hundreds of nodes per attempt."""
    try:
        return parse_time(text)
    except ValueError:
        return 0.0


def preempt(
    cluster: Cluster,
    pod: PodInfo,
    vector: PodVector,
    static: bytes,
    rng: random.Random,
    checks: Checks = Checks(),
    rules: VictimRules | None = None,
) -> Outcome:
    """A candidate for ``pod``, or the message saying why there is none. ``static`` is the
    mask of the filters eviction cannot change (1: the node passes them); ``checks`` the
    profile's filters whose rejections eviction can lift."""
    if pod.preemption_policy == "Never":
        return Outcome(None, NEVER)
    if pod.nominated_node and any(
        ((placed := cluster.placed[key][2]).terminating or key in cluster.evicting)
        and placed.priority < pod.priority
        for key in cluster.on_node.get(pod.nominated_node, ())
    ):
        return Outcome(None, TERMINATING)  # its victims are still going: wait, preempt no more
    rows = [i for i, ok in enumerate(static) if ok and cluster.by_row[i] is not None]
    pod_checks = checks.for_pod(pod, cluster)
    histogram = {NOT_HELPFUL: len(cluster.nodes) - len(rows)}
    wanted = num_candidates(len(rows))
    # upstream's DryRunPreemption: two lists of at most ``wanted`` each, the search stopping
    # once there are ``wanted`` in all and one of them violates no PDB
    clean: list[Candidate] = []
    violating: list[Candidate] = []
    errors: list[str] = []
    offset = rng.randrange(len(rows)) if rows else 0
    for j in range(len(rows)):
        node = cluster.by_row[rows[(offset + j) % len(rows)]]
        assert node is not None
        found = select_victims(cluster, node.name, pod, vector, pod_checks, rules)
        if isinstance(found, Candidate) and not found.victims:
            # it fits as it is (a pod left meanwhile): upstream's error, not a candidate
            errors.append(f'expected at least one victim pod on node "{node.name}"')
        elif isinstance(found, Candidate):
            kept = violating if found.pdb_violations else clean
            if len(kept) < wanted:
                kept.append(found)
            if clean and len(clean) + len(violating) >= wanted:
                break
        else:
            for reason in found:
                histogram[reason] = histogram.get(reason, 0) + 1
    candidates = clean + violating
    if candidates:
        return Outcome(pick_one(candidates), "")
    if errors:  # utilerrors.NewAggregate(errs).Error()
        return Outcome(None, errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]", True)
    reasons = ", ".join(sorted(f"{n} {r}" for r, n in histogram.items() if n))
    return Outcome(None, f"0/{len(cluster.nodes)} nodes are available: {reasons}.", True)
