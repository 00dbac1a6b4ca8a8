"""The pure rules of quota admission: what a pod counts, what a quota allows, how a refusal reads.

* A pod counts its effective requests (containers, init containers, ``spec.overhead``), and
  nothing once it has Failed or Succeeded or its deletion grace period is over
  (upstream's ``QuotaV1Pod``).
* Only the resources named in the quota's ``spec.max`` are charged, and nothing at all
  unless one of them is a pod resource (:data:`POD_RESOURCES`).
* The limit is the quota's ``admission`` annotation, or ``spec.max`` when that annotation
  is absent or an empty list; the total already charged is its ``child-request``
  annotation (empty when absent).
* A refusal names only the resources that went over:
  ``exceeded quota: ns/name, requested: cpu=2, used: cpu=4, limited: cpu=4``.

With ``ElasticQuotaEvaluationTransformPod`` and ``ReplaceResourcesTransformer`` the pod is
first rewritten by its ``pod.koordinator.sh/replace-resources`` annotation
(:func:`replace_resources`), as the scheduler sees it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from koordinator.api import resourcelist
from koordinator.api.extension.annotations import annotations_of
from koordinator.api.extension.constants import ANNOTATION_REPLACE_RESOURCES
from koordinator.api.extension.quota import ANNOTATION_ADMISSION, ANNOTATION_CHILD_REQUEST
from koordinator.api.extension.resources import (
    BATCH_CPU,
    BATCH_MEMORY,
    GPU,
    GPU_MEMORY_RATIO,
    GPU_SHARED,
    MID_CPU,
    MID_MEMORY,
    NVIDIA_GPU,
)
from koordinator.api.jsonutil import JSONError, unmarshal
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import ResourceList, ResourceListError
from koordinator.kube.timeutil import parse_time

__all__ = [
    "POD_RESOURCES",
    "QuotaReadError",
    "admission_limit",
    "charged_names",
    "child_request",
    "exceeded_message",
    "mask_non_zero",
    "pod_usage",
    "pretty_print",
    "quota_key",
    "replace_resources",
    "retries_for_batch",
]

Obj = dict[str, Any]

#: the resources of pods a quota can limit (upstream's ``podResources``)
POD_RESOURCES = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        BATCH_CPU,
        BATCH_MEMORY,
        MID_CPU,
        MID_MEMORY,
        GPU,
        NVIDIA_GPU,
        GPU_SHARED,
        GPU_MEMORY_RATIO,
    }
)
#: the fewest retries of a batch's write (upstream's ``quotaUpdateMinRetries``)
MIN_RETRIES = 3


class QuotaReadError(ValueError):
    """A quota whose ``spec.max`` or a ResourceList annotation cannot be read."""


def quota_key(quota: Mapping[str, Any]) -> str:
    """``namespace/name`` of a quota."""
    meta = quota.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _annotation_resources(quota: Mapping[str, Any], key: str) -> ResourceList:
    """A JSON ResourceList annotation; empty when absent, empty or ``null``."""
    raw = annotations_of(quota).get(key, "")
    if not raw:
        return {}
    where = f"annotation {key} of elastic quota {quota_key(quota)}"
    try:
        data = unmarshal(raw)
    except JSONError as exc:
        raise QuotaReadError(f"invalid {where}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise QuotaReadError(f"invalid {where}: expected a JSON object of quantities")
    try:
        return resourcelist.parse(data, path=key)
    except ResourceListError as exc:
        raise QuotaReadError(f"invalid {where}: {exc}") from None


def child_request(quota: Mapping[str, Any]) -> ResourceList:
    """What is already charged: the ``child-request`` annotation."""
    return _annotation_resources(quota, ANNOTATION_CHILD_REQUEST)


def admission_limit(quota: Mapping[str, Any]) -> ResourceList:
    """The ``admission`` annotation, or ``spec.max`` when it is absent or an empty list."""
    admission = _annotation_resources(quota, ANNOTATION_ADMISSION)
    if admission:
        return admission
    try:
        return resourcelist.parse((quota.get("spec") or {}).get("max"), path="spec.max")
    except ResourceListError as exc:
        raise QuotaReadError(f"invalid elastic quota {quota_key(quota)}: {exc}") from None


def charged_names(quota: Mapping[str, Any]) -> frozenset[str]:
    """The resource names of ``spec.max``: the only ones charged."""
    maximum = (quota.get("spec") or {}).get("max")
    return frozenset(str(name) for name in maximum) if isinstance(maximum, Mapping) else frozenset()


def mask_non_zero(resources: Mapping[str, Quantity], names: Iterable[str]) -> ResourceList:
    """The non-zero values of ``resources`` whose name is in ``names`` (``maskResourceList``)."""
    wanted = set(names)
    return {name: value for name, value in resources.items() if name in wanted and not value.is_zero()}


def _counts(pod: Mapping[str, Any], now: float) -> bool:
    """Whether the pod still uses its quota: not finished, not past its deletion grace period."""
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Failed", "Succeeded"):
        return False
    meta = pod.get("metadata") or {}
    deleted, grace = meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds")
    if isinstance(deleted, str) and deleted and isinstance(grace, int) and not isinstance(grace, bool):
        try:
            return now <= parse_time(deleted) + grace
        except ValueError:
            return True
    return True


def pod_usage(pod: Mapping[str, Any], now: float) -> ResourceList:
    """The pod's effective requests; empty for a pod that no longer counts.

    Raises :class:`~koordinator.api.resourcelist.ResourceListError` for a malformed quantity.
    """
    if not _counts(pod, now):
        return {}
    return resourcelist.pod_requests(pod)


def _replace_pairs(pod: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """(names to erase, from -> to) of the replace-resources annotation; malformed items are skipped."""
    raw = annotations_of(pod).get(ANNOTATION_REPLACE_RESOURCES, "")
    erase: list[str] = []
    mappings: dict[str, str] = {}
    for item in raw.split(",") if raw else ():
        parts = item.split(":")
        if len(parts) != 2:
            continue
        source, target = parts[0].strip(), parts[1].strip()
        if target:
            mappings[source] = target
        else:
            erase.append(source)
    return erase, mappings


def _rewrite(resources: Obj, erase: list[str], mappings: Mapping[str, str]) -> None:
    for name in erase:
        resources.pop(name, None)
    for source, target in mappings.items():
        if target in resources or source not in resources:
            continue
        value = resources.pop(source)
        if source == "cpu":
            value = str(Quantity.from_int(Quantity.from_json(value).milli_value()))
        resources[target] = value


def replace_resources(pod: Mapping[str, Any]) -> Obj:
    """A copy of the pod rewritten by ``pod.koordinator.sh/replace-resources`` (``"a:b,c:"``: ``a``
    becomes ``b``, ``c`` is erased; ``cpu`` moved to another name counts milli-cores).

    Raises :class:`~koordinator.api.quantity.QuantityError` for a malformed ``cpu`` quantity.
    """
    result: Obj = copy.deepcopy(dict(pod))
    erase, mappings = _replace_pairs(pod)
    if not erase and not mappings:
        return result
    spec = result.get("spec") or {}
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            for which in ("requests", "limits"):
                if isinstance(resources.get(which), dict):
                    _rewrite(resources[which], erase, mappings)
    if isinstance(spec.get("overhead"), dict):
        _rewrite(spec["overhead"], erase, mappings)
    return result


def pretty_print(resources: Mapping[str, Quantity]) -> str:
    """``cpu=2,memory=4Gi``: names sorted, canonical quantities."""
    return ",".join(f"{name}={resources[name]}" for name in sorted(resources))


def exceeded_message(
    key: str,
    requested: Mapping[str, Quantity],
    used: Mapping[str, Quantity],
    limit: Mapping[str, Quantity],
    over: Iterable[str],
) -> str:
    """Upstream's refusal, each list masked to the resources that went over."""
    names = list(over)
    return (
        f"exceeded quota: {key}, requested: {pretty_print(resourcelist.mask(requested, names))}, "
        f"used: {pretty_print(resourcelist.mask(used, names))}, "
        f"limited: {pretty_print(resourcelist.mask(limit, names))}"
    )


def retries_for_batch(changed: int, max_retries: int) -> int:
    """Retries a batch's write gets: three, one more per doubling of the pods it charges,
    at most ``max_retries`` (never below three)."""
    ceiling = max(max_retries, MIN_RETRIES)
    if changed <= 1:
        return MIN_RETRIES
    # floor(log2(changed)), exactly
    return min(MIN_RETRIES + changed.bit_length() - 1, ceiling)
