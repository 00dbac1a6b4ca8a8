"""``/validate-configmap``: the ``slo-controller-config`` ConfigMap (gate ``ConfigMapValidatingWebhook``).

Only ``<config-namespace>/slo-controller-config`` is checked (the webhook configuration
also selects it by the ``koordinator.sh/configmap-type`` label). On CREATE and UPDATE,
each key among ``colocation-config``, ``resource-threshold-config``,
``resource-qos-config``, ``system-config`` and ``cpu-burst-config`` that is non-empty and
changed is checked in that order (see :mod:`.sloconfig`): it parses, its entries have
non-empty valid ``nodeSelector`` s, its values are in range, its entries are named (with
``--node-strategy-name-need-check``) and no two of their selectors overlap. Then, when
one of those keys has several entries, no existing node may be selected by two entries
of a key (nodes in name order).

DELETE is allowed. The first problem is refused with status code 400 and upstream's
``___{"reason":...,"message":...}___`` text.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from controlplane.manager.webhooks import metrics
from controlplane.manager.webhooks.configmap.sloconfig import CHECKED_KEYS, KeyCheck
from controlplane.manager.webhooks.context import PluginStep, WebhookContext
from controlplane.manager.webhooks.objects import CONFIG_MAP, ObjectError, check
from controlplane.manager.webhooks.review import AdmissionRequest, AdmissionResponse, allowed, errored

__all__ = ["ConfigMapValidatingHandler", "validate_slo_config"]

log = logging.getLogger(__name__)

NAME = "SLOControllerConfig"

Obj = dict[str, Any]


def validate_slo_config(
    data: Mapping[str, str],
    old_data: Mapping[str, str] | None,
    nodes: list[Obj],
    *,
    config_map: str,
    require_names: bool,
) -> str | None:
    """The first problem of the changed keys, or ``None``; ``config_map`` is ``namespace/name``."""
    checks: list[KeyCheck] = []
    for key in CHECKED_KEYS:
        text = data.get(key)
        if not text or (old_data is not None and old_data.get(key) == text):
            continue
        parsed, problem = KeyCheck.parse(key, text, config_map)
        if parsed is None:
            return problem
        if problem := parsed.values(text):
            return problem
        if require_names and (problem := parsed.names()):
            return problem
        if problem := parsed.overlap():
            return problem
        checks.append(parsed)
    if not any(len(c.entries) > 1 for c in checks):
        return None
    for node in sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name") or "")):
        for parsed in checks:
            if problem := parsed.node_conflict(node):
                return problem
    return None


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
            problem = validate_slo_config(
                config_map.get("data") or {},
                ((old or {}).get("data") or {}) if old is not None else None,
                list(self.ctx.cluster.nodes()),
                config_map=f"{namespace}/{meta.get('name')}",
                require_names=options.node_strategy_name_need_check,
            )
            if problem:
                step.reject()
                return errored(400, problem)
        return allowed()
