"""Required pod labels from ``pod-enhanced-validator-config`` (gate ``EnablePodEnhancedValidator``).

The ConfigMap ``koordinator-system/pod-enhanced-validator-config`` holds ``enable``
(``"true"``, case-insensitive) and ``rules``: a JSON list of
``{"name", "requiredLabels": [...], "namespaceWhitelist": [...]}``. With ``enable`` on, a pod
outside a rule's whitelisted namespaces must carry every label the rule requires. The
ConfigMap is read from the informer cache, so changes apply at once. An unreadable
``rules`` value disables the check (and is logged): refusing every pod because of a typo
in this ConfigMap would take the cluster down.
"""

from __future__ import annotations

import logging
from typing import Any

from controlplane.manager.webhooks.context import WebhookContext
from koordinator.api.extension.annotations import labels_of
from koordinator.api.jsonutil import JSONError, unmarshal

__all__ = ["CONFIG_NAME", "NAME", "validate_required_labels"]

log = logging.getLogger(__name__)

NAME = "EnhancedValidation"
CONFIG_NAME = "pod-enhanced-validator-config"

Obj = dict[str, Any]


def _rules(config: Obj) -> list[Obj]:
    data = config.get("data") or {}
    if str(data.get("enable", "")).strip().lower() != "true":
        return []
    raw = data.get("rules")
    if not raw:
        return []
    try:
        rules = unmarshal(raw)
    except JSONError as exc:
        log.error("%s: rules are not valid JSON, enhanced validation is off: %s", CONFIG_NAME, exc)
        return []
    if not isinstance(rules, list) or not all(isinstance(rule, dict) for rule in rules):
        log.error("%s: rules must be a JSON list of objects, enhanced validation is off", CONFIG_NAME)
        return []
    return rules


def validate_required_labels(ctx: WebhookContext, pod: Obj, namespace: str) -> list[str]:
    config = ctx.cluster.config_map(ctx.options.config_namespace, CONFIG_NAME)
    if config is None:
        return []
    labels = labels_of(pod)
    for rule in _rules(config):
        whitelist = rule.get("namespaceWhitelist") or []
        if isinstance(whitelist, list) and namespace in whitelist:
            continue
        required = rule.get("requiredLabels") or []
        missing = [key for key in required if isinstance(key, str) and key not in labels]
        if len(missing) == 1:
            return [f"required label '{missing[0]}' is missing"]
        if missing:
            return [f"required labels are missing: [{' '.join(missing)}]"]
    return []
