"""A gang's definition, :class:`GangSpec`, resolved from its PodGroup object or from the
annotations of its first pod, as upstream's ``PodGroupGangInfo`` / ``AnnotationGangInfo``
resolve them.

* minimum: PodGroup ``spec.minMember``; a pod's declared ``min-available`` (required).
* total: the ``total-number`` annotation (PodGroup's or pod's), defaulting to and floored
  at the minimum.
* wait: PodGroup ``spec.scheduleTimeoutSeconds`` when > 0, a pod's ``waiting-time`` when
  > 0, else args ``defaultTimeout``.
* mode: ``Strict`` unless the annotation says ``NonStrict`` (any other value: Strict).
* match policy: the annotation (or its alias); unset *or unknown* values take args
  ``defaultMatchPolicy``. Upstream keeps an unknown value, which its Permit then treats as
  once-satisfied while its PreEnqueue/PostFilter/Unreserve shortcuts (which test for the
  exact string) do not: one gang, two policies. Falling back keeps the gang consistent.
* group: the ``groups`` annotation's gang ids, or the gang alone; sorted, and the group id
  is the sorted ids joined by ``,``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.gang.args import CoschedulingArgs
from controlplane.scheduler.gang.member import (
    GangMember,
    created_at,
    declared_groups,
    declared_match_policy,
    pod_key,
)
from koordinator.api.extension.gang import (
    ANNOTATION_GANG_MODE,
    ANNOTATION_GANG_TOTAL_NUM,
    GANG_MATCH_POLICIES,
    GANG_MODE_NON_STRICT,
    GANG_MODE_STRICT,
)
from koordinator.api.goparse import GoParseError, parse_int

__all__ = [
    "FROM_POD_ANNOTATION",
    "FROM_POD_GROUP",
    "GangSpec",
    "group_id",
    "spec_from_member",
    "spec_from_pod_group",
]

#: where a gang's definition came from (upstream's ``GangFrom`` values)
FROM_POD_GROUP = "GangFromPodGroupCrd"
FROM_POD_ANNOTATION = "GangFromPodAnnotation"


def group_id(gang_ids: Iterable[str]) -> str:
    """Upstream's ``GetGangGroupId``: the sorted gang ids joined by ``,``."""
    return ",".join(sorted(gang_ids))


@dataclass(frozen=True, slots=True)
class GangSpec:
    """What a gang is: who must be scheduled together, how long they wait, and how."""

    gang_id: str
    min_member: int
    total_member: int
    mode: str
    wait_time_s: float
    match_policy: str
    #: the gang ids of its group, sorted (the gang itself at least)
    groups: tuple[str, ...]
    #: creation time of the PodGroup or of the pod that defined the gang (epoch seconds)
    created_at: float
    #: :data:`FROM_POD_GROUP` or :data:`FROM_POD_ANNOTATION`
    source: str

    @property
    def group_id(self) -> str:
        return group_id(self.groups)

    @property
    def strict(self) -> bool:
        return self.mode == GANG_MODE_STRICT


def _mode(raw: str) -> str:
    return raw if raw in (GANG_MODE_STRICT, GANG_MODE_NON_STRICT) else GANG_MODE_STRICT


def _policy(raw: str, args: CoschedulingArgs) -> str:
    return raw if raw in GANG_MATCH_POLICIES else args.default_match_policy


def _groups(declared: tuple[str, ...], gang_id: str) -> tuple[str, ...]:
    return tuple(sorted(declared)) if declared else (gang_id,)


def spec_from_pod_group(pod_group: Mapping[str, Any], args: CoschedulingArgs) -> GangSpec | None:
    """The gang a ``scheduling.sigs.k8s.io/v1alpha1`` PodGroup defines (None when its
    ``minMember`` is negative, which upstream does not initialize)."""
    metadata: Mapping[str, Any] = pod_group.get("metadata") or {}
    spec: Mapping[str, Any] = pod_group.get("spec") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    gang_id = pod_key(str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
    minimum = _int(spec.get("minMember"))
    if minimum < 0:
        return None
    total = 0
    if annotations.get(ANNOTATION_GANG_TOTAL_NUM):
        try:
            total = parse_int(annotations[ANNOTATION_GANG_TOTAL_NUM], 10, 32)
        except GoParseError:
            total = 0
    timeout = _int(spec.get("scheduleTimeoutSeconds"))
    return GangSpec(
        gang_id=gang_id,
        min_member=minimum,
        total_member=max(total, minimum),
        mode=_mode(annotations.get(ANNOTATION_GANG_MODE, "")),
        wait_time_s=float(timeout) if timeout > 0 else args.default_timeout_s,
        match_policy=_policy(declared_match_policy(annotations, labels), args),
        groups=_groups(declared_groups(annotations), gang_id),
        created_at=created_at(metadata),
        source=FROM_POD_GROUP,
    )


def spec_from_member(member: GangMember, args: CoschedulingArgs) -> GangSpec | None:
    """The gang a pod's annotations define (None when its minimum is missing, unparsable or
    negative: such a pod cannot initialize its gang)."""
    if member.min_available is None or member.min_available < 0:
        return None
    minimum = member.min_available
    return GangSpec(
        gang_id=member.gang_id,
        min_member=minimum,
        total_member=max(member.total_number, minimum),
        mode=_mode(member.mode),
        wait_time_s=member.wait_time_s if member.wait_time_s > 0 else args.default_timeout_s,
        match_policy=_policy(member.match_policy, args),
        groups=_groups(member.groups, member.gang_id),
        created_at=member.created_at,
        source=FROM_POD_ANNOTATION,
    )


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value
