"""Which pods a Recommendation is about: its ``spec.target``.

``type: workload`` names ``workload{apiVersion, kind, name}`` in the Recommendation's
namespace (``apiVersion`` may be left out: the kind alone names the workload); the
workload is read from the apiserver and its ``spec.selector`` (a label selector) picks the
pods, for the kinds in :data:`WORKLOADS` (Deployment, ReplicaSet,
StatefulSet, DaemonSet, Job). ``type: podSelector`` selects pods in the Recommendation's
namespace by ``podSelector`` directly. Anything else is a :class:`TargetError`, which the
controller reports as a condition, never as a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.selectors import SelectorError, validate_label_selector
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import NotFoundError
from koordinator.kube.resources import Resource

__all__ = [
    "REASON_INVALID_TARGET",
    "REASON_TARGET_NOT_FOUND",
    "WORKLOADS",
    "Target",
    "TargetError",
    "resolve",
]

REASON_TARGET_NOT_FOUND = "TargetNotFound"
REASON_INVALID_TARGET = "InvalidTarget"

#: (API group, kind) -> resource; the group of ``apiVersion``, where given, must match
WORKLOADS: Mapping[tuple[str, str], Resource] = {
    ("apps", "Deployment"): res.DEPLOYMENTS,
    ("apps", "ReplicaSet"): res.REPLICA_SETS,
    ("apps", "StatefulSet"): res.STATEFUL_SETS,
    ("apps", "DaemonSet"): res.DAEMON_SETS,
    ("batch", "Job"): res.JOBS,
}


class TargetError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Target:
    namespace: str
    #: a validated label selector (an empty one selects every pod of the namespace)
    selector: Mapping[str, Any]
    description: str


def _checked_selector(selector: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(selector, Mapping):
        raise TargetError(REASON_INVALID_TARGET, f"{what} has no label selector")
    try:
        validate_label_selector(selector)
    except SelectorError as exc:
        raise TargetError(REASON_INVALID_TARGET, f"{what} has an invalid selector: {exc}") from None
    return selector


async def resolve(client: ApiClient, recommendation: Mapping[str, Any]) -> Target:
    """The target's pod selector; raises :class:`TargetError` when there is none to use."""
    namespace = str((recommendation.get("metadata") or {}).get("namespace") or "")
    target = (recommendation.get("spec") or {}).get("target") or {}
    kind = target.get("type")
    if kind == "podSelector":
        return Target(namespace, _checked_selector(target.get("podSelector"), "podSelector"), "podSelector")
    if kind != "workload":
        raise TargetError(REASON_INVALID_TARGET, f"unknown target type {kind!r} (workload or podSelector)")
    workload = target.get("workload") or {}
    api_version, workload_kind, name = (str(workload.get(k) or "") for k in ("apiVersion", "kind", "name"))
    if api_version:
        resource = WORKLOADS.get((api_version.rpartition("/")[0], workload_kind))
    else:  # optional in the CRD (upstream's omitempty): the kinds are unique, so the kind says it
        resource = next((r for (_, k), r in WORKLOADS.items() if k == workload_kind), None)
    if resource is None or not name:
        raise TargetError(
            REASON_INVALID_TARGET,
            f"workload {api_version} {workload_kind} {name!r} is not supported "
            f"(kinds: {', '.join(f'{g}/{k}' for g, k in WORKLOADS)}, with a name)",
        )
    description = f"{workload_kind} {namespace}/{name}"
    try:
        found = await client.get(resource, name, namespace)
    except NotFoundError:
        raise TargetError(REASON_TARGET_NOT_FOUND, f"{description} not found") from None
    selector = _checked_selector((found.get("spec") or {}).get("selector"), description)
    return Target(namespace, selector, description)
