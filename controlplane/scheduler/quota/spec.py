"""What the quota core reads from one ElasticQuota object (``NewQuotaInfoFromQuota``).

A :class:`QuotaSpec` is immutable and built once per informer event by :func:`quota_spec`:
the tree links (``parent`` label, defaulting to the root quota; ``is-parent``; the
``tree-id``, ``is-root`` and ``ignore-default-tree`` labels), ``spec.min``/``spec.max``, the
shared weight (the ``shared-weight`` annotation, or ``max`` when it is absent, unreadable
or all zero, as upstream's ``GetSharedWeight``), whether the quota lends what it does not use
(``allow-lent-resource``; never under ``ElasticQuotaGuaranteeUsage``), the namespaces bound by
the ``namespaces`` annotation and a tree root's ``total-resource`` annotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordinator.api.extension.annotations import AnnotationError, labels_of
from koordinator.api.extension.quota import (
    ANNOTATION_SHARED_WEIGHT,
    ANNOTATION_TOTAL_RESOURCE,
    LABEL_IGNORE_DEFAULT_TREE,
    ROOT_QUOTA_NAME,
    allow_lent_resource,
    is_parent,
    is_root,
    quota_max,
    quota_min,
    quota_namespaces,
    quota_parent,
    quota_resource_list,
    quota_tree_id,
)
from koordinator.api.resourcelist import ResourceList, ResourceListError, is_zero

__all__ = ["QuotaSpec", "QuotaSpecError", "quota_spec"]


class QuotaSpecError(ValueError):
    """An ElasticQuota whose ``spec.min`` or ``spec.max`` is not a ResourceList."""


@dataclass(frozen=True)
class QuotaSpec:
    name: str
    namespace: str = ""
    #: the parent quota; ``koordinator-root-quota`` for top-level quotas, ``""`` for the root
    parent: str = ROOT_QUOTA_NAME
    is_parent: bool = False
    allow_lent_resource: bool = True
    min: ResourceList = field(default_factory=dict)
    max: ResourceList = field(default_factory=dict)
    shared_weight: ResourceList = field(default_factory=dict)
    tree_id: str = ""
    #: labelled ``is-root=true``: the top of a quota tree of its own (``MultiQuotaTree``)
    is_tree_root: bool = False
    ignore_default_tree: bool = False
    namespaces: tuple[str, ...] = ()
    #: a tree root's ``total-resource`` annotation (None: absent or unreadable)
    total_resource: ResourceList | None = None
    #: ``metadata.deletionTimestamp`` is set
    deleting: bool = False


def _shared_weight(quota: Mapping[str, Any], maximum: ResourceList) -> ResourceList:
    try:
        weight = quota_resource_list(quota, ANNOTATION_SHARED_WEIGHT)
    except (AnnotationError, ResourceListError):
        weight = None
    if weight is None or is_zero(weight):
        return dict(maximum)
    return weight


def _total_resource(quota: Mapping[str, Any]) -> ResourceList | None:
    try:
        return quota_resource_list(quota, ANNOTATION_TOTAL_RESOURCE)
    except (AnnotationError, ResourceListError):
        return None


def _namespaces(quota: Mapping[str, Any]) -> tuple[str, ...]:
    try:
        return tuple(quota_namespaces(quota))
    except AnnotationError:
        return ()


def quota_spec(quota: Mapping[str, Any], *, guarantee_usage: bool = False) -> QuotaSpec:
    """The :class:`QuotaSpec` of an ElasticQuota dict (``QuotaSpecError`` when min/max are unreadable)."""
    metadata = quota.get("metadata") or {}
    name = str(metadata.get("name") or "")
    try:
        minimum, maximum = quota_min(quota), quota_max(quota)
    except ResourceListError as err:
        raise QuotaSpecError(f"ElasticQuota {name}: {err}") from None
    return QuotaSpec(
        name=name,
        namespace=str(metadata.get("namespace") or ""),
        parent="" if name == ROOT_QUOTA_NAME else quota_parent(quota),
        is_parent=is_parent(quota),
        allow_lent_resource=allow_lent_resource(quota) and not guarantee_usage,
        min=minimum,
        max=maximum,
        shared_weight=_shared_weight(quota, maximum),
        tree_id=quota_tree_id(quota),
        is_tree_root=is_root(quota),
        ignore_default_tree=labels_of(quota).get(LABEL_IGNORE_DEFAULT_TREE) == "true",
        namespaces=_namespaces(quota),
        total_resource=_total_resource(quota),
        deleting=bool(metadata.get("deletionTimestamp")),
    )
