"""``/validate-node``: node label changes against ``slo-controller-config`` (gate ``NodeValidatingWebhook``).

The slo-controller gives a node the first matching per-node entry of each
``slo-controller-config`` key. When an UPDATE changes a node's labels so that two entries
of one key would select it, the change is refused (400) rather than letting list order
pick the node's strategy, with upstream's text for the first such key
(``___{"reason":"ExistNodeConfict","message":{"config":...,"strategies":[...],
"exampleNodes":[...]}}___``). Keys that do not parse, or have a bad selector, are skipped.
A CREATE is only logged, as upstream does: nodes register themselves and must not be
kept out of the cluster by a configuration conflict.
"""

from __future__ import annotations

import logging

from controlplane.manager.webhooks import metrics
from controlplane.manager.webhooks.configmap.sloconfig import CHECKED_KEYS, parsed_keys
from controlplane.manager.webhooks.context import PluginStep, WebhookContext
from controlplane.manager.webhooks.objects import NODE, ObjectError, check
from controlplane.manager.webhooks.review import AdmissionRequest, AdmissionResponse, allowed, errored
from koordinator.api.extension.annotations import labels_of

__all__ = ["NodeValidatingHandler"]

log = logging.getLogger(__name__)

NAME = "SLOConfigNodeSelector"


class NodeValidatingHandler:
    def __init__(self, ctx: WebhookContext) -> None:
        self.ctx = ctx

    async def handle(self, request: AdmissionRequest) -> AdmissionResponse:
        if request.sub_resource or request.resource_name != "nodes":
            return allowed()
        if request.operation not in ("CREATE", "UPDATE"):
            return allowed()
        try:
            node = check(request.object, NODE, "node")
            old = check(request.old_object, NODE, "old node") if request.operation == "UPDATE" else None
        except ObjectError as exc:
            return errored(400, str(exc))
        labels = labels_of(node)
        if old is not None and labels_of(old) == labels:
            return allowed()
        options = self.ctx.options
        config = self.ctx.cluster.config_map(options.config_namespace, options.slo_config_name)
        data = (config or {}).get("data") or {}
        source = f"{options.config_namespace}/{options.slo_config_name}"
        problem = None
        with PluginStep(self.ctx, metrics.VALIDATING, metrics.NODE, request.operation, NAME) as step:
            for parsed in parsed_keys(data, source, CHECKED_KEYS):
                if problem := parsed.node_conflict(node):
                    break
            if problem and request.operation == "UPDATE":
                step.reject()
                return errored(400, problem)
        if problem:
            log.warning("node %s: config conflict for %s: %s", request.name, options.slo_config_name, problem)
        return allowed()
