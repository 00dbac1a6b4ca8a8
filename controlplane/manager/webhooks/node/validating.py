"""``/validate-node``: node label changes against ``slo-controller-config`` (gate ``NodeValidatingWebhook``).

The slo-controller gives a node the first matching per-node entry of each
``slo-controller-config`` key. When an UPDATE changes a node's labels so that two entries
of one key would match it, the change is refused (400) rather than letting list order pick
the node's strategy. A CREATE is only logged, as upstream does: nodes register themselves
and must not be kept out of the cluster by a configuration conflict.
"""

from __future__ import annotations

import logging

from controlplane.manager.webhooks import metrics
from controlplane.manager.webhooks.configmap.sloconfig import (
    CHECKED_KEYS,
    entries_matching,
    entry_label,
    node_entries,
)
from controlplane.manager.webhooks.context import PluginStep, WebhookContext
from controlplane.manager.webhooks.fielderrors import aggregate
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
        data = dict((config or {}).get("data") or {})
        problems = []
        with PluginStep(self.ctx, metrics.VALIDATING, metrics.NODE, request.operation, NAME) as step:
            for key, field in CHECKED_KEYS.items():
                entries = node_entries(data, key)
                hits = entries_matching(entries, labels)
                if len(hits) > 1:
                    names = ", ".join(entry_label(entries[i], i) for i in hits)
                    problems.append(
                        f"node {request.name or ''} would match more than one {key} {field}: {names}"
                    )
            if problems and request.operation == "UPDATE":
                step.reject()
                return errored(400, aggregate(problems))
        for problem in problems:
            log.warning("%s", problem)
        return allowed()
