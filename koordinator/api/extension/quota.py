"""Elastic quota keys (prefix ``quota.scheduling.koordinator.sh/``) and readers for quota objects.

Labels place pods in quotas and shape the tree; annotations carry JSON ResourceLists written
by the webhook (``shared-weight``) and the scheduler's status writer (``runtime``, ``request``
...). The three special quotas live in ``koordinator-system``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.api.extension.annotations import (
    annotations_of,
    get_resource_list,
    get_string_list,
    labels_of,
)
from koordinator.api.extension.constants import KOORDINATOR_SYSTEM_NAMESPACE, QUOTA_DOMAIN_PREFIX
from koordinator.api.resourcelist import ResourceList, parse

__all__ = [
    "ANNOTATION_ADMISSION",
    "ANNOTATION_ALLOCATED",
    "ANNOTATION_CHILD_REQUEST",
    "ANNOTATION_GUARANTEED",
    "ANNOTATION_MAX_STRICT_CHECK_RESOURCE_KEYS",
    "ANNOTATION_NAMESPACES",
    "ANNOTATION_NON_PREEMPTIBLE_REQUEST",
    "ANNOTATION_NON_PREEMPTIBLE_USED",
    "ANNOTATION_REQUEST",
    "ANNOTATION_RESOURCE_KEYS",
    "ANNOTATION_RUNTIME",
    "ANNOTATION_SHARED_WEIGHT",
    "ANNOTATION_TOTAL_RESOURCE",
    "ANNOTATION_UNSCHEDULABLE_RESOURCE",
    "DEFAULT_QUOTA_NAME",
    "LABEL_ALLOW_FORCE_UPDATE",
    "LABEL_ALLOW_LENT_RESOURCE",
    "LABEL_IGNORE_DEFAULT_TREE",
    "LABEL_PREEMPTIBLE",
    "LABEL_QUOTA_IS_PARENT",
    "LABEL_QUOTA_IS_ROOT",
    "LABEL_QUOTA_NAME",
    "LABEL_QUOTA_PARENT",
    "LABEL_QUOTA_PROFILE",
    "LABEL_QUOTA_TREE_ID",
    "QUOTA_NAMESPACE",
    "ROOT_QUOTA_NAME",
    "SYSTEM_QUOTA_NAME",
    "allow_lent_resource",
    "is_forbidden_modify",
    "is_parent",
    "is_pod_non_preemptible",
    "is_root",
    "pod_quota_name",
    "quota_max",
    "quota_min",
    "quota_namespaces",
    "quota_parent",
    "quota_resource_list",
    "quota_shared_weight",
    "quota_tree_id",
]

_P = QUOTA_DOMAIN_PREFIX + "/"
LABEL_QUOTA_NAME = _P + "name"
LABEL_QUOTA_PARENT = _P + "parent"
LABEL_QUOTA_IS_PARENT = _P + "is-parent"
LABEL_ALLOW_LENT_RESOURCE = _P + "allow-lent-resource"
LABEL_QUOTA_IS_ROOT = _P + "is-root"
LABEL_QUOTA_TREE_ID = _P + "tree-id"
LABEL_QUOTA_PROFILE = _P + "profile"
LABEL_IGNORE_DEFAULT_TREE = _P + "ignore-default-tree"
LABEL_PREEMPTIBLE = _P + "preemptible"
LABEL_ALLOW_FORCE_UPDATE = _P + "allow-force-update"

ANNOTATION_SHARED_WEIGHT = _P + "shared-weight"
ANNOTATION_RUNTIME = _P + "runtime"
ANNOTATION_REQUEST = _P + "request"
ANNOTATION_CHILD_REQUEST = _P + "child-request"
ANNOTATION_GUARANTEED = _P + "guaranteed"
ANNOTATION_ALLOCATED = _P + "allocated"
ANNOTATION_NON_PREEMPTIBLE_REQUEST = _P + "non-preemptible-request"
ANNOTATION_NON_PREEMPTIBLE_USED = _P + "non-preemptible-used"
ANNOTATION_ADMISSION = _P + "admission"
ANNOTATION_TOTAL_RESOURCE = _P + "total-resource"
ANNOTATION_UNSCHEDULABLE_RESOURCE = _P + "unschedulable-resource"
ANNOTATION_NAMESPACES = _P + "namespaces"
ANNOTATION_RESOURCE_KEYS = _P + "resource-keys"
ANNOTATION_MAX_STRICT_CHECK_RESOURCE_KEYS = _P + "max-strict-check-resource-keys"

ROOT_QUOTA_NAME = "koordinator-root-quota"
SYSTEM_QUOTA_NAME = "koordinator-system-quota"
DEFAULT_QUOTA_NAME = "koordinator-default-quota"
QUOTA_NAMESPACE = KOORDINATOR_SYSTEM_NAMESPACE


def quota_parent(quota: Mapping[str, Any]) -> str:
    """The parent quota name; unlabelled quotas hang under the root quota."""
    return labels_of(quota).get(LABEL_QUOTA_PARENT) or ROOT_QUOTA_NAME


def is_parent(quota: Mapping[str, Any]) -> bool:
    return labels_of(quota).get(LABEL_QUOTA_IS_PARENT) == "true"


def is_root(quota: Mapping[str, Any]) -> bool:
    return labels_of(quota).get(LABEL_QUOTA_IS_ROOT) == "true"


def allow_lent_resource(quota: Mapping[str, Any]) -> bool:
    """True unless the label is exactly ``"false"``."""
    return labels_of(quota).get(LABEL_ALLOW_LENT_RESOURCE) != "false"


def quota_tree_id(quota: Mapping[str, Any]) -> str:
    return labels_of(quota).get(LABEL_QUOTA_TREE_ID, "")


def is_pod_non_preemptible(pod: Mapping[str, Any]) -> bool:
    """Pods labelled ``preemptible: "false"`` may not be preempted by quota preemption."""
    return labels_of(pod).get(LABEL_PREEMPTIBLE) == "false"


def pod_quota_name(pod: Mapping[str, Any]) -> str:
    """The quota named by a pod's ``quota.scheduling.koordinator.sh/name`` label (``""``: none)."""
    return labels_of(pod).get(LABEL_QUOTA_NAME) or ""


def is_forbidden_modify(quota: Mapping[str, Any]) -> bool:
    """The system and root quotas may not be changed by users."""
    return (quota.get("metadata") or {}).get("name") in (SYSTEM_QUOTA_NAME, ROOT_QUOTA_NAME)


def quota_min(quota: Mapping[str, Any]) -> ResourceList:
    return parse(((quota.get("spec") or {}).get("min")), path="spec.min")


def quota_max(quota: Mapping[str, Any]) -> ResourceList:
    return parse(((quota.get("spec") or {}).get("max")), path="spec.max")


def quota_resource_list(quota: Mapping[str, Any], key: str) -> ResourceList | None:
    """One of the JSON ResourceList annotations (``runtime``, ``request``, ``shared-weight`` ...)."""
    return get_resource_list(annotations_of(quota), key)


def quota_shared_weight(quota: Mapping[str, Any]) -> ResourceList:
    """``shared-weight``, defaulting to ``spec.max``."""
    weight = quota_resource_list(quota, ANNOTATION_SHARED_WEIGHT)
    return weight if weight is not None else quota_max(quota)


def quota_namespaces(quota: Mapping[str, Any]) -> list[str]:
    """Namespaces bound to the quota by the ``namespaces`` annotation."""
    return get_string_list(annotations_of(quota), ANNOTATION_NAMESPACES) or []
