"""Domain prefixes and the miscellaneous pod label/annotation keys of the protocol.

Keys that belong to one area live in that area's module; this module holds the prefixes and
the pod keys read by several components (eviction, OOM score, per-pod QoS overrides ...).
"""

from __future__ import annotations

from collections.abc import Mapping

from koordinator.api.extension.annotations import AnnotationError, decode_json
from koordinator.api.goparse import GoParseError, parse_int

__all__ = [
    "ANNOTATION_EVICTION_POLICY",
    "ANNOTATION_EVICTION_PRIORITY",
    "ANNOTATION_EVICT_REASON",
    "ANNOTATION_EVICT_TRIGGER",
    "ANNOTATION_JOB_CREATED_BY",
    "ANNOTATION_NETWORK_QOS",
    "ANNOTATION_POD_BLKIO_QOS",
    "ANNOTATION_POD_CPU_BURST",
    "ANNOTATION_POD_CPU_QOS",
    "ANNOTATION_POD_MEMORY_QOS",
    "ANNOTATION_POD_OOM_SCORE_ADJ",
    "ANNOTATION_POD_OOM_SCORE_ADJ_SPEC",
    "ANNOTATION_REPLACE_RESOURCES",
    "ANNOTATION_SKIP_ENHANCED_VALIDATION",
    "ANNOTATION_SKIP_HOOKSERVER",
    "CONFIGMAP_TYPE_SLO_CONTROLLER_CONFIG",
    "CONFIG_DOMAIN_PREFIX",
    "CORE_SCHED_POLICY_EXCLUSIVE",
    "CORE_SCHED_POLICY_NONE",
    "DOMAIN_PREFIX",
    "INTERNAL_SCHEDULING_DOMAIN_PREFIX",
    "KOORDINATOR_SYSTEM_NAMESPACE",
    "KUBELET_DOMAIN_PREFIX",
    "LABEL_BINDING_ADMISSION_BYPASS",
    "LABEL_CONFIGMAP_TYPE",
    "LABEL_CORE_SCHED_GROUP_ID",
    "LABEL_CORE_SCHED_POLICY",
    "LABEL_EVICT_POLICY",
    "LABEL_MANAGED_BY",
    "LABEL_POD_EVICT_ENABLE",
    "LABEL_POD_MUTATING_UPDATE",
    "MANAGED_BY_KOORDINATOR",
    "NODE_DOMAIN_PREFIX",
    "POD_DOMAIN_PREFIX",
    "QUOTA_DOMAIN_PREFIX",
    "SCHEDULING_DOMAIN_PREFIX",
    "eviction_enabled",
    "eviction_policy",
    "eviction_priority",
    "oom_score_adj",
    "parse_replace_resources",
]

DOMAIN_PREFIX = "koordinator.sh/"
SCHEDULING_DOMAIN_PREFIX = "scheduling.koordinator.sh"
NODE_DOMAIN_PREFIX = "node.koordinator.sh"
POD_DOMAIN_PREFIX = "pod.koordinator.sh"
CONFIG_DOMAIN_PREFIX = "config.koordinator.sh"
QUOTA_DOMAIN_PREFIX = "quota.scheduling.koordinator.sh"
KUBELET_DOMAIN_PREFIX = "kubelet.koordinator.sh"
INTERNAL_SCHEDULING_DOMAIN_PREFIX = "internal.scheduling.koordinator.sh"

KOORDINATOR_SYSTEM_NAMESPACE = "koordinator-system"

# ---- eviction ---------------------------------------------------------------------------------
#: Label ``"true"``: CPUEvict/MemoryEvict may evict the pod.
LABEL_POD_EVICT_ENABLE = DOMAIN_PREFIX + "eviction-enabled"
#: JSON array of koordlet feature names allowed to evict the pod (absent: all).
ANNOTATION_EVICTION_POLICY = DOMAIN_PREFIX + "eviction-policy"
#: Integer; lower is evicted first.
ANNOTATION_EVICTION_PRIORITY = DOMAIN_PREFIX + "eviction-priority"

# ---- per-pod overrides of NodeSLO / runtime behaviour ------------------------------------------
ANNOTATION_POD_OOM_SCORE_ADJ = DOMAIN_PREFIX + "oom-score-adj"
ANNOTATION_POD_OOM_SCORE_ADJ_SPEC = DOMAIN_PREFIX + "oom-score-adj-spec"
ANNOTATION_NETWORK_QOS = DOMAIN_PREFIX + "networkQOS"
ANNOTATION_POD_CPU_BURST = DOMAIN_PREFIX + "cpuBurst"
ANNOTATION_POD_CPU_QOS = DOMAIN_PREFIX + "cpuQOS"
ANNOTATION_POD_MEMORY_QOS = DOMAIN_PREFIX + "memoryQOS"
ANNOTATION_POD_BLKIO_QOS = DOMAIN_PREFIX + "blkioQOS"
LABEL_CORE_SCHED_GROUP_ID = DOMAIN_PREFIX + "core-sched-group-id"
#: ``exclusive`` (a group per pod UID) or ``none`` (core scheduling off for the pod).
LABEL_CORE_SCHED_POLICY = DOMAIN_PREFIX + "core-sched-policy"
CORE_SCHED_POLICY_EXCLUSIVE = "exclusive"
CORE_SCHED_POLICY_NONE = "none"

# ---- webhooks -----------------------------------------------------------------------------------
#: Label ``"true"`` makes the pod mutating webhook see UPDATE requests.
LABEL_POD_MUTATING_UPDATE = POD_DOMAIN_PREFIX + "/mutating-update"
ANNOTATION_SKIP_ENHANCED_VALIDATION = POD_DOMAIN_PREFIX + "/skip-enhanced-validation"
#: ``"from:to,from2:"``: rename (or, with an empty target, erase) resources in the pod spec.
ANNOTATION_REPLACE_RESOURCES = POD_DOMAIN_PREFIX + "/replace-resources"
LABEL_BINDING_ADMISSION_BYPASS = DOMAIN_PREFIX + "binding-admission-bypass"
#: ConfigMaps the configmap webhook validates carry this label.
LABEL_CONFIGMAP_TYPE = DOMAIN_PREFIX + "configmap-type"
CONFIGMAP_TYPE_SLO_CONTROLLER_CONFIG = "slo-controller-config"

# ---- misc ------------------------------------------------------------------------------------------
ANNOTATION_JOB_CREATED_BY = DOMAIN_PREFIX + "job-created-by"
#: on a PodMigrationJob: why the descheduler asked for it, and which plug-in did
ANNOTATION_EVICT_REASON = DOMAIN_PREFIX + "evict-reason"
ANNOTATION_EVICT_TRIGGER = DOMAIN_PREFIX + "evict-trigger"
#: on a pod (or its PodMigrationJob): the eviction policy (Eviction, Delete, SoftEviction)
LABEL_EVICT_POLICY = DOMAIN_PREFIX + "evict-policy"
ANNOTATION_SKIP_HOOKSERVER = "runtimeproxy.koordinator.sh/skip-hookserver"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_KOORDINATOR = "Koordinator"


def eviction_enabled(labels: Mapping[str, str] | None) -> bool:
    """Whether ``koordinator.sh/eviction-enabled`` is ``"true"``."""
    return (labels or {}).get(LABEL_POD_EVICT_ENABLE) == "true"


def eviction_policy(annotations: Mapping[str, str] | None) -> list[str] | None:
    """Feature names allowed to evict the pod; ``None`` (all allowed) when absent."""
    data = decode_json(annotations, ANNOTATION_EVICTION_POLICY)
    if data is None:
        return None
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise AnnotationError(ANNOTATION_EVICTION_POLICY, "expected a JSON array of feature names")
    return data


def eviction_priority(annotations: Mapping[str, str] | None) -> int | None:
    """``koordinator.sh/eviction-priority`` as an integer; ``None`` when absent."""
    raw = (annotations or {}).get(ANNOTATION_EVICTION_PRIORITY)
    if raw is None:
        return None
    try:
        return parse_int(raw, 10, 64)
    except GoParseError as exc:
        raise AnnotationError(ANNOTATION_EVICTION_PRIORITY, str(exc)) from None


def oom_score_adj(annotations: Mapping[str, str] | None, container: str) -> int | None:
    """The OOM score adjustment of a container: the per-container spec first, then the pod value.

    An empty annotation counts as unset, as upstream. Values outside [-1000, 1000] are refused.
    """
    key = ANNOTATION_POD_OOM_SCORE_ADJ_SPEC
    spec = decode_json(annotations, key) if (annotations or {}).get(key) else None
    value: object = None
    if spec is not None:
        if not isinstance(spec, dict):
            raise AnnotationError(key, "expected a JSON object of container name to integer")
        value = spec.get(container)
    if value is None:
        key = ANNOTATION_POD_OOM_SCORE_ADJ
        raw = (annotations or {}).get(key)
        if not raw:
            return None
        try:
            value = parse_int(raw, 10, 64)
        except GoParseError as exc:
            raise AnnotationError(key, str(exc)) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise AnnotationError(key, f"expected an integer for container {container!r}")
    if not -1000 <= value <= 1000:
        raise AnnotationError(key, f"{value} is outside [-1000, 1000]")
    return value


def parse_replace_resources(annotations: Mapping[str, str] | None) -> list[tuple[str, str]]:
    """Pairs ``(from, to)`` of ``pod.koordinator.sh/replace-resources``; an empty ``to`` erases."""
    raw = (annotations or {}).get(ANNOTATION_REPLACE_RESOURCES, "")
    pairs = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        source, sep, target = item.partition(":")
        if not sep or not source.strip():
            raise AnnotationError(ANNOTATION_REPLACE_RESOURCES, f"{item!r} is not <from>:<to>")
        pairs.append((source.strip(), target.strip()))
    return pairs
