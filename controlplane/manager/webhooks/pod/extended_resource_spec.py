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

import functools
from typing import Any

from controlplane.manager.webhooks.encoding import go_json
from controlplane.manager.webhooks.objects import ensure_map, quantity
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.resources import (
    ANNOTATION_EXTENDED_RESOURCE_SPEC,
    BATCH_CPU,
    BATCH_MEMORY,
    ExtendedResourceSpec,
    get_extended_resource_spec,
)

__all__ = ["NAME", "mutate_extended_resource_spec"]

NAME = "ExtendedResourceSpec"
_RESOURCES = (BATCH_CPU, BATCH_MEMORY)

Obj = dict[str, Any]


@functools.lru_cache(maxsize=4096)
def _canonical_text(raw: str) -> str:
    return str(quantity(raw))


def _canonical(raw: Any) -> str:
    return _canonical_text(raw) if isinstance(raw, str) else str(quantity(raw))


def _batch(resources: Any) -> dict[str, str]:
    """The batch resources of a requests/limits map, canonical and sorted (Go's map order)."""
    if not resources:
        return {}
    return {name: _canonical(resources[name]) for name in _RESOURCES if name in resources}


def _computed(pod: Obj) -> dict[str, Any]:
    """The annotation's JSON value: ``{"containers": {...}}``, or ``{}`` without batch resources."""
    containers: dict[str, Any] = {}
    for container in (pod.get("spec") or {}).get("containers") or ():
        resources = container.get("resources") or {}
        limits, requests = _batch(resources.get("limits")), _batch(resources.get("requests"))
        if limits or requests:
            entry: dict[str, Any] = {}
            if limits:
                entry["limits"] = limits
            if requests:
                entry["requests"] = requests
            containers[str(container.get("name") or "")] = entry
    return {"containers": dict(sorted(containers.items()))} if containers else {}


def mutate_extended_resource_spec(pod: Obj, warnings: list[str]) -> None:
    """Write the annotation when the pod's batch resources differ from it (in place)."""
    computed = _computed(pod)
    meta = ensure_map(pod, "metadata")
    annotations = meta.get("annotations") or {}
    current = annotations.get(ANNOTATION_EXTENDED_RESOURCE_SPEC)
    if current is None and not computed:
        return
    text = go_json(computed, floats=False)  # container names and canonical quantities only
    if current == text:
        return
    if current is not None:
        try:
            parsed = get_extended_resource_spec(annotations) or ExtendedResourceSpec()
        except AnnotationError as exc:
            warnings.append(f"replacing unreadable {ANNOTATION_EXTENDED_RESOURCE_SPEC}: {exc.reason}")
        else:
            if parsed.to_json() == text:
                return
    ensure_map(meta, "annotations")[ANNOTATION_EXTENDED_RESOURCE_SPEC] = text
