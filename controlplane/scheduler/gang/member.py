"""What the gang core keeps of a pod: :class:`GangMember`, built once from the pod object by
:func:`gang_member` (the pod informer calls it next to its ``PodInfo`` transform).

A pod belongs to a gang when it names one (``pod-group.scheduling.sigs.k8s.io`` label, the
lightweight ``pod-group.scheduling.sigs.k8s.io/name`` label, or the
``gang.scheduling.koordinator.sh/name`` annotation). A pod with the first label is a member
of a PodGroup object; any other member declares its gang itself, in annotations read as
upstream's ``AnnotationGangInfo`` reads them: the minimum from the lightweight
``.../min-available`` label when set, else the ``gang.scheduling.koordinator.sh/min-available``
annotation (missing or unparsable: the pod cannot initialize its gang); ``total-number``,
``waiting-time`` (a Go duration), ``mode``, ``match-policy`` (or its
``pod-group.scheduling.sigs.k8s.io/match-policy`` alias) and ``groups`` (a JSON array of
gang ids), each ignored when unparsable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.annotations import AnnotationError, get_string_list
from koordinator.api.extension.gang import (
    ANNOTATION_ALIAS_GANG_MATCH_POLICY,
    ANNOTATION_GANG_GROUPS,
    ANNOTATION_GANG_MATCH_POLICY,
    ANNOTATION_GANG_MIN_NUM,
    ANNOTATION_GANG_MODE,
    ANNOTATION_GANG_TOTAL_NUM,
    ANNOTATION_GANG_WAIT_TIME,
    LABEL_GANG_MATCH_POLICY,
    LABEL_LIGHTWEIGHT_GANG_MIN_AVAILABLE,
    LABEL_POD_GROUP,
    gang_name,
)
from koordinator.api.goparse import GoParseError, parse_duration_seconds, parse_int
from koordinator.kube.timeutil import parse_time

__all__ = ["GangMember", "gang_member", "pod_key"]

POD_SUCCEEDED, POD_FAILED = "Succeeded", "Failed"


def pod_key(namespace: str, name: str) -> str:
    """Upstream's ``util.GetId``: ``"<namespace>/<name>"`` (pods and gangs alike)."""
    return f"{namespace}/{name}"


@dataclass(frozen=True, slots=True)
class GangMember:
    """A gang's pod: identity, placement and phase, and what its annotations declare."""

    namespace: str
    name: str
    uid: str
    #: the gang's name (its id is ``namespace/gang_name``)
    gang_name: str
    node_name: str = ""
    #: ``status.phase``
    phase: str = ""
    #: names of the pod's owner references, in the object's order
    owners: tuple[str, ...] = ()
    #: the pod carries the ``pod-group.scheduling.sigs.k8s.io`` label: its gang is a PodGroup
    in_pod_group: bool = False
    #: ``metadata.creationTimestamp`` in epoch seconds (0 when absent)
    created_at: float = 0.0
    #: declared minimum (None when missing or unparsable)
    min_available: int | None = None
    #: declared ``total-number`` (0 when unset or unparsable)
    total_number: int = 0
    #: declared ``mode`` as written ("" when unset)
    mode: str = ""
    #: declared ``waiting-time`` in seconds (0 when unset, unparsable or not positive)
    wait_time_s: float = 0.0
    #: declared match policy as written ("" when unset)
    match_policy: str = ""
    #: declared gang group (empty when unset or unparsable)
    groups: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return pod_key(self.namespace, self.name)

    @property
    def gang_id(self) -> str:
        return pod_key(self.namespace, self.gang_name)

    @property
    def bound(self) -> bool:
        """The pod has a node (``spec.nodeName``)."""
        return bool(self.node_name)

    @property
    def terminated(self) -> bool:
        return self.phase in (POD_SUCCEEDED, POD_FAILED)


def _min_available(labels: Mapping[str, str], annotations: Mapping[str, str]) -> int | None:
    raw = labels.get(LABEL_LIGHTWEIGHT_GANG_MIN_AVAILABLE) or None
    if raw is None and ANNOTATION_GANG_MIN_NUM in annotations:
        raw = annotations[ANNOTATION_GANG_MIN_NUM]
    if raw is None:
        return None
    try:
        return parse_int(raw, 10, 32)
    except GoParseError:
        return None


def _total_number(annotations: Mapping[str, str]) -> int:
    raw = annotations.get(ANNOTATION_GANG_TOTAL_NUM, "")
    if not raw:
        return 0
    try:
        return parse_int(raw, 10, 32)
    except GoParseError:
        return 0


def _wait_time_s(annotations: Mapping[str, str]) -> float:
    raw = annotations.get(ANNOTATION_GANG_WAIT_TIME, "")
    if not raw:
        return 0.0
    try:
        seconds = parse_duration_seconds(raw)
    except GoParseError:
        return 0.0
    return max(seconds, 0.0)


def declared_groups(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The ``groups`` annotation's gang ids (empty when unset or not a JSON string array)."""
    try:
        return tuple(get_string_list(annotations, ANNOTATION_GANG_GROUPS) or ())
    except AnnotationError:
        return ()


def declared_match_policy(annotations: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """The match policy an object names: the annotation, its alias annotation, then the
    alias as a label (as this project's vocabulary also accepts); "" when none."""
    return (
        annotations.get(ANNOTATION_GANG_MATCH_POLICY)
        or annotations.get(ANNOTATION_ALIAS_GANG_MATCH_POLICY)
        or labels.get(LABEL_GANG_MATCH_POLICY)
        or ""
    )


def created_at(metadata: Mapping[str, Any]) -> float:
    raw = metadata.get("creationTimestamp")
    if not raw:
        return 0.0
    try:
        return parse_time(str(raw))
    except ValueError:
        return 0.0


def gang_member(pod: Mapping[str, Any]) -> GangMember | None:
    """The pod's gang record, or None when the pod belongs to no gang."""
    name = gang_name(pod)
    if not name:
        return None
    metadata: Mapping[str, Any] = pod.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    spec: Mapping[str, Any] = pod.get("spec") or {}
    status: Mapping[str, Any] = pod.get("status") or {}
    owners = tuple(
        str(ref.get("name") or "")
        for ref in metadata.get("ownerReferences") or ()
        if isinstance(ref, Mapping)
    )
    return GangMember(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
        gang_name=name,
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or ""),
        owners=owners,
        in_pod_group=bool(labels.get(LABEL_POD_GROUP)),
        created_at=created_at(metadata),
        min_available=_min_available(labels, annotations),
        total_number=_total_number(annotations),
        mode=annotations.get(ANNOTATION_GANG_MODE, ""),
        wait_time_s=_wait_time_s(annotations),
        match_policy=declared_match_policy(annotations, labels),
        groups=declared_groups(annotations),
    )
