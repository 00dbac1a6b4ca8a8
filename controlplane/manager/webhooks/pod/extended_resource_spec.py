"""The ``node.koordinator.sh/extended-resource-spec`` pod annotation.

The koordlet sets cgroup limits of batch pods from this annotation: per container, the
``kubernetes.io/batch-cpu`` and ``kubernetes.io/batch-memory`` requests and limits the pod
asked for, as JSON (``{"containers":{"main":{"limits":{...},"requests":{...}}}}``, Go's
encoding: map keys sorted, canonical quantities). The annotation is written only when the
computed value differs from the one the pod carries, so a pod without batch resources gets
no annotation; a stale or unreadable value left on a pod without batch resources is
replaced by ``{}``.
"""

from __future__ import annotations

from typing import Any

from koordinator.api import resourcelist
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.resources import (
    ANNOTATION_EXTENDED_RESOURCE_SPEC,
    BATCH_CPU,
    BATCH_MEMORY,
    ExtendedResourceContainerSpec,
    ExtendedResourceSpec,
    get_extended_resource_spec,
)

__all__ = ["NAME", "mutate_extended_resource_spec"]

NAME = "ExtendedResourceSpec"
_RESOURCES = (BATCH_CPU, BATCH_MEMORY)

Obj = dict[str, Any]


def _container_spec(container: Obj) -> ExtendedResourceContainerSpec | None:
    resources = container.get("resources") or {}
    requests = resourcelist.mask(resourcelist.parse(resources.get("requests")), _RESOURCES)
    limits = resourcelist.mask(resourcelist.parse(resources.get("limits")), _RESOURCES)
    if not requests and not limits:
        return None
    return ExtendedResourceContainerSpec(limits=limits, requests=requests)


def mutate_extended_resource_spec(pod: Obj, warnings: list[str]) -> None:
    """Write the annotation when the pod's batch resources differ from it (in place)."""
    computed = ExtendedResourceSpec()
    for container in (pod.get("spec") or {}).get("containers") or ():
        spec = _container_spec(container)
        if spec is not None:
            computed.containers[str(container.get("name") or "")] = spec
    meta = pod.setdefault("metadata", {}) if isinstance(pod.get("metadata"), dict) else None
    if meta is None:
        meta = {}
        pod["metadata"] = meta
    annotations = meta.get("annotations") or {}
    try:
        current = get_extended_resource_spec(annotations) or ExtendedResourceSpec()
    except AnnotationError as exc:
        warnings.append(f"replacing unreadable {ANNOTATION_EXTENDED_RESOURCE_SPEC}: {exc.reason}")
        current = None
    if current is not None and current.to_json() == computed.to_json():
        return
    if not isinstance(meta.get("annotations"), dict):
        meta["annotations"] = {}
    meta["annotations"][ANNOTATION_EXTENDED_RESOURCE_SPEC] = computed.to_json()
