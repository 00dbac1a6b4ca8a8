"""``/validate-configmap``: the ``slo-controller-config`` ConfigMap (gate ``ConfigMapValidatingWebhook``).

Only ``<config-namespace>/slo-controller-config`` is checked (the webhook configuration
also selects it by the ``koordinator.sh/configmap-type`` label). On CREATE and UPDATE,
every key among ``colocation-config``, ``resource-threshold-config``,
``resource-qos-config``, ``cpu-burst-config`` and ``system-config`` that is non-empty and
changed must:

* be valid JSON of the right shape, within the documented ranges
  (:func:`koordinator.api.sloconfig.config.validate_config_data`);
* give every per-node entry a non-empty ``nodeSelector`` (and, with
  ``--node-strategy-name-need-check``, a unique non-empty name);
* have no two entries whose selectors can select the same node, and -- when it has more
  than one entry -- no existing node matched by two entries.

DELETE is allowed. Violations are refused with status code 400 listing every problem.
"""

from __future__ import annotations

import logging
from typing import Any

from controlplane.manager.webhooks import metrics
from controlplane.manager.webhooks.configmap.sloconfig import (
    CHECKED_KEYS,
    entries_matching,
    entry_label,
    node_entries,
    overlapping_entries,
)
from controlplane.manager.webhooks.context import PluginStep, WebhookContext
from controlplane.manager.webhooks.fielderrors import aggregate
from controlplane.manager.webhooks.objects import CONFIG_MAP, ObjectError, check
from controlplane.manager.webhooks.review import AdmissionRequest, AdmissionResponse, allowed, errored
from koordinator.api.extension.annotations import labels_of
from koordinator.api.sloconfig.config import validate_config_data

__all__ = ["ConfigMapValidatingHandler", "validate_slo_config"]

log = logging.getLogger(__name__)

NAME = "SLOControllerConfig"

Obj = dict[str, Any]


def validate_slo_config(
    data: dict[str, str], old_data: dict[str, str] | None, nodes: list[Obj], *, require_names: bool
) -> list[str]:
    changed = {
        key: value
        for key, value in data.items()
        if key in CHECKED_KEYS and value and (old_data is None or old_data.get(key) != value)
    }
    if not changed:
        return []
    problems: list[str] = [str(e) for e in validate_config_data(changed, require_names=require_names)]
    for key in changed:
        entries = node_entries(changed, key)
        for i, j in overlapping_entries(entries):
            problems.append(
                f"{key}: {CHECKED_KEYS[key]} {entry_label(entries[i], i)} and {entry_label(entries[j], j)} "
                "have overlapping nodeSelectors"
            )
        if len(entries) > 1:
            for node in nodes:
                hits = entries_matching(entries, labels_of(node))
                if len(hits) > 1:
                    name = (node.get("metadata") or {}).get("name", "")
                    labels = ", ".join(entry_label(entries[i], i) for i in hits)
                    problems.append(
                        f"{key}: node {name} is selected by more than one {CHECKED_KEYS[key]}: {labels}"
                    )
    return problems


class ConfigMapValidatingHandler:
    def __init__(self, ctx: WebhookContext) -> None:
        self.ctx = ctx

    async def handle(self, request: AdmissionRequest) -> AdmissionResponse:
        if request.sub_resource or request.resource_name != "configmaps":
            return allowed()
        if request.operation not in ("CREATE", "UPDATE"):
            if request.operation == "DELETE":
                log.info("ConfigMap %s/%s deleted", request.namespace, request.name)
            return allowed()
        try:
            config_map = check(request.object, CONFIG_MAP, "configmap")
            old = (
                check(request.old_object, CONFIG_MAP, "old configmap")
                if request.operation == "UPDATE"
                else None
            )
        except ObjectError as exc:
            return errored(400, str(exc))
        meta = config_map.get("metadata") or {}
        namespace = meta.get("namespace") or request.namespace
        options = self.ctx.options
        if namespace != options.config_namespace or meta.get("name") != options.slo_config_name:
            return allowed()
        with PluginStep(self.ctx, metrics.VALIDATING, metrics.CONFIG_MAP, request.operation, NAME) as step:
            problems = validate_slo_config(
                dict(config_map.get("data") or {}),
                dict((old or {}).get("data") or {}) if old is not None else None,
                list(self.ctx.cluster.nodes()),
                require_names=options.node_strategy_name_need_check,
            )
            if problems:
                step.reject()
                return errored(400, aggregate(problems))
        return allowed()
