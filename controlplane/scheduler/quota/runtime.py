"""The runtime quota calculator: how a parent's resources are shared among its children.

For one parent and one resource, every child brings its limited request (``min(request,
max)``), its effective min (the auto-scaled min, raised to its guaranteed amount), its
shared weight and whether it lends what it does not use. :func:`distribute` then follows
upstream's ``redistribution``:

1. a child asking more than its min gets its min and joins the *adjust set*; any other
   child gets its request when it lends resources, else its whole min;
2. what is left of the parent's total (if anything) is split over the adjust set in
   proportion to the shared weights with the largest-remainder (Hamilton) method: integer
   shares ``w * rest // W``, then one more unit to the largest remainders, ties broken by
   quota name, so the shares add up to ``rest`` exactly;
3. a child pushed above its request is cut back to it and the excess is split again over
   the children still short, until nothing is left or nobody is short.

All arithmetic is on Python integers in the units of :func:`~.quantities.quantity_value`
(milli-cores for CPU), exact where upstream uses 128-bit intermediates.

:func:`scale_min` is upstream's ``ScaleMinQuotaManager``: when the children's mins add up
to more than the parent's total in a dimension, each child's min there becomes
``total * min / sum`` (float64 arithmetic truncated, as upstream computes it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controlplane.scheduler.quota.quantities import make_quantity, quantity_value
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import ResourceList, sum_of

__all__ = ["ShareRequest", "distribute", "hamilton_deltas", "scale_min"]


@dataclass(frozen=True, slots=True)
class ShareRequest:
    """One child of a parent, in one resource dimension (integers, see the module docstring)."""

    name: str
    request: int
    min: int
    guarantee: int = 0
    weight: int = 0
    allow_lent: bool = True


def hamilton_deltas(total: int, total_weight: int, nodes: Sequence[ShareRequest]) -> list[int]:
    """``computeHamiltonDeltas``: split ``total`` over ``nodes`` by weight, summing to ``total``.

    Nodes with no positive weight get nothing; ``total_weight`` is the sum the caller
    computed over ``nodes`` (upstream divides by it, not by the positive weights only).
    """
    deltas = [0] * len(nodes)
    if total_weight <= 0 or total <= 0 or not nodes:
        return deltas
    remainders: list[tuple[int, str, int]] = []
    distributed = 0
    for index, node in enumerate(nodes):
        if node.weight <= 0:
            continue
        base, remainder = divmod(node.weight * total, total_weight)
        deltas[index] = base
        distributed += base
        remainders.append((remainder, node.name, index))
    residual = total - distributed
    # largest remainder first, then the quota name, as upstream's stable sort orders them
    remainders.sort(key=lambda entry: (-entry[0], entry[1]))
    for _, _, index in remainders:
        if residual <= 0:
            break
        deltas[index] += 1
        residual -= 1
    return deltas


def distribute(total: int, children: Sequence[ShareRequest]) -> dict[str, int]:
    """Each child's runtime in one dimension of a parent whose total is ``total``."""
    runtime: dict[str, int] = {}
    to_partition = total
    total_weight = 0
    adjust: list[ShareRequest] = []
    for child in children:
        floor = max(child.min, child.guarantee)
        if child.request > floor:
            adjust.append(child)
            total_weight += child.weight
            runtime[child.name] = floor
        else:
            runtime[child.name] = child.request if child.allow_lent else floor
        to_partition -= runtime[child.name]

    while to_partition > 0 and total_weight > 0 and adjust:
        deltas = hamilton_deltas(to_partition, total_weight, adjust)
        still_short: list[ShareRequest] = []
        excess = 0
        short_weight = 0
        for node, delta in zip(adjust, deltas, strict=True):
            value = runtime[node.name] + delta
            if value < node.request:
                still_short.append(node)
                short_weight += node.weight
                runtime[node.name] = value
            else:
                excess += value - node.request
                runtime[node.name] = node.request
        to_partition, total_weight, adjust = excess, short_weight, still_short
    return runtime


def scale_min(
    total: Mapping[str, Quantity], mins: Mapping[str, Mapping[str, Quantity]], enabled: bool
) -> dict[str, ResourceList]:
    """The children's auto-scaled mins under a parent whose total is ``total``.

    ``mins`` maps each child to its ``spec.min``. Disabled, or when the mins fit, every
    child keeps its own min. Only dimensions present in ``total`` are scaled.
    """
    originals = {name: dict(value) for name, value in mins.items()}
    if not enabled:
        return originals
    sums = sum_of(mins.values())
    oversubscribed = [resource for resource, value in total.items() if value < sums.get(resource, Quantity())]
    if not oversubscribed:
        return originals
    scaled: dict[str, ResourceList] = {}
    for child, original in originals.items():
        result = dict(original)
        for resource in oversubscribed:
            available = total[resource]
            if available.value() <= 0:
                result[resource] = Quantity()
                continue
            child_min = quantity_value(resource, original.get(resource))
            sum_min = sums.get(resource, Quantity())
            value = 0
            if sum_min.value() > 0:
                value = int(
                    float(quantity_value(resource, available))
                    * float(child_min)
                    / float(quantity_value(resource, sum_min))
                )
            result[resource] = make_quantity(resource, value)
        scaled[child] = result
    return scaled
