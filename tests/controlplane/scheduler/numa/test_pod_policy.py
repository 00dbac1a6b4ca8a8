"""The pod's NUMA request and the node checks (plugin.go PreFilter/Filter, util.go): who may
bind CPUs, which bind policy applies, the integer-CPU rule, node bind-policy conflicts, SMT
alignment, NUMA policy merging, the amplified-CPU filter and the resource-spec write-back, with
upstream's messages."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.scheduler.numa.options import TopologyOptions, new_topology_options
from controlplane.scheduler.numa.podpolicy import (
    NodeCPUUsage,
    PodNUMARequest,
    allow_use_cpuset,
    check_node,
    cpu_amplification_ratio,
    cpu_bind_policy_for,
    filter_amplified_cpus,
    pre_filter,
    request_cpu_bind,
    resource_options,
    resource_spec_write_back,
)
from controlplane.scheduler.numa.status import RejectionError
from controlplane.scheduler.numa.topology import NodeCPUTopology
from koordinator.api.extension.node import ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO
from koordinator.api.extension.numa import (
    ANNOTATION_RESOURCE_SPEC,
    LABEL_NODE_CPU_BIND_POLICY,
    LABEL_NODE_NUMA_ALLOCATE_STRATEGY,
    LABEL_NUMA_TOPOLOGY_POLICY,
    ResourceSpec,
)
from koordinator.api.extension.topology import KubeletCPUManagerPolicy
from koordinator.api.quantity import Quantity
from tests.controlplane.scheduler.numa.builders import TOPO_2S4N, make_nrt, make_pod

Q = Quantity.parse
UNRESOLVABLE = "UnschedulableAndUnresolvable"
NODE = TopologyOptions(cpu_topology=TOPO_2S4N)


@pytest.mark.parametrize(
    ("pod", "allowed"),
    [
        pytest.param(make_pod().qos("LSE").prod().build(), True, id="LSE with koord-prod label"),
        pytest.param(make_pod().qos("LSR").priority(9500).build(), True, id="LSR with a prod priority value"),
        pytest.param(make_pod().qos("LSR").build(), True, id="LSR without priority: prod from its QoS"),
        pytest.param(make_pod().qos("LS").prod().build(), False, id="LS never binds"),
        pytest.param(make_pod().qos("LSR").priority_class("koord-batch").build(), False, id="LSR batch"),
        pytest.param(make_pod().prod().build(), False, id="no QoS label (Kubernetes QoS does not count)"),
        pytest.param({}, False, id="no pod"),
    ],
)
def test_allow_use_cpuset(pod: dict[str, Any], allowed: bool) -> None:
    assert allow_use_cpuset(pod) is allowed


def lsr(cpu: str = "4", **spec: str) -> dict[str, Any]:
    builder = make_pod().qos("LSR").prod().requests(cpu=cpu, memory="1Gi")
    if spec:
        builder.resource_spec(**spec)
    return builder.build()


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        pytest.param(lsr(), (True, "", "FullPCPUs", 4), id="no spec: plug-in default FullPCPUs, preferred"),
        pytest.param(
            lsr(preferredCPUBindPolicy="SpreadByPCPUs"), (True, "", "SpreadByPCPUs", 4), id="preferred"
        ),
        pytest.param(
            lsr(requiredCPUBindPolicy="Default"), (True, "FullPCPUs", "FullPCPUs", 4), id="required Default"
        ),
        pytest.param(
            lsr(requiredCPUBindPolicy="SpreadByPCPUs", preferredCPUBindPolicy="FullPCPUs"),
            (True, "SpreadByPCPUs", "SpreadByPCPUs", 4),
            id="required overrides preferred",
        ),
        pytest.param(
            lsr(preferredCPUBindPolicy="ConstrainedBurst"), (False, "", "", 4), id="non-binding policy"
        ),
        pytest.param(
            lsr("0", preferredCPUBindPolicy="FullPCPUs"), (False, "", "", 0), id="no cpu: no binding"
        ),
        pytest.param(
            make_pod().qos("LS").requests(cpu="2").build(), (False, "", "", 2), id="LS pod: no binding"
        ),
        pytest.param(
            make_pod().qos("LS").requests(cpu="1500m").build(), (False, "", "", 1), id="LS fractional"
        ),
    ],
)
def test_pre_filter_bind_policy(pod: dict[str, Any], want: tuple[bool, str, str, int]) -> None:
    got = pre_filter(pod)
    assert (
        got.request_cpu_bind,
        got.required_cpu_bind_policy,
        got.preferred_cpu_bind_policy,
        got.num_cpus_needed,
    ) == want


def test_pre_filter_skips_pods_requesting_nothing() -> None:
    assert pre_filter(make_pod().qos("LSR").prod().build()).skip


def test_pre_filter_keeps_exclusive_and_numa_specs() -> None:
    pod = (
        make_pod()
        .qos("LSE")
        .prod()
        .requests(cpu="2")
        .resource_spec(preferredCPUExclusivePolicy="PCPULevel")
        .numa_spec(numaTopologyPolicy="SingleNUMANode", singleNUMANodeExclusive="Preferred")
        .build()
    )
    got = pre_filter(pod)
    assert (got.preferred_cpu_exclusive_policy, got.numa_topology_policy, got.numa_exclusive) == (
        "PCPULevel",
        "SingleNUMANode",
        "Preferred",
    )


def test_pre_filter_plugin_default_policy() -> None:
    assert pre_filter(lsr(), "SpreadByPCPUs").preferred_cpu_bind_policy == "SpreadByPCPUs"


def test_fractional_cpus_with_a_binding_policy_are_refused() -> None:
    with pytest.raises(RejectionError) as err:
        pre_filter(lsr("1500m"))
    assert (err.value.code, err.value.reasons) == (UNRESOLVABLE, ("the requested CPUs must be integer",))


def test_malformed_resource_spec_is_an_error() -> None:
    pod = make_pod().qos("LSR").prod().requests(cpu="2").annotate(ANNOTATION_RESOURCE_SPEC, "{").build()
    with pytest.raises(RejectionError) as err:
        pre_filter(pod)
    assert err.value.code == "Error"


@pytest.mark.parametrize(
    ("cpu", "node_policy", "want"),
    [
        pytest.param("2", "None", False, id="node without policy"),
        pytest.param("2", "FullPCPUsOnly", True, id="node FullPCPUsOnly binds any cpu pod"),
        pytest.param("0", "SpreadByPCPUs", False, id="no cpu requested"),
    ],
)
def test_request_cpu_bind_by_node_policy(cpu: str, node_policy: str, want: bool) -> None:
    request = pre_filter(make_pod().qos("LS").requests(cpu=cpu, memory="1Gi").build())
    assert request_cpu_bind(request, node_policy) is want


def decide(
    request: PodNUMARequest, labels: dict[str, str] | None = None, options: TopologyOptions = NODE
) -> tuple[Any, ...]:
    got = check_node(request, labels or {}, options)
    return (got.numa_topology_policy, got.request_cpu_bind, got.required_cpu_bind_policy, got.numa_exclusive)


@pytest.mark.parametrize(
    ("pod", "labels", "options", "want"),
    [
        pytest.param(lsr(), {}, NODE, ("", True, "", ""), id="preferred policy: no required"),
        pytest.param(
            lsr(),
            {LABEL_NODE_CPU_BIND_POLICY: "SpreadByPCPUs"},
            NODE,
            ("", True, "SpreadByPCPUs", ""),
            id="node SpreadByPCPUs becomes required",
        ),
        pytest.param(
            lsr(),
            {},
            TopologyOptions(
                cpu_topology=TOPO_2S4N,
                kubelet_policy=KubeletCPUManagerPolicy(policy="static", options={"full-pcpus-only": "true"}),
            ),
            ("", True, "FullPCPUs", ""),
            id="static kubelet full-pcpus-only requires FullPCPUs",
        ),
        pytest.param(
            make_pod().qos("LS").requests(cpu="2").build(),
            {LABEL_NODE_CPU_BIND_POLICY: "FullPCPUsOnly"},
            NODE,
            ("", True, "FullPCPUs", ""),
            id="node policy binds an LS pod",
        ),
        pytest.param(
            make_pod().qos("LS").requests(cpu="2").numa_spec(numaTopologyPolicy="SingleNUMANode").build(),
            {},
            NODE,
            ("SingleNUMANode", False, "", "Required"),
            id="pod NUMA policy defaults exclusivity to Required",
        ),
        pytest.param(
            make_pod().qos("LS").requests(cpu="2").build(),
            {LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"},
            NODE,
            ("Restricted", False, "", ""),
            id="node NUMA policy alone keeps exclusivity empty",
        ),
        pytest.param(
            make_pod().qos("LS").requests(cpu="2").build(),
            {},
            TopologyOptions(cpu_topology=TOPO_2S4N, numa_topology_policy="BestEffort"),
            ("BestEffort", False, "", ""),
            id="kubelet NUMA policy from the NRT",
        ),
    ],
)
def test_check_node(
    pod: dict[str, Any], labels: dict[str, str], options: TopologyOptions, want: tuple[Any, ...]
) -> None:
    assert decide(pre_filter(pod), labels, options) == want


@pytest.mark.parametrize(
    ("pod", "labels", "options", "message"),
    [
        pytest.param(
            make_pod().qos("LS").requests(cpu="2").numa_spec(numaTopologyPolicy="SingleNUMANode").build(),
            {LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"},
            NODE,
            "node(s) NUMA Topology policy not match",
            id="pod and node NUMA policies differ",
        ),
        pytest.param(
            lsr(requiredCPUBindPolicy="SpreadByPCPUs"),
            {LABEL_NODE_CPU_BIND_POLICY: "FullPCPUsOnly"},
            NODE,
            "node(s) cpu bind policy conflicts with pod's required cpu bind policy",
            id="bind policy conflict",
        ),
        pytest.param(
            lsr("3", requiredCPUBindPolicy="FullPCPUs"),
            {},
            NODE,
            "node(s) requested cpus not multiple cpus per core",
            id="3 CPUs cannot be whole cores of 2 threads",
        ),
        pytest.param(
            make_pod().qos("LS").requests(cpu="3").build(),
            {LABEL_NODE_CPU_BIND_POLICY: "FullPCPUsOnly"},
            NODE,
            "node(s) requested cpus not multiple cpus per core",
            id="node FullPCPUsOnly and 3 CPUs",
        ),
        pytest.param(lsr(), {}, TopologyOptions(), "node(s) invalid CPU Topology", id="node without NRT"),
        pytest.param(
            lsr(),
            {},
            TopologyOptions(cpu_topology=NodeCPUTopology.empty()),
            "node(s) invalid CPU Topology",
            id="empty topology",
        ),
        pytest.param(
            make_pod().qos("LS").requests(cpu="1500m").build(),
            {LABEL_NODE_CPU_BIND_POLICY: "SpreadByPCPUs"},
            NODE,
            "the requested CPUs must be integer",
            id="node policy and fractional CPUs",
        ),
    ],
)
def test_check_node_rejections(
    pod: dict[str, Any], labels: dict[str, str], options: TopologyOptions, message: str
) -> None:
    with pytest.raises(RejectionError) as err:
        check_node(pre_filter(pod), labels, options)
    assert (err.value.code, err.value.reasons) == (UNRESOLVABLE, (message,))


def test_preferred_full_pcpus_with_odd_cpus_passes_the_filter() -> None:
    """Only a *required* FullPCPUs policy needs whole cores."""
    assert decide(pre_filter(lsr("3"))) == ("", True, "", "")


def test_trial_and_admission_flags() -> None:
    required = check_node(pre_filter(lsr(requiredCPUBindPolicy="FullPCPUs")), {}, NODE)
    assert (required.needs_cpuset_trial, required.needs_numa_admission) == (True, False)
    numa = check_node(
        pre_filter(lsr(requiredCPUBindPolicy="FullPCPUs")), {LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"}, NODE
    )
    assert (numa.needs_cpuset_trial, numa.needs_numa_admission) == (False, True)


@pytest.mark.parametrize(
    ("pod_milli", "ratio", "requested", "bound", "bind", "fits"),
    [
        pytest.param(4000, 1.5, 6000, 0, False, True, id="shared pod: 4000 <= 10000 - 6000"),
        pytest.param(4000, 1.5, 6000, 0, True, False, id="bound pod counts 6000 > 4000"),
        pytest.param(2000, 1.5, 6000, 4, False, True, id="4 bound CPUs count 6000: 2000 <= 10000 - 8000"),
        pytest.param(3000, 1.5, 6000, 4, False, False, id="3000 > 10000 - 8000"),
        pytest.param(9000, 1.0, 6000, 4, True, True, id="no amplification: not this filter's business"),
    ],
)
def test_filter_amplified_cpus(
    pod_milli: int, ratio: float, requested: int, bound: int, bind: bool, fits: bool
) -> None:
    if fits:
        filter_amplified_cpus(pod_milli, ratio, 10000, requested, bound, bind)
        return
    with pytest.raises(RejectionError) as err:
        filter_amplified_cpus(pod_milli, ratio, 10000, requested, bound, bind)
    assert (err.value.code, err.value.reasons) == ("Unschedulable", ("Insufficient amplified cpu",))


def test_cpu_amplification_ratio_annotation() -> None:
    assert cpu_amplification_ratio({ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: '{"cpu": 1.5}'}) == 1.5
    assert cpu_amplification_ratio({}) == 0.0
    with pytest.raises(RejectionError) as err:
        cpu_amplification_ratio({ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: '{"cpu": "x"}'})
    assert err.value.reasons == ("node(s) invalid CPU amplification ratio",)


@pytest.mark.parametrize(
    ("required", "preferred", "labels", "want"),
    [
        pytest.param(
            "SpreadByPCPUs",
            "FullPCPUs",
            {LABEL_NODE_CPU_BIND_POLICY: "FullPCPUsOnly"},
            ("SpreadByPCPUs", True),
            id="pod's required wins",
        ),
        pytest.param(
            "",
            "FullPCPUs",
            {LABEL_NODE_CPU_BIND_POLICY: "SpreadByPCPUs"},
            ("SpreadByPCPUs", True),
            id="node policy is required",
        ),
        pytest.param("", "FullPCPUs", {}, ("FullPCPUs", False), id="preferred, not required"),
    ],
)
def test_cpu_bind_policy_for(
    required: str, preferred: str, labels: dict[str, str], want: tuple[str, bool]
) -> None:
    assert cpu_bind_policy_for(labels, NODE, required, preferred) == want


def test_resource_options_amplify_bound_cpu_and_read_strategy() -> None:
    nrt = make_nrt().zone(0, cpu="8").build()
    options = new_topology_options(
        nrt, node_annotations={ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: '{"cpu": 1.5}'}
    )
    request = pre_filter(lsr("4"))
    ro = resource_options(request, options, {LABEL_NODE_NUMA_ALLOCATE_STRATEGY: "MostAllocated"}, True)
    assert (str(ro.requests["cpu"]), str(ro.unamplified_requests["cpu"]), ro.num_cpus_needed) == ("6", "4", 4)
    assert (ro.cpu_bind_policy, ro.required_cpu_bind_policy, ro.numa_allocate_strategy) == (
        "FullPCPUs",
        False,
        "MostAllocated",
    )
    shared = resource_options(request, options, {}, False)
    assert (str(shared.requests["cpu"]), shared.numa_allocate_strategy) == ("4", "LeastAllocated")


@pytest.mark.parametrize(
    ("spec", "labels", "want"),
    [
        pytest.param(
            None, {}, ResourceSpec(preferred_cpu_bind_policy="FullPCPUs"), id="no spec: preferred written"
        ),
        pytest.param(
            {"preferredCPUBindPolicy": "Default"},
            {},
            ResourceSpec(preferred_cpu_bind_policy="FullPCPUs"),
            id="Default resolved",
        ),
        pytest.param(
            None,
            {LABEL_NODE_CPU_BIND_POLICY: "SpreadByPCPUs"},
            ResourceSpec(required_cpu_bind_policy="SpreadByPCPUs", preferred_cpu_bind_policy="SpreadByPCPUs"),
            id="node policy written as required",
        ),
        pytest.param({"preferredCPUBindPolicy": "SpreadByPCPUs"}, {}, None, id="explicit spec left alone"),
    ],
)
def test_resource_spec_write_back(
    spec: dict[str, str] | None, labels: dict[str, str], want: ResourceSpec | None
) -> None:
    pod = lsr(**(spec or {}))
    got = resource_spec_write_back(pod["metadata"]["annotations"], pre_filter(pod), labels, NODE)
    assert got == want


def test_amplified_cpu_check_comes_before_topology_checks() -> None:
    """Upstream's order: an amplified-CPU shortage is reported even on a node without topology."""
    usage = NodeCPUUsage(allocatable_milli=6000, requested_milli=0, amplification_ratio=2.0)
    with pytest.raises(RejectionError) as err:
        check_node(pre_filter(lsr()), {}, TopologyOptions(), usage)
    assert err.value.reasons == ("Insufficient amplified cpu",)
    roomy = NodeCPUUsage(allocatable_milli=16000, requested_milli=0, amplification_ratio=2.0)
    assert check_node(pre_filter(lsr()), {}, NODE, roomy).request_cpu_bind
