"""What the quota core keeps of a pod: a :class:`QuotaPod` record built once per event.

The record holds the pod's effective request (container requests, init containers and,
unless ``ElasticQuotaIgnorePodOverhead``, ``spec.overhead``: upstream's ``PodRequests``),
the ``quota.scheduling.koordinator.sh/name`` label, whether it is non-preemptible
(``preemptible: "false"``), its node, phase, priority and the times the terminating-pod
gates and the revoke order read. Pods in phase Succeeded or Failed are *terminated*: the
scheduler's pod informer does not list them, so the core treats them as gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler.quota.gates import QuotaGates
from controlplane.scheduler.specdigest import spec_digest
from koordinator.api.extension.quota import is_pod_non_preemptible, pod_quota_name
from koordinator.api.resourcelist import ResourceList, pod_requests
from koordinator.kube.timeutil import parse_time

__all__ = ["QuotaPod", "is_ignored", "more_important", "quota_pod", "revoke_order"]

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"


@dataclass(frozen=True)
class QuotaPod:
    namespace: str
    name: str
    #: effective requests, every resource (masked to a quota's ``max`` where it is counted)
    request: ResourceList = field(default_factory=dict)
    #: the ``quota.scheduling.koordinator.sh/name`` label ("" when absent)
    quota_label: str = ""
    non_preemptible: bool = False
    node_name: str = ""
    #: phase Succeeded or Failed
    terminated: bool = False
    priority: int = 0
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    nominated_node: str = ""
    #: ``status.startTime`` in epoch seconds (None: not started)
    start_time: float | None = None
    #: ``metadata.deletionTimestamp`` in epoch seconds (None: not being deleted)
    deletion_time: float | None = None
    deletion_grace_seconds: int | None = None
    #: the digest of the spec ``request`` came from (:func:`spec_digest`; None: not known)
    spec_digest: int | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> str:
        """``namespace/name``, the pod's key in every quota."""
        return f"{self.namespace}/{self.name}"


def _time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def quota_pod(
    pod: Mapping[str, Any], *, ignore_overhead: bool = False, previous: QuotaPod | None = None
) -> QuotaPod:
    """The :class:`QuotaPod` of a pod dict as the API returns it. ``previous``, the record
    of the pod before this change, lends its request when the spec is the same (a binding)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    priority = spec.get("priority")
    grace = metadata.get("deletionGracePeriodSeconds")
    digest = spec_digest(spec)
    if previous is not None and digest is not None and digest == previous.spec_digest:
        request = previous.request
    else:
        request = pod_requests(pod, include_overhead=not ignore_overhead)
    return QuotaPod(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        request=request,
        spec_digest=digest,
        quota_label=pod_quota_name(pod),
        non_preemptible=is_pod_non_preemptible(pod),
        node_name=str(spec.get("nodeName") or ""),
        terminated=status.get("phase") in ("Succeeded", "Failed"),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        preemption_policy=str(spec.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY),
        nominated_node=str(status.get("nominatedNodeName") or ""),
        start_time=_time(status.get("startTime")),
        deletion_time=_time(metadata.get("deletionTimestamp")),
        deletion_grace_seconds=grace if isinstance(grace, int) and not isinstance(grace, bool) else None,
    )


def is_ignored(pod: QuotaPod, gates: QuotaGates, now: float) -> bool:
    """``shouldBeIgnored``: a terminating pod the gates say no longer counts.

    ``ElasticQuotaImmediateIgnoreTerminatingPod`` ignores it as soon as it is being deleted;
    ``ElasticQuotaIgnoreTerminatingPod`` once ``now`` is past its deletion time plus grace.
    """
    if pod.deletion_time is None:
        return False
    if gates.immediate_ignore_terminating_pod:
        return True
    if not gates.ignore_terminating_pod:
        return False
    return now > pod.deletion_time + (pod.deletion_grace_seconds or 0)


def more_important(a: QuotaPod, b: QuotaPod) -> bool:
    """kube-scheduler's ``MoreImportantPod``: higher priority, then the earlier start.

    A pod that has not started counts as starting now, i.e. after any started pod.
    """
    if a.priority != b.priority:
        return a.priority > b.priority
    a_start = a.start_time if a.start_time is not None else float("inf")
    b_start = b.start_time if b.start_time is not None else float("inf")
    return a_start < b_start


def revoke_order(pod: QuotaPod) -> tuple[int, float, str]:
    """Sort key from the least to the most important pod (ties: by key, for a stable order)."""
    start = pod.start_time if pod.start_time is not None else float("inf")
    return (pod.priority, -start, pod.key)
