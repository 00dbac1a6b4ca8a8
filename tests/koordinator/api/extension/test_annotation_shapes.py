"""Every JSON annotation decodes into its typed model and re-encodes to the same text Go writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from koordinator.api.extension import constants as c
from koordinator.api.extension import (
    device,
    gang,
    node,
    numa,
    podqos,
    quota,
    reservation,
    scheduling,
    topology,
)
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.model import Model

SHAPES: list[tuple[str, Callable[[dict[str, str]], Any], str]] = [
    (
        numa.ANNOTATION_RESOURCE_SPEC,
        numa.get_resource_spec,
        '{"requiredCPUBindPolicy":"FullPCPUs","preferredCPUExclusivePolicy":"PCPULevel"}',
    ),
    (
        numa.ANNOTATION_RESOURCE_STATUS,
        numa.get_resource_status,
        '{"cpuset":"0-3","numaNodeResources":[{"node":0,"resources":{"cpu":"4","memory":"8Gi"}},{"node":1}]}',
    ),
    (
        numa.ANNOTATION_NUMA_TOPOLOGY_SPEC,
        numa.get_numa_topology_spec,
        '{"numaTopologyPolicy":"SingleNUMANode","singleNUMANodeExclusive":"Required"}',
    ),
    (
        reservation.ANNOTATION_RESERVATION_ALLOCATED,
        reservation.get_reservation_allocated,
        '{"name":"r1","uid":"1234"}',
    ),
    (
        reservation.ANNOTATION_RESERVATION_AFFINITY,
        reservation.get_reservation_affinity,
        '{"name":"r1","requiredDuringSchedulingIgnoredDuringExecution":{"reservationSelectorTerms":'
        '[{"matchExpressions":[{"key":"team","operator":"In","values":["a"]}]}]},'
        '"reservationSelector":{"app":"web"},"tolerations":[{"key":"k","operator":"Exists"}]}',
    ),
    (
        scheduling.ANNOTATION_CUSTOM_USAGE_THRESHOLDS,
        scheduling.get_custom_usage_thresholds,
        '{"usageThresholds":{"cpu":65,"memory":95},"prodUsageThresholds":{"cpu":50},'
        '"aggregatedUsage":{"usageThresholds":{"cpu":70},"usageAggregationType":"p95",'
        '"usageAggregatedDuration":"5m0s"}}',
    ),
    (
        node.ANNOTATION_NODE_RESERVATION,
        node.get_node_reservation,
        '{"resources":{"cpu":"1","memory":"2Gi"},"reservedCPUs":"0-1","applyPolicy":"ReservedCPUsOnly"}',
    ),
    (
        node.ANNOTATION_NODE_THIRD_PARTY_ALLOCATIONS,
        node.get_third_party_allocations,
        '{"allocations":[{"name":"agent","priority":"koord-batch","resources":{"kubernetes.io/batch-cpu":"1k"}}]}',
    ),
    (
        node.ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE,
        node.get_origin_extended_allocatable,
        '{"resources":{"kubernetes.io/batch-cpu":"8k","kubernetes.io/batch-memory":"16Gi"}}',
    ),
    (c.ANNOTATION_POD_CPU_BURST, podqos.get_pod_cpu_burst, '{"policy":"auto","cpuBurstPercent":200}'),
    (c.ANNOTATION_POD_CPU_QOS, podqos.get_pod_cpu_qos, '{"groupIdentity":1,"enable":true}'),
    (c.ANNOTATION_POD_MEMORY_QOS, podqos.get_pod_memory_qos, '{"minLimitPercent":100,"policy":"auto"}'),
    (
        c.ANNOTATION_POD_BLKIO_QOS,
        podqos.get_pod_blkio_qos,
        '{"blocks":[{"name":"vol","type":"podvolume","ioCfg":{"readBPS":1048576}}]}',
    ),
    (c.ANNOTATION_NETWORK_QOS, podqos.get_pod_network_qos, '{"ingressLimit":"10M","egressLimit":"10M"}'),
    (
        topology.ANNOTATION_CPU_TOPOLOGY,
        topology.get_cpu_topology,
        '{"detail":[{"id":0,"core":0,"socket":0,"node":0},{"id":1,"core":0,"socket":0,"node":0}]}',
    ),
    (
        topology.ANNOTATION_CPU_BASIC_INFO,
        topology.get_cpu_basic_info,
        '{"cpuModel":"Intel Xeon","hyperThreadEnabled":true,"catL3CbmMask":"7ff","vendorID":"GenuineIntel"}',
    ),
    (
        topology.ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
        topology.get_system_qos_resource,
        '{"cpuset":"0-1","cpusetExclusive":false}',
    ),
    (
        topology.ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
        topology.get_kubelet_cpu_manager_policy,
        '{"policy":"static","options":{"full-pcpus-only":"true"},"reservedCPUs":"0-1"}',
    ),
    (
        topology.ANNOTATION_RESCTRL,
        topology.get_resctrl,
        '{"llc":{"schemata":{"range":[0,30]},"schemataPerCache":[{"cacheid":0,"range":[20,50]}]},'
        '"mb":{"schemata":{"percent":20}}}',
    ),
]


@pytest.mark.parametrize(("key", "reader", "text"), SHAPES, ids=[s[0].split("/")[-1] for s in SHAPES])
def test_annotation_round_trips_to_identical_text(key, reader, text):
    value = reader({key: text})
    assert isinstance(value, Model)
    assert value.to_json() == text


@pytest.mark.parametrize(("key", "reader", "text"), SHAPES, ids=[s[0].split("/")[-1] for s in SHAPES])
def test_malformed_annotation_names_the_key(key, reader, text):
    with pytest.raises(AnnotationError, match=key.replace(".", r"\.")):
        reader({key: text[:-1]})


def test_resource_spec_defaults_to_preferred_default_policy():
    assert numa.get_resource_spec({}).to_json() == '{"preferredCPUBindPolicy":"Default"}'


def test_wrong_type_inside_annotation_names_the_path():
    with pytest.raises(AnnotationError, match=r"numaNodeResources\[0\]\.node"):
        numa.get_resource_status({numa.ANNOTATION_RESOURCE_STATUS: '{"numaNodeResources":[{"node":"0"}]}'})


def test_device_allocated_round_trip():
    text = (
        '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50",'
        '"koordinator.sh/gpu-memory":"8Gi","koordinator.sh/gpu-memory-ratio":"50"}}],'
        '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},'
        '"extension":{"vfs":[{"minor":3,"busID":"0000:1f:00.2"}]}}]}'
    )
    allocations = device.get_device_allocations({device.ANNOTATION_DEVICE_ALLOCATED: text})
    assert allocations["gpu"][0].resources["koordinator.sh/gpu-memory"].value() == 8 * 1024**3
    out: dict[str, str] = {}
    assert device.set_device_allocations(out, allocations) == text


def test_device_allocate_hint():
    hints = device.get_device_allocate_hints(
        {
            device.ANNOTATION_DEVICE_ALLOCATE_HINT: '{"gpu":{"selector":{"matchLabels":{"model":"A100"}},'
            '"allocateStrategy":"ApplyForAll"}}'
        }
    )
    assert hints["gpu"].selector is not None
    assert hints["gpu"].selector.match_labels == {"model": "A100"}


def test_share_pools_and_pod_cpu_allocs():
    annotations = {
        topology.ANNOTATION_CPU_SHARED_POOLS: '[{"socket":0,"node":0,"cpuset":"2-7"}]',
        topology.ANNOTATION_BE_CPU_SHARED_POOLS: '[{"socket":0,"node":1,"cpuset":"8-15"}]',
        topology.ANNOTATION_POD_CPU_ALLOCS: '[{"namespace":"ns","name":"p","uid":"u","cpuset":"0-1",'
        '"managedByKubelet":true}]',
    }
    assert topology.get_cpu_shared_pools(annotations)[0].cpuset == "2-7"
    assert topology.get_cpu_shared_pools(annotations, be=True)[0].node == 1
    assert topology.get_pod_cpu_allocs(annotations)[0].managed_by_kubelet is True
    assert topology.get_system_qos_resource({}) is None
    assert topology.SystemQOSResource(cpuset="0").is_cpuset_exclusive()


def test_node_reserved_resources_prefer_explicit_cpus():
    reserved = node.node_reserved_resources(
        {node.ANNOTATION_NODE_RESERVATION: '{"resources":{"cpu":"1","memory":"2Gi"},"reservedCPUs":"0-3"}'}
    )
    assert {k: str(v) for k, v in reserved.items()} == {"cpu": "4", "memory": "2Gi"}
    reserved = node.node_reserved_resources(
        {node.ANNOTATION_NODE_RESERVATION: '{"resources":{"cpu":"500m"}}'}
    )
    assert {k: str(v) for k, v in reserved.items()} == {"cpu": "500m"}


def test_amplification_and_normalization_ratios():
    annotations: dict[str, str] = {}
    node.set_resource_amplification_ratios(annotations, {"memory": 1.0, "cpu": 1.456})
    assert annotations[node.ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO] == '{"cpu":1.46,"memory":1}'
    assert node.get_resource_amplification_ratios(annotations) == {"cpu": 1.46, "memory": 1.0}
    assert node.get_cpu_normalization_ratio({node.ANNOTATION_CPU_NORMALIZATION_RATIO: "1.20"}) == 1.2
    assert node.format_ratio(1.2) == "1.20"
    with pytest.raises(AnnotationError):
        node.get_cpu_normalization_ratio({node.ANNOTATION_CPU_NORMALIZATION_RATIO: "0"})


def test_gang_identity_and_parameters():
    pod: dict[str, Any] = {
        "metadata": {
            "namespace": "ns",
            "labels": {},
            "annotations": {
                gang.ANNOTATION_GANG_NAME: "g1",
                gang.ANNOTATION_GANG_MIN_NUM: "3",
                gang.ANNOTATION_GANG_WAIT_TIME: "30s",
                gang.ANNOTATION_GANG_MODE: "NonStrict",
                gang.ANNOTATION_GANG_GROUPS: '["ns/g1","ns/g2"]',
                gang.ANNOTATION_GANG_MATCH_POLICY: "waiting-and-running",
            },
        }
    }
    assert gang.gang_id(pod) == "ns/g1"
    assert gang.gang_min_available(pod) == 3
    assert gang.gang_wait_time_nanos(pod) == 30 * 10**9
    assert gang.gang_mode(pod) == "NonStrict"
    assert gang.gang_groups(pod) == ["ns/g1", "ns/g2"]
    assert gang.gang_match_policy(pod) == "waiting-and-running"
    pod["metadata"]["labels"] = {gang.LABEL_POD_GROUP: "pg", gang.LABEL_LIGHTWEIGHT_GANG_NAME: "light"}
    assert gang.gang_name(pod) == "pg"
    pod["metadata"]["annotations"][gang.ANNOTATION_GANG_MODE] = "Loose"
    assert gang.gang_mode(pod) == "Strict"


def test_quota_labels_and_annotations():
    obj: dict[str, Any] = {
        "metadata": {
            "name": "team-a",
            "labels": {quota.LABEL_ALLOW_LENT_RESOURCE: "false", quota.LABEL_QUOTA_IS_PARENT: "true"},
            "annotations": {quota.ANNOTATION_NAMESPACES: '["ns1","ns2"]'},
        },
        "spec": {"max": {"cpu": "10", "memory": "20Gi"}, "min": {"cpu": "2"}},
    }
    assert quota.quota_parent(obj) == quota.ROOT_QUOTA_NAME
    assert not quota.allow_lent_resource(obj)
    assert quota.is_parent(obj)
    assert quota.quota_namespaces(obj) == ["ns1", "ns2"]
    assert {k: str(v) for k, v in quota.quota_shared_weight(obj).items()} == {"cpu": "10", "memory": "20Gi"}
    obj["metadata"]["annotations"][quota.ANNOTATION_SHARED_WEIGHT] = '{"cpu":"1"}'
    assert {k: str(v) for k, v in quota.quota_shared_weight(obj).items()} == {"cpu": "1"}


def test_misc_pod_keys():
    assert c.eviction_policy({c.ANNOTATION_EVICTION_POLICY: '["BECPUEvict"]'}) == ["BECPUEvict"]
    assert c.eviction_policy({}) is None
    assert c.eviction_enabled({c.LABEL_POD_EVICT_ENABLE: "true"})
    assert c.oom_score_adj({c.ANNOTATION_POD_OOM_SCORE_ADJ_SPEC: '{"main":-500}'}, "main") == -500
    assert c.oom_score_adj({c.ANNOTATION_POD_OOM_SCORE_ADJ: "100"}, "main") == 100
    with pytest.raises(AnnotationError):
        c.oom_score_adj({c.ANNOTATION_POD_OOM_SCORE_ADJ: "1001"}, "main")
    # an empty annotation is unset, as upstream
    assert c.oom_score_adj({c.ANNOTATION_POD_OOM_SCORE_ADJ: ""}, "main") is None
    assert c.oom_score_adj({c.ANNOTATION_POD_OOM_SCORE_ADJ_SPEC: ""}, "main") is None
    both = {c.ANNOTATION_POD_OOM_SCORE_ADJ_SPEC: "", c.ANNOTATION_POD_OOM_SCORE_ADJ: "-10"}
    assert c.oom_score_adj(both, "main") == -10
    assert c.parse_replace_resources(
        {c.ANNOTATION_REPLACE_RESOURCES: "nvidia.com/gpu:koordinator.sh/gpu,foo:"}
    ) == [
        ("nvidia.com/gpu", "koordinator.sh/gpu"),
        ("foo", ""),
    ]
    assert reservation.reservation_order({reservation.LABEL_RESERVATION_ORDER: "123"}) == 123
    assert reservation.reservation_order({reservation.LABEL_RESERVATION_ORDER: "x"}) == 0


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (c.LABEL_POD_MUTATING_UPDATE, "pod.koordinator.sh/mutating-update"),
        (reservation.ANNOTATION_RESERVE_POD, "scheduling.koordinator.sh/reserve-pod"),
        (gang.ANNOTATION_BIND_GANG_GROUP_ID, "internal.scheduling.koordinator.sh/bind-gang-group-id"),
        (quota.LABEL_QUOTA_TREE_ID, "quota.scheduling.koordinator.sh/tree-id"),
        (node.ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE, "node.koordinator.sh/originExtendedAllocatable"),
        (topology.ANNOTATION_KUBELET_CPU_MANAGER_POLICY, "kubelet.koordinator.sh/cpu-manager-policy"),
        (scheduling.ANNOTATION_SCHEDULING_HINT, "internal.scheduling.koordinator.sh/scheduling-hint"),
        (device.LABEL_GPU_VENDOR, "node.koordinator.sh/gpu-vendor"),
    ],
)
def test_exact_upstream_keys(key, expected):
    assert key == expected
