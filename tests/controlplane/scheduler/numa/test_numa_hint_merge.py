"""Merging NUMA hints under BestEffort, Restricted and SingleNUMANode (frameworkext
topologymanager policy*.go): which merged hint wins, when the pod is admitted and the exact
rejection reasons; plus the bitmask text used in those reasons."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pytest

from controlplane.scheduler.numa.hints import (
    MergeResult,
    NUMATopologyHint,
    bitmask_string,
    check_exclusive_policy,
    is_narrower,
    iterate_masks,
    merge_hints,
)

NODES = [0, 1, 2, 3]


def h(*nodes: int, preferred: bool = True, score: int = 0) -> NUMATopologyHint:
    return NUMATopologyHint(affinity=frozenset(nodes), preferred=preferred, score=score)


ANY = NUMATopologyHint(preferred=True)
ALL = frozenset(NODES)
Providers = Sequence[Mapping[str, Sequence[NUMATopologyHint] | None]]


def merge(policy: str, providers: Providers, exclusive: str = "", status: Sequence[str] = ()) -> MergeResult:
    return merge_hints(policy, NODES, providers, exclusive, status)


def nodes(hint: NUMATopologyHint) -> set[int] | None:
    return None if hint.affinity is None else set(hint.affinity)


@pytest.mark.parametrize("policy", ["BestEffort", "Restricted", "SingleNUMANode"])
@pytest.mark.parametrize(
    ("providers", "want"),
    [
        pytest.param([{"r1": [h(0)]}, {"r2": [h(0)]}], {0}, id="same one-node hint from both providers"),
        pytest.param([{}, {"r": [h(1)]}], {1}, id="a provider without preference"),
        pytest.param([{"r1": [h(0), h(1)]}, {"r2": [h(1)]}], {1}, id="the only common node"),
        pytest.param(
            [{"r1": [h(0), h(1)]}, {"r2": [h(0), h(0, 1, preferred=False)]}], {0}, id="narrowest preferred"
        ),
        pytest.param(
            [{"r1": [h(1), h(0, 1, preferred=False)]}, {"r2": [h(0), h(1), h(0, 1, preferred=False)]}],
            {1},
            id="preferred wider over non-preferred narrower",
        ),
        pytest.param(
            [{"r1": [h(1), h(0, 1, preferred=False)], "r2": [h(0), h(1), h(0, 1, preferred=False)]}],
            {1},
            id="several resources of one provider",
        ),
    ],
)
def test_common_merges(policy: str, providers: Providers, want: set[int]) -> None:
    result = merge(policy, providers)
    assert (nodes(result.hint), result.hint.preferred, result.admit) == (want, True, True)


def test_no_provider_at_all_prefers_every_node() -> None:
    result = merge("Restricted", [])
    assert (result.hint.affinity, result.hint.preferred, result.admit) == (ALL, True, True)


@pytest.mark.parametrize(
    ("policy", "want_hint", "admit", "reasons"),
    [
        pytest.param("BestEffort", ALL, True, (), id="BestEffort falls back to every node and admits"),
        pytest.param(
            "Restricted",
            ALL,
            False,
            ("Unaligned NUMA Hint cause r1 prefer [01] among [01] & r2 prefer [10] among [10]",),
            id="Restricted rejects, summaries joined by &",
        ),
        pytest.param(
            "SingleNUMANode",
            None,
            False,
            ("Unaligned NUMA Hint cause r1 prefer [01] among [01],r2 prefer [10] among [10]",),
            id="SingleNUMANode rejects, summaries joined by comma",
        ),
    ],
)
def test_no_common_node(
    policy: str, want_hint: frozenset[int] | None, admit: bool, reasons: tuple[str, ...]
) -> None:
    result = merge(policy, [{"r1": [h(0)]}, {"r2": [h(1)]}])
    assert (result.hint.affinity, result.hint.preferred, result.admit, result.reasons) == (
        want_hint,
        False,
        admit,
        reasons,
    )


@pytest.mark.parametrize(
    ("policy", "admit", "reasons"),
    [
        pytest.param("BestEffort", True, (), id="BestEffort ignores an unplaceable resource"),
        pytest.param(
            "Restricted", False, ("Unsatisfied NUMA r",), id="Restricted: Unsatisfied NUMA <resource>"
        ),
        pytest.param("SingleNUMANode", False, ("Unsatisfied NUMA r",), id="SingleNUMANode: Unsatisfied NUMA"),
    ],
)
def test_resource_without_any_hint(policy: str, admit: bool, reasons: tuple[str, ...]) -> None:
    result = merge(policy, [{"r": []}])
    assert (result.admit, result.reasons) == (admit, reasons)


def test_best_effort_unsatisfied_merge_becomes_every_node() -> None:
    """{0} and {0,1} intersect to {0}, narrower than one of them: unsatisfied -> every node."""
    result = merge("BestEffort", [{"r1": [h(0)]}, {"r2": [h(0, 1)]}])
    assert (result.hint.affinity, result.hint.preferred, result.admit) == (ALL, False, True)


def test_restricted_wider_and_narrower_preferred_hints_do_not_align() -> None:
    result = merge("Restricted", [{"r1": [h(0)]}, {"r2": [h(0, 1)]}])
    assert result.reasons == (
        "Unaligned NUMA Hint cause r1 prefer [01] among [01] & r2 prefer [11] among [11]",
    )


def test_summary_lists_non_preferred_hints_among_possible_ones() -> None:
    result = merge("Restricted", [{"r1": [h(0)]}, {"r2": [h(0, preferred=False)]}])
    assert result.reasons == (
        "Unaligned NUMA Hint cause r1 prefer [01] among [01] & r2 prefer [] among [01]",
    )
    assert nodes(result.hint) == {0}


def test_single_numa_node_ignores_multi_node_hints() -> None:
    result = merge("SingleNUMANode", [{"cpu": [h(0, 1), h(2)]}])
    assert (nodes(result.hint), result.admit) == ({2}, True)


def test_single_numa_node_any_hint_means_no_affinity() -> None:
    result = merge("SingleNUMANode", [{"cpu": [ANY]}])
    assert (result.hint.affinity, result.hint.preferred, result.admit) == (None, True, True)


def test_restricted_any_hint_preferred_is_every_node() -> None:
    result = merge("Restricted", [{"r": [ANY]}])
    assert (result.hint.affinity, result.admit) == (ALL, True)


@pytest.mark.parametrize(
    ("hints", "want"),
    [
        pytest.param(
            [h(0, score=10), h(1, score=20)], {1}, id="same size: higher score wins when it comes later"
        ),
        pytest.param(
            [h(1, score=20), h(0, score=10)], {0}, id="a lower bitmask later wins regardless of score"
        ),
        pytest.param([h(0, 1, score=90), h(2, score=0)], {2}, id="fewer nodes beat any score"),
    ],
)
def test_scores_break_ties_only_between_equal_sizes(hints: list[NUMATopologyHint], want: set[int]) -> None:
    assert nodes(merge("BestEffort", [{"cpu": hints}]).hint) == want


def test_merged_score_sums_the_hints_equal_to_the_merge() -> None:
    result = merge("BestEffort", [{"cpu": [h(1, score=30)], "memory": [h(1, score=12)]}])
    assert result.hint.score == 42


@pytest.mark.parametrize(
    ("hint", "status", "ok"),
    [
        pytest.param(
            h(0, 1), ["single", "idle", "idle", "idle"], False, id="multi-node over a single NUMA node"
        ),
        pytest.param(
            h(0, 1), ["shared", "idle", "idle", "idle"], True, id="multi-node over a shared NUMA node"
        ),
        pytest.param(h(0), ["shared", "idle", "idle", "idle"], False, id="one node that is shared"),
        pytest.param(h(0), ["single", "idle", "idle", "idle"], True, id="one node next to single-node pods"),
        pytest.param(ANY, ["idle"] * 4, False, id="no affinity never passes"),
    ],
)
def test_required_numa_exclusivity(hint: NUMATopologyHint, status: list[str], ok: bool) -> None:
    assert check_exclusive_policy(hint, "Required", status) is ok


def test_exclusivity_makes_a_hint_non_preferred() -> None:
    """Restricted, Required exclusivity, NUMA 0 held by single-node pods: {0,1} loses to {1,2}."""
    providers = [{"cpu": [h(0, 1), h(1, 2)]}]
    status = ["single", "idle", "idle", "idle"]
    assert nodes(merge("Restricted", providers, "Required", status).hint) == {1, 2}
    assert nodes(merge("Restricted", providers, "", status).hint) == {0, 1}


@pytest.mark.parametrize(
    ("mask", "text"),
    [
        pytest.param({0}, "01", id="node 0"),
        pytest.param({1}, "10", id="node 1"),
        pytest.param({0, 1}, "11", id="nodes 0 and 1"),
        pytest.param({2}, "100", id="exactly a power of four keeps the short width"),
        pytest.param({0, 2}, "0101", id="padded to an even width"),
        pytest.param({3}, "1000", id="node 3"),
        pytest.param(set(), "00", id="empty"),
        pytest.param(None, "<nil>", id="no affinity"),
    ],
)
def test_bitmask_string(mask: set[int] | None, text: str) -> None:
    assert bitmask_string(mask) == text


def test_masks_iterate_smallest_first_in_list_order() -> None:
    got = ["".join(map(str, sorted(m))) for m in iterate_masks([0, 1, 2])]
    assert got == ["0", "1", "2", "01", "02", "12", "012"]


@pytest.mark.parametrize(
    ("a", "b", "narrower"),
    [
        pytest.param({0}, {0, 1}, True, id="fewer nodes"),
        pytest.param({0}, {1}, True, id="same size, lower bits"),
        pytest.param({1}, {0}, False, id="same size, higher bits"),
        pytest.param({0, 1}, {2}, False, id="more nodes"),
    ],
)
def test_is_narrower(a: Iterable[int], b: Iterable[int], narrower: bool) -> None:
    assert is_narrower(frozenset(a), frozenset(b)) is narrower


def test_unknown_policy_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown NUMA topology policy"):
        merge("Whatever", [])
