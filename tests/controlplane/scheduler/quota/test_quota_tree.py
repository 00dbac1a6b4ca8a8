"""Request, used and runtime of quota trees, with figures worked out by hand from upstream's rules."""

from __future__ import annotations

from typing import Any

from controlplane.scheduler.quota import ElasticQuotaArgs, QuotaForest, QuotaGates
from controlplane.scheduler.quota.quantities import add_non_negative, add_non_negative_into
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import is_zero, parse

from .builders import cpu, eq, pod, pod_dict

W1 = {"cpu": "1"}


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def rl(**values: str) -> dict[str, Quantity]:
    return parse(values)


def three_level_forest() -> QuotaForest:
    """root (10001m) -> team-a, team-b; team-a -> team-a-1, team-a-2; team-a-1 -> x, y."""
    forest = QuotaForest()
    forest.set_cluster_total({"cpu": q("10001m")})
    for obj in (
        eq("team-a", is_parent=True, max=cpu("100"), weight=W1),
        eq("team-b", max=cpu("100"), weight=W1),
        eq("team-a-1", parent="team-a", is_parent=True, max=cpu("100"), weight=W1),
        eq("team-a-2", parent="team-a", max=cpu("100"), weight=W1),
        eq("y", parent="team-a-1", max=cpu("100"), weight=W1),
        eq("x", parent="team-a-1", max=cpu("100"), weight=W1),
    ):
        forest.upsert_quota(obj)
    for name, quota, request in (
        ("px", "x", "2"),
        ("py", "y", "2"),
        ("pa2", "team-a-2", "3"),
        ("pb", "team-b", "6"),
    ):
        forest.add_pod(pod(name, quota=quota, requests=cpu(request)))
    return forest


def test_three_levels_split_by_largest_remainder_with_ties_by_name():
    forest = three_level_forest()
    tree = forest.tree("")
    assert tree is not None
    # 10001m over two equal weights: 5000 each, remainders tie, team-a < team-b gets the unit
    assert tree.runtime("team-a") == {"cpu": q("5001m")}
    assert tree.runtime("team-b") == {"cpu": q("5")}
    # team-a's 5001m: team-a-1 (asks 4) and team-a-2 (asks 3) tie again
    assert tree.runtime("team-a-1") == {"cpu": q("2501m")}
    assert tree.runtime("team-a-2") == {"cpu": q("2500m")}
    # team-a-1's 2501m: x before y
    assert tree.runtime("x") == {"cpu": q("1251m")}
    assert tree.runtime("y") == {"cpu": q("1250m")}
    assert str(tree.runtime("x")["cpu"]) == "1251m"


def test_requests_propagate_and_used_counts_assigned_pods_only():
    forest = three_level_forest()
    tree = forest.tree("")
    assert tree is not None
    assert tree.request("team-a-1") == {"cpu": q("4")}
    summary = forest.summary("team-a")
    assert summary is not None
    assert summary.child_request == {"cpu": q("7")}
    assert summary.request == {"cpu": q("7")}
    assert summary.used == {}
    forest.update_pod(pod("px", quota="x", requests=cpu("2"), node="n1", phase="Running"))
    assert tree.used("x") == tree.used("team-a-1") == tree.used("team-a") == {"cpu": q("2")}
    assert tree.used("team-b") == {}
    root = forest.summary("koordinator-root-quota")
    assert root is not None
    assert root.used == {"cpu": q("2")}
    assert root.request == {"cpu": q("13")}


def test_child_request_is_limited_by_the_childs_max():
    forest = QuotaForest()
    forest.set_cluster_total({"cpu": q("100")})
    forest.upsert_quota(eq("parent", is_parent=True, max=cpu("100"), weight=W1))
    forest.upsert_quota(eq("small", parent="parent", max=cpu("2"), weight=W1))
    forest.add_pod(pod("p1", quota="small", requests=cpu("5")))
    tree = forest.tree("")
    assert tree is not None
    assert tree.request("small") == {"cpu": q("5")}
    assert tree.limited_request("small") == {"cpu": q("2")}
    assert tree.request("parent") == {"cpu": q("2")}
    assert tree.runtime("small") == {"cpu": q("2")}


def test_capped_child_gives_the_excess_to_its_sibling():
    forest = QuotaForest()
    forest.set_cluster_total({"cpu": q("10")})
    forest.upsert_quota(eq("p", is_parent=True, max=cpu("100"), weight=W1))
    forest.upsert_quota(eq("c1", parent="p", max=cpu("100"), weight=W1))
    forest.upsert_quota(eq("c2", parent="p", max=cpu("100"), weight=W1))
    forest.add_pod(pod("small", quota="c1", requests=cpu("1")))
    forest.add_pod(pod("big", quota="c2", requests=cpu("20")))
    tree = forest.tree("")
    assert tree is not None
    assert tree.runtime("p") == {"cpu": q("10")}
    # 5 and 5, c1 only asked 1: 4 go to c2
    assert tree.runtime("c1") == {"cpu": q("1")}
    assert tree.runtime("c2") == {"cpu": q("9")}


def mins_forest(scale: bool) -> QuotaForest:
    forest = QuotaForest(ElasticQuotaArgs(enable_min_quota_scale=scale))
    forest.set_cluster_total({"cpu": q("10")})
    forest.upsert_quota(eq("a", min=cpu("8"), max=cpu("100"), weight=W1))
    forest.upsert_quota(eq("b", min=cpu("4"), max=cpu("100"), weight=W1))
    forest.add_pod(pod("pa", quota="a", requests=cpu("10")))
    forest.add_pod(pod("pb", quota="b", requests=cpu("10")))
    return forest


def test_oversubscribed_mins_scale_down():
    forest = mins_forest(scale=True)
    a, b = forest.summary("a"), forest.summary("b")
    assert a is not None
    assert b is not None
    assert (a.auto_scale_min, b.auto_scale_min) == ({"cpu": q("6666m")}, {"cpu": q("3333m")})
    # 6666m + 3333m leave 1m, shared 1:1 -> tie -> a
    assert (a.runtime, b.runtime) == ({"cpu": q("6667m")}, {"cpu": q("3333m")})


def test_without_min_scaling_mins_are_kept_even_above_the_total():
    forest = mins_forest(scale=False)
    a, b = forest.summary("a"), forest.summary("b")
    assert a is not None
    assert b is not None
    assert (a.auto_scale_min, b.auto_scale_min) == ({"cpu": q("8")}, {"cpu": q("4")})
    assert (a.runtime, b.runtime) == ({"cpu": q("8")}, {"cpu": q("4")})


def lending_forest(lent: bool) -> QuotaForest:
    forest = QuotaForest()
    forest.set_cluster_total({"cpu": q("10")})
    forest.upsert_quota(eq("owner", min=cpu("4"), max=cpu("100"), weight=W1, lent=lent))
    forest.upsert_quota(eq("asker", max=cpu("100"), weight=W1))
    forest.add_pod(pod("po", quota="owner", requests=cpu("1")))
    forest.add_pod(pod("pa", quota="asker", requests=cpu("10")))
    return forest


def test_a_lending_quota_keeps_only_its_request():
    forest = lending_forest(lent=True)
    tree = forest.tree("")
    assert tree is not None
    assert tree.runtime("owner") == {"cpu": q("1")}
    assert tree.runtime("asker") == {"cpu": q("9")}
    assert tree.request("owner") == {"cpu": q("1")}


def test_a_quota_that_does_not_lend_keeps_its_min():
    forest = lending_forest(lent=False)
    tree = forest.tree("")
    assert tree is not None
    assert tree.runtime("owner") == {"cpu": q("4")}
    assert tree.runtime("asker") == {"cpu": q("6")}
    summary = forest.summary("owner")
    assert summary is not None
    assert (summary.child_request, summary.request) == ({"cpu": q("1")}, {"cpu": q("4")})


def test_runtime_covers_every_resource_key_of_the_tree():
    forest = QuotaForest()
    forest.set_cluster_total(rl(cpu="10", memory="10Gi"))
    forest.upsert_quota(eq("gpu-team", max={"cpu": "10", "nvidia.com/gpu": "8"}))
    forest.upsert_quota(eq("mem-team", max={"memory": "8Gi"}))
    forest.add_pod(pod("p", quota="mem-team", requests={"memory": "3Gi", "cpu": "1"}))
    tree = forest.tree("")
    assert tree is not None
    assert tree.resource_keys == ("cpu", "memory", "nvidia.com/gpu")
    # the cpu request is not counted: mem-team's max has no cpu
    assert tree.request("mem-team") == rl(memory="3Gi")
    runtime = tree.runtime("mem-team")
    assert runtime == rl(cpu="0", memory="3Gi", **{"nvidia.com/gpu": "0"})
    assert str(runtime["memory"]) == "3Gi"


def test_special_quotas_are_limited_by_max_and_their_used_leaves_the_shared_total():
    forest = QuotaForest(ElasticQuotaArgs(default_quota_group_max={"cpu": q("3")}))
    forest.set_cluster_total({"cpu": q("10")})
    forest.upsert_quota(eq("team", max=cpu("100"), weight=W1))
    forest.add_pod(pod("t", quota="team", requests=cpu("20")))
    forest.add_pod(pod("d", requests=cpu("2"), node="n1", phase="Running"))
    tree = forest.tree("")
    assert tree is not None
    assert tree.runtime("koordinator-default-quota") == {"cpu": q("3")}
    assert tree.used("koordinator-default-quota") == {"cpu": q("2")}
    assert tree.shared_total() == {"cpu": q("8")}
    assert tree.runtime("team") == {"cpu": q("8")}


def test_overhead_counts_unless_the_gate_says_otherwise():
    overhead = {"cpu": "100m"}
    counted = QuotaForest()
    counted.upsert_quota(eq("team", max=cpu("10")))
    counted.add_pod(counted.pod_record(_overhead_pod(overhead)))
    ignoring = QuotaForest(gates=QuotaGates(ignore_pod_overhead=True))
    ignoring.upsert_quota(eq("team", max=cpu("10")))
    ignoring.add_pod(ignoring.pod_record(_overhead_pod(overhead)))
    assert counted.summary("team").request == {"cpu": q("1100m")}  # type: ignore[union-attr]
    assert ignoring.summary("team").request == {"cpu": q("1")}  # type: ignore[union-attr]


def _overhead_pod(overhead: dict[str, str]) -> dict[str, Any]:
    return pod_dict("p", quota="team", requests=cpu("1"), overhead=overhead)


def test_terminated_pods_stop_counting():
    forest = QuotaForest()
    forest.upsert_quota(eq("team", max=cpu("10")))
    forest.add_pod(pod("p", quota="team", requests=cpu("1"), node="n1", phase="Running"))
    forest.add_pod(pod("done", quota="team", requests=cpu("5"), node="n1", phase="Succeeded"))
    tree = forest.tree("")
    assert tree is not None
    assert tree.used("team") == tree.request("team") == {"cpu": q("1")}
    forest.update_pod(pod("p", quota="team", requests=cpu("1"), node="n1", phase="Failed"))
    assert tree.request("team") == {"cpu": q("0")}
    assert tree.used("team") == {"cpu": q("0")}
    assert forest.placement("default/p") is None


def test_terminating_pods_follow_the_gates():
    clock = [1000.0]
    immediate = QuotaForest(gates=QuotaGates(immediate_ignore_terminating_pod=True))
    immediate.upsert_quota(eq("team", max=cpu("10")))
    assert immediate.add_pod(pod("p", quota="team", requests=cpu("1"), deleted_at=1000)) is None

    after_grace = QuotaForest(gates=QuotaGates(ignore_terminating_pod=True), now=lambda: clock[0])
    after_grace.upsert_quota(eq("team", max=cpu("10")))
    terminating = pod("p", quota="team", requests=cpu("1"), deleted_at=1000, grace=30)
    assert after_grace.add_pod(terminating) is not None
    clock[0] = 1031.0
    assert after_grace.update_pod(terminating) is None
    assert is_zero(after_grace.summary("team").request)  # type: ignore[union-attr]

    ungated = QuotaForest()
    ungated.upsert_quota(eq("team", max=cpu("10")))
    assert ungated.add_pod(pod("p", quota="team", requests=cpu("1"), deleted_at=1000)) is not None


def test_reserve_and_unreserve_are_idempotent_and_keep_runtime_cached():
    forest = QuotaForest()
    forest.set_cluster_total({"cpu": q("10")})
    forest.upsert_quota(eq("team", max=cpu("10")))
    p = pod("p", quota="team", requests=cpu("2"))
    forest.add_pod(p)
    tree = forest.tree("")
    assert tree is not None
    runtime = tree.runtime("team")
    version = tree.version
    forest.reserve(p)
    forest.reserve(p)  # upstream's ReservePod adds the used a second time here
    assert tree.used("team") == {"cpu": q("2")}
    assert tree.version == version  # used changed, nothing runtime depends on
    assert tree.runtime("team") == runtime
    forest.unreserve(p)
    forest.unreserve(p)
    assert tree.used("team") == {"cpu": q("0")}
    forest.reserve(p)
    # the bind arrives: still counted once
    forest.update_pod(pod("p", quota="team", requests=cpu("2"), node="n1", phase="Running"))
    assert tree.used("team") == {"cpu": q("2")}


def test_a_request_change_invalidates_the_runtime():
    forest = QuotaForest()
    forest.set_cluster_total({"cpu": q("10")})
    forest.upsert_quota(eq("a", max=cpu("100"), weight=W1))
    forest.upsert_quota(eq("b", max=cpu("100"), weight=W1))
    forest.add_pod(pod("pa", quota="a", requests=cpu("10")))
    tree = forest.tree("")
    assert tree is not None
    assert tree.runtime("a") == {"cpu": q("10")}
    forest.add_pod(pod("pb", quota="b", requests=cpu("10")))
    assert tree.runtime("a") == tree.runtime("b") == {"cpu": q("5")}
    forest.remove_pod("default/pb")
    assert tree.runtime("a") == {"cpu": q("10")}


def test_guarantee_usage_gate_guarantees_what_is_allocated():
    forest = QuotaForest(gates=QuotaGates(guarantee_usage=True))
    forest.set_cluster_total({"cpu": q("10")})
    forest.upsert_quota(eq("p", is_parent=True, max=cpu("10")))
    forest.upsert_quota(eq("g", parent="p", min=cpu("2"), max=cpu("10")))
    forest.upsert_quota(eq("h", parent="p", min=cpu("1"), max=cpu("10")))
    forest.add_pod(pod("pg", quota="g", requests=cpu("3"), node="n1", phase="Running"))
    g, h, p = forest.summary("g"), forest.summary("h"), forest.summary("p")
    assert g is not None
    assert h is not None
    assert p is not None
    assert (g.allocated, g.guaranteed) == ({"cpu": q("3")}, {"cpu": q("3")})
    assert h.guaranteed == {"cpu": q("1")}
    assert (p.allocated, p.guaranteed) == ({"cpu": q("4")}, {"cpu": q("4")})
    # nobody lends under the gate: each keeps what it guarantees
    assert (p.runtime, g.runtime, h.runtime) == ({"cpu": q("4")}, {"cpu": q("3")}, {"cpu": q("1")})


def test_an_orphan_quota_has_no_runtime_until_its_parent_appears():
    forest = QuotaForest()
    forest.set_cluster_total({"cpu": q("10")})
    forest.upsert_quota(eq("child", parent="later", max=cpu("10")))
    forest.add_pod(pod("p", quota="child", requests=cpu("4")))
    tree = forest.tree("")
    assert tree is not None
    assert tree.is_orphan("child")
    assert tree.runtime("child") == {}
    forest.upsert_quota(eq("later", is_parent=True, max=cpu("10")))
    assert not tree.is_orphan("child")
    assert tree.runtime("child") == {"cpu": q("4")}
    assert tree.path_to_root("child") == ["child", "later"]


def test_running_sums_are_added_in_place_and_floored_at_zero_as_upstream_creates_it():
    used = rl(cpu="1", memory="1Gi")
    add_non_negative_into(used, rl(cpu="-3", **{"nvidia.com/gpu": "1"}))
    assert used == rl(cpu="0", memory="1Gi", **{"nvidia.com/gpu": "1"})
    assert used == add_non_negative(rl(cpu="1", memory="1Gi"), rl(cpu="-3", **{"nvidia.com/gpu": "1"}))
    assert str(used["cpu"]) == "0"
