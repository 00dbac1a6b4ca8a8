"""Permit: members wait until every gang of their group is valid under its match policy,
then the whole group is allowed; the wait time and its 15-minute cap; PreBind's bind-gang
annotations on the members released together; PostBind's bound count."""

from __future__ import annotations

import pytest

from controlplane.scheduler.gang import (
    ALLOW,
    MAX_PERMIT_WAIT_S,
    REJECT,
    WAIT,
    GangMember,
    PermitDecision,
    PodGroupManager,
)
from controlplane.scheduler.plugins import interface
from koordinator.api.extension.gang import (
    ANNOTATION_BIND_GANG_GROUP_ID,
    ANNOTATION_BIND_GANG_MEMBER_COUNT,
    DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID,
    DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT,
)
from tests.controlplane.scheduler.gang.builders import make_pod, make_pod_group


def _added(manager: PodGroupManager, *pods: GangMember) -> None:
    for pod in pods:
        manager.cache.on_pod_add(pod)


def test_verdicts_match_the_framework():
    assert (ALLOW, WAIT, REJECT) == (interface.ALLOW, interface.WAIT, interface.REJECT)
    assert MAX_PERMIT_WAIT_S == interface.MAX_PERMIT_TIMEOUT_S == 900.0


def test_only_waiting_counts_members_waiting_at_permit():
    manager = PodGroupManager()
    p1, p2, p3 = (make_pod(f"p{i}").gang("job", 2, policy="only-waiting").member() for i in (1, 2, 3))
    _added(manager, p1, p2, p3)
    assert manager.permit(p1) == PermitDecision(WAIT, wait_s=600.0)
    # 2 waiting >= 2: p2 goes and releases p1
    assert manager.permit(p2) == PermitDecision(ALLOW, release=(p1,))
    manager.post_bind(p1)
    manager.post_bind(p2)
    # p1 and p2 are bound, not waiting: p3 alone is 1 < 2
    assert manager.permit(p3).status == WAIT


def test_waiting_and_running_counts_bound_members_too():
    manager = PodGroupManager()
    p1 = make_pod("p1").gang("job", 2, policy="waiting-and-running").on("node-1").member()
    p2 = make_pod("p2").gang("job", 2, policy="waiting-and-running").member()
    _added(manager, p1, p2)
    # 1 waiting + 1 bound >= 2
    assert manager.permit(p2) == PermitDecision(ALLOW)


def test_once_satisfied_waits_for_min_member_the_first_time_only():
    manager = PodGroupManager()
    p1, p2, p3 = (make_pod(f"p{i}").gang("job", 2).member() for i in (1, 2, 3))
    _added(manager, p1, p2, p3)
    assert manager.permit(p1).status == WAIT
    assert manager.permit(p2) == PermitDecision(ALLOW, release=(p1,))
    manager.post_bind(p1)
    manager.post_bind(p2)
    # the group was satisfied once: a late member needs nobody
    assert manager.permit(p3) == PermitDecision(ALLOW)


def test_a_group_of_two_gangs_is_allowed_together():
    manager = PodGroupManager()
    group = ["default/a", "default/b"]
    a1 = make_pod("a1").gang("a", 1, groups=group).member()
    b1, b2 = (make_pod(f"b{i}").gang("b", 2, groups=group).member() for i in (1, 2))
    _added(manager, a1, b1, b2)
    # a is valid (1 waiting >= 1) but b has none waiting
    assert manager.permit(a1).status == WAIT
    assert manager.permit(b1).status == WAIT
    gang_a = manager.cache.get("default/a")
    assert gang_a is not None
    assert gang_a.group.waiting_gangs == {"default/a", "default/b"}
    # b: 2 waiting >= 2 -> the group goes, a1 and b1 released
    assert manager.permit(b2) == PermitDecision(ALLOW, release=(a1, b1))


@pytest.mark.parametrize(
    ("pod_group", "expected"),
    [
        pytest.param(make_pod_group("train", min_member=2), 600.0, id="default-600s"),
        pytest.param(make_pod_group("train", min_member=2, timeout=30), 30.0, id="schedule-timeout"),
        pytest.param(make_pod_group("train", min_member=2, timeout=3600), 900.0, id="capped-at-15m"),
    ],
)
def test_permit_wait_time(pod_group, expected):
    manager = PodGroupManager()
    manager.cache.on_pod_group_add(pod_group)
    pod = make_pod("p1").in_pod_group("train").member()
    manager.cache.on_pod_add(pod)
    assert manager.permit(pod) == PermitDecision(WAIT, wait_s=expected)


def test_annotation_wait_time_is_capped_too():
    manager = PodGroupManager()
    pod = make_pod("p1").gang("job", 2, wait="1h").member()
    manager.cache.on_pod_add(pod)
    assert manager.permit(pod).wait_s == 900.0


def test_a_pod_whose_gang_is_gone_is_rejected():
    manager = PodGroupManager()
    assert manager.permit(make_pod("p1").gang("job", 2).member()) == PermitDecision(
        REJECT, message="Gang not found"
    )


BIND_KEYS = (
    ANNOTATION_BIND_GANG_GROUP_ID,
    ANNOTATION_BIND_GANG_MEMBER_COUNT,
    DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID,
    DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT,
)


def test_pre_bind_annotates_the_members_released_together():
    manager = PodGroupManager()
    group = ["default/b", "default/a"]
    a1 = make_pod("a1").gang("a", 1, groups=group).member()
    b1, b2, b3 = (make_pod(f"b{i}").gang("b", 2, groups=group).member() for i in (1, 2, 3))
    _added(manager, a1, b1, b2, b3)
    for pod in (a1, b1, b2):
        manager.permit(pod)
    assert ANNOTATION_BIND_GANG_GROUP_ID == "internal.scheduling.koordinator.sh/bind-gang-group-id"
    assert DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT == "scheduling.koordinator.sh/bind-gang-member-count"
    expected = dict(zip(BIND_KEYS, ("default/a,default/b", "3") * 2, strict=True))
    for pod in (a1, b1, b2):
        assert manager.pre_bind(pod) == expected
    # b3 was not among the members released together: the keys are removed
    assert manager.pre_bind(b3) == dict.fromkeys(BIND_KEYS)


def test_binding_members_last_until_the_whole_group_is_bound():
    manager = PodGroupManager()
    p1, p2 = (make_pod(f"p{i}").gang("job", 2).member() for i in (1, 2))
    _added(manager, p1, p2)
    manager.permit(p1)
    manager.permit(p2)
    manager.post_bind(p1)
    # p2 still binds with the count of the pair
    assert manager.pre_bind(p2)[ANNOTATION_BIND_GANG_MEMBER_COUNT] == "2"
    manager.post_bind(p2)
    assert manager.pre_bind(p2) == dict.fromkeys(BIND_KEYS)
    assert manager.cache.bound_count("default/job") == 2


def test_a_lone_member_gets_no_bind_annotations():
    manager = PodGroupManager()
    pod = make_pod("p1").gang("job", 1).member()
    manager.cache.on_pod_add(pod)
    assert manager.permit(pod) == PermitDecision(ALLOW)
    assert manager.pre_bind(pod) == dict.fromkeys(BIND_KEYS)


def test_post_bind_counts_bound_members_and_satisfies_the_group():
    manager = PodGroupManager()
    manager.cache.on_pod_group_add(make_pod_group("train", min_member=2))
    p1, p2 = (make_pod(f"p{i}").in_pod_group("train").member() for i in (1, 2))
    _added(manager, p1, p2)
    manager.permit(p1)
    manager.permit(p2)
    gang = manager.cache.get("default/train")
    assert gang is not None
    assert gang.group.once_satisfied is False
    manager.post_bind(p1)
    assert manager.cache.bound_count("default/train") == 1
    assert gang.once_satisfied
    assert sorted(gang.waiting) == ["default/p2"]
