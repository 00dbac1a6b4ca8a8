"""Valid samples and invalid objects (one per documented validation rule) for every CRD.

Shared by the schema tests; the samples live in ``data/*.yaml``. Each invalid case names the
field path the apiserver reports and the ``StatusCause`` reason.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).parent / "data"


def load(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DATA / name).read_text()) if doc]


SEED_SAMPLES = load("seed_samples.yaml")
MORE_SAMPLES = load("more_samples.yaml")
ALL_SAMPLES = SEED_SAMPLES + MORE_SAMPLES


def sample_id(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['apiVersion'].rsplit('/', 1)[1]}/{obj['metadata']['name']}"


_MISSING = object()


def _edit(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    node: Any = out
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    last = keys[-1]
    if value is _MISSING:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


def setting(obj: dict[str, Any], **paths: Any) -> dict[str, Any]:
    """A copy of ``obj`` with dotted paths (``spec__ttl`` style, ``__`` for dots) set."""
    for key, value in paths.items():
        obj = _edit(obj, key.replace("__", "."), value)
    return obj


def without(obj: dict[str, Any], *paths: str) -> dict[str, Any]:
    for path in paths:
        obj = _edit(obj, path, _MISSING)
    return obj


def _meta(kind: str, api_version: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


RESERVATION = {
    **_meta("Reservation", "scheduling.koordinator.sh/v1alpha1", "r"),
    "spec": {
        "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
        "owners": [{"labelSelector": {"matchLabels": {"app": "x"}}}],
        "ttl": "1h",
    },
}
PROFILE = {
    **_meta("ClusterColocationProfile", "config.koordinator.sh/v1alpha1", "p"),
    "spec": {"selector": {"matchLabels": {"a": "b"}}, "qosClass": "BE"},
}
EQP = {
    **_meta("ElasticQuotaProfile", "quota.koordinator.sh/v1alpha1", "eqp", "ns"),
    "spec": {"quotaName": "q", "nodeSelector": {"matchLabels": {"pool": "a"}}, "resourceRatio": "0.9"},
}
RECOMMENDATION = {
    **_meta("Recommendation", "analysis.koordinator.sh/v1alpha1", "rec", "ns"),
    "spec": {"target": {"type": "workload", "workload": {"kind": "Deployment", "name": "web"}}},
}
NODE_METRIC = {
    **_meta("NodeMetric", "slo.koordinator.sh/v1alpha1", "node-1"),
    "spec": {
        "metricCollectPolicy": {"aggregateDurationSeconds": 300, "nodeAggregatePolicy": {"durations": ["5m"]}}
    },
}
NODE_SLO = {
    **_meta("NodeSLO", "slo.koordinator.sh/v1alpha1", "node-1"),
    "spec": {
        "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65},
        "resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True, "groupIdentity": -1}}},
        "cpuBurstStrategy": {"policy": "none"},
        "systemStrategy": {"totalNetworkBandwidth": "0"},
    },
}
DEVICE = {
    **_meta("Device", "scheduling.koordinator.sh/v1alpha1", "node-1"),
    "spec": {
        "devices": [
            {
                "type": "gpu",
                "minor": 0,
                "health": True,
                "resources": {"koordinator.sh/gpu-core": "100"},
                "topology": {"socketID": 0, "nodeID": 0, "pcieID": "pci0"},
            }
        ]
    },
}
ELASTIC_QUOTA = {
    **_meta("ElasticQuota", "scheduling.sigs.k8s.io/v1alpha1", "q", "ns"),
    "spec": {"max": {"cpu": "10"}, "min": {"cpu": "1"}},
}
POD_GROUP = {**_meta("PodGroup", "scheduling.sigs.k8s.io/v1alpha1", "pg", "ns"), "spec": {"minMember": 2}}
PMJ = {
    **_meta("PodMigrationJob", "scheduling.koordinator.sh/v1alpha1", "pmj"),
    "spec": {"podRef": {"namespace": "ns", "name": "p"}, "mode": "ReservationFirst", "ttl": "5m"},
}
NRT = {
    **_meta("NodeResourceTopology", "topology.node.k8s.io/v1alpha1", "node-1"),
    "topologyPolicies": ["None"],
    "zones": [
        {
            "name": "node-0",
            "type": "Node",
            "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"}],
        }
    ],
}
CNT = {
    **_meta("ClusterNetworkTopology", "scheduling.koordinator.sh/v1alpha1", "default"),
    "spec": {"networkTopologySpec": [{"labelKey": ["spine"], "topologyLayer": "SpineLayer"}]},
}
SCHEDULE_EXPLANATION = {
    **_meta("ScheduleExplanation", "scheduling.koordinator.sh/v1alpha1", "se", "ns"),
    "spec": {},
}

#: Minimal valid objects, one per kind; the invalid cases below are edits of these.
BASES = [
    RESERVATION,
    PROFILE,
    EQP,
    RECOMMENDATION,
    NODE_METRIC,
    NODE_SLO,
    DEVICE,
    ELASTIC_QUOTA,
    POD_GROUP,
    PMJ,
    NRT,
    CNT,
    SCHEDULE_EXPLANATION,
]

_BE = "spec.resourceUsedThresholdWithBE"
_Q = "spec.resourceQOSStrategy.beClass"


@dataclass(frozen=True)
class Invalid:
    id: str
    obj: dict[str, Any]
    field: str
    reason: str


INVALID: list[Invalid] = [
    # Reservation: template and owners required, owners non-empty, ttl/expires exclusive, enums, formats
    Invalid("reservation-without-spec", without(RESERVATION, "spec"), "spec", "FieldValueRequired"),
    Invalid(
        "reservation-without-template",
        without(RESERVATION, "spec.template"),
        "spec.template",
        "FieldValueRequired",
    ),
    Invalid(
        "reservation-without-owners", without(RESERVATION, "spec.owners"), "spec.owners", "FieldValueRequired"
    ),
    Invalid(
        "reservation-empty-owners", setting(RESERVATION, spec__owners=[]), "spec.owners", "FieldValueInvalid"
    ),
    Invalid(
        "reservation-ttl-and-expires",
        setting(RESERVATION, spec__expires="2030-01-01T00:00:00Z"),
        "spec",
        "FieldValueInvalid",
    ),
    Invalid(
        "reservation-unknown-allocate-policy",
        setting(RESERVATION, spec__allocatePolicy="Default"),
        "spec.allocatePolicy",
        "FieldValueNotSupported",
    ),
    Invalid(
        "reservation-ttl-not-a-duration",
        setting(RESERVATION, spec__ttl="12 hours"),
        "spec.ttl",
        "FieldValueInvalid",
    ),
    Invalid(
        "reservation-ttl-a-number", setting(RESERVATION, spec__ttl=12), "spec.ttl", "FieldValueTypeInvalid"
    ),
    Invalid(
        "reservation-expires-not-a-time",
        without(setting(RESERVATION, spec__expires="tomorrow"), "spec.ttl"),
        "spec.expires",
        "FieldValueTypeInvalid",
    ),
    Invalid(
        "reservation-allocate-once-not-bool",
        setting(RESERVATION, spec__allocateOnce="yes"),
        "spec.allocateOnce",
        "FieldValueTypeInvalid",
    ),
    Invalid(
        "reservation-owner-object-not-an-object",
        setting(RESERVATION, spec__owners=[{"object": "pod-a"}]),
        "spec.owners[0].object",
        "FieldValueTypeInvalid",
    ),
    Invalid(
        "reservation-taint-without-effect",
        setting(RESERVATION, spec__taints=[{"key": "k"}]),
        "spec.taints[0].effect",
        "FieldValueRequired",
    ),
    Invalid(
        "reservation-unknown-pre-allocation-mode",
        setting(RESERVATION, spec__preAllocationPolicy={"mode": "Everywhere"}),
        "spec.preAllocationPolicy.mode",
        "FieldValueNotSupported",
    ),
    # ClusterColocationProfile: qosClass enum, probability int-or-percent 0..100, selectors
    Invalid(
        "profile-unknown-qos-class",
        setting(PROFILE, spec__qosClass="Guaranteed"),
        "spec.qosClass",
        "FieldValueNotSupported",
    ),
    Invalid(
        "profile-probability-over-100",
        setting(PROFILE, spec__probability=101),
        "spec.probability",
        "FieldValueInvalid",
    ),
    Invalid(
        "profile-probability-negative",
        setting(PROFILE, spec__probability=-1),
        "spec.probability",
        "FieldValueInvalid",
    ),
    Invalid(
        "profile-probability-bad-percent",
        setting(PROFILE, spec__probability="150%"),
        "spec.probability",
        "FieldValueInvalid",
    ),
    Invalid(
        "profile-probability-not-int-or-string",
        setting(PROFILE, spec__probability=True),
        "spec.probability",
        "FieldValueTypeInvalid",
    ),
    Invalid(
        "profile-selector-expression-without-operator",
        setting(PROFILE, spec__selector={"matchExpressions": [{"key": "a"}]}),
        "spec.selector.matchExpressions[0].operator",
        "FieldValueRequired",
    ),
    Invalid(
        "profile-koordinator-priority-not-int",
        setting(PROFILE, spec__koordinatorPriority="high"),
        "spec.koordinatorPriority",
        "FieldValueTypeInvalid",
    ),
    Invalid(
        "profile-label-value-not-string",
        setting(PROFILE, spec__labels={"a": 1}),
        "spec.labels.a",
        "FieldValueTypeInvalid",
    ),
    # ElasticQuotaProfile: quotaName and nodeSelector required, ratio format
    Invalid("eqp-without-quota-name", without(EQP, "spec.quotaName"), "spec.quotaName", "FieldValueRequired"),
    Invalid("eqp-empty-quota-name", setting(EQP, spec__quotaName=""), "spec.quotaName", "FieldValueInvalid"),
    Invalid(
        "eqp-without-node-selector",
        without(EQP, "spec.nodeSelector"),
        "spec.nodeSelector",
        "FieldValueRequired",
    ),
    Invalid(
        "eqp-ratio-not-a-number",
        setting(EQP, spec__resourceRatio="most"),
        "spec.resourceRatio",
        "FieldValueInvalid",
    ),
    # Recommendation: target required, type enum, target fields required by type
    Invalid(
        "recommendation-without-target",
        without(RECOMMENDATION, "spec.target"),
        "spec.target",
        "FieldValueRequired",
    ),
    Invalid(
        "recommendation-unknown-target-type",
        setting(RECOMMENDATION, spec__target__type="deployment"),
        "spec.target.type",
        "FieldValueNotSupported",
    ),
    Invalid(
        "recommendation-workload-type-without-workload",
        without(RECOMMENDATION, "spec.target.workload"),
        "spec.target.workload",
        "FieldValueInvalid",
    ),
    Invalid(
        "recommendation-selector-type-without-selector",
        setting(RECOMMENDATION, spec__target={"type": "podSelector"}),
        "spec.target.podSelector",
        "FieldValueInvalid",
    ),
    Invalid(
        "recommendation-workload-without-kind",
        without(RECOMMENDATION, "spec.target.workload.kind"),
        "spec.target.workload.kind",
        "FieldValueRequired",
    ),
    # NodeMetric: memory collect policy enum, durations
    Invalid(
        "nodemetric-unknown-memory-policy",
        setting(NODE_METRIC, spec__metricCollectPolicy__nodeMemoryCollectPolicy="usageWithCache"),
        "spec.metricCollectPolicy.nodeMemoryCollectPolicy",
        "FieldValueNotSupported",
    ),
    Invalid(
        "nodemetric-duration-seconds-not-int",
        setting(NODE_METRIC, spec__metricCollectPolicy__aggregateDurationSeconds="60"),
        "spec.metricCollectPolicy.aggregateDurationSeconds",
        "FieldValueTypeInvalid",
    ),
    Invalid(
        "nodemetric-aggregation-window-not-a-duration",
        setting(NODE_METRIC, spec__metricCollectPolicy__nodeAggregatePolicy__durations=["5 minutes"]),
        "spec.metricCollectPolicy.nodeAggregatePolicy.durations[0]",
        "FieldValueInvalid",
    ),
    # NodeSLO: percent ranges, ordering rules, enums, quantity format
    Invalid(
        "nodeslo-suppress-threshold-over-100",
        setting(NODE_SLO, spec__resourceUsedThresholdWithBE__cpuSuppressThresholdPercent=101),
        f"{_BE}.cpuSuppressThresholdPercent",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-memory-threshold-negative",
        setting(NODE_SLO, spec__resourceUsedThresholdWithBE__memoryEvictThresholdPercent=-1),
        f"{_BE}.memoryEvictThresholdPercent",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-memory-threshold-below-lower",
        setting(
            NODE_SLO,
            spec__resourceUsedThresholdWithBE__memoryEvictThresholdPercent=60,
            spec__resourceUsedThresholdWithBE__memoryEvictLowerPercent=70,
        ),
        _BE,
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-be-satisfaction-lower-over-60",
        setting(NODE_SLO, spec__resourceUsedThresholdWithBE__cpuEvictBESatisfactionLowerPercent=70),
        f"{_BE}.cpuEvictBESatisfactionLowerPercent",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-be-satisfaction-upper-not-above-lower",
        setting(
            NODE_SLO,
            spec__resourceUsedThresholdWithBE__cpuEvictBESatisfactionLowerPercent=50,
            spec__resourceUsedThresholdWithBE__cpuEvictBESatisfactionUpperPercent=40,
        ),
        _BE,
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-evict-time-window-zero",
        setting(NODE_SLO, spec__resourceUsedThresholdWithBE__cpuEvictTimeWindowSeconds=0),
        f"{_BE}.cpuEvictTimeWindowSeconds",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-unknown-suppress-policy",
        setting(NODE_SLO, spec__resourceUsedThresholdWithBE__cpuSuppressPolicy="quota"),
        f"{_BE}.cpuSuppressPolicy",
        "FieldValueNotSupported",
    ),
    Invalid(
        "nodeslo-unknown-evict-policy",
        setting(NODE_SLO, spec__resourceUsedThresholdWithBE__cpuEvictPolicy="evictByUsage"),
        f"{_BE}.cpuEvictPolicy",
        "FieldValueNotSupported",
    ),
    Invalid(
        "nodeslo-group-identity-over-2",
        setting(NODE_SLO, spec__resourceQOSStrategy__beClass__cpuQOS__groupIdentity=3),
        f"{_Q}.cpuQOS.groupIdentity",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-sched-idle-over-1",
        setting(NODE_SLO, spec__resourceQOSStrategy__beClass__cpuQOS__schedIdle=2),
        f"{_Q}.cpuQOS.schedIdle",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-min-limit-percent-over-100",
        setting(NODE_SLO, spec__resourceQOSStrategy__beClass__memoryQOS={"minLimitPercent": 120}),
        f"{_Q}.memoryQOS.minLimitPercent",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-wmark-ratio-over-100",
        setting(NODE_SLO, spec__resourceQOSStrategy__beClass__memoryQOS={"wmarkRatio": 101}),
        f"{_Q}.memoryQOS.wmarkRatio",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-wmark-scale-permill-zero",
        setting(NODE_SLO, spec__resourceQOSStrategy__beClass__memoryQOS={"wmarkScalePermill": 0}),
        f"{_Q}.memoryQOS.wmarkScalePermill",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-wmark-min-adj-below-25",
        setting(NODE_SLO, spec__resourceQOSStrategy__beClass__memoryQOS={"wmarkMinAdj": -26}),
        f"{_Q}.memoryQOS.wmarkMinAdj",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-cat-end-before-start",
        setting(
            NODE_SLO,
            spec__resourceQOSStrategy__beClass__resctrlQOS={
                "catRangeStartPercent": 50,
                "catRangeEndPercent": 30,
            },
        ),
        f"{_Q}.resctrlQOS",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-io-weight-zero",
        setting(
            NODE_SLO,
            spec__resourceQOSStrategy__beClass__blkioQOS={
                "blocks": [{"name": "sda", "type": "device", "ioCfg": {"ioWeightPercent": 0}}]
            },
        ),
        f"{_Q}.blkioQOS.blocks[0].ioCfg.ioWeightPercent",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-unknown-block-type",
        setting(
            NODE_SLO,
            spec__resourceQOSStrategy__beClass__blkioQOS={"blocks": [{"name": "sda", "type": "disk"}]},
        ),
        f"{_Q}.blkioQOS.blocks[0].type",
        "FieldValueNotSupported",
    ),
    Invalid(
        "nodeslo-unknown-burst-policy",
        setting(NODE_SLO, spec__cpuBurstStrategy__policy="always"),
        "spec.cpuBurstStrategy.policy",
        "FieldValueNotSupported",
    ),
    Invalid(
        "nodeslo-burst-percent-over-10000",
        setting(NODE_SLO, spec__cpuBurstStrategy__cpuBurstPercent=20000),
        "spec.cpuBurstStrategy.cpuBurstPercent",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-cfs-quota-burst-below-100",
        setting(NODE_SLO, spec__cpuBurstStrategy__cfsQuotaBurstPercent=50),
        "spec.cpuBurstStrategy.cfsQuotaBurstPercent",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-burst-period-below-minus-1",
        setting(NODE_SLO, spec__cpuBurstStrategy__cfsQuotaBurstPeriodSeconds=-2),
        "spec.cpuBurstStrategy.cfsQuotaBurstPeriodSeconds",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-share-pool-threshold-over-100",
        setting(NODE_SLO, spec__cpuBurstStrategy__sharePoolThresholdPercent=120),
        "spec.cpuBurstStrategy.sharePoolThresholdPercent",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-watermark-scale-factor-over-400",
        setting(NODE_SLO, spec__systemStrategy__watermarkScaleFactor=500),
        "spec.systemStrategy.watermarkScaleFactor",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-min-free-kbytes-factor-zero",
        setting(NODE_SLO, spec__systemStrategy__minFreeKbytesFactor=0),
        "spec.systemStrategy.minFreeKbytesFactor",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-bandwidth-not-a-quantity",
        setting(NODE_SLO, spec__systemStrategy__totalNetworkBandwidth="10 Gbps"),
        "spec.systemStrategy.totalNetworkBandwidth",
        "FieldValueInvalid",
    ),
    Invalid(
        "nodeslo-host-application-unknown-qos",
        setting(NODE_SLO, spec__hostApplications=[{"name": "nginx", "qos": "Gold"}]),
        "spec.hostApplications[0].qos",
        "FieldValueNotSupported",
    ),
    Invalid(
        "nodeslo-host-application-unknown-priority",
        setting(NODE_SLO, spec__hostApplications=[{"name": "nginx", "priority": "koord-high"}]),
        "spec.hostApplications[0].priority",
        "FieldValueNotSupported",
    ),
    # Device
    Invalid(
        "device-topology-without-pcie-id",
        without(DEVICE, "spec.devices.0.topology.pcieID"),
        "spec.devices[0].topology.pcieID",
        "FieldValueRequired",
    ),
    Invalid(
        "device-resource-not-a-quantity",
        setting(DEVICE, spec__devices__0__resources={"koordinator.sh/gpu-core": "lots"}),
        "spec.devices[0].resources.koordinator.sh/gpu-core",
        "FieldValueInvalid",
    ),
    Invalid(
        "device-health-not-bool",
        setting(DEVICE, spec__devices__0__health="yes"),
        "spec.devices[0].health",
        "FieldValueTypeInvalid",
    ),
    # ElasticQuota and PodGroup
    Invalid(
        "elasticquota-max-not-a-quantity",
        setting(ELASTIC_QUOTA, spec__max={"cpu": "1.2.3"}),
        "spec.max.cpu",
        "FieldValueInvalid",
    ),
    Invalid(
        "elasticquota-min-suffix-only",
        setting(ELASTIC_QUOTA, spec__min={"memory": "Mi"}),
        "spec.min.memory",
        "FieldValueInvalid",
    ),
    Invalid(
        "podgroup-unknown-phase",
        setting(POD_GROUP, status={"phase": "Done"}),
        "status.phase",
        "FieldValueNotSupported",
    ),
    Invalid(
        "podgroup-min-member-not-int",
        setting(POD_GROUP, spec__minMember="3"),
        "spec.minMember",
        "FieldValueTypeInvalid",
    ),
    # PodMigrationJob
    Invalid("pmj-without-pod-ref", without(PMJ, "spec.podRef"), "spec.podRef", "FieldValueRequired"),
    Invalid("pmj-unknown-mode", setting(PMJ, spec__mode="Evict"), "spec.mode", "FieldValueNotSupported"),
    Invalid("pmj-ttl-not-a-duration", setting(PMJ, spec__ttl="5 min"), "spec.ttl", "FieldValueInvalid"),
    # NodeResourceTopology
    Invalid("nrt-without-zones", without(NRT, "zones"), "zones", "FieldValueRequired"),
    Invalid(
        "nrt-v1alpha1-without-policies",
        without(NRT, "topologyPolicies"),
        "topologyPolicies",
        "FieldValueRequired",
    ),
    Invalid("nrt-zone-without-type", without(NRT, "zones.0.type"), "zones[0].type", "FieldValueRequired"),
    Invalid(
        "nrt-resource-without-available",
        without(NRT, "zones.0.resources.0.available"),
        "zones[0].resources[0].available",
        "FieldValueRequired",
    ),
    # ClusterNetworkTopology and ScheduleExplanation
    Invalid(
        "cnt-label-key-not-a-list",
        setting(CNT, spec__networkTopologySpec=[{"labelKey": "spine"}]),
        "spec.networkTopologySpec[0].labelKey",
        "FieldValueTypeInvalid",
    ),
    Invalid(
        "schedule-explanation-spec-not-an-object",
        setting(SCHEDULE_EXPLANATION, spec="x"),
        "spec",
        "FieldValueTypeInvalid",
    ),
]
