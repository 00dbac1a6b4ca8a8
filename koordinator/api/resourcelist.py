"""ResourceList arithmetic (``quotav1`` semantics) and the requests/limits of a pod dict.

A ResourceList is a ``dict[str, Quantity]``; :func:`parse` turns the JSON form
(``{"cpu": "500m", "memory": 1024}``) into one and :func:`to_json` back. Every function
returns a new dict and never mutates its arguments. Missing keys are zero unless stated.

Pod helpers follow the kubelet/scheduler rules for effective requests: the sum over
regular containers, then each init container (restartable sidecars are added to everything
that starts after them) taking the maximum, then ``spec.overhead``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from koordinator.api.quantity import Quantity, QuantityError

__all__ = [
    "ResourceList",
    "ResourceListError",
    "add",
    "equal",
    "fits",
    "is_zero",
    "less_than_or_equal",
    "mask",
    "max_of",
    "min_of",
    "non_negative",
    "parse",
    "pod_limits",
    "pod_requests",
    "subtract",
    "subtract_non_negative",
    "sum_of",
    "to_json",
    "zero",
]

ResourceList = dict[str, Quantity]


class ResourceListError(ValueError):
    """A ResourceList whose JSON form holds something that is not a quantity."""


def parse(data: Mapping[str, Any] | None, *, path: str = "") -> ResourceList:
    """JSON object of quantities -> ResourceList. ``None`` gives an empty list."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ResourceListError(f"{path or 'resources'}: expected an object, got {type(data).__name__}")
    result: ResourceList = {}
    for name, raw in data.items():
        try:
            result[str(name)] = raw if isinstance(raw, Quantity) else Quantity.from_json(raw)
        except QuantityError as exc:
            where = f"{path}.{name}" if path else str(name)
            raise ResourceListError(f"{where}: {exc}") from None
    return result


def to_json(resources: Mapping[str, Quantity]) -> dict[str, str]:
    """ResourceList -> JSON object with canonical quantity strings, keys sorted as Go marshals maps."""
    return {name: str(resources[name]) for name in sorted(resources)}


def zero(names: Iterable[str]) -> ResourceList:
    return {name: Quantity() for name in names}


def add(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """Union of keys, values summed."""
    result = dict(a)
    for name, value in b.items():
        result[name] = result[name] + value if name in result else value
    return result


def sum_of(lists: Iterable[Mapping[str, Quantity]]) -> ResourceList:
    result: ResourceList = {}
    for item in lists:
        result = add(result, item)
    return result


def subtract(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """``quotav1.Subtract``: a - b; keys only in ``b`` appear negated."""
    result = {name: value - b[name] if name in b else value for name, value in a.items()}
    for name, value in b.items():
        if name not in result:
            result[name] = -value
    return result


def subtract_non_negative(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """a - b floored at zero for every key of either list."""
    return non_negative(subtract(a, b))


def non_negative(resources: Mapping[str, Quantity]) -> ResourceList:
    """Negative values replaced by zero (keys kept)."""
    return {
        name: value if value.sign() >= 0 else Quantity(0, value.format) for name, value in resources.items()
    }


def max_of(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """``quotav1.Max``: union of keys, the larger value; a key in one list only keeps its value."""
    result = dict(a)
    for name, value in b.items():
        if name not in result or value > result[name]:
            result[name] = value
    return result


def min_of(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """Union of keys, the smaller value where both have the key; otherwise the present value."""
    result = dict(a)
    for name, value in b.items():
        if name not in result or value < result[name]:
            result[name] = value
    return result


def mask(resources: Mapping[str, Quantity], names: Iterable[str]) -> ResourceList:
    """Only the listed keys that are present (``quotav1.Mask``)."""
    return {name: resources[name] for name in names if name in resources}


def is_zero(resources: Mapping[str, Quantity]) -> bool:
    """True when every value is zero (an empty list is zero)."""
    return all(value.is_zero() for value in resources.values())


def equal(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> bool:
    """``quotav1.Equals``: the same keys with equal values."""
    return a.keys() == b.keys() and all(a[name] == b[name] for name in a)


def less_than_or_equal(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> tuple[bool, list[str]]:
    """``quotav1.LessThanOrEqual``: for keys present in both, ``a <= b``; returns the offending keys."""
    over = sorted(name for name, limit in b.items() if name in a and a[name] > limit)
    return not over, over


def fits(request: Mapping[str, Quantity], available: Mapping[str, Quantity]) -> list[str]:
    """Keys whose non-zero request exceeds what is available (a missing key has nothing available).

    An empty result means the request fits.
    """
    short: list[str] = []
    for name in sorted(request):
        value = request[name]
        if value.sign() > 0 and value > available.get(name, Quantity()):
            short.append(name)
    return short


# ---- pods -------------------------------------------------------------------------------------


def _container_resources(container: Mapping[str, Any], which: str) -> ResourceList:
    resources = container.get("resources") or {}
    return parse(resources.get(which), path=f"{container.get('name', '')}.resources.{which}")


def _pod_total(pod: Mapping[str, Any], which: str, include_overhead: bool) -> ResourceList:
    spec = pod.get("spec") or {}
    total: ResourceList = {}
    for container in spec.get("containers") or ():
        own = _container_resources(container, which)
        total = add(total, own) if total else own  # ``own`` is a fresh dict: no copy needed
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for container in spec.get("initContainers") or ():
        own = _container_resources(container, which)
        if container.get("restartPolicy") == "Always":
            # A sidecar keeps running next to everything started after it.
            total = add(total, own)
            sidecars = add(sidecars, own)
            effective = sidecars
        else:
            effective = add(own, sidecars)
        init_peak = max_of(init_peak, effective)
    total = max_of(total, init_peak)
    if include_overhead and spec.get("overhead"):
        overhead = parse(spec["overhead"], path="spec.overhead")
        if which == "limits":
            # Overhead only raises limits that exist; it never creates a limit.
            overhead = mask(overhead, total)
        total = add(total, overhead)
    return total


def pod_requests(pod: Mapping[str, Any], *, include_overhead: bool = True) -> ResourceList:
    """Effective pod requests (``resourcehelper.PodRequests``) of a pod dict."""
    return _pod_total(pod, "requests", include_overhead)


def pod_limits(pod: Mapping[str, Any], *, include_overhead: bool = True) -> ResourceList:
    """Effective pod limits (``resourcehelper.PodLimits``) of a pod dict; unlimited resources are absent."""
    return _pod_total(pod, "limits", include_overhead)
