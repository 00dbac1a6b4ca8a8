"""Failure of a member: PostFilter after it fits nowhere, Unreserve after it was rejected or
timed out at Permit. A Strict gang rejects its whole group's waiting members, a NonStrict
gang keeps them waiting, and an once-satisfied gang that was satisfied rejects nobody."""

from __future__ import annotations

from controlplane.scheduler.gang import (
    WAIT,
    GangMember,
    PodGroupManager,
    PostFilterOutcome,
    Rejection,
)
from controlplane.scheduler.gang.messages import go_quote
from tests.controlplane.scheduler.gang.builders import make_pod

FIT_ERROR = "0/2 nodes are available: 2 Insufficient cpu."


def _waiting(manager: PodGroupManager, *pods: GangMember) -> None:
    for pod in pods:
        manager.cache.on_pod_add(pod)
    for pod in pods:
        assert manager.permit(pod).status == WAIT


def _gang(mode: str = "Strict", policy: str = "once-satisfied") -> list[GangMember]:
    return [make_pod(f"p{i}").gang("job", 3, mode=mode, policy=policy).member() for i in (1, 2, 3)]


def test_strict_post_filter_rejects_the_waiting_group():
    manager = PodGroupManager()
    p1, p2, p3 = _gang()
    _waiting(manager, p1, p2)
    manager.cache.on_pod_add(p3)
    outcome = manager.post_filter(p3, FIT_ERROR)
    assert outcome == PostFilterOutcome(
        'Gang "default/job" gets rejected due to pod is unschedulable',
        Rejection(
            'Gang "default/job" gets rejected due to member Pod "p3" is unschedulable with reason '
            '"0/2 nodes are available: 2 Insufficient cpu.", alreadyWaitForBound: 2',
            (p1, p2),
        ),
    )
    gang = manager.cache.get("default/job")
    assert gang is not None
    assert gang.group.waiting_gangs == set()


def test_strict_post_filter_rejects_every_gang_of_the_group():
    manager = PodGroupManager()
    group = ["default/a", "default/b"]
    a1 = make_pod("a1").gang("a", 1, groups=group).member()
    b1, b2 = (make_pod(f"b{i}").gang("b", 2, groups=group).member() for i in (1, 2))
    _waiting(manager, a1, b1)
    manager.cache.on_pod_add(b2)
    outcome = manager.post_filter(b2, FIT_ERROR)
    assert outcome.rejection is not None
    assert outcome.rejection.pods == (a1, b1)
    assert "alreadyWaitForBound: 1" in outcome.rejection.message


def test_non_strict_post_filter_keeps_the_others_waiting():
    manager = PodGroupManager()
    p1, p2, p3 = _gang(mode="NonStrict")
    _waiting(manager, p1, p2)
    manager.cache.on_pod_add(p3)
    assert manager.post_filter(p3, FIT_ERROR) == PostFilterOutcome()
    gang = manager.cache.get("default/job")
    assert gang is not None
    assert sorted(gang.waiting) == ["default/p1", "default/p2"]


def test_post_filter_keeps_the_group_when_preemption_succeeded():
    manager = PodGroupManager()
    p1, p2, p3 = _gang()
    _waiting(manager, p1, p2)
    manager.cache.on_pod_add(p3)
    assert manager.post_filter(p3, FIT_ERROR, preempted=True) == PostFilterOutcome()


def test_a_satisfied_once_satisfied_gang_rejects_nobody():
    manager = PodGroupManager()
    p1, p2, p3 = _gang()
    for pod in (p1, p2, p3):
        manager.cache.on_pod_add(pod)
    manager.post_bind(p1)  # the group is satisfied for good
    assert manager.permit(p2).status == "Allow"
    p4 = make_pod("p4").gang("job", 3).member()
    manager.cache.on_pod_add(p4)
    manager.permit(p4)
    assert manager.post_filter(p3, FIT_ERROR) == PostFilterOutcome()
    assert manager.unreserve(p4) is None


def test_other_policies_keep_rejecting_after_satisfaction():
    manager = PodGroupManager()
    p1, p2, p3 = _gang(policy="only-waiting")
    for pod in (p1, p2, p3):
        manager.cache.on_pod_add(pod)
    manager.post_bind(p1)
    assert manager.permit(p2).status == WAIT  # only-waiting: 1 waiting < 3
    outcome = manager.post_filter(p3, FIT_ERROR)
    assert outcome.rejection is not None
    assert outcome.rejection.pods == (p2,)


def test_a_permit_timeout_rejects_the_strict_group():
    # p1 and p2 wait (600 s); the framework rejects p1 when its wait runs out and
    # unreserves it: p2 is rejected too, and p1 is pending again.
    manager = PodGroupManager()
    p1, p2, _ = _gang()
    _waiting(manager, p1, p2)
    rejection = manager.unreserve(p1)
    assert rejection == Rejection('Gang "default/job" gets rejected due to Pod "p1" in Unreserve', (p2,))
    gang = manager.cache.get("default/job")
    assert gang is not None
    assert list(gang.pending) == ["default/p1"]
    # p2's own Unreserve follows its rejection: nobody is left to reject
    assert manager.unreserve(p2) is None
    assert gang.waiting == {}
    assert gang.group.waiting_gangs == set()


def test_non_strict_unreserve_keeps_the_others_waiting():
    manager = PodGroupManager()
    p1, p2, _ = _gang(mode="NonStrict")
    _waiting(manager, p1, p2)
    assert manager.unreserve(p1) is None
    gang = manager.cache.get("default/job")
    assert gang is not None
    assert list(gang.waiting) == ["default/p2"]


def test_post_filter_for_a_pod_whose_gang_is_gone():
    manager = PodGroupManager()
    pod = make_pod("p1").gang("job", 2).member()
    assert manager.post_filter(pod, FIT_ERROR) == PostFilterOutcome('Pod "default/p1" cannot find Gang "job"')
    assert manager.unreserve(pod) is None


def test_go_quote():
    assert go_quote('say "hi"\n\tC:\\tmp é \x01') == '"say \\"hi\\"\\n\\tC:\\\\tmp é \\x01"'
