"""The three ElasticQuota objects the scheduler creates at start when they are absent.

``koordinator-root-quota`` (labels ``is-parent=true``, ``allow-lent-resource=false`` and an
empty ``parent``), ``koordinator-system-quota`` and ``koordinator-default-quota`` (``max``
from the args), all in ``quotaGroupNamespace``. Upstream creates them in the order root,
system, default; :func:`builtin_quotas` returns them in that order, as request bodies.
"""

from __future__ import annotations

from typing import Any

from controlplane.scheduler.quota.args import ElasticQuotaArgs
from koordinator.api.extension.quota import (
    DEFAULT_QUOTA_NAME,
    LABEL_ALLOW_LENT_RESOURCE,
    LABEL_QUOTA_IS_PARENT,
    LABEL_QUOTA_PARENT,
    ROOT_QUOTA_NAME,
    SYSTEM_QUOTA_NAME,
)
from koordinator.api.resourcelist import to_json
from koordinator.api.types.sigs import API_VERSION

__all__ = ["builtin_quotas", "default_quota", "root_quota", "system_quota"]

_KIND = "ElasticQuota"


def _quota(
    name: str, namespace: str, spec: dict[str, Any], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": API_VERSION, "kind": _KIND, "metadata": metadata, "spec": spec}


def default_quota(args: ElasticQuotaArgs) -> dict[str, Any]:
    """``koordinator-default-quota``: where pods without a quota go; ``max`` = defaultQuotaGroupMax."""
    return _quota(
        DEFAULT_QUOTA_NAME, args.quota_group_namespace, {"max": to_json(args.default_quota_group_max)}
    )


def system_quota(args: ElasticQuotaArgs) -> dict[str, Any]:
    """``koordinator-system-quota``: ``max`` = systemQuotaGroupMax."""
    return _quota(
        SYSTEM_QUOTA_NAME, args.quota_group_namespace, {"max": to_json(args.system_quota_group_max)}
    )


def root_quota(args: ElasticQuotaArgs) -> dict[str, Any]:
    """``koordinator-root-quota``: the parent of every top-level quota; lends nothing."""
    labels = {LABEL_QUOTA_IS_PARENT: "true", LABEL_ALLOW_LENT_RESOURCE: "false", LABEL_QUOTA_PARENT: ""}
    return _quota(ROOT_QUOTA_NAME, args.quota_group_namespace, {}, labels)


def builtin_quotas(args: ElasticQuotaArgs) -> list[dict[str, Any]]:
    """Root, system and default quota, in upstream's creation order."""
    return [root_quota(args), system_quota(args), default_quota(args)]
