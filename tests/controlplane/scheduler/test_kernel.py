"""The filter/score kernel, one body for the compiled kernel and its pure-Python twin.

Expected values are computed by hand from kube-scheduler's rules (NodeResourcesFit's
filter and LeastAllocated/MostAllocated/RequestedToCapacityRatio scores,
NodeResourcesBalancedAllocation, numFeasibleNodesToFind-style sampling, reservoir
tie-break); the comments show the arithmetic.
"""

from __future__ import annotations

from array import array

import pytest

from controlplane.scheduler import kernel
from controlplane.scheduler.kernel import twin
from controlplane.scheduler.kernel.table import (
    MOST_ALLOCATED,
    REQUESTED_TO_CAPACITY_RATIO,
    NodeTable,
)

GI = 1 << 30
BATCH_CPU = "kubernetes.io/batch-cpu"


def table_with(*nodes: tuple[str, int, int, int]) -> NodeTable:
    """Nodes of (name, milli-CPU, memory bytes, pods)."""
    table = NodeTable()
    for name, cpu, memory, pods in nodes:
        table.set_node(name, {"cpu": cpu, "memory": memory}, pods)
    return table


def seed(value: int = 42) -> array[int]:
    return array("Q", [value])


def test_filter_reasons_follow_node_resources_fit(backend):
    table = table_with(("a", 4000, 32 * GI, 110), ("b", 4000, 32 * GI, 1), ("c", 4000, 32 * GI, 110))
    table.set_node("c", {"cpu": 4000, "memory": 32 * GI, BATCH_CPU: 1000}, 110)
    running = table.pod_vector({"cpu": 3500, "memory": 40 * GI})  # memory overcommitted
    table.add_pod(table.index["a"], running)
    table.add_pod(table.index["b"], table.pod_vector({}))
    cfg = table.score_config()
    # 600m > 4000 - 3500 on a; b is at its one-pod limit; c has room
    pod = table.pod_vector({"cpu": 600})
    counts = kernel.diagnose(table, pod, cfg, table.live())
    assert counts[twin.TOO_MANY_PODS] == 1
    assert counts[twin.FIRST_RESOURCE + table.column["cpu"]] == 1
    # no memory request: a node with memory overcommitted does not fail it for memory
    assert counts[twin.FIRST_RESOURCE + table.column["memory"]] == 0
    assert kernel.find(table, pod, cfg, table.live(), 0, 3, seed())[0] == table.index["c"]
    # an extended resource: a and b have none, c has 1000 < 1200
    batch = table.pod_vector({BATCH_CPU: 1200})
    counts = kernel.diagnose(table, batch, cfg, table.live())
    assert counts[twin.FIRST_RESOURCE + table.column[BATCH_CPU]] == 3
    assert kernel.find(table, batch, cfg, table.live(), 0, 3, seed()) == (-1, 0, 3, -1)


def test_least_allocated_and_balanced_scores(backend):
    table = table_with(("a", 4000, 32 * GI, 110))
    table.add_pod(0, table.pod_vector({"cpu": 1000, "memory": 8 * GI}))
    cfg = table.score_config()
    pod = table.pod_vector({"cpu": 1000, "memory": 8 * GI})
    # fit: cpu (4000 - 2000) * 100 / 4000 = 50, memory (32 - 16) * 100 / 32 = 50 -> 50
    # balanced: fractions 0.5 and 0.5 -> std 0 -> 100
    assert kernel.score(table, 0, pod, cfg) == (50, 100)
    assert kernel.find(table, pod, cfg, table.live(), 0, 1, seed())[3] == 150
    # a pod with no requests: scored with 100m / 200Mi; balanced skips it
    empty = table.pod_vector({})
    # cpu (4000 - 1100) * 100 / 4000 = 72 (72.5 truncated); memory (32Gi - 8Gi - 200Mi) * 100 / 32Gi
    # = 74 (74.4 truncated); (72 + 74) / 2 = 73
    assert kernel.score(table, 0, empty, cfg) == (73, -1)


def test_unbalanced_requests_lower_the_balanced_score(backend):
    table = table_with(("a", 4000, 32 * GI, 110))
    cfg = table.score_config()
    pod = table.pod_vector({"cpu": 3000, "memory": 8 * GI})
    # fractions 0.75 and 0.25 -> std |0.75 - 0.25| / 2 = 0.25 -> int(0.75 * 100) = 75
    # fit: cpu 1000 * 100 / 4000 = 25, memory 24 * 100 / 32 = 75 -> (25 + 75) / 2 = 50
    assert kernel.score(table, 0, pod, cfg) == (50, 75)


def test_most_allocated_and_weights(backend):
    table = table_with(("a", 4000, 32 * GI, 110))
    cfg = table.score_config(MOST_ALLOCATED, {"cpu": 3, "memory": 1}, fit_plugin_weight=2)
    pod = table.pod_vector({"cpu": 1000, "memory": 24 * GI})
    # cpu 1000 * 100 / 4000 = 25 (weight 3), memory 24 * 100 / 32 = 75 (weight 1)
    # (25 * 3 + 75) / 4 = 37 (37.5 truncated)
    assert kernel.score(table, 0, pod, cfg)[0] == 37
    # total: fit 37 * plug-in weight 2 + balanced int((1 - 0.25) * 100) = 75
    assert kernel.find(table, pod, cfg, table.live(), 0, 1, seed())[3] == 37 * 2 + 75


def test_requested_to_capacity_ratio_truncates_like_go(backend):
    table = table_with(("a", 3000, 30 * GI, 110))
    # shape (0, 10), (30, 0): scores scaled by 10 -> 100 at 0%, 0 at 30%
    cfg = table.score_config(REQUESTED_TO_CAPACITY_RATIO, {"cpu": 1}, shape=[(0, 10), (30, 0)])
    pod = table.pod_vector({"cpu": 210})
    # utilization 210 * 100 / 3000 = 7 -> 100 + (0 - 100) * (7 - 0) / 30 = 100 + trunc(-23.3) = 77
    assert kernel.score(table, 0, pod, cfg)[0] == 77
    # above 30% the last point holds (0), and a zero part is left out of the average
    cfg = table.score_config(REQUESTED_TO_CAPACITY_RATIO, {"cpu": 1, "memory": 1}, shape=[(0, 10), (30, 0)])
    big = table.pod_vector({"cpu": 2000, "memory": 3 * GI})
    # cpu 66% -> 0 (left out); memory 10% -> 100 + (-100 * 10) / 30 = 67 -> round(67 / 1) = 67
    assert kernel.score(table, 0, big, cfg)[0] == 67


def test_sampling_starts_at_start_and_stops_after_want_feasible(backend):
    table = table_with(*((f"n{i}", 4000, 32 * GI, 110) for i in range(10)))
    mask = table.live()
    mask[9] = 0  # another filter rejected n9
    cfg = table.score_config()
    pod = table.pod_vector({"cpu": 100})
    chosen, feasible, processed, _ = kernel.find(table, pod, cfg, mask, 8, 3, seed())
    # visits n8 (feasible), n9 (masked), n0, n1 -> 3 feasible after 4 rows
    assert (feasible, processed) == (3, 4)
    assert chosen in (table.index["n8"], table.index["n0"], table.index["n1"])
    assert kernel.find(table, pod, cfg, mask, 0, 100, seed())[1:3] == (9, 10)


def test_ties_are_broken_at_random_the_same_way_by_both_backends(backend):
    table = table_with(*((f"n{i}", 4000, 32 * GI, 110) for i in range(5)))
    cfg = table.score_config()
    pod = table.pod_vector({"cpu": 100})
    chosen = [kernel.find(table, pod, cfg, table.live(), 0, 5, seed(s))[0] for s in range(1, 200)]
    assert set(chosen) == set(range(5))  # every tied node gets picked
    # the sequence is the shared xorshift's: the twin picks the same rows
    state = seed(7)
    assert (
        kernel.find(table, pod, cfg, table.live(), 0, 5, state)[0]
        == twin.find(table, pod, cfg, table.live(), 0, 5, seed(7))[0]
    )


def test_the_table_grows_and_gains_columns_after_the_kernel_was_bound(backend):
    table = table_with(("a", 4000, 32 * GI, 110))
    cfg = table.score_config()
    pod = table.pod_vector({"cpu": 100})
    assert kernel.find(table, pod, cfg, table.live(), 0, 1, seed())[0] == 0
    for i in range(40):  # past the first capacity: every buffer is reallocated
        table.set_node(f"m{i}", {"cpu": 8000, "memory": 64 * GI, "nvidia.com/gpu": 2}, 110)
    gpu = table.pod_vector({"nvidia.com/gpu": 1})
    cfg = table.score_config()
    chosen, feasible, processed, _ = kernel.find(table, gpu, cfg, table.live(), 0, 100, seed())
    assert (feasible, processed) == (40, 41)
    assert table.names[chosen].startswith("m")
    table.remove_node("m0")
    assert kernel.find(table, gpu, cfg, table.live(), 0, 100, seed())[1] == 39


def test_a_memoized_pod_vector_is_rebuilt_once_the_table_gains_a_column():
    table = table_with(("a", 4000, 32 * GI, 110))
    first = table.pod_vector({"cpu": 100, "memory": GI})
    assert table.pod_vector({"cpu": 100, "memory": GI}) is first  # the same requests: shared
    table.set_node("g", {"cpu": 8000, "memory": 64 * GI, "nvidia.com/gpu": 2}, 110)
    again = table.pod_vector({"cpu": 100, "memory": GI})
    assert len(again.req) == table.width  # one value per column, the new one included
    assert again.req[table.column["nvidia.com/gpu"]] == 0
    assert len(first.req) == table.width - 1  # vectors already handed out are never changed


def test_normalized_score_plugins_over_the_window(backend):
    from controlplane.scheduler.kernel import Extra

    table = table_with(*((f"n{i}", 4000, 32 * GI, 110) for i in range(3)))
    cfg = table.score_config()
    pod = table.pod_vector({"cpu": 1000, "memory": 8 * GI})
    base = kernel.find(table, pod, cfg, table.live(), 0, 3, seed())[3]  # 50 + 100, the same on every node
    # a TaintToleration-like plug-in (fewer is better, weight 3): n0 has two intolerable
    # PreferNoSchedule taints, n1 one, n2 none -> normalized 0, 50, 100
    taints = Extra("TaintToleration", 3, True, [(b"\x01\x01\x00", 1), (b"\x01\x00\x00", 1)])
    chosen, feasible, processed, best = kernel.find(table, pod, cfg, table.live(), 0, 3, seed(), [taints])
    assert (chosen, feasible, processed, best) == (2, 3, 3, base + 3 * 100)
    # a NodeAffinity-like plug-in (more is better): term weights 10 on n0 and 30 on n1 -> 33, 100, 0
    preferred = Extra("NodeAffinity", 2, False, [(b"\x01\x00\x00", 10), (b"\x00\x01\x00", 30)])
    chosen, _, _, best = kernel.find(table, pod, cfg, table.live(), 0, 3, seed(), [taints, preferred])
    # n0: 0 * 3 + 33 * 2 = 66; n1: 50 * 3 + 100 * 2 = 350; n2: 100 * 3 + 0 = 300
    assert (chosen, best) == (1, base + 350)
    # nobody scores: a reverse plug-in gives everyone 100, a plain one 0
    none = Extra("TaintToleration", 1, True, [])
    assert kernel.find(table, pod, cfg, table.live(), 0, 3, seed(), [none])[3] == base + 100


def test_both_backends_pick_the_same_with_extras():
    import random

    from controlplane.scheduler.kernel import Extra

    if kernel.native() is None:
        pytest.skip("the compiled kernel is not built")
    rng = random.Random(3)
    for _ in range(50):
        n = rng.randint(1, 60)
        table = table_with(
            *((f"n{i}", rng.randint(1, 8) * 1000, rng.randint(1, 32) * GI, 110) for i in range(n))
        )
        cfg = table.score_config()
        pod = table.pod_vector({"cpu": rng.randint(0, 2000), "memory": rng.randint(0, 4) * GI})
        extras = [
            Extra(
                "e",
                rng.randint(1, 5),
                rng.random() < 0.5,
                [
                    (bytes(rng.randint(0, 1) for _ in range(n)), rng.randint(1, 50))
                    for _ in range(rng.randint(0, 4))
                ],
            )
            for _ in range(rng.randint(1, 3))
        ]
        mask = bytes(rng.random() < 0.8 for _ in range(n))
        start, want, value = rng.randrange(n), rng.randint(1, n), rng.getrandbits(63) | 1
        native = kernel.find(table, pod, cfg, mask, start, want, seed(value), extras)
        python = twin.find(table, pod, cfg, mask, start, want, seed(value), extras)
        assert native == python
