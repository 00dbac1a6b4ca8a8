"""kube-scheduler's single-resource LeastAllocated and MostAllocated scores (0-100, integer
division as Go's), shared by the plug-ins that score resources outside the kernel
(NodeResourcesFitPlus, NodeNUMAResource, DeviceShare)."""

from __future__ import annotations

MAX_NODE_SCORE = 100


def least_requested_score(requested: int, capacity: int) -> int:
    """``(capacity - requested) * 100 / capacity``; 0 with no capacity or when over."""
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def most_requested_score(requested: int, capacity: int) -> int:
    """``min(requested, capacity) * 100 / capacity``; 0 with no capacity."""
    if capacity == 0:
        return 0
    return min(requested, capacity) * MAX_NODE_SCORE // capacity
