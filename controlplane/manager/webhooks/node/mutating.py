"""``/mutate-node-status``: resource amplification of node allocatable (gate ``NodeMutatingWebhook``).

When the slo-controller puts ``node.koordinator.sh/resource-amplification-ratio`` (e.g.
``{"cpu":1.5}``) on a node, the kubelet's ``cpu``/``memory`` allocatable is kept in
``node.koordinator.sh/raw-allocatable`` and the amplified value (raw x ratio, milli
precision, rounded down) is written to ``status.allocatable`` on every status UPDATE
(CREATE passes unchanged, as upstream). Ratios of 1 or less are skipped: amplification
never shrinks a node. The raw value is refreshed when the kubelet reports a different
allocatable than before or the annotation is missing. Without a ratio, a stale
``raw-allocatable`` is removed. A ratio
annotation that cannot be read leaves the node untouched (logged): upstream answers it
with an error (500), which refuses every status update of the node, kubelet heartbeats
included, until someone fixes the annotation.
"""

from __future__ import annotations

import logging
from typing import Any

from controlplane.manager.webhooks import metrics
from controlplane.manager.webhooks.context import PluginStep, WebhookContext
from controlplane.manager.webhooks.jsonpatch import create_patch, json_copy
from controlplane.manager.webhooks.objects import NODE, ObjectError, check, ensure_map
from controlplane.manager.webhooks.review import (
    AdmissionRequest,
    AdmissionResponse,
    allowed,
    errored,
    patched,
)
from koordinator.api import resourcelist
from koordinator.api.extension.annotations import AnnotationError, get_resource_list
from koordinator.api.extension.node import (
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    get_resource_amplification_ratios,
)
from koordinator.api.jsonutil import marshal
from koordinator.api.quantity import Quantity

__all__ = ["NodeMutatingHandler", "amplify"]

log = logging.getLogger(__name__)

NAME = "ResourceAmplification"
AMPLIFIED = ("cpu", "memory")

Obj = dict[str, Any]


def amplify(quantity: Quantity, ratio: float) -> Quantity:
    return Quantity.from_milli(int(quantity.milli_value() * ratio), quantity.format)


def _allocatable(node: Obj) -> dict[str, Quantity]:
    return resourcelist.mask(resourcelist.parse((node.get("status") or {}).get("allocatable")), AMPLIFIED)


def amplify_node(node: Obj, old: Obj | None) -> None:
    """Apply the amplification ratios to ``node`` in place."""
    meta = ensure_map(node, "metadata")
    raw_annotations = meta.get("annotations")
    annotations: dict[str, Any] = raw_annotations if isinstance(raw_annotations, dict) else {}
    try:
        ratios = get_resource_amplification_ratios(annotations)
    except AnnotationError as exc:
        log.warning("node %s: %s", meta.get("name", ""), exc)
        return
    ratios = {name: ratio for name, ratio in ratios.items() if name in AMPLIFIED}
    if not ratios:
        annotations.pop(ANNOTATION_NODE_RAW_ALLOCATABLE, None)
        return
    reported = _allocatable(node)
    try:
        raw = get_resource_list(annotations, ANNOTATION_NODE_RAW_ALLOCATABLE)
    except AnnotationError:
        raw = None
    kubelet_changed = old is not None and _allocatable(old) != reported
    if raw is None or kubelet_changed:
        raw = reported
        annotations[ANNOTATION_NODE_RAW_ALLOCATABLE] = marshal(resourcelist.to_json(raw))
        meta["annotations"] = annotations
    allocatable = ensure_map(ensure_map(node, "status"), "allocatable")
    for name, ratio in ratios.items():
        if name in raw and ratio > 1:
            allocatable[name] = str(amplify(raw[name], ratio))


class NodeMutatingHandler:
    def __init__(self, ctx: WebhookContext) -> None:
        self.ctx = ctx

    async def handle(self, request: AdmissionRequest) -> AdmissionResponse:
        if request.resource_name != "nodes" or request.sub_resource != "status":
            return allowed()
        if request.operation != "UPDATE":
            return allowed()
        try:
            original = check(request.object, NODE, "node")
            old = check(request.old_object, NODE, "old node") if request.old_object is not None else None
        except ObjectError as exc:
            return errored(400, str(exc))
        node = json_copy(original)
        with PluginStep(self.ctx, metrics.MUTATING, metrics.NODE, request.operation, NAME):
            amplify_node(node, old)
        return patched(create_patch(original, node))
