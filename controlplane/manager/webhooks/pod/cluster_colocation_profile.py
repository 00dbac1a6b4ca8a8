"""Pod mutation by ClusterColocationProfiles, then batch/mid resource replacement.

The profiles that match a new pod are applied in name order (see
:mod:`controlplane.manager.webhooks.colocation`). When at least one profile matched, and
none of the matched profiles carries ``config.koordinator.sh/skip-update-resources`` and the
``ColocationProfileSkipMutatingResources`` gate is off, the pod's ``cpu`` and ``memory``
are replaced by the extended resources of its priority class
(``GetPodPriorityClassWithDefault``): ``kubernetes.io/batch-cpu``/``batch-memory`` for
koord-batch, ``mid-*`` for koord-mid. CPU becomes an integer number of milli-cores
(``500m`` -> ``500``). Requests and limits of every init and regular container are
replaced, and ``spec.overhead``; a container that ends up with an extended limit but no
extended request gets the limit as its request. Prod, free and unclassified pods keep
their resources.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from controlplane.manager.webhooks.colocation import (
    ProfileTarget,
    apply_profile,
    matching_profiles,
    should_skip,
    skips_resource_update,
)
from controlplane.manager.webhooks.context import WebhookContext
from controlplane.manager.webhooks.objects import POD, quantity
from controlplane.manager.webhooks.strategicmerge import POD_RULES
from koordinator.api.extension.annotations import labels_of
from koordinator.api.extension.priority import PriorityClass, get_pod_priority_class_with_default
from koordinator.api.extension.resources import RESOURCE_NAME_MAP
from koordinator.api.quantity import Format, Quantity

__all__ = ["NAME", "POD_TARGET", "mutate_pod_by_profiles", "replace_extended_resources"]

NAME = "ClusterColocationProfile"
POD_TARGET = ProfileTarget("Pod", ("spec",), POD_RULES, POD)

Obj = dict[str, Any]


async def mutate_pod_by_profiles(ctx: WebhookContext, pod: Obj, namespace: str, warnings: list[str]) -> Obj:
    """Apply the matching profiles to ``pod`` (a copy owned by the caller); returns the result."""
    profiles = ctx.cluster.colocation_profiles()
    if not profiles:
        return pod

    async def namespace_labels() -> Mapping[str, str]:
        found = await ctx.cluster.namespace(namespace) if namespace else None
        return labels_of(found) if found is not None else {}

    matched = await matching_profiles(profiles, labels_of(pod), namespace_labels, warnings)
    if not matched:
        return pod
    for profile in matched:
        if should_skip(profile, ctx.rand_intn):
            continue
        pod = await apply_profile(pod, profile, POD_TARGET, ctx.cluster.priority_class)
    if skips_resource_update(matched) or ctx.enabled("ColocationProfileSkipMutatingResources"):
        return pod
    replace_extended_resources(pod)
    return pod


def _extended(native: str, raw: Any) -> str:
    """The extended resource's value for ``native``'s: milli-cores for cpu, canonical text.

    Not cached by value: quantities equal in value compare equal (``2Ki`` and ``2048``),
    and a value-keyed cache would hand out the spelling of whichever came first."""
    value = quantity(raw)
    if native == "cpu":
        value = Quantity.from_int(value.milli_value(), Format.DECIMAL_SI)
    return str(value)


#: (native resource, its text) -> the extended value; a cluster uses few spellings.
_extended_text = functools.lru_cache(maxsize=4096)(_extended)


def _replace(resources: Any, mapping: Mapping[str, str]) -> None:
    if not isinstance(resources, dict):
        return
    for native, extended in mapping.items():
        if native in resources:
            raw = resources.pop(native)
            text = _extended_text(native, raw) if isinstance(raw, str) else _extended(native, raw)
            resources[extended] = text


def replace_extended_resources(pod: Obj) -> None:
    """Swap cpu/memory for the batch or mid resources of the pod's priority class (in place)."""
    priority = get_pod_priority_class_with_default(pod)
    mapping = RESOURCE_NAME_MAP.get(priority)
    if not mapping or priority in (PriorityClass.NONE, PriorityClass.PROD):
        return
    spec = pod.get("spec") or {}
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            resources = container.get("resources")
            if not isinstance(resources, dict):
                continue
            requests, limits = resources.get("requests"), resources.get("limits")
            _replace(requests, mapping)
            _replace(limits, mapping)
            if not isinstance(limits, dict):
                continue
            for extended in mapping.values():
                if extended in limits and not (isinstance(requests, dict) and extended in requests):
                    if not isinstance(requests, dict):
                        requests = {}
                        resources["requests"] = requests
                    requests[extended] = limits[extended]
    _replace(spec.get("overhead"), mapping)
