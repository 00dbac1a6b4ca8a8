"""What a pod asks of NodeNUMAResource and whether a node can honour it (upstream ``plugin.go``
PreFilter/Filter, ``util.go``).

* :func:`allow_use_cpuset`: CPU binding is possible only for a pod whose raw QoS label is LSE
  or LSR and whose priority class (label, else ``spec.priority``, else from its QoS) is
  koord-prod.
* :func:`pre_filter`: a pod requesting nothing is skipped. For a cpuset-capable pod the bind
  policy is the required one (``Default`` -> the plug-in default) or else the preferred one
  (empty or ``Default`` -> the plug-in default); with FullPCPUs or SpreadByPCPUs the cpu
  request must be whole CPUs (``the requested CPUs must be integer``, unresolvable) and a
  positive one requests binding. ``num_cpus_needed`` is the cpu request's whole CPUs.
* :func:`check_node`: the Filter's checks in upstream's order: NUMA policy of node vs pod
  (``node(s) NUMA Topology policy not match``); binding requested by the node's bind policy
  (whole CPUs again); then, when binding: a valid CPU topology (``node(s) invalid CPU
  Topology``), the node's policy overriding the pod's required one unless they conflict
  (``node(s) cpu bind policy conflicts with pod's required cpu bind policy``) and, for
  FullPCPUs, whole cores (``node(s) requested cpus not multiple cpus per core``).
* :func:`filter_amplified_cpus` (``Insufficient amplified cpu``), :func:`cpu_bind_policy_for`
  (``getCPUBindPolicy``), :func:`resource_options` (``getResourceOptions``) and
  :func:`resource_spec_write_back` (``appendResourceSpecIfMissed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler.numa.accumulator import (
    CPU_BIND_POLICY_FULL_PCPUS,
    CPU_BIND_POLICY_SPREAD_BY_PCPUS,
)
from controlplane.scheduler.numa.allocator import ResourceOptions
from controlplane.scheduler.numa.hints import NUMA_EXCLUSIVE_REQUIRED, NUMATopologyHint
from controlplane.scheduler.numa.options import (
    NODE_CPU_BIND_POLICY_FULL_PCPUS_ONLY,
    NODE_CPU_BIND_POLICY_NONE,
    NODE_CPU_BIND_POLICY_SPREAD_BY_PCPUS,
    NUMA_LEAST_ALLOCATED,
    TopologyOptions,
    amplify,
    amplify_resource_list,
    merge_topology_policy,
    node_cpu_bind_policy,
    node_numa_topology_policy,
    numa_allocate_strategy,
)
from controlplane.scheduler.numa.scoring import ResourceAllocationScorer
from controlplane.scheduler.numa.status import (
    ERR_CPU_BIND_POLICY_CONFLICT,
    ERR_INSUFFICIENT_AMPLIFIED_CPU,
    ERR_INVALID_CPU_AMPLIFICATION_RATIO,
    ERR_INVALID_CPU_TOPOLOGY,
    ERR_INVALID_REQUESTED_CPUS,
    ERR_SMT_ALIGNMENT,
    ERROR,
    UNSCHEDULABLE,
    UNSCHEDULABLE_AND_UNRESOLVABLE,
    RejectionError,
)
from controlplane.scheduler.numa.topology import is_valid_topology
from koordinator.api import resourcelist
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.node import get_resource_amplification_ratios
from koordinator.api.extension.numa import (
    CPU_BIND_POLICY_DEFAULT,
    ResourceSpec,
    get_numa_topology_spec,
    get_resource_spec,
)
from koordinator.api.extension.priority import PriorityClass, get_pod_priority_class_with_default
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import ResourceList

__all__ = [
    "DEFAULT_CPU_BIND_POLICY",
    "NodeCPUUsage",
    "NodeDecision",
    "PodNUMARequest",
    "allow_use_cpuset",
    "check_node",
    "cpu_amplification_ratio",
    "cpu_bind_policy_for",
    "filter_amplified_cpus",
    "pre_filter",
    "request_cpu_bind",
    "resource_options",
    "resource_spec_write_back",
]

#: NodeNUMAResourceArgs.defaultCPUBindPolicy's default
DEFAULT_CPU_BIND_POLICY = CPU_BIND_POLICY_FULL_PCPUS
_BINDING_POLICIES = (CPU_BIND_POLICY_FULL_PCPUS, CPU_BIND_POLICY_SPREAD_BY_PCPUS)


def allow_use_cpuset(pod: Mapping[str, Any] | None) -> bool:
    """``AllowUseCPUSet``: raw QoS LSE or LSR and priority class koord-prod."""
    if not pod:
        return False
    qos = get_pod_qos_class_raw(pod)
    return (
        qos in (QoSClass.LSE, QoSClass.LSR) and get_pod_priority_class_with_default(pod) is PriorityClass.PROD
    )


@dataclass(frozen=True)
class PodNUMARequest:
    """What PreFilter learnt about the pod (upstream ``preFilterState``)."""

    skip: bool = False
    requests: ResourceList = field(default_factory=dict)
    request_cpu_bind: bool = False
    required_cpu_bind_policy: str = ""
    preferred_cpu_bind_policy: str = ""
    preferred_cpu_exclusive_policy: str = ""
    numa_topology_policy: str = ""
    numa_exclusive: str = ""
    num_cpus_needed: int = 0

    @property
    def requested_milli_cpu(self) -> int:
        return self.requests.get("cpu", Quantity()).milli_value()


def pre_filter(
    pod: Mapping[str, Any],
    default_cpu_bind_policy: str = DEFAULT_CPU_BIND_POLICY,
    *,
    requests: ResourceList | None = None,
) -> PodNUMARequest:
    """The pod's NUMA request (``PreFilter``). ``requests`` defaults to the pod's effective
    requests. Raises :class:`RejectionError`: Error for a malformed ``resource-spec`` or
    ``numa-topology-spec``, unresolvable for a fractional cpu request with a binding policy."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        spec = get_resource_spec(annotations)
        numa_spec = get_numa_topology_spec(annotations)
    except AnnotationError as exc:
        raise RejectionError(ERROR, str(exc)) from None
    if requests is None:
        requests = resourcelist.pod_requests(pod)
    if resourcelist.is_zero(requests):
        return PodNUMARequest(skip=True)
    milli = requests.get("cpu", Quantity()).milli_value()
    request = PodNUMARequest(
        requests=dict(requests),
        num_cpus_needed=milli // 1000,
        numa_topology_policy=numa_spec.numa_topology_policy,
        numa_exclusive=numa_spec.single_numa_node_exclusive,
    )
    if not allow_use_cpuset(pod):
        return request
    policy = spec.preferred_cpu_bind_policy
    if policy in ("", CPU_BIND_POLICY_DEFAULT):
        policy = default_cpu_bind_policy
    required = spec.required_cpu_bind_policy
    if required == CPU_BIND_POLICY_DEFAULT:
        required = default_cpu_bind_policy
    if required:
        policy = required
    if policy not in _BINDING_POLICIES:
        return request
    if milli % 1000 != 0:
        raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_INVALID_REQUESTED_CPUS)
    if milli <= 0:
        return request
    return PodNUMARequest(
        requests=request.requests,
        request_cpu_bind=True,
        required_cpu_bind_policy=required,
        preferred_cpu_bind_policy=policy,
        preferred_cpu_exclusive_policy=spec.preferred_cpu_exclusive_policy,
        numa_topology_policy=request.numa_topology_policy,
        numa_exclusive=request.numa_exclusive,
        num_cpus_needed=request.num_cpus_needed,
    )


def request_cpu_bind(request: PodNUMARequest, node_cpu_bind: str) -> bool:
    """``requestCPUBind``: the pod asked for binding, or the node's bind policy imposes it on any
    pod requesting cpu (which must then be whole CPUs)."""
    if request.request_cpu_bind:
        return True
    milli = request.requested_milli_cpu
    if milli == 0:
        return False
    if node_cpu_bind not in ("", NODE_CPU_BIND_POLICY_NONE):
        if milli % 1000 != 0:
            raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_INVALID_REQUESTED_CPUS)
        return True
    return False


@dataclass(frozen=True)
class NodeCPUUsage:
    """What the amplified-CPU check needs of a node: allocatable and requested milli-CPU (the
    framework's NodeInfo), CPUs held by cpusets and the cpu amplification ratio
    (``invalid_ratio``: the node's ``resource-amplification-ratio`` does not parse)."""

    allocatable_milli: int
    requested_milli: int
    bound_cpus: int = 0
    amplification_ratio: float = 0.0
    invalid_ratio: bool = False


@dataclass(frozen=True)
class NodeDecision:
    """The Filter's view of the pod on one node once the policy checks passed."""

    numa_topology_policy: str
    numa_exclusive: str
    node_cpu_bind_policy: str
    request_cpu_bind: bool
    required_cpu_bind_policy: str

    @property
    def needs_cpuset_trial(self) -> bool:
        """A required bind policy without NUMA policy: Filter tries the allocation."""
        return self.request_cpu_bind and self.required_cpu_bind_policy != "" and not self.numa_topology_policy

    @property
    def needs_numa_admission(self) -> bool:
        """A NUMA policy applies: Filter runs the topology manager (:func:`.admission.admit`)."""
        return bool(self.numa_topology_policy)


def check_node(
    request: PodNUMARequest,
    node_labels: Mapping[str, str] | None,
    options: TopologyOptions,
    usage: NodeCPUUsage | None = None,
) -> NodeDecision:
    """The Filter's policy checks for the pod on one node; raises :class:`RejectionError`.
    With ``usage`` the amplified-CPU check runs where upstream runs it (after the bind
    decision, before the topology checks): a pod requesting cpu is refused by a node whose
    ratio does not parse (``node(s) invalid CPU amplification ratio``) or that has too
    little amplified cpu left (``Insufficient amplified cpu``)."""
    node_bind = node_cpu_bind_policy(node_labels, options.kubelet_policy)
    exclusive = request.numa_exclusive
    if not exclusive and request.numa_topology_policy:
        exclusive = NUMA_EXCLUSIVE_REQUIRED
    policy = merge_topology_policy(
        node_numa_topology_policy(node_labels, options.numa_topology_policy), request.numa_topology_policy
    )
    bind = request_cpu_bind(request, node_bind)
    if usage is not None and usage.invalid_ratio:
        if request.requested_milli_cpu:
            raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_INVALID_CPU_AMPLIFICATION_RATIO)
    elif usage is not None:
        filter_amplified_cpus(
            request.requested_milli_cpu,
            usage.amplification_ratio,
            usage.allocatable_milli,
            usage.requested_milli,
            usage.bound_cpus,
            bind,
        )
    required = request.required_cpu_bind_policy
    if bind:
        if not is_valid_topology(options.cpu_topology):
            raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_INVALID_CPU_TOPOLOGY)
        if node_bind == NODE_CPU_BIND_POLICY_FULL_PCPUS_ONLY:
            required = CPU_BIND_POLICY_FULL_PCPUS
        elif node_bind == NODE_CPU_BIND_POLICY_SPREAD_BY_PCPUS:
            required = CPU_BIND_POLICY_SPREAD_BY_PCPUS
        if request.required_cpu_bind_policy and request.required_cpu_bind_policy != required:
            raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_CPU_BIND_POLICY_CONFLICT)
        assert options.cpu_topology is not None
        if (
            required == CPU_BIND_POLICY_FULL_PCPUS
            and request.num_cpus_needed % options.cpu_topology.cpus_per_core()
        ):
            raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_SMT_ALIGNMENT)
    return NodeDecision(
        numa_topology_policy=policy,
        numa_exclusive=exclusive,
        node_cpu_bind_policy=node_bind,
        request_cpu_bind=bind,
        required_cpu_bind_policy=required,
    )


def cpu_amplification_ratio(node_annotations: Mapping[str, str] | None) -> float:
    """The node's cpu amplification ratio (0 when absent); a malformed annotation rejects with
    ``node(s) invalid CPU amplification ratio``."""
    try:
        return get_resource_amplification_ratios(node_annotations).get("cpu", 0.0)
    except AnnotationError:
        raise RejectionError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_INVALID_CPU_AMPLIFICATION_RATIO) from None


def filter_amplified_cpus(
    pod_request_milli: int,
    ratio: float,
    node_allocatable_milli: int,
    node_requested_milli: int,
    bound_cpus: int,
    request_cpu_bind: bool,
) -> None:
    """``filterAmplifiedCPUs``: on a node with a cpu amplification ratio above 1, a binding pod
    needs its cpu amplified, and the ``bound_cpus`` held by cpusets count amplified in what the
    node has requested; raises ``Insufficient amplified cpu`` (Unschedulable)."""
    if pod_request_milli == 0 or ratio <= 1:
        return
    if request_cpu_bind:
        pod_request_milli = amplify(pod_request_milli, ratio)
    bound = bound_cpus * 1000
    requested = node_requested_milli
    if requested >= bound and bound > 0:
        requested = requested - bound + amplify(bound, ratio)
    if pod_request_milli > node_allocatable_milli - requested:
        raise RejectionError(UNSCHEDULABLE, ERR_INSUFFICIENT_AMPLIFIED_CPU)


def cpu_bind_policy_for(
    node_labels: Mapping[str, str] | None, options: TopologyOptions, required: str, preferred: str
) -> tuple[str, bool]:
    """``getCPUBindPolicy``: the pod's required policy, else the node's (required), else the
    pod's preferred one (not required)."""
    if required:
        return required, True
    node_bind = node_cpu_bind_policy(node_labels, options.kubelet_policy)
    if node_bind == NODE_CPU_BIND_POLICY_SPREAD_BY_PCPUS:
        return CPU_BIND_POLICY_SPREAD_BY_PCPUS, True
    if node_bind == NODE_CPU_BIND_POLICY_FULL_PCPUS_ONLY:
        return CPU_BIND_POLICY_FULL_PCPUS, True
    return preferred, False


def resource_options(
    request: PodNUMARequest,
    options: TopologyOptions,
    node_labels: Mapping[str, str] | None,
    bind: bool,
    *,
    hint: NUMATopologyHint | None = None,
    default_numa_allocate_strategy: str = NUMA_LEAST_ALLOCATED,
    numa_scorer: ResourceAllocationScorer | None = None,
) -> ResourceOptions:
    """How to allocate the pod on the node (``getResourceOptions``): ``options`` should already
    carry the node's amplification (:func:`.options.with_amplification`); binding pods' cpu
    request is amplified by it."""
    ratios = options.amplification_ratios or {}
    requests = request.requests
    if bind and ratios.get("cpu", 0.0) > 1:
        requests = amplify_resource_list(requests, ratios, ["cpu"])
    policy, required = cpu_bind_policy_for(
        node_labels, options, request.required_cpu_bind_policy, request.preferred_cpu_bind_policy
    )
    return ResourceOptions(
        requests=requests,
        original_requests=request.requests,
        num_cpus_needed=request.num_cpus_needed,
        request_cpu_bind=bind,
        required_cpu_bind_policy=required,
        cpu_bind_policy=policy,
        cpu_exclusive_policy=request.preferred_cpu_exclusive_policy,
        numa_allocate_strategy=numa_allocate_strategy(node_labels, default_numa_allocate_strategy),
        hint=hint or NUMATopologyHint(),
        numa_scorer=numa_scorer,
    )


def resource_spec_write_back(
    annotations: Mapping[str, str] | None,
    request: PodNUMARequest,
    node_labels: Mapping[str, str] | None,
    options: TopologyOptions,
) -> ResourceSpec | None:
    """The ``resource-spec`` PreBind writes for a binding pod whose spec leaves the policy open
    (``appendResourceSpecIfMissed``, called only when the pod binds CPUs on that node); ``None``
    when nothing is to be written."""
    policy, required = cpu_bind_policy_for(
        node_labels, options, request.required_cpu_bind_policy, request.preferred_cpu_bind_policy
    )
    try:
        spec = get_resource_spec(annotations)
    except AnnotationError:
        spec = ResourceSpec()
    changed = False
    if required and spec.required_cpu_bind_policy in ("", CPU_BIND_POLICY_DEFAULT):
        spec.required_cpu_bind_policy = policy
        changed = True
    if spec.preferred_cpu_bind_policy == CPU_BIND_POLICY_DEFAULT:
        spec.preferred_cpu_bind_policy = policy
        changed = True
    if not spec.required_cpu_bind_policy and not spec.preferred_cpu_bind_policy and policy:
        spec.preferred_cpu_bind_policy = policy
        changed = True
    return spec if changed else None
