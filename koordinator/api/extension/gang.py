"""Gang scheduling (coscheduling) keys and how a pod's gang is identified.

A pod belongs to a gang named, in this order: the ``pod-group.scheduling.sigs.k8s.io`` label
(a PodGroup object), the lightweight ``pod-group.scheduling.sigs.k8s.io/name`` label, then the
``gang.scheduling.koordinator.sh/name`` annotation. Gang ids are ``"<namespace>/<name>"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.api.extension.annotations import AnnotationError, annotations_of, get_string_list, labels_of
from koordinator.api.extension.constants import INTERNAL_SCHEDULING_DOMAIN_PREFIX, SCHEDULING_DOMAIN_PREFIX
from koordinator.api.goparse import GoParseError, parse_duration, parse_int

__all__ = [
    "ANNOTATION_ALIAS_GANG_MATCH_POLICY",
    "ANNOTATION_BIND_GANG_GROUP_ID",
    "ANNOTATION_BIND_GANG_MEMBER_COUNT",
    "ANNOTATION_GANG_GROUPS",
    "ANNOTATION_GANG_MATCH_POLICY",
    "ANNOTATION_GANG_MIN_NUM",
    "ANNOTATION_GANG_MODE",
    "ANNOTATION_GANG_NAME",
    "ANNOTATION_GANG_NETWORK_TOPOLOGY_INDEX",
    "ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC",
    "ANNOTATION_GANG_TIMEOUT",
    "ANNOTATION_GANG_TOTAL_NUM",
    "ANNOTATION_GANG_WAIT_TIME",
    "DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID",
    "DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT",
    "GANG_MATCH_POLICIES",
    "GANG_MODE_NON_STRICT",
    "GANG_MODE_STRICT",
    "LABEL_GANG_MATCH_POLICY",
    "LABEL_LIGHTWEIGHT_GANG_MIN_AVAILABLE",
    "LABEL_LIGHTWEIGHT_GANG_NAME",
    "LABEL_POD_GROUP",
    "MATCH_POLICY_ONCE_SATISFIED",
    "MATCH_POLICY_ONLY_WAITING",
    "MATCH_POLICY_WAITING_AND_RUNNING",
    "gang_groups",
    "gang_id",
    "gang_match_policy",
    "gang_min_available",
    "gang_mode",
    "gang_name",
    "gang_total_number",
    "gang_wait_time_nanos",
]

_PREFIX = "gang.scheduling.koordinator.sh"
ANNOTATION_GANG_NAME = _PREFIX + "/name"
ANNOTATION_GANG_MIN_NUM = _PREFIX + "/min-available"
#: Go duration string.
ANNOTATION_GANG_WAIT_TIME = _PREFIX + "/waiting-time"
ANNOTATION_GANG_TOTAL_NUM = _PREFIX + "/total-number"
ANNOTATION_GANG_MODE = _PREFIX + "/mode"
#: JSON array of gang ids (``"ns/name"``) scheduled as one group.
ANNOTATION_GANG_GROUPS = _PREFIX + "/groups"
ANNOTATION_GANG_MATCH_POLICY = _PREFIX + "/match-policy"
ANNOTATION_GANG_TIMEOUT = _PREFIX + "/timeout"
ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC = _PREFIX + "/network-topology-spec"
ANNOTATION_GANG_NETWORK_TOPOLOGY_INDEX = _PREFIX + "/network-topology-index"

LABEL_POD_GROUP = "pod-group.scheduling.sigs.k8s.io"
LABEL_LIGHTWEIGHT_GANG_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LABEL_LIGHTWEIGHT_GANG_MIN_AVAILABLE = "pod-group.scheduling.sigs.k8s.io/min-available"
LABEL_GANG_MATCH_POLICY = "pod-group.scheduling.sigs.k8s.io/match-policy"
#: upstream reads the same key as an *annotation* alias of ``ANNOTATION_GANG_MATCH_POLICY``
#: (``AnnotationAliasGangMatchPolicy``); the label constant above keeps its name.
ANNOTATION_ALIAS_GANG_MATCH_POLICY = LABEL_GANG_MATCH_POLICY

ANNOTATION_BIND_GANG_GROUP_ID = INTERNAL_SCHEDULING_DOMAIN_PREFIX + "/bind-gang-group-id"
ANNOTATION_BIND_GANG_MEMBER_COUNT = INTERNAL_SCHEDULING_DOMAIN_PREFIX + "/bind-gang-member-count"
DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID = SCHEDULING_DOMAIN_PREFIX + "/bind-gang-group-id"
DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT = SCHEDULING_DOMAIN_PREFIX + "/bind-gang-member-count"

GANG_MODE_STRICT = "Strict"
GANG_MODE_NON_STRICT = "NonStrict"
MATCH_POLICY_ONLY_WAITING = "only-waiting"
MATCH_POLICY_WAITING_AND_RUNNING = "waiting-and-running"
MATCH_POLICY_ONCE_SATISFIED = "once-satisfied"
GANG_MATCH_POLICIES = (
    MATCH_POLICY_ONLY_WAITING,
    MATCH_POLICY_WAITING_AND_RUNNING,
    MATCH_POLICY_ONCE_SATISFIED,
)


def gang_name(pod: Mapping[str, Any]) -> str:
    """The gang the pod belongs to ("" when none)."""
    labels = labels_of(pod)
    for key in (LABEL_POD_GROUP, LABEL_LIGHTWEIGHT_GANG_NAME):
        if labels.get(key):
            return labels[key]
    return annotations_of(pod).get(ANNOTATION_GANG_NAME, "")


def gang_id(pod: Mapping[str, Any]) -> str:
    """``"<namespace>/<gang name>"`` ("" when the pod has no gang)."""
    name = gang_name(pod)
    if not name:
        return ""
    return f"{(pod.get('metadata') or {}).get('namespace', '')}/{name}"


def _int(raw: str, key: str) -> int:
    try:
        return parse_int(raw, 10, 32)
    except GoParseError as exc:
        raise AnnotationError(key, str(exc)) from None


def gang_min_available(pod: Mapping[str, Any]) -> int | None:
    """Minimum members from the gang annotation, else the lightweight label; ``None`` when unset."""
    raw = annotations_of(pod).get(ANNOTATION_GANG_MIN_NUM)
    if raw is not None:
        return _int(raw, ANNOTATION_GANG_MIN_NUM)
    raw = labels_of(pod).get(LABEL_LIGHTWEIGHT_GANG_MIN_AVAILABLE)
    return _int(raw, LABEL_LIGHTWEIGHT_GANG_MIN_AVAILABLE) if raw is not None else None


def gang_total_number(pod: Mapping[str, Any]) -> int | None:
    raw = annotations_of(pod).get(ANNOTATION_GANG_TOTAL_NUM)
    return _int(raw, ANNOTATION_GANG_TOTAL_NUM) if raw is not None else None


def gang_wait_time_nanos(pod: Mapping[str, Any]) -> int | None:
    """``waiting-time`` as nanoseconds; ``None`` when absent, invalid or not positive (default applies)."""
    raw = annotations_of(pod).get(ANNOTATION_GANG_WAIT_TIME)
    if raw is None:
        return None
    try:
        value = parse_duration(raw)
    except GoParseError:
        return None
    return value if value > 0 else None


def gang_mode(pod: Mapping[str, Any]) -> str:
    """``Strict`` (default, also for unknown values) or ``NonStrict``."""
    mode = annotations_of(pod).get(ANNOTATION_GANG_MODE, GANG_MODE_STRICT)
    return mode if mode in (GANG_MODE_STRICT, GANG_MODE_NON_STRICT) else GANG_MODE_STRICT


def gang_groups(pod: Mapping[str, Any]) -> list[str]:
    """Gang ids of the pod's gang group (empty when the annotation is absent)."""
    return get_string_list(annotations_of(pod), ANNOTATION_GANG_GROUPS) or []


def gang_match_policy(pod: Mapping[str, Any], default: str = MATCH_POLICY_ONCE_SATISFIED) -> str:
    """The annotation, else the PodGroup label alias, else ``default``; unknown values give ``default``."""
    policy = annotations_of(pod).get(ANNOTATION_GANG_MATCH_POLICY) or labels_of(pod).get(
        LABEL_GANG_MATCH_POLICY
    )
    return policy if policy in GANG_MATCH_POLICIES else default
