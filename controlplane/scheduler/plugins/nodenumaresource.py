"""NodeNUMAResource: CPU pinning and NUMA placement from each node's NodeResourceTopology
(Koordinator's ``plugins/nodenumaresource``), the scheduler's side of
:mod:`controlplane.scheduler.numa`.

* **PreFilter**: an LSE/LSR pod of the prod priority class binds CPUs (its ``resource-spec``
  policy, ``Default`` meaning ``defaultCPUBindPolicy``); its CPU request must then be whole
  CPUs ("the requested CPUs must be integer");
* **Filter**: on a node with a NUMA topology policy (node label
  ``node.koordinator.sh/numa-topology-policy``, the pod's ``numa-topology-spec``, or the
  kubelet's policy in the NRT) the pod must fit the NUMA nodes the policy allows; on a node
  whose ``node.koordinator.sh/resource-amplification-ratio`` amplifies cpu, a pod asking for
  cpu must fit the amplified cpu left, a binding pod's request and the CPUs cpusets hold
  there counted amplified ("Insufficient amplified cpu"; "node(s) invalid CPU amplification
  ratio" when the ratio does not parse); a binding pod needs a valid CPU topology, a bind
  policy the node agrees with, whole cores for FullPCPUs and, for a required policy, a
  cpuset the accumulator can take;
* **Score**: a binding pod scores the node's requests with its own, the CPUs held by
  cpusets counted amplified (LeastAllocated by default); under a NUMA policy, the NUMA
  nodes it would use; other pods score 0;
* **Reserve / Unreserve**: the cpuset and NUMA resources are booked on the node;
* **PreBind**: ``scheduling.koordinator.sh/resource-status`` (the cpuset and NUMA resources
  the koordlet applies) and, for a binding pod, the ``resource-spec`` policy it was bound with.

NUMA zones are amplified by the node's ratios (upstream's ``amplifyNUMANodeResources``) and
a binding pod asks them for its cpu amplified, while its cpuset takes as many CPUs as it
requests. CPUs are taken from the NUMA node the ``node.koordinator.sh/numa-allocate-strategy``
label prefers, else the one ``numaScoringStrategy`` implies (MostAllocated packs, anything
else spreads; upstream's ``GetDefaultNUMAAllocateStrategy``).

Pods bound with a ``resource-status`` are booked from it. A pod neither binding CPUs nor on a
node with a NUMA policy costs nothing here, unless some node with an amplified cpu ratio has
CPUs bound by cpusets (or a ratio that does not parse): then its cpu is checked against the
amplified cpu left. Not applied: reservations' CPUs (restored only for the pods the
reservation plug-in gives them), preemption of bound CPUs, the node-level score of pods that
bind no CPUs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.kernel.twin import Extra
from controlplane.scheduler.numa.admission import admit
from controlplane.scheduler.numa.allocation import NodeAllocation, PodAllocation
from controlplane.scheduler.numa.allocator import allocate
from controlplane.scheduler.numa.options import (
    TopologyOptions,
    amplify,
    amplify_resource_list,
    default_numa_allocate_strategy,
    new_topology_options,
    with_amplification,
)
from controlplane.scheduler.numa.podpolicy import (
    NodeCPUUsage,
    NodeDecision,
    PodNUMARequest,
    check_node,
    pre_filter,
    resource_options,
    resource_spec_write_back,
)
from controlplane.scheduler.numa.resourcestatus import (
    allocation_from_pod,
    resource_status,
    resource_status_json,
)
from controlplane.scheduler.numa.scoring import (
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    ResourceAllocationScorer,
    node_score_units,
    numa_allocation_score,
)
from controlplane.scheduler.numa.status import UNSCHEDULABLE_AND_UNRESOLVABLE, RejectionError
from controlplane.scheduler.plugins.args import ArgsError, resource_weights
from controlplane.scheduler.plugins.interface import (
    CycleState,
    Handle,
    PodPatch,
    PreFilterResult,
    QueueNotifier,
    final_row_scores,
    follow,
    reasons_by_node,
)
from controlplane.scheduler.plugins.rowverdicts import PodShapes, RowVerdicts, Verdict
from controlplane.scheduler.podinfo import PodInfo, pod_object
from controlplane.scheduler.queue import ClusterEvent
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.node import (
    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
    get_resource_amplification_ratios,
)
from koordinator.api.extension.numa import (
    ANNOTATION_NUMA_TOPOLOGY_SPEC,
    ANNOTATION_RESOURCE_SPEC,
    ANNOTATION_RESOURCE_STATUS,
    CPU_BIND_POLICY_FULL_PCPUS,
    CPU_BIND_POLICY_SPREAD_BY_PCPUS,
    LABEL_NODE_CPU_BIND_POLICY,
    LABEL_NUMA_TOPOLOGY_POLICY,
)
from koordinator.api.quantity import Format, Quantity
from koordinator.api.resourcelist import ResourceList
from koordinator.kube import resources as res
from koordinator.kube.informer.factory import InformerFactory

log = logging.getLogger(__name__)

NAME = "NodeNUMAResource"
#: a NodeResourceTopology came, changed or went: pods refused for CPUs or NUMA may fit now
NRT_CHANGE = ClusterEvent("NodeResourceTopology", "*")
_STATE_KEY = "NodeNUMAResource/allocation"
_SPEC_KEY = "NodeNUMAResource/resource-spec"

Obj = Mapping[str, Any]
#: a pod's shape here: requests, QoS and priority labels, priority and the two annotations
Shape = tuple[tuple[tuple[str, int], ...], tuple[tuple[str, str], ...], int, str, str]
_EMPTY = TopologyOptions()
#: distinct ratio annotations parsed and kept at once; past it they are all dropped
MAX_RATIOS = 256


@dataclass(frozen=True, slots=True)
class Amplification:
    """A node's ``node.koordinator.sh/resource-amplification-ratio`` as read: the ratios
    (empty when absent or malformed) and, for one that does not parse, why."""

    ratios: Mapping[str, float] = field(default_factory=dict)
    problem: str = ""

    @property
    def cpu(self) -> float:
        return self.ratios.get("cpu", 0.0)


_NO_AMPLIFICATION = Amplification()


@dataclass(frozen=True)
class NodeNUMAResourceArgs:
    default_cpu_bind_policy: str = CPU_BIND_POLICY_FULL_PCPUS
    scorer: ResourceAllocationScorer = field(default_factory=ResourceAllocationScorer)
    numa_scorer: ResourceAllocationScorer = field(default_factory=ResourceAllocationScorer)


def _scorer(raw: Any, path: str) -> ResourceAllocationScorer:
    if raw is None:
        return ResourceAllocationScorer()
    if not isinstance(raw, Mapping):
        raise ArgsError(f"{path}: must be an object")
    kind = raw.get("type") or LEAST_ALLOCATED
    if kind not in (LEAST_ALLOCATED, MOST_ALLOCATED):
        raise ArgsError(
            f"{path}.type: Unsupported value: {kind!r}: supported values: {LEAST_ALLOCATED}, {MOST_ALLOCATED}"
        )
    if not raw.get("resources"):
        return ResourceAllocationScorer(kind)
    return ResourceAllocationScorer(kind, resource_weights(raw["resources"], f"{path}.resources"))


def numa_args(raw: Mapping[str, Any] | None, path: str = NAME) -> NodeNUMAResourceArgs:
    """NodeNUMAResourceArgs with upstream's defaults: FullPCPUs, LeastAllocated over cpu and
    memory (weight 1) for both the node and the NUMA scores."""
    raw = raw or {}
    unknown = set(raw) - {
        "apiVersion",
        "kind",
        "defaultCPUBindPolicy",
        "scoringStrategy",
        "numaScoringStrategy",
    }
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {sorted(unknown)}")
    policy = raw.get("defaultCPUBindPolicy") or CPU_BIND_POLICY_FULL_PCPUS
    if policy not in (CPU_BIND_POLICY_FULL_PCPUS, CPU_BIND_POLICY_SPREAD_BY_PCPUS):
        raise ArgsError(
            f"{path}.defaultCPUBindPolicy: Unsupported value: {policy!r}: "
            f"supported values: {CPU_BIND_POLICY_FULL_PCPUS}, {CPU_BIND_POLICY_SPREAD_BY_PCPUS}"
        )
    return NodeNUMAResourceArgs(
        policy,
        _scorer(raw.get("scoringStrategy"), f"{path}.scoringStrategy"),
        _scorer(raw.get("numaScoringStrategy"), f"{path}.numaScoringStrategy"),
    )


_BINARY = ("memory", "ephemeral-storage")


def _quantities(requests: Mapping[str, int]) -> ResourceList:
    """The pod's requests as quantities, printed as users write them (memory in binary units)
    in the ``numaNodeResources`` PreBind writes."""
    return {
        n: Quantity.from_milli(v)
        if n == "cpu"
        else Quantity.from_int(
            v, Format.BINARY_SI if n in _BINARY or n.startswith("hugepages-") else Format.DECIMAL_SI
        )
        for n, v in requests.items()
    }


_POLICY_LABELS = ("koordinator.sh/qosClass", "koordinator.sh/priority-class")


def _shape(pod: PodInfo) -> Shape:
    annotations = pod.annotations
    return (
        tuple(sorted(pod.requests.items())),
        tuple((k, pod.labels[k]) for k in _POLICY_LABELS if k in pod.labels),
        pod.priority,
        annotations.get(ANNOTATION_RESOURCE_SPEC, ""),
        annotations.get(ANNOTATION_NUMA_TOPOLOGY_SPEC, ""),
    )


class NodeNUMAResource:
    NAME = NAME
    PREEMPTION_HELPS = False
    reverse = False

    def __init__(self, args: NodeNUMAResourceArgs | None = None) -> None:
        self.args = args or numa_args(None)
        #: node -> its topology options (from its NodeResourceTopology)
        self.options: dict[str, TopologyOptions] = {}
        #: node -> the cpusets and NUMA resources booked there
        self.allocations: dict[str, NodeAllocation] = {}
        #: pod UID -> the node its allocation is booked on
        self.booked: dict[str, str] = {}
        #: nodes whose NRT sets a NUMA policy or the kubelet's static CPU manager policy
        self._policy_nodes: set[str] = set()
        self._verdicts: RowVerdicts[Shape] = RowVerdicts()
        self._requests: PodShapes[Shape, PodNUMARequest | RejectionError] = PodShapes(_shape, self._parse)
        self._notifier = QueueNotifier(NRT_CHANGE)
        self._cluster: Cluster | None = None
        #: the NUMA allocate strategy of nodes without the label (upstream's
        #: ``GetDefaultNUMAAllocateStrategy``: MostAllocated with a MostAllocated NUMA score)
        self._numa_allocate_strategy = default_numa_allocate_strategy(self.args.numa_scorer.strategy)
        #: ratio annotation -> its parsed ratios (a cluster has few distinct ones)
        self._ratios: dict[str, Amplification] = {}
        #: node -> (its NRT options, its amplification, those options with NUMA zones amplified)
        self._amplified_options: dict[str, tuple[TopologyOptions, Amplification, TopologyOptions]] = {}
        #: nodes where cpusets hold CPUs
        self._bound_nodes: set[str] = set()
        #: nodes whose ratio amplifies cpu, and nodes whose ratio does not parse, as of the
        #: node objects last looked at (``_ratio_dirty`` changed since; all of them when
        #: ``_ratio_rescan``)
        self._amplified_nodes: set[str] = set()
        self._bad_ratio_nodes: set[str] = set()
        self._ratio_dirty: set[str] = set()
        self._ratio_rescan = True
        self._followed: Cluster | None = None

    # --- wiring ----------------------------------------------------------------------------

    def bind_handle(self, handle: Handle) -> None:
        self._notifier.handle = handle

    def attach(self, factory: InformerFactory, name: str) -> None:
        follow(factory, res.NODE_RESOURCE_TOPOLOGIES, name, self.on_topology, self.on_topology_deleted)

    def take_object(self, obj: Obj) -> None:
        """An object ``simulate`` was given: NodeResourceTopologies describe the nodes' CPUs."""
        if obj.get("kind") == "NodeResourceTopology":
            self.on_topology(obj)

    def on_topology(self, nrt: Obj) -> None:
        node = str((nrt.get("metadata") or {}).get("name") or "")
        options = new_topology_options(nrt)
        for problem in options.problems:
            log.warning("NodeResourceTopology %s: %s", node, problem)
        self.options[node] = options
        kubelet = options.kubelet_policy
        if options.numa_topology_policy or (kubelet is not None and kubelet.policy == "static"):
            self._policy_nodes.add(node)
        else:
            self._policy_nodes.discard(node)
        self._verdicts.touch(node)
        self._notifier.notify()

    def on_topology_deleted(self, node: str) -> None:
        self.options.pop(node, None)
        self._amplified_options.pop(node, None)
        self._policy_nodes.discard(node)
        self._verdicts.touch(node)

    def on_pod(self, old: PodInfo | None, new: PodInfo | None) -> None:
        """Pods bound with a ``resource-status`` are booked from it; deleted ones released."""
        if new is None:
            if old is not None:
                self._release(old.uid)
            return
        if not new.node_name or ANNOTATION_RESOURCE_STATUS not in new.annotations or new.uid in self.booked:
            return
        allocation = allocation_from_pod(pod_object(new))
        if allocation is not None:
            self._book(new.node_name, allocation)

    def _book(self, node: str, allocation: PodAllocation) -> None:
        self.allocations.setdefault(node, NodeAllocation(node)).add(allocation)
        self.booked[allocation.uid] = node
        if allocation.cpuset:
            self._bound_nodes.add(node)
        self._verdicts.touch(node)

    def _release(self, uid: str) -> None:
        node = self.booked.pop(uid, None)
        if node is None:
            return
        allocation = self.allocations.get(node)
        if allocation is not None:
            allocation.release(uid)
            if not allocation.bound_cpu_count():
                self._bound_nodes.discard(node)
        self._verdicts.touch(node)
        self._notifier.notify()

    # --- a pod on a node -------------------------------------------------------------------

    def _request(self, pod: PodInfo) -> tuple[Shape, PodNUMARequest | RejectionError]:
        return self._requests.get(pod)

    def _parse(self, pod: PodInfo, shape: Shape) -> PodNUMARequest | RejectionError:
        try:
            return pre_filter(
                pod_object(pod), self.args.default_cpu_bind_policy, requests=_quantities(pod.requests)
            )
        except RejectionError as err:
            return err

    # --- amplification ---------------------------------------------------------------------

    def _amplification(self, info: NodeInfo) -> Amplification:
        raw = info.annotations.get(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO, "")
        if not raw:
            return _NO_AMPLIFICATION
        found = self._ratios.get(raw)
        if found is None:
            try:
                found = Amplification(
                    get_resource_amplification_ratios({ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: raw})
                )
            except AnnotationError as err:
                found = Amplification(problem=str(err))
            if len(self._ratios) >= MAX_RATIOS:
                self._ratios.clear()
            self._ratios[raw] = found
        return found

    def _topology(self, info: NodeInfo) -> tuple[TopologyOptions, Amplification]:
        """The node's options with its NUMA zones amplified by its ratios (kept until the
        NRT or the ratios change), and the ratios."""
        options = self.options.get(info.name, _EMPTY)
        amplification = self._amplification(info)
        if not amplification.ratios:
            return options, amplification
        kept = self._amplified_options.get(info.name)
        if kept is not None and kept[0] is options and kept[1] is amplification:
            return kept[2], amplification
        amplified = with_amplification(options, info.annotations)
        self._amplified_options[info.name] = (options, amplification, amplified)
        return amplified, amplification

    def _bound_cpus(self, node: str) -> int:
        allocation = self.allocations.get(node)
        return allocation.bound_cpu_count() if allocation is not None else 0

    def _cpu_usage(self, info: NodeInfo, amplification: Amplification) -> NodeCPUUsage | None:
        """What the amplified-CPU check reads of the node (None: its ratio amplifies nothing)."""
        if not amplification.problem and amplification.cpu <= 1:
            return None
        cluster = self._cluster
        requested = 0
        if cluster is not None:
            table = cluster.table
            requested = table.req[info.row * table.width + table.column["cpu"]]
        return NodeCPUUsage(
            allocatable_milli=info.allocatable.get("cpu", 0),
            requested_milli=requested,
            bound_cpus=self._bound_cpus(info.name),
            amplification_ratio=amplification.cpu,
            invalid_ratio=bool(amplification.problem),
        )

    def _follow(self, cluster: Cluster) -> None:
        if self._followed is not cluster:
            self._followed = cluster
            cluster.subscribe(self._node_changed)
            self._ratio_rescan = True

    def _node_changed(self, node: str | None, pod: PodInfo | None = None, sign: int = 0) -> None:
        if node is None:
            self._ratio_rescan = True
        elif pod is None:
            self._ratio_dirty.add(node)

    def _classify(self, info: NodeInfo) -> None:
        amplification = self._amplification(info)
        if amplification.problem:
            self._bad_ratio_nodes.add(info.name)
        elif amplification.cpu > 1:
            self._amplified_nodes.add(info.name)

    def _amplification_matters(self, cluster: Cluster) -> bool:
        """Whether a pod binding no CPUs may be refused for amplified cpu somewhere: a node
        whose ratio does not parse, or one amplifying cpu where cpusets hold CPUs (elsewhere
        the check is NodeResourcesFit's own)."""
        self._follow(cluster)
        if self._ratio_rescan:
            self._ratio_rescan = False
            self._ratio_dirty.clear()
            self._amplified_nodes.clear()
            self._bad_ratio_nodes.clear()
            for info in cluster.nodes.values():
                self._classify(info)
        elif self._ratio_dirty:
            for name in self._ratio_dirty:
                self._amplified_nodes.discard(name)
                self._bad_ratio_nodes.discard(name)
                changed = cluster.nodes.get(name)
                if changed is not None:
                    self._classify(changed)
            self._ratio_dirty.clear()
        return bool(self._bad_ratio_nodes) or not self._amplified_nodes.isdisjoint(self._bound_nodes)

    # --- a pod on a node, continued ----------------------------------------------------------

    def _decide(
        self, request: PodNUMARequest, info: NodeInfo, *, filtering: bool = True
    ) -> tuple[TopologyOptions, NodeDecision]:
        """The node's options and the Filter's checks (``filtering``: with the amplified-CPU
        check, which Reserve does not make: the pod is counted on the node by then)."""
        options, amplification = self._topology(info)
        usage = self._cpu_usage(info, amplification) if filtering else None
        return options, check_node(request, info.labels, options, usage)

    def _allocate(
        self,
        pod: PodInfo,
        request: PodNUMARequest,
        info: NodeInfo,
        options: TopologyOptions,
        decision: NodeDecision,
    ) -> PodAllocation | None:
        """The pod's allocation on the node (None: it needs none there); raises RejectionError."""
        if not decision.needs_numa_admission and not decision.request_cpu_bind:
            return None
        problem = self._amplification(info).problem
        if problem:  # upstream's getResourceOptions fails amplifying the NUMA zones
            raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, problem)
        allocation = self.allocations.get(info.name) or NodeAllocation(info.name)
        ro = resource_options(
            request,
            options,
            info.labels,
            decision.request_cpu_bind,
            default_numa_allocate_strategy=self._numa_allocate_strategy,
            numa_scorer=self.args.numa_scorer,
        )
        if decision.needs_numa_admission:
            return admit(
                options,
                allocation,
                ro,
                decision.numa_topology_policy,
                exclusive_policy=decision.numa_exclusive,
                uid=pod.uid,
                namespace=pod.namespace,
                name=pod.name,
            ).allocation
        return allocate(options, allocation, ro, uid=pod.uid, namespace=pod.namespace, name=pod.name)

    def _score(
        self,
        request: PodNUMARequest,
        info: NodeInfo,
        options: TopologyOptions,
        decision: NodeDecision,
        trial: PodAllocation | None,
        pod: PodInfo,
    ) -> int:
        """Upstream's Score: under a NUMA policy, the NUMA nodes of the trial allocation (with
        every CPU held by cpusets on the node counted as requested); else the node's requests
        with the pod's, over the scored resources (a binding pod only: see the module). With
        a cpu amplification ratio a binding pod's cpu counts amplified, and so do the CPUs
        cpusets hold (``scoreWithAmplifiedCPUs``)."""
        requested = self._node_requested(info)
        ratio = options.cpu_amplification_ratio()
        amplified = decision.request_cpu_bind and ratio > 1
        if decision.needs_numa_admission and trial is not None:
            booked = self.allocations.get(info.name) or NodeAllocation(info.name)
            return numa_allocation_score(
                self.args.scorer,
                trial,
                options,
                booked,
                _quantities(requested),
                _quantities(info.allocatable),
                amplify_resource_list(request.requests, options.amplification_ratios or {}, ["cpu"])
                if amplified
                else request.requests,
            )
        wanted: Mapping[str, int] = pod.requests
        if amplified and wanted.get("cpu"):
            wanted = {**wanted, "cpu": amplify(wanted["cpu"], ratio)}
        return node_score_units(
            self.args.scorer,
            requested,
            info.allocatable,
            wanted,
            cpu_amplification_ratio=ratio,
            bound_cpus=self._bound_cpus(info.name),
        )

    def _node_requested(self, info: NodeInfo) -> dict[str, int]:
        """What the pods placed on the node request (the kernel table's row)."""
        cluster = self._cluster
        if cluster is None:
            return {}
        table = cluster.table
        base = info.row * table.width
        return {name: table.req[base + col] for name, col in table.column.items()}

    def _verdict(self, pod: PodInfo, request: PodNUMARequest) -> Callable[[NodeInfo], Verdict]:
        def verdict(info: NodeInfo) -> Verdict:
            try:
                options, decision = self._decide(request, info)
                trial = None
                if decision.needs_numa_admission or decision.needs_cpuset_trial:
                    trial = self._allocate(pod, request, info, options, decision)
            except RejectionError:
                return False, 0
            if not decision.request_cpu_bind and not decision.needs_numa_admission:
                return True, 0
            return True, self._score(request, info, options, decision, trial, pod)

        return verdict

    def _why(self, pod: PodInfo, request: PodNUMARequest, info: NodeInfo) -> str | None:
        try:
            options, decision = self._decide(request, info)
            if decision.needs_numa_admission or decision.needs_cpuset_trial:
                self._allocate(pod, request, info, options, decision)
        except RejectionError as err:
            return "; ".join(err.reasons)
        return None

    def _concerned(self, request: PodNUMARequest, cluster: Cluster) -> bool:
        """Whether any node may treat the pod differently from "passes, scores 0"."""
        if request.skip:
            return False
        if request.request_cpu_bind or request.numa_topology_policy:
            return True
        if (
            self._policy_nodes
            or cluster.rows_with(LABEL_NUMA_TOPOLOGY_POLICY)
            or cluster.rows_with(LABEL_NODE_CPU_BIND_POLICY)
        ):
            return True
        # the cluster test first: it is nearly always false, and cheaper than the request
        return self._amplification_matters(cluster) and request.requested_milli_cpu > 0

    # --- the points ------------------------------------------------------------------------

    def pre_filter(self, pod: PodInfo, cluster: Cluster) -> PreFilterResult | None:
        self._cluster = cluster
        _, request = self._request(pod)
        if isinstance(request, RejectionError):
            return PreFilterResult(message="; ".join(request.reasons))
        return None

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        self._cluster = cluster
        shape, request = self._request(pod)
        if not isinstance(request, PodNUMARequest) or not self._concerned(request, cluster):
            return None
        mask, _ = self._verdicts.get(cluster, shape, self._verdict(pod, request))
        return bytes(mask)

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        self._cluster = cluster
        _, request = self._request(pod)
        if not isinstance(request, PodNUMARequest):
            return {}
        return reasons_by_node(cluster, rejected, lambda info: self._why(pod, request, info))

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        self._cluster = cluster
        _, request = self._request(pod)
        if not isinstance(request, PodNUMARequest) or not self._concerned(request, cluster):
            return None
        return self._why(pod, request, node)

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        self._cluster = cluster
        shape, request = self._request(pod)
        if not isinstance(request, PodNUMARequest) or not self._concerned(request, cluster):
            return None  # every node scores 0
        _, scores = self._verdicts.get(cluster, shape, self._verdict(pod, request))
        return final_row_scores(self.NAME, weight, scores)

    def raw_score(self, pod: PodInfo, node: NodeInfo) -> int:
        _, request = self._request(pod)
        if not isinstance(request, PodNUMARequest) or request.skip:
            return 0
        return self._verdict(pod, request)(node)[1]

    def window_scores(self, pod: PodInfo, cluster: Cluster, rows: Sequence[int]) -> list[int]:
        """The final scores of ``rows`` (``simulate``: upstream does not normalize them)."""
        self._cluster = cluster
        by_row = cluster.by_row
        return [self.raw_score(pod, info) if (info := by_row[row]) is not None else 0 for row in rows]

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        _, request = self._request(pod)
        info = self._cluster_node(node)
        cluster = self._cluster
        if not isinstance(request, PodNUMARequest) or info is None or cluster is None:
            return None
        if not self._concerned(request, cluster):
            return None
        try:
            options, decision = self._decide(request, info, filtering=False)
            allocation = self._allocate(pod, request, info, options, decision)
        except RejectionError as err:
            return "; ".join(err.reasons)
        if allocation is None:
            return None
        self._book(node, allocation)
        state[_STATE_KEY] = allocation
        if decision.request_cpu_bind:
            spec = resource_spec_write_back(pod.annotations, request, info.labels, options)
            if spec is not None:
                state[_SPEC_KEY] = spec.to_json()
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        if state.pop(_STATE_KEY, None) is not None:
            self._release(pod.uid)
        state.pop(_SPEC_KEY, None)

    def forget_pod(self, pod: PodInfo, node: str) -> None:
        self._release(pod.uid)

    def modify(self, state: CycleState, pod: PodInfo, node: str, patch: PodPatch) -> str | None:
        allocation = state.get(_STATE_KEY)
        if isinstance(allocation, PodAllocation):
            patch.annotations[ANNOTATION_RESOURCE_STATUS] = resource_status_json(allocation)
        spec = state.get(_SPEC_KEY)
        if isinstance(spec, str):
            patch.annotations[ANNOTATION_RESOURCE_SPEC] = spec
        return None

    def describe(self, pod: PodInfo) -> tuple[str, Any] | None:
        """``simulate``'s report of the pod's cpuset and NUMA resources."""
        node = self.booked.get(pod.uid)
        allocation = self.allocations[node].get(pod.uid) if node is not None else None
        if allocation is None:
            return None
        return "resourceStatus", resource_status(allocation).to_dict()

    def _cluster_node(self, node: str) -> NodeInfo | None:
        """Reserve gets the node's name: its labels and allocatable come from the cluster the
        cycle's PreFilter saw."""
        return self._cluster.nodes.get(node) if self._cluster is not None else None
