"""How many feasible nodes a cycle looks for before it stops filtering (upstream's
``numFeasibleNodesToFind``, ``pkg/scheduler/schedule_one.go``)."""

from __future__ import annotations

#: below this many nodes every node is checked; never fewer feasible nodes are looked for
MIN_FEASIBLE_NODES_TO_FIND = 100
#: the adaptive percentage never goes below this
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(percentage: int | None, all_nodes: int, *, has_scoring: bool = True) -> int:
    """``percentage`` is the profile's (else the global) percentageOfNodesToScore; 0 or None
    means adaptive: 50% less 1% per 125 nodes, at least 5%. Without score plug-ins one
    feasible node is enough."""
    if not has_scoring:
        return 1
    if all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return all_nodes
    pct = percentage or 0
    if pct == 0:
        pct = 50 - all_nodes // 125
        if pct < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND:
            pct = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND
    found = all_nodes * pct // 100
    return max(found, MIN_FEASIBLE_NODES_TO_FIND)
