"""Node affinity of pods in a multi-tree ElasticQuota (gate ``MultiQuotaTree``).

A pod belongs to the quota named by its ``quota.scheduling.koordinator.sh/name`` label, else
to the quota named like its namespace. When that quota carries a tree id, the
ElasticQuotaProfile labelled with the same ``tree-id`` says which nodes form the tree: its
``nodeSelector`` (``matchLabels`` as ``In`` requirements, ``matchExpressions`` as given) is
ANDed into every required node-affinity term of the pod, or becomes the only term when the
pod has none. Profiles are taken in name order; the first with the tree id wins.
"""

from __future__ import annotations

import logging
from typing import Any

from controlplane.manager.webhooks.context import WebhookContext
from controlplane.manager.webhooks.objects import ELASTIC_QUOTA_PROFILE, ObjectError, check, ensure_map
from koordinator.api.extension.annotations import labels_of
from koordinator.api.extension.quota import LABEL_QUOTA_NAME, LABEL_QUOTA_TREE_ID

__all__ = ["NAME", "mutate_multi_quota_tree_affinity"]

log = logging.getLogger(__name__)

NAME = "MultiQuotaTree"

Obj = dict[str, Any]


def _requirements(selector: Obj) -> list[Obj]:
    requirements: list[Obj] = [
        {"key": key, "operator": "In", "values": [value]}
        for key, value in sorted((selector.get("matchLabels") or {}).items())
    ]
    for expression in selector.get("matchExpressions") or ():
        requirement: Obj = {"key": expression.get("key"), "operator": expression.get("operator")}
        if expression.get("values"):
            requirement["values"] = list(expression["values"])
        requirements.append(requirement)
    return requirements


def _readable(profile: Obj) -> bool:
    try:
        check(profile, ELASTIC_QUOTA_PROFILE, "ElasticQuotaProfile")
    except ObjectError as exc:
        log.warning("ignoring ElasticQuotaProfile %s: %s", (profile.get("metadata") or {}).get("name"), exc)
        return False
    return True


def mutate_multi_quota_tree_affinity(ctx: WebhookContext, pod: Obj, namespace: str) -> None:
    labelled = labels_of(pod).get(LABEL_QUOTA_NAME)
    info = ctx.quotas.view().infos.get(labelled or namespace)
    # without the label, upstream gets the quota named like the namespace *in* that
    # namespace (a quota of that name elsewhere is not the pod's)
    if info is None or not info.tree_id or (not labelled and info.namespace != namespace):
        return
    profiles = sorted(
        (
            p
            for p in ctx.cluster.elastic_quota_profiles()
            if labels_of(p).get(LABEL_QUOTA_TREE_ID) == info.tree_id and _readable(p)
        ),
        key=lambda p: str((p.get("metadata") or {}).get("name") or ""),
    )
    if not profiles:
        return
    selector = (profiles[0].get("spec") or {}).get("nodeSelector") or {}
    requirements = _requirements(selector)
    if not requirements:
        return
    node_affinity = ensure_map(ensure_map(ensure_map(pod, "spec"), "affinity"), "nodeAffinity")
    required = ensure_map(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms")
    if not terms:
        required["nodeSelectorTerms"] = [{"matchExpressions": requirements}]
        return
    for term in terms:
        expressions = term.get("matchExpressions")
        term["matchExpressions"] = [*(expressions or []), *(dict(r) for r in requirements)]
