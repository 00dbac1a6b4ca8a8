"""Builders for ElasticQuota objects and pod records in the shapes the API returns."""

from __future__ import annotations

import json
from typing import Any

from controlplane.scheduler.quota import QuotaPod, quota_pod
from koordinator.api.extension import quota as ext
from koordinator.kube.timeutil import format_time


def eq(
    name: str,
    *,
    namespace: str = "default",
    parent: str | None = None,
    is_parent: bool = False,
    min: dict[str, str] | None = None,
    max: dict[str, str] | None = None,
    weight: dict[str, str] | None = None,
    lent: bool = True,
    tree_id: str | None = None,
    is_root: bool = False,
    total: dict[str, str] | None = None,
    ignore_default_tree: bool = False,
    namespaces: list[str] | None = None,
    annotations: dict[str, str] | None = None,
    used: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels: dict[str, str] = {}
    notes: dict[str, str] = dict(annotations or {})
    if parent is not None:
        labels[ext.LABEL_QUOTA_PARENT] = parent
    if is_parent:
        labels[ext.LABEL_QUOTA_IS_PARENT] = "true"
    if not lent:
        labels[ext.LABEL_ALLOW_LENT_RESOURCE] = "false"
    if tree_id is not None:
        labels[ext.LABEL_QUOTA_TREE_ID] = tree_id
    if is_root:
        labels[ext.LABEL_QUOTA_IS_ROOT] = "true"
    if ignore_default_tree:
        labels[ext.LABEL_IGNORE_DEFAULT_TREE] = "true"
    if weight is not None:
        notes[ext.ANNOTATION_SHARED_WEIGHT] = json.dumps(weight)
    if total is not None:
        notes[ext.ANNOTATION_TOTAL_RESOURCE] = json.dumps(total)
    if namespaces is not None:
        notes[ext.ANNOTATION_NAMESPACES] = json.dumps(namespaces)
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": notes},
        "spec": {"min": dict(min or {}), "max": dict(max or {})},
    }
    if used is not None:
        obj["status"] = {"used": dict(used)}
    return obj


def cpu_quota(
    name: str,
    cpu_min: str,
    cpu_max: str,
    *,
    namespace: str = "default",
    parent: str | None = None,
    is_parent: bool = False,
) -> dict[str, Any]:
    """An ElasticQuota bounding CPU (``min``/``max``) with memory left wide open (0 to 64Gi)."""
    return eq(
        name,
        namespace=namespace,
        parent=parent,
        is_parent=is_parent,
        min={"cpu": cpu_min, "memory": "0"},
        max={"cpu": cpu_max, "memory": "64Gi"},
    )


def pod_dict(
    name: str,
    *,
    namespace: str = "default",
    quota: str | None = None,
    requests: dict[str, str] | None = None,
    node: str | None = None,
    priority: int | None = None,
    non_preemptible: bool = False,
    phase: str = "Pending",
    overhead: dict[str, str] | None = None,
    start: float | None = None,
    deleted_at: float | None = None,
    grace: int | None = None,
    preemption_policy: str | None = None,
    nominated: str | None = None,
) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if quota is not None:
        labels[ext.LABEL_QUOTA_NAME] = quota
    if non_preemptible:
        labels[ext.LABEL_PREEMPTIBLE] = "false"
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if deleted_at is not None:
        metadata["deletionTimestamp"] = format_time(deleted_at)
    if grace is not None:
        metadata["deletionGracePeriodSeconds"] = grace
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": dict(requests or {})}}]}
    if node is not None:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    if overhead is not None:
        spec["overhead"] = dict(overhead)
    if preemption_policy is not None:
        spec["preemptionPolicy"] = preemption_policy
    status: dict[str, Any] = {"phase": phase}
    if start is not None:
        status["startTime"] = format_time(start)
    if nominated is not None:
        status["nominatedNodeName"] = nominated
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def pod(name: str, *, ignore_overhead: bool = False, **kwargs: Any) -> QuotaPod:
    return quota_pod(pod_dict(name, **kwargs), ignore_overhead=ignore_overhead)


def cpu(value: str) -> dict[str, str]:
    return {"cpu": value}
