"""When to write a node's batch and mid resources: update hysteresis by time and by difference.

``desired`` holds the resources of the enabled plug-ins (all four by default); a name it
lacks is left alone. A node status write is needed when the computed resources differ from
the node's and

* this manager has not written the node yet (since it started, or since its NodeMetric
  was deleted), or
* the last write is older than ``updateTimeThresholdSeconds``, or
* a resource appears, disappears, or moves by more than ``resourceDiffThreshold`` of its
  current value (``|new - old| > old * threshold``, compared in milli-units).

Small moves therefore reach the node at most every ``updateTimeThresholdSeconds``, large ones
at once. A node whose status already holds exactly the computed values is never written
(upstream rewrites it unchanged when the time threshold passes). Values go to
``status.capacity`` and ``status.allocatable`` together, in one write (which also carries
the device plug-ins' changes, see :mod:`.devices`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controlplane.manager.controllers.noderesource.views import NodeView
from koordinator.api.quantity import Quantity
from koordinator.api.sloconfig.types import ColocationStrategy

__all__ = ["SyncDecision", "decide", "is_resource_diff", "status_patch"]


@dataclass(frozen=True, slots=True)
class SyncDecision:
    write: bool
    reason: str


def is_resource_diff(old: Quantity | None, new: Quantity | None, threshold: float) -> bool:
    """``IsResourceDiff``: presence changed, or ``|new - old| > old * threshold`` in milli-units."""
    if (old is None) != (new is None):
        return True
    if old is None or new is None:
        return False
    old_milli, new_milli = old.milli_value(), new.milli_value()
    return abs(float(new_milli - old_milli)) > float(old_milli) * threshold


def decide(
    node: NodeView,
    desired: Mapping[str, Quantity | None],
    *,
    last_update: float | None,
    now: float,
    strategy: ColocationStrategy,
    current: Mapping[str, Quantity] | None = None,
) -> SyncDecision:
    """Whether to write ``desired`` to ``node`` now.

    ``current`` overrides the node's allocatable resources when the caller knows better
    than its cache (a write of its own the cache has not seen yet).
    """
    allocatable = node.allocatable_ext if current is None else current
    capacity = node.capacity_ext if current is None else current
    if all(allocatable.get(name) == value and capacity.get(name) == value for name, value in desired.items()):
        return SyncDecision(False, "node status already holds these values")
    if last_update is None:
        return SyncDecision(True, "first update of this node since the manager started")
    period = strategy.update_time_threshold_seconds or 0
    if now > last_update + period:
        return SyncDecision(
            True, f"last update {now - last_update:.0f}s ago, updateTimeThresholdSeconds={period}"
        )
    threshold = strategy.resource_diff_threshold or 0.0
    for name, new in desired.items():
        in_allocatable, in_capacity = allocatable.get(name), capacity.get(name)
        if is_resource_diff(in_allocatable, new, threshold) or (
            in_capacity != in_allocatable and is_resource_diff(in_capacity, new, threshold)
        ):
            return SyncDecision(True, f"{name} differs by more than resourceDiffThreshold={threshold}")
    return SyncDecision(
        False,
        f"every difference is within resourceDiffThreshold={threshold}; "
        f"next update after {last_update + period - now:.0f}s",
    )


def status_patch(desired: Mapping[str, Quantity | None], resource_version: str = "") -> dict[str, object]:
    """The JSON merge patch writing ``desired`` into capacity and allocatable (``null`` removes;
    names not in ``desired`` are left as they are).

    With ``resource_version`` it carries ``metadata.resourceVersion``, which makes it
    conditional: the apiserver answers 409 Conflict when the Node is at another version.
    """
    values = {name: (str(value) if value is not None else None) for name, value in desired.items()}
    patch: dict[str, object] = {"status": {"capacity": dict(values), "allocatable": dict(values)}}
    if resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch
