"""The PodGroup status phase machine: each transition of upstream's PodGroup controller,
the counters, scheduleStartTime and occupiedBy, the patch carrying only what changed, and
which PodGroups the controller syncs at all."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.scheduler.gang import GangMember, pod_group_status, should_sync
from tests.controlplane.scheduler.gang.builders import make_pod, make_pod_group

NOW = 1700000000.0
NOW_TEXT = "2023-11-14T22:13:20Z"
EARLIER = "2023-11-14T22:00:00Z"


def _pods(*states: tuple[str, bool]) -> list[GangMember]:
    """Members of PodGroup ``train`` with (phase, bound) each, named p1, p2, ..."""
    pods = []
    for i, (phase, bound) in enumerate(states, 1):
        builder = make_pod(f"p{i}").in_pod_group("train").phase(phase)
        if bound:
            builder.on("node-1")
        pods.append(builder.member())
    return pods


def _pod_group(phase: str | None, min_member: int = 3, **status: Any) -> dict[str, Any]:
    if phase is not None:
        status["phase"] = phase
    return make_pod_group("train", min_member=min_member, status=status or None)


PENDING3 = (("Pending", False),) * 3


@pytest.mark.parametrize(
    ("pod_group", "pods", "patch"),
    [
        pytest.param(_pod_group(None), [], {"phase": "Pending"}, id="new-group-is-pending"),
        pytest.param(_pod_group("Pending"), _pods(*PENDING3[:2]), None, id="pending-until-min-member-pods"),
        pytest.param(
            _pod_group("Pending", min_member=0), _pods(*PENDING3), None, id="min-member-0-stays-pending"
        ),
        pytest.param(
            _pod_group("Pending"), _pods(*PENDING3), {"phase": "PreScheduling"}, id="pre-scheduling"
        ),
        pytest.param(
            _pod_group("PreScheduling"),
            _pods(("Pending", True), ("Pending", False), ("Pending", False)),
            {"phase": "Scheduling", "scheduled": 1, "scheduleStartTime": NOW_TEXT},
            id="scheduling-stamps-start-time",
        ),
        pytest.param(
            _pod_group("Scheduling", scheduled=1, scheduleStartTime=EARLIER),
            _pods(("Pending", True), ("Pending", True), ("Pending", False)),
            {"scheduled": 2},
            id="start-time-stamped-once",
        ),
        pytest.param(
            _pod_group("Scheduling", scheduled=2, scheduleStartTime=EARLIER),
            _pods(("Pending", True), ("Pending", True), ("Pending", True)),
            {"phase": "Scheduled", "scheduled": 3},
            id="scheduled",
        ),
        pytest.param(
            _pod_group("Scheduled", scheduled=3, scheduleStartTime=EARLIER),
            _pods(("Running", True), ("Running", True), ("Succeeded", True)),
            {"phase": "Running", "running": 2, "succeeded": 1},
            id="running-counts-succeeded",
        ),
        pytest.param(
            _pod_group("Running", scheduled=3, running=3),
            _pods(("Failed", True), ("Running", True), ("Running", True)),
            {"phase": "Failed", "running": 2, "failed": 1},
            id="failed",
        ),
        pytest.param(
            _pod_group("Scheduling", scheduled=2, scheduleStartTime=EARLIER),
            _pods(("Failed", True), ("Running", True), ("Pending", False)),
            {"running": 1, "failed": 1},
            id="failed-needs-min-member-pods-settled",
        ),
        pytest.param(
            _pod_group("Running", scheduled=3, running=3),
            _pods(("Succeeded", True), ("Succeeded", True), ("Succeeded", True)),
            {"phase": "Finished", "running": 0, "succeeded": 3},
            id="finished",
        ),
        pytest.param(
            _pod_group("Running", scheduled=3, running=3, scheduleStartTime=EARLIER),
            [],
            {"phase": "Pending"},
            id="back-to-pending-without-pods",
        ),
        pytest.param(
            _pod_group("Running", scheduled=3, running=3, scheduleStartTime=EARLIER),
            _pods(("Running", True), ("Running", True), ("Running", True)),
            None,
            id="unchanged",
        ),
    ],
)
def test_phase_transitions(pod_group, pods, patch):
    expected = None if patch is None else {"status": patch}
    assert pod_group_status(pod_group, pods, NOW) == expected


def test_the_gang_cache_bound_count_overrides_the_pods():
    # PostBind counted 3 bound before the informer saw the nodes
    patch = pod_group_status(
        _pod_group("Scheduling", scheduled=2, scheduleStartTime=EARLIER), _pods(*PENDING3), NOW, scheduled=3
    )
    assert patch == {"status": {"phase": "Scheduled", "scheduled": 3}}


def test_occupied_by_comes_from_the_first_pod_by_name():
    pods = [
        make_pod("worker-b").in_pod_group("train").owned_by("job-z").member(),
        make_pod("worker-a").in_pod_group("train").owned_by("set-b", "set-a").member(),
        make_pod("worker-c").in_pod_group("train").owned_by("job-y").member(),
    ]
    # whatever order the cache lists them in, worker-a is first: its owners, sorted
    for order in (pods, pods[::-1]):
        assert pod_group_status(_pod_group("Pending"), order, NOW) == {
            "status": {"phase": "PreScheduling", "occupiedBy": "default/set-a,default/set-b"}
        }


def test_owner_less_pods_leave_occupied_by_alone():
    assert pod_group_status(_pod_group("Pending", occupiedBy="default/old"), _pods(*PENDING3), NOW) == {
        "status": {"phase": "PreScheduling"}
    }


@pytest.mark.parametrize(
    ("pod_group", "expected"),
    [
        pytest.param(_pod_group("Scheduling", scheduled=1), True, id="scheduling"),
        pytest.param(_pod_group(None), True, id="new"),
        pytest.param(_pod_group("Finished"), False, id="finished"),
        pytest.param(_pod_group("Failed"), False, id="failed"),
        pytest.param(
            # scheduled in full 49 h after creation, nothing running: left alone
            _pod_group("Scheduled", scheduled=3, scheduleStartTime="2024-01-03T01:00:00Z"),
            False,
            id="scheduled-long-after-creation",
        ),
        pytest.param(
            _pod_group("Scheduled", scheduled=3, scheduleStartTime="2024-01-02T23:00:00Z"),
            True,
            id="scheduled-within-48h",
        ),
        pytest.param(
            _pod_group("Running", scheduled=3, running=1, scheduleStartTime="2024-01-03T01:00:00Z"),
            True,
            id="something-runs",
        ),
    ],
)
def test_should_sync(pod_group, expected):
    assert should_sync(pod_group) is expected
