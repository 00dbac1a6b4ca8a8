"""The kubelet's /configz as the NodeResourceTopology reads it: field types, the topology
policy from the topology manager's policy and scope, the static policy's reserved CPUs."""

from __future__ import annotations

from typing import Any

import pytest

from koordinator.api.cpuset import format_cpuset
from koordlet.statesinformer.kubeletconfig import (
    KubeletConfigError,
    KubeletConfiguration,
    ReservedCPUsError,
    topology_policy,
)
from koordlet.system.topology import CPUTopology, Processor

# 2 sockets x 2 cores x 2 threads: socket 0 = CPUs 0,1,4,5 (cores 0: 0,4; 1: 1,5)
TOPOLOGY = CPUTopology(
    tuple(Processor(node=(cpu % 4) // 2, socket=(cpu % 4) // 2, core=cpu % 4, cpu=cpu) for cpu in range(8))
)


def test_from_configz_reads_the_fields_the_nrt_needs():
    configz = {
        "cpuManagerPolicy": "static",
        "cpuManagerPolicyOptions": {"full-pcpus-only": "true"},
        "reservedSystemCPUs": "0",
        "kubeReserved": {"cpu": "500m", "memory": "1Gi"},
        "systemReserved": {"cpu": "1"},
        "topologyManagerPolicy": "single-numa-node",
        "topologyManagerScope": "pod",
        "evictionHard": {"memory.available": "100Mi"},
    }
    assert KubeletConfiguration.from_configz(configz) == KubeletConfiguration(
        cpu_manager_policy="static",
        cpu_manager_policy_options={"full-pcpus-only": "true"},
        reserved_system_cpus="0",
        kube_reserved={"cpu": "500m", "memory": "1Gi"},
        system_reserved={"cpu": "1"},
        topology_manager_policy="single-numa-node",
        topology_manager_scope="pod",
    )
    assert KubeletConfiguration.from_configz({}) == KubeletConfiguration()


@pytest.mark.parametrize(
    "configz",
    [{"cpuManagerPolicy": 1}, {"cpuManagerPolicyOptions": ["a"]}, {"kubeReserved": {"cpu": 1}}],
    ids=["policy-number", "options-list", "reserved-number"],
)
def test_from_configz_refuses_fields_of_the_wrong_type(configz: dict[str, Any]):
    with pytest.raises(KubeletConfigError):
        KubeletConfiguration.from_configz(configz)


TOPOLOGY_POLICIES = {
    "none": ("none", "container", "None"),
    "unset": ("", "pod", "None"),
    "container single-numa-node": ("single-numa-node", "container", "SingleNUMANodeContainerLevel"),
    "container restricted": ("restricted", "container", "RestrictedContainerLevel"),
    "container best-effort": ("best-effort", "container", "BestEffortContainerLevel"),
    "pod single-numa-node": ("single-numa-node", "pod", "SingleNUMANodePodLevel"),
    "pod restricted": ("restricted", "pod", "RestrictedPodLevel"),
    "pod best-effort": ("best-effort", "pod", "BestEffortPodLevel"),
    "no scope": ("best-effort", "", "None"),
    "unknown policy": ("prefer-closest", "pod", "None"),
}


@pytest.mark.parametrize(
    ("policy", "scope", "expected"), TOPOLOGY_POLICIES.values(), ids=list(TOPOLOGY_POLICIES)
)
def test_topology_policy(policy, scope, expected):
    assert topology_policy(policy, scope) == expected


RESERVED = {
    # reservedSystemCPUs win over kubeReserved/systemReserved
    "explicit": ({"reservedSystemCPUs": "3,7", "kubeReserved": {"cpu": "4"}}, "3,7"),
    # ceil(0.5 + 1) = 2 CPUs picked by topology: the two threads of the first core
    "by count": ({"kubeReserved": {"cpu": "500m"}, "systemReserved": {"cpu": "1"}}, "0,4"),
    "by count, one CPU": ({"systemReserved": {"cpu": "100m", "memory": "1Gi"}}, "0"),
    "a whole socket": ({"kubeReserved": {"cpu": "4"}}, "0-1,4-5"),
}


@pytest.mark.parametrize(("fields", "expected"), RESERVED.values(), ids=list(RESERVED))
def test_static_policy_reserved_cpus(fields, expected):
    config = KubeletConfiguration.from_configz({"cpuManagerPolicy": "static", **fields})
    assert format_cpuset(config.static_reserved_cpus(TOPOLOGY)) == expected


def test_no_reserved_cpus_outside_the_static_policy():
    config = KubeletConfiguration.from_configz({"cpuManagerPolicy": "none", "reservedSystemCPUs": "0"})
    assert config.static_reserved_cpus(TOPOLOGY) == frozenset()


UNRESERVABLE = {
    "nothing reserved": ({}, "unable to determine reserved CPU"),
    "not a CPU list": ({"reservedSystemCPUs": "0-"}, "unable to parse"),
    "offline CPUs": ({"reservedSystemCPUs": "8-9"}, "not a subset of online-cpus: 0-7"),
    "unknown resource": ({"kubeReserved": {"cpu": "1", "gpu": "1"}}, "cannot reserve 'gpu'"),
    "negative": ({"systemReserved": {"cpu": "-1"}}, "cannot be negative"),
    "not a quantity": ({"systemReserved": {"cpu": "one"}}, "cpu"),
    "more than the node": ({"kubeReserved": {"cpu": "9"}}, "did not equal 9"),
}


@pytest.mark.parametrize(("fields", "message"), UNRESERVABLE.values(), ids=list(UNRESERVABLE))
def test_reserved_cpus_the_kubelet_could_not_reserve(fields, message):
    config = KubeletConfiguration.from_configz({"cpuManagerPolicy": "static", **fields})
    with pytest.raises(ReservedCPUsError, match=message):
        config.static_reserved_cpus(TOPOLOGY)
