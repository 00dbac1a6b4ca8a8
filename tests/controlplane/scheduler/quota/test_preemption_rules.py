"""Which victims quota preemption may take, and when a preemptor may preempt at all."""

from __future__ import annotations

import pytest

from controlplane.scheduler.quota import QuotaForest, can_preempt, eligible_to_preempt_others

from .builders import eq, pod


@pytest.fixture
def forest() -> QuotaForest:
    f = QuotaForest()
    f.upsert_quota(eq("q1"))
    f.upsert_quota(eq("q2"))
    return f


@pytest.mark.parametrize(
    ("preemptor", "victim", "disable_default", "expected"),
    [
        pytest.param(
            {"quota": "q1", "priority": 10}, {"quota": "q1", "priority": 5}, True, True, id="allowed"
        ),
        pytest.param(
            {"quota": "q1", "priority": 10},
            {"quota": "q1", "priority": 5, "non_preemptible": True},
            True,
            False,
            id="non-preemptible",
        ),
        pytest.param(
            {"quota": "q1", "priority": 10}, {"quota": "q1", "priority": 10}, True, False, id="same-prio"
        ),
        pytest.param(
            {"quota": "q1", "priority": 5}, {"quota": "q1", "priority": 15}, True, False, id="higher"
        ),
        pytest.param(
            {"quota": "q1", "priority": 10}, {"quota": "q2", "priority": 5}, True, False, id="other-quota"
        ),
        pytest.param({"priority": 10}, {"priority": 5}, True, False, id="default-quota-protected"),
        pytest.param({"priority": 10}, {"priority": 5}, False, True, id="default-quota-allowed"),
    ],
)
def test_victims(forest, preemptor, victim, disable_default, expected):
    assert (
        can_preempt(
            forest,
            pod("preemptor", **preemptor),
            pod("victim", **victim),
            disable_default_quota_preemption=disable_default,
        )
        is expected
    )


def test_default_quota_preemption_follows_the_args_by_default(forest):
    assert not can_preempt(forest, pod("a", priority=10), pod("b", priority=1))


def test_preemption_policy_never_is_not_eligible(forest):
    assert eligible_to_preempt_others(forest, pod("p", quota="q1", preemption_policy="Never")) == (
        False,
        "not eligible due to preemptionPolicy=Never.",
    )


def test_terminating_lower_priority_pod_of_the_same_quota_blocks(forest):
    preemptor = pod("p", quota="q1", priority=10, nominated="n1")
    same = pod("t", quota="q1", priority=5, node="n1", deleted_at=100)
    other = pod("u", quota="q2", priority=5, node="n1", deleted_at=100)
    higher = pod("h", quota="q1", priority=15, node="n1", deleted_at=100)
    assert eligible_to_preempt_others(forest, preemptor, pods_on_nominated_node=[same]) == (
        False,
        "not eligible due to a terminating pod on the nominated node.",
    )
    assert eligible_to_preempt_others(forest, preemptor, pods_on_nominated_node=[other, higher]) == (True, "")
    assert eligible_to_preempt_others(
        forest, preemptor, nominated_node_unresolvable=True, pods_on_nominated_node=[same]
    ) == (True, "")
    assert eligible_to_preempt_others(forest, preemptor, pods_on_nominated_node=None) == (True, "")
    assert eligible_to_preempt_others(forest, pod("p", quota="q1"), pods_on_nominated_node=[same]) == (
        True,
        "",
    )
