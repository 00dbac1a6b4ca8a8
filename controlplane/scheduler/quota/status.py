"""The status the scheduler writes back on each ElasticQuota (upstream's status controller).

For a quota and its :class:`~.tree.QuotaSummary`, :func:`status_patch` returns the JSON
merge-patch body upstream's ``syncElasticQuotaStatus`` sends, or None when nothing changed:

* the annotations ``runtime``, ``request``, ``child-request``, ``guaranteed``,
  ``allocated``, ``non-preemptible-request`` and ``non-preemptible-used``, each a JSON
  ResourceList as Go marshals one (keys sorted, quantities as canonical strings:
  ``{"cpu":"5","memory":"1Gi"}``), written only when it differs from the one on the object
  once zero quantities are ignored on both sides;
* ``status.used``, compared the same way and patched key by key (a key that disappeared
  is sent as null).

The body is for a merge PATCH of the object itself (the ElasticQuota CRD has no status
subresource). An annotation that does not parse makes upstream skip the quota forever;
here it is simply rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.scheduler.quota.quantities import same_ignoring_zeros
from controlplane.scheduler.quota.tree import QuotaSummary
from koordinator.api.extension.annotations import AnnotationError, annotations_of, get_resource_list
from koordinator.api.extension.quota import (
    ANNOTATION_ALLOCATED,
    ANNOTATION_CHILD_REQUEST,
    ANNOTATION_GUARANTEED,
    ANNOTATION_NON_PREEMPTIBLE_REQUEST,
    ANNOTATION_NON_PREEMPTIBLE_USED,
    ANNOTATION_REQUEST,
    ANNOTATION_RUNTIME,
)
from koordinator.api.jsonutil import marshal
from koordinator.api.quantity import Quantity, QuantityError
from koordinator.api.resourcelist import ResourceList, ResourceListError, parse, to_json

__all__ = ["STATUS_ANNOTATIONS", "status_annotations", "status_patch"]

STATUS_ANNOTATIONS = (
    ANNOTATION_RUNTIME,
    ANNOTATION_REQUEST,
    ANNOTATION_CHILD_REQUEST,
    ANNOTATION_GUARANTEED,
    ANNOTATION_ALLOCATED,
    ANNOTATION_NON_PREEMPTIBLE_REQUEST,
    ANNOTATION_NON_PREEMPTIBLE_USED,
)


def status_annotations(summary: QuotaSummary) -> dict[str, ResourceList]:
    """The ResourceList each status annotation carries for ``summary``."""
    return {
        ANNOTATION_RUNTIME: summary.runtime,
        ANNOTATION_REQUEST: summary.request,
        ANNOTATION_CHILD_REQUEST: summary.child_request,
        ANNOTATION_GUARANTEED: summary.guaranteed,
        ANNOTATION_ALLOCATED: summary.allocated,
        ANNOTATION_NON_PREEMPTIBLE_REQUEST: summary.non_preemptible_request,
        ANNOTATION_NON_PREEMPTIBLE_USED: summary.non_preemptible_used,
    }


def _current(annotations: Mapping[str, str], key: str) -> ResourceList | None:
    """The annotation's list (empty when absent), None when it does not parse."""
    try:
        return get_resource_list(annotations, key) or {}
    except (AnnotationError, ResourceListError):
        return None


def _canonical(value: Any) -> str | None:
    try:
        return str(Quantity.from_json(value))
    except QuantityError:
        return None


def _used_patch(old: Mapping[str, Any], new: ResourceList) -> dict[str, str | None]:
    patch: dict[str, str | None] = {}
    for name in sorted(new):
        text = str(new[name])
        if name not in old or _canonical(old[name]) != text:
            patch[name] = text
    for name in sorted(set(old) - set(new)):
        patch[name] = None
    return patch


def status_patch(quota: Mapping[str, Any], summary: QuotaSummary) -> dict[str, Any] | None:
    """The merge-patch body bringing ``quota``'s status in line with ``summary`` (None: in line)."""
    annotations = annotations_of(quota)
    changed: dict[str, str] = {}
    for key, resources in status_annotations(summary).items():
        current = _current(annotations, key)
        if current is None or not same_ignoring_zeros(current, resources):
            text = marshal(to_json(resources))
            if annotations.get(key) != text:
                changed[key] = text
    body: dict[str, Any] = {}
    if changed:
        body["metadata"] = {"annotations": changed}
    raw_used = (quota.get("status") or {}).get("used") or {}
    try:
        used = parse(raw_used, path="status.used")
        used_differs = not same_ignoring_zeros(used, summary.used)
    except ResourceListError:
        used_differs = True
    if used_differs:
        used_patch = _used_patch(raw_used if isinstance(raw_used, Mapping) else {}, summary.used)
        if used_patch:
            body["status"] = {"used": used_patch}
    return body or None
