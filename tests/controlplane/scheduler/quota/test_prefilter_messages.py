"""The PreFilter check and its messages, verbatim."""

from __future__ import annotations

from controlplane.scheduler.quota import Code, ElasticQuotaArgs, QuotaForest, QuotaGates, pre_filter
from koordinator.api.quantity import Quantity

from .builders import cpu, eq, pod

BIG = {"cpu": "10", "memory": "20Gi"}


def team_forest(args: ElasticQuotaArgs | None = None) -> QuotaForest:
    forest = QuotaForest(args)
    forest.set_cluster_total({"cpu": Quantity.parse("4"), "memory": Quantity.parse("8Gi")})
    forest.upsert_quota(eq("team", min={"cpu": "2", "memory": "4Gi"}, max=BIG))
    forest.add_pod(
        pod("running", quota="team", requests={"cpu": "3", "memory": "2Gi"}, node="n1", phase="Running")
    )
    return forest


def test_over_runtime_is_refused_with_upstreams_message():
    forest = team_forest()
    pending = pod("pending", quota="team", requests={"cpu": "2", "memory": "1Gi", "example.com/foo": "1"})
    forest.add_pod(pending)
    # request cpu 5 > min 2: gets all 4 cpu; memory 3Gi <= min 4Gi: lent, runtime = request 3Gi
    check = pre_filter(forest, pending)
    assert check.code is Code.UNSCHEDULABLE
    assert check.message == (
        "Insufficient quotas, quotaName: team, runtime: cpu:4,memory:3Gi, used: cpu:3,memory:2Gi, "
        "pod's request: cpu:2,memory:1Gi, exceedDimensions: [cpu]"
    )
    assert check.state.used_limit == {"cpu": Quantity.parse("4"), "memory": Quantity.parse("3Gi")}


def test_without_runtime_quota_the_limit_is_max():
    forest = team_forest(ElasticQuotaArgs(enable_runtime_quota=False))
    pending = pod("pending", quota="team", requests={"cpu": "2", "memory": "1Gi"})
    forest.add_pod(pending)
    check = pre_filter(forest, pending)
    assert check.code is Code.SUCCESS
    assert check.state.used_limit == {"cpu": Quantity.parse("10"), "memory": Quantity.parse("20Gi")}


def test_a_fitting_pod_passes():
    forest = team_forest()
    pending = pod("pending", quota="team", requests={"cpu": "1", "memory": "1Gi"})
    forest.add_pod(pending)
    assert pre_filter(forest, pending).code is Code.SUCCESS


def np_forest() -> QuotaForest:
    forest = QuotaForest()
    forest.set_cluster_total({"cpu": Quantity.parse("100"), "memory": Quantity.parse("100Gi")})
    forest.upsert_quota(eq("np", min={"cpu": "2", "memory": "4Gi"}, max=BIG))
    forest.add_pod(
        pod("a", quota="np", requests={"cpu": "1500m", "memory": "1Gi"}, node="n1", non_preemptible=True)
    )
    return forest


def test_non_preemptible_pods_must_fit_min():
    forest = np_forest()
    pending = pod("b", quota="np", requests={"cpu": "1", "memory": "1Gi"}, non_preemptible=True)
    forest.add_pod(pending)
    check = pre_filter(forest, pending)
    assert check.code is Code.UNSCHEDULABLE
    assert check.message == (
        "Insufficient non-preemptible quotas, quotaName: np, min: cpu:2,memory:4Gi, "
        "nonPreemptibleUsed: cpu:1500m,memory:1Gi, pod's request: cpu:1,memory:1Gi, exceedDimensions: [cpu]"
    )


def test_preemptible_pods_are_not_held_to_min():
    forest = np_forest()
    pending = pod("c", quota="np", requests={"cpu": "1", "memory": "1Gi"})
    forest.add_pod(pending)
    assert pre_filter(forest, pending).code is Code.SUCCESS


def parent_forest(check_parent: bool) -> QuotaForest:
    forest = QuotaForest(ElasticQuotaArgs(enable_check_parent_quota=check_parent))
    forest.set_cluster_total({"cpu": Quantity.parse("4")})
    forest.upsert_quota(eq("org", is_parent=True, max=cpu("10"), weight=cpu("1")))
    forest.upsert_quota(eq("dev", parent="org", max=cpu("10"), weight=cpu("1")))
    forest.upsert_quota(eq("ops", parent="org", max=cpu("10"), weight=cpu("1")))
    forest.add_pod(pod("d", quota="dev", requests=cpu("3"), node="n1", phase="Running"))
    return forest


def test_parent_check_refuses_what_the_parent_cannot_take():
    forest = parent_forest(check_parent=True)
    pending = pod("o", quota="ops", requests=cpu("2"))
    forest.add_pod(pending)
    # org asks 5 and gets all 4; dev and ops get 2 each: ops fits, org (used 3) does not
    tree = forest.tree("")
    assert tree is not None
    assert tree.runtime("ops") == {"cpu": Quantity.parse("2")}
    check = pre_filter(forest, pending)
    assert check.code is Code.UNSCHEDULABLE
    assert check.message == (
        "Insufficient quotas, quotaNameTopo: [org ops], runtime: cpu:4, used: cpu:3, "
        "pod's request: cpu:2, exceedDimensions: [cpu]"
    )


def test_parent_check_is_off_by_default():
    forest = parent_forest(check_parent=False)
    pending = pod("o", quota="ops", requests=cpu("2"))
    forest.add_pod(pending)
    assert pre_filter(forest, pending).code is Code.SUCCESS


def test_unmanaged_pods_are_skipped_and_empty_lists_print_empty():
    forest = QuotaForest(gates=QuotaGates(disable_default_quota=True))
    assert pre_filter(forest, pod("p")).code is Code.SKIP
    forest = QuotaForest(ElasticQuotaArgs(default_quota_group_max={"cpu": Quantity.parse("1")}))
    check = pre_filter(forest, pod("p", requests={"memory": "1Gi", "cpu": "2"}))
    assert check.message == (
        "Insufficient quotas, quotaName: koordinator-default-quota, runtime: cpu:1, used: <empty>, "
        "pod's request: cpu:2, exceedDimensions: [cpu]"
    )


def test_post_filter_state_follows_the_dry_run():
    forest = team_forest()
    pending = pod("pending", quota="team", requests={"cpu": "2", "memory": "1Gi"})
    forest.add_pod(pending)
    state = pre_filter(forest, pending).state
    assert not state.fits(pending)
    running = pod("running", quota="team", requests={"cpu": "3", "memory": "2Gi"}, node="n1", phase="Running")
    state.remove_pod(running)
    assert state.used == {"cpu": Quantity.parse("0"), "memory": Quantity.parse("0")}
    assert state.fits(pending)
    state.add_pod(running)
    assert not state.fits(pending)
    stranger = pod("stranger", quota="other", requests={"cpu": "3"})
    state.remove_pod(stranger)  # not one of the quota's pods: nothing changes
    assert state.used == {"cpu": Quantity.parse("3"), "memory": Quantity.parse("2Gi")}


def test_exceeded_dimensions_are_listed_in_order():
    forest = team_forest(ElasticQuotaArgs(enable_runtime_quota=False))
    pending = pod("pending", quota="team", requests={"memory": "19Gi", "cpu": "8"})
    forest.add_pod(pending)
    check = pre_filter(forest, pending)
    assert check.message.endswith("pod's request: cpu:8,memory:19Gi, exceedDimensions: [cpu memory]")
