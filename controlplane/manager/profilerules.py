"""The ClusterColocationProfile rules koord-manager lends its colocationprofile controller.

The controllers may not import the webhooks, yet an existing pod must be matched and
changed by exactly the code that changes a new one. This module, above both, builds the
controller's :class:`ProfileRules` from :mod:`controlplane.manager.webhooks.colocation`:
the same selector matching (``namespaceSelector`` included), the same probability rule,
and :func:`apply_profile` on a copy of the profile without the settings an existing pod
cannot take (``schedulerName``, ``priorityClassName``) or must not take twice
(``labelSuffixes``), as upstream's controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from controlplane.manager.controllers.colocationprofile.settings import ProfileRules
from controlplane.manager.webhooks.colocation import apply_profile, matching_profiles, should_skip
from controlplane.manager.webhooks.pod.cluster_colocation_profile import POD_TARGET

__all__ = ["EXISTING_POD_EXCLUDED", "existing_pod_rules"]

#: profile settings the controller does not apply to an existing pod
EXISTING_POD_EXCLUDED = ("schedulerName", "priorityClassName", "labelSuffixes")

Obj = dict[str, Any]


async def _matches(
    profile: Mapping[str, Any],
    labels: Mapping[str, str],
    namespace_labels: Mapping[str, str],
    warnings: list[str],
) -> bool:
    async def fetch() -> Mapping[str, str]:
        return namespace_labels

    return bool(await matching_profiles([cast(Obj, profile)], labels, fetch, warnings))


async def _no_priority_class(name: str) -> Obj | None:
    raise AssertionError(f"priorityClassName {name} reached an existing pod")


async def _apply(pod: Obj, profile: Mapping[str, Any]) -> Obj:
    spec = {k: v for k, v in (profile.get("spec") or {}).items() if k not in EXISTING_POD_EXCLUDED}
    return await apply_profile(pod, {**profile, "spec": spec}, POD_TARGET, _no_priority_class)


def existing_pod_rules() -> ProfileRules:
    return ProfileRules(matches=_matches, should_skip=should_skip, apply=_apply)
