"""The gang cache over time: children and their states, gangs and groups going away with
their PodGroup or last annotated pod, ignored events, and the summary."""

from __future__ import annotations

from controlplane.scheduler.gang import GangCache, PodGroupManager
from tests.controlplane.scheduler.gang.builders import make_pod, make_pod_group


def test_an_annotation_gang_goes_with_its_last_pod():
    cache = GangCache()
    group = ["default/a", "default/b"]
    a1, a2 = (make_pod(f"a{i}").gang("a", 2, groups=group).member() for i in (1, 2))
    b1 = make_pod("b1").gang("b", 1, groups=group).member()
    for pod in (a1, a2, b1):
        cache.on_pod_add(pod)
    assert cache.group("default/a,default/b") is not None
    cache.on_pod_delete(a1)
    assert cache.get("default/a") is not None
    cache.on_pod_delete(a2)
    assert cache.get("default/a") is None
    # b is left: the group stays
    assert cache.group("default/a,default/b") is not None
    cache.on_pod_delete(b1)
    assert cache.gangs() == {}
    assert cache.group("default/a,default/b") is None


def test_a_pod_group_gang_outlives_its_pods_and_goes_with_its_pod_group():
    cache = GangCache()
    cache.on_pod_group_add(make_pod_group("train", min_member=2))
    pod = make_pod("p1").in_pod_group("train").member()
    cache.on_pod_add(pod)
    cache.on_pod_delete(pod)
    gang = cache.get("default/train")
    assert gang is not None
    assert gang.children == {}
    cache.on_pod_group_delete("default", "train")
    assert cache.get("default/train") is None
    assert cache.group("default/train") is None


def test_an_update_for_an_unknown_pod_group_is_ignored():
    cache = GangCache()
    cache.on_pod_group_update(make_pod_group("train", min_member=2))
    assert cache.get("default/train") is None


def test_a_pod_group_update_redefines_the_gang():
    cache = GangCache()
    cache.on_pod_group_add(make_pod_group("train", min_member=2))
    cache.on_pod_group_update(make_pod_group("train", min_member=5, timeout=10))
    gang = cache.get("default/train")
    assert gang is not None
    assert (gang.min_member, gang.wait_time_s) == (5, 10.0)


def test_children_move_between_pending_waiting_and_bound():
    manager = PodGroupManager()
    p1 = make_pod("p1").gang("job", 2).member()
    manager.cache.on_pod_add(p1)
    gang = manager.cache.get("default/job")
    assert gang is not None
    assert (list(gang.pending), list(gang.waiting), list(gang.bound)) == (["default/p1"], [], [])
    manager.permit(p1)
    assert (list(gang.pending), list(gang.waiting)) == ([], ["default/p1"])
    # a refresh of a waiting pod does not make it pending again
    manager.cache.on_pod_update(p1)
    assert list(gang.pending) == []
    manager.post_bind(p1)
    assert (list(gang.waiting), list(gang.bound)) == ([], ["default/p1"])


def test_a_pod_seen_on_a_node_is_bound():
    cache = GangCache()
    cache.on_pod_add(make_pod("p1").gang("job", 2).on("node-1").member())
    gang = cache.get("default/job")
    assert gang is not None
    assert list(gang.bound) == ["default/p1"]
    assert gang.once_satisfied


def test_a_bound_pod_seen_before_its_pod_group_still_satisfies_the_group():
    # upstream drops the mark with the placeholder group; here it carries over
    cache = GangCache()
    cache.on_pod_add(make_pod("p1").in_pod_group("train").on("node-1").member())
    cache.on_pod_group_add(make_pod_group("train", min_member=2))
    gang = cache.get("default/train")
    assert gang is not None
    assert gang.group.initialized
    assert gang.once_satisfied


def test_updates_of_terminated_pods_are_ignored():
    cache = GangCache()
    pod = make_pod("p1").gang("job", 1)
    cache.on_pod_add(pod.member())
    cache.on_pod_update(pod.on("node-1").phase("Succeeded").member())
    gang = cache.get("default/job")
    assert gang is not None
    assert gang.bound == {}


def test_summary():
    manager = PodGroupManager()
    p1, p2 = (make_pod(f"p{i}").gang("job", 2, total=3, wait="30s").member() for i in (1, 2))
    manager.cache.on_pod_add(p1)
    manager.cache.on_pod_add(p2)
    manager.permit(p2)
    gang = manager.cache.get("default/job")
    assert gang is not None
    assert gang.summary() == {
        "name": "default/job",
        "waitTime": 30.0,
        "createTime": 1704067200.0,
        "mode": "Strict",
        "gangMatchPolicy": "once-satisfied",
        "minRequiredNumber": 2,
        "totalChildrenNum": 3,
        "gangGroup": ["default/job"],
        "children": ["default/p1", "default/p2"],
        "waitingForBindChildren": ["default/p2"],
        "boundChildren": [],
        "onceResourceSatisfied": False,
        "gangGroupId": "default/job",
        "gangFrom": "GangFromPodAnnotation",
        "hasGangInit": True,
    }
