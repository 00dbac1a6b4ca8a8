"""Keys on ClusterColocationProfile objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.api.extension.annotations import annotations_of, labels_of
from koordinator.api.extension.constants import CONFIG_DOMAIN_PREFIX

__all__ = [
    "ANNOTATION_SKIP_UPDATE_RESOURCES",
    "LABEL_CONTROLLER_MANAGED",
    "is_controller_managed",
    "skips_update_resources",
]

#: Presence on a matched profile stops the webhook from replacing cpu/memory with batch/mid resources.
ANNOTATION_SKIP_UPDATE_RESOURCES = CONFIG_DOMAIN_PREFIX + "/skip-update-resources"
#: ``"true"``: the colocation-profile controller also re-applies the profile to pending pods.
LABEL_CONTROLLER_MANAGED = CONFIG_DOMAIN_PREFIX + "/controller-managed"


def skips_update_resources(profile: Mapping[str, Any]) -> bool:
    return ANNOTATION_SKIP_UPDATE_RESOURCES in annotations_of(profile)


def is_controller_managed(profile: Mapping[str, Any]) -> bool:
    return labels_of(profile).get(LABEL_CONTROLLER_MANAGED) == "true"
