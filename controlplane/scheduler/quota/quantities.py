"""Integer views of quantities and the ResourceList helpers the quota core shares.

Upstream's runtime calculator works on ``int64`` per resource: CPU in milli-cores
(``MilliValue``), everything else in whole units (``Value``), both rounded up away from
zero. Results go back into quantities as upstream's ``createQuantity`` builds them: CPU as
a DecimalSI milli quantity, memory BinarySI, anything else DecimalSI. The printing helpers
reproduce the text of upstream's scheduling messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from koordinator.api.quantity import Format, Quantity
from koordinator.api.resourcelist import ResourceList

__all__ = [
    "CPU",
    "MEMORY",
    "add_non_negative",
    "go_names",
    "limited",
    "make_quantity",
    "max_with",
    "print_resource_list",
    "quantity_value",
    "remove_zeros",
    "same_ignoring_zeros",
]

CPU = "cpu"
MEMORY = "memory"


def quantity_value(name: str, quantity: Quantity | None) -> int:
    """``getQuantityValue``: milli-cores for CPU, whole units otherwise (missing: 0)."""
    if quantity is None:
        return 0
    return quantity.milli_value() if name == CPU else quantity.value()


def make_quantity(name: str, value: int) -> Quantity:
    """``createQuantity``: the quantity of ``value`` in the unit :func:`quantity_value` uses."""
    if name == CPU:
        return Quantity.from_milli(value, Format.DECIMAL_SI)
    if name == MEMORY:
        return Quantity.from_int(value, Format.BINARY_SI)
    return Quantity.from_int(value, Format.DECIMAL_SI)


def add_non_negative(base: Mapping[str, Quantity], delta: Mapping[str, Quantity]) -> ResourceList:
    """``base + delta`` with every negative result replaced by a zero ``createQuantity``."""
    result = dict(base)
    for name, value in delta.items():
        result[name] = result[name] + value if name in result else value
    for name, value in result.items():
        if value.sign() < 0:
            result[name] = make_quantity(name, 0)
    return result


def add_non_negative_into(target: dict[str, Quantity], delta: Mapping[str, Quantity]) -> None:
    """:func:`add_non_negative` in place, for a ``target`` whose values are not negative
    (the running sums it keeps): only the resources of ``delta`` can change."""
    for name, value in delta.items():
        current = target.get(name)
        result = value if current is None else current + value
        target[name] = result if result.sign() >= 0 else make_quantity(name, 0)


def limited(request: Mapping[str, Quantity], maximum: Mapping[str, Quantity]) -> ResourceList:
    """``getLimitRequestNoLock``: each requested resource capped at ``maximum`` where it has one."""
    return {
        name: maximum[name] if name in maximum and value > maximum[name] else value
        for name, value in request.items()
    }


def max_with(base: Mapping[str, Quantity], floor: Mapping[str, Quantity]) -> ResourceList:
    """``base`` raised to ``floor`` key by key; keys only in ``floor`` are added."""
    result = dict(base)
    for name, value in floor.items():
        if name not in result or value > result[name]:
            result[name] = value
    return result


def remove_zeros(resources: Mapping[str, Quantity]) -> ResourceList:
    """``quotav1.RemoveZeros``."""
    return {name: value for name, value in resources.items() if not value.is_zero()}


def same_ignoring_zeros(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> bool:
    """``quotav1.Equals(RemoveZeros(a), RemoveZeros(b))``."""
    left, right = remove_zeros(a), remove_zeros(b)
    return left.keys() == right.keys() and all(left[name] == right[name] for name in left)


def print_resource_list(resources: Mapping[str, Quantity]) -> str:
    """Upstream's ``printResourceList``: ``cpu:2,memory:1Gi`` sorted, ``<empty>`` when empty."""
    if not resources:
        return "<empty>"
    return ",".join(sorted(f"{name}:{value}" for name, value in resources.items()))


def go_names(names: Iterable[str]) -> str:
    """Go's ``%v`` of a string slice: ``[cpu memory]``."""
    return "[" + " ".join(names) + "]"
