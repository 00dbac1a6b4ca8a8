"""Arbitration's retryable limits (per node, namespace, globally, per workload migrating and
unavailable), which jobs count as migrating, the object limiters' token buckets and the
order in which waiting jobs are arbitrated."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from controlplane.descheduler.migration.arbitration import (
    ANNOTATION_PASSED,
    JobView,
    Limits,
    ObjectLimiters,
    is_migrating,
    order_jobs,
)
from controlplane.descheduler.migration.args import parse_args
from controlplane.descheduler.migration.workloads import Workload, controller_of, max_unavailable
from tests.controlplane.descheduler.builders import pod
from testsupport.fake import FakeClock

Obj = dict[str, Any]


def job(name: str, p: Obj | None, phase: str = "Pending", passed: bool = False, created: str = "") -> Obj:
    meta: Obj = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    if passed:
        meta["annotations"] = {ANNOTATION_PASSED: "true"}
    ref = {}
    if p is not None:
        ref = {k: p["metadata"][k] for k in ("namespace", "name", "uid")}
    return {"metadata": meta, "spec": {"podRef": ref}, "status": {"phase": phase} if phase else {}}


class World:
    """Pods and jobs as the controller's caches hold them."""

    def __init__(self, pods: Sequence[Obj] = (), jobs: Sequence[Obj] = (), replicas: int = 10) -> None:
        self.pods = list(pods)
        self.jobs = list(jobs)
        self.replicas = replicas
        self.clock = FakeClock()

    def pod_of_job(self, j: Mapping[str, Any]) -> Obj | None:
        ref = j["spec"]["podRef"]
        for p in self.pods:
            if (p["metadata"]["namespace"], p["metadata"]["name"]) == (ref.get("namespace"), ref.get("name")):
                return p
        return None

    def workload_pods(self, workload: Workload) -> list[Obj]:
        return [p for p in self.pods if (c := controller_of(p)) is not None and c.uid == workload.uid]

    def expected(self, workload: Workload) -> int:
        return self.replicas

    def limits(self, raw: Mapping[str, Any] | None = None) -> Limits:
        args = parse_args(raw)
        limiters = ObjectLimiters(
            args.object_limiters,
            self.expected,
            lambda r: max_unavailable(r, args.max_migrating_per_workload),
            self.clock,
        )
        return Limits(args, lambda: self.jobs, self.pod_of_job, self.workload_pods, self.expected, limiters)


def rs(name: str) -> tuple[str, str, str]:
    return ("ReplicaSet", name, f"{name}-uid")


# ---- which jobs count -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "passed", "admitted_only", "expected"),
    [
        ("Running", False, True, True),
        ("Running", False, False, True),
        ("Pending", False, False, True),
        ("Pending", False, True, False),
        ("Pending", True, True, True),
        ("", False, False, True),
        ("", False, True, False),
        ("", True, True, True),
        ("Succeeded", True, False, False),
        ("Failed", True, False, False),
        ("Aborted", False, False, False),
    ],
)
def test_is_migrating(phase: str, passed: bool, admitted_only: bool, expected: bool) -> None:
    assert is_migrating(job("j", pod("p"), phase, passed), admitted_only=admitted_only) is expected


# ---- per node --------------------------------------------------------------------------------


def test_max_migrating_per_node() -> None:
    a, b = pod("a", node="n1", owner=rs("ra")), pod("b", node="n1", owner=rs("rb"))
    world = World([a, b], [job("ja", a, "Running"), job("jb", b, "Running")])
    candidate = pod("c", node="n1", owner=rs("rc"))
    limits = world.limits()
    assert limits.refusal(candidate, admitted_only=True) == (
        "node n1 already has 2 pod(s) migrating (maxMigratingPerNode 2)"
    )
    assert limits.refusal(pod("c", node="n2", owner=rs("rc")), admitted_only=True) is None
    # a pod without a node is not limited by node
    assert limits.refusal(pod("c", owner=rs("rc")), admitted_only=True) is None
    assert world.limits({"maxMigratingPerNode": 3}).refusal(candidate, admitted_only=True) is None
    assert world.limits({"maxMigratingPerNode": 0}).refusal(candidate, admitted_only=True) is None
    assert (
        world.limits({"skipEvictionGates": ["MaxMigratingPerNode"]}).refusal(candidate, admitted_only=True)
        is None
    )


def test_pending_jobs_count_at_filter_time_and_admitted_ones_at_arbitration() -> None:
    a, b = pod("a", node="n1", owner=rs("ra")), pod("b", node="n1", owner=rs("rb"))
    candidate = pod("c", node="n1", owner=rs("rc"))
    waiting = World([a, b], [job("ja", a), job("jb", b)])
    refused = "node n1 already has 2 pod(s) migrating (maxMigratingPerNode 2)"
    assert waiting.limits().refusal(candidate, admitted_only=False) == refused
    assert waiting.limits().refusal(candidate, admitted_only=True) is None
    admitted = World([a, b], [job("ja", a, passed=True), job("jb", b)])
    assert admitted.limits().refusal(candidate, admitted_only=True) is None
    both = World([a, b], [job("ja", a, passed=True), job("jb", b, passed=True)])
    assert both.limits().refusal(candidate, admitted_only=True) == refused
    # the job being arbitrated is left out of the count
    assert both.limits().refusal(candidate, admitted_only=True, exclude_job="jb") is None


def test_ended_jobs_and_the_pods_own_job_do_not_count() -> None:
    a, b = pod("a", node="n1", owner=rs("ra")), pod("b", node="n1", owner=rs("rb"))
    candidate = pod("c", node="n1", owner=rs("rc"))
    ended = World([a, b, candidate], [job("ja", a, "Succeeded"), job("jb", b, "Failed")])
    assert ended.limits().refusal(candidate, admitted_only=False) is None
    own = World([a, candidate], [job("ja", a, "Running"), job("jc", candidate, "Running")])
    assert own.limits().refusal(candidate, admitted_only=False) is None


def test_a_job_whose_pod_is_gone_does_not_count_on_its_node() -> None:
    a, b = pod("a", node="n1", owner=rs("ra")), pod("b", node="n1", owner=rs("rb"))
    world = World([a], [job("ja", a, "Running"), job("jb", b, "Running")])
    assert world.limits().refusal(pod("c", node="n1", owner=rs("rc")), admitted_only=True) is None


# ---- per namespace and globally --------------------------------------------------------------


def test_max_migrating_per_namespace() -> None:
    a = pod("a", namespace="prod", node="n2", owner=rs("ra"))
    world = World([a], [job("ja", a, "Running")])
    limits = world.limits({"maxMigratingPerNamespace": 1})
    assert limits.refusal(pod("c", namespace="prod", node="n1", owner=rs("rc")), admitted_only=True) == (
        "namespace prod already has 1 pod(s) migrating (maxMigratingPerNamespace 1)"
    )
    assert limits.refusal(pod("c", node="n1", owner=rs("rc")), admitted_only=True) is None
    assert (
        world.limits({"maxMigratingPerNamespace": 2}).refusal(
            pod("c", namespace="prod", node="n1", owner=rs("rc")), admitted_only=True
        )
        is None
    )


def test_a_running_job_whose_pod_was_evicted_still_counts_in_its_namespace() -> None:
    gone = pod("a", namespace="prod", node="n2", owner=rs("ra"))
    world = World([], [job("ja", gone, "Running")])
    assert (
        world.limits({"maxMigratingPerNamespace": 1}).refusal(
            pod("c", namespace="prod", node="n1", owner=rs("rc")), admitted_only=True
        )
        == "namespace prod already has 1 pod(s) migrating (maxMigratingPerNamespace 1)"
    )


def test_max_migrating_globally() -> None:
    a = pod("a", namespace="x", node="n1", owner=rs("ra"))
    b = pod("b", namespace="y", node="n2", owner=rs("rb"))
    world = World([a, b], [job("ja", a, "Running"), job("jb", b, "Pending", passed=True)])
    candidate = pod("c", namespace="z", node="n3", owner=rs("rc"))
    assert world.limits({"maxMigratingGlobally": 2}).refusal(candidate, admitted_only=True) == (
        "2 pod(s) already migrating (maxMigratingGlobally 2)"
    )
    assert world.limits({"maxMigratingGlobally": 3}).refusal(candidate, admitted_only=True) is None
    assert world.limits().refusal(candidate, admitted_only=True) is None


# ---- per workload ----------------------------------------------------------------------------


def test_max_migrating_per_workload() -> None:
    # 10 replicas: at most 2 migrating and 2 unavailable
    pods = [pod(f"p{i}", node=f"n{i}", owner=rs("web")) for i in range(10)]
    world = World(pods, [job("j0", pods[0], "Running"), job("j1", pods[1], "Running")])
    assert world.limits().refusal(pods[2], admitted_only=True) == (
        "workload ReplicaSet default/web already has 2 pod(s) migrating (at most 2)"
    )
    # more may migrate, but the 2 migrating are unavailable
    assert world.limits({"maxMigratingPerWorkload": 3}).refusal(pods[2], admitted_only=True) == (
        "workload ReplicaSet default/web already has 2 pod(s) unavailable (at most 2)"
    )
    assert (
        world.limits({"maxMigratingPerWorkload": 3, "maxUnavailablePerWorkload": "30%"}).refusal(
            pods[2], admitted_only=True
        )
        is None
    )
    # another workload's pod is not limited by this one
    assert world.limits().refusal(pod("other", node="n5", owner=rs("api")), admitted_only=True) is None
    one = World(pods, [job("j0", pods[0], "Running")])
    assert one.limits().refusal(pods[2], admitted_only=True) is None


def test_max_unavailable_per_workload_counts_pods_not_ready() -> None:
    pods = [pod(f"p{i}", node=f"n{i}", owner=rs("web"), ready=i not in (3, 4)) for i in range(10)]
    world = World(pods)
    assert world.limits().refusal(pods[0], admitted_only=True) == (
        "workload ReplicaSet default/web already has 2 pod(s) unavailable (at most 2)"
    )
    # one not ready and one migrating
    pods[4] = pod("p4", node="n4", owner=rs("web"))
    mixed = World(pods, [job("j5", pods[5], "Running")])
    assert mixed.limits().refusal(pods[0], admitted_only=True) == (
        "workload ReplicaSet default/web already has 2 pod(s) unavailable (at most 2)"
    )
    # a migrating pod that is also not ready counts once
    pods[5] = pod("p5", node="n5", owner=rs("web"), ready=False)
    pods[3] = pod("p3", node="n3", owner=rs("web"))
    once = World(pods, [job("j5", pods[5], "Running")])
    assert once.limits().refusal(pods[0], admitted_only=True) is None
    assert (
        world.limits({"skipEvictionGates": ["MaxUnavailablePerWorkload"]}).refusal(
            pods[0], admitted_only=True
        )
        is None
    )


def test_the_candidate_counts_as_unavailable_when_it_is_not_ready() -> None:
    pods = [pod(f"p{i}", node=f"n{i}", owner=rs("web"), ready=i not in (0, 1)) for i in range(10)]
    assert World(pods).limits().refusal(pods[0], admitted_only=True) == (
        "workload ReplicaSet default/web already has 2 pod(s) unavailable (at most 2)"
    )


def test_bare_pods_have_no_workload_limits() -> None:
    pods = [pod(f"p{i}", node=f"n{i}", owner=None, ready=False) for i in range(3)]
    assert World(pods).limits().refusal(pod("c", node="n9", owner=None), admitted_only=True) is None


def test_the_evict_annotation_lets_a_pod_past_every_limit() -> None:
    a, b = pod("a", node="n1", owner=rs("web")), pod("b", node="n1", owner=rs("web"))
    world = World([a, b], [job("ja", a, "Running"), job("jb", b, "Running")])
    candidate = pod("c", node="n1", owner=rs("web"))
    assert world.limits().refusal(candidate, admitted_only=True) is not None
    evictable = pod(
        "c", node="n1", owner=rs("web"), annotations={"descheduler.alpha.kubernetes.io/evict": "1"}
    )
    assert world.limits({"maxMigratingGlobally": 1}).refusal(evictable, admitted_only=True) is None


# ---- object limiters -------------------------------------------------------------------------


def test_workload_object_limiter_default_window() -> None:
    """Default: 5m per workload; 10 replicas may migrate 2 per window, so one eviction uses the
    bucket's only token and it refills in 300 / 2 = 150 s."""
    pods = [pod(f"p{i}", node="n1", owner=rs("web")) for i in range(10)]
    world = World(pods)
    limits = world.limits()
    limiters = limits.limiters
    assert limiters.exceeded(pods[1]) is None
    limiters.track(pods[0])
    refused = "workload ReplicaSet default/web was migrated too recently (object limiter)"
    assert limiters.exceeded(pods[1]) == refused
    assert limits.refusal(pods[1], admitted_only=True) == refused
    # the same pod, or any pod of the workload
    assert limiters.exceeded(pods[0]) == refused
    assert limiters.exceeded(pod("other", node="n1", owner=rs("api"))) is None
    world.clock.advance(149.0)
    assert limiters.exceeded(pods[1]) == refused
    world.clock.advance(1.0)
    assert limiters.exceeded(pods[1]) is None
    assert limits.refusal(pods[1], admitted_only=True) is None
    assert world.limits({"skipEvictionGates": ["ObjectLimiter"]}).refusal(pods[1], admitted_only=True) is None


def test_workload_object_limiter_max_migrating_sets_the_rate() -> None:
    # 50% of 10 replicas: 5 per 5m, a token every 60 s
    pods = [pod(f"p{i}", node="n1", owner=rs("web")) for i in range(10)]
    world = World(pods)
    limiters = world.limits(
        {"objectLimiters": {"workload": {"duration": "5m", "maxMigrating": "50%"}}}
    ).limiters
    limiters.track(pods[0])
    assert limiters.exceeded(pods[1]) is not None
    world.clock.advance(59.0)
    assert limiters.exceeded(pods[1]) is not None
    world.clock.advance(1.0)
    assert limiters.exceeded(pods[1]) is None


def test_a_zero_duration_turns_the_limiter_off() -> None:
    pods = [pod(f"p{i}", node="n1", owner=rs("web")) for i in range(10)]
    world = World(pods)
    limiters = world.limits({"objectLimiters": {"workload": {"duration": "0s"}}}).limiters
    limiters.track(pods[0])
    assert limiters.exceeded(pods[1]) is None


def test_namespace_object_limiter() -> None:
    world = World()
    limiters = world.limits({"objectLimiters": {"namespace": {"duration": "1m", "maxMigrating": 2}}}).limiters
    a, b = pod("a", namespace="prod", owner=None), pod("b", namespace="prod", owner=None)
    limiters.track(a)
    assert limiters.exceeded(b) == "namespace prod was migrated too recently (object limiter)"
    assert limiters.exceeded(pod("c", namespace="dev", owner=None)) is None
    world.clock.advance(30.0)
    assert limiters.exceeded(b) is None
    # a percent is not a count of pods: the namespace limiter is off
    off = (
        World().limits({"objectLimiters": {"namespace": {"duration": "1m", "maxMigrating": "50%"}}}).limiters
    )
    off.track(a)
    assert off.exceeded(b) is None


# ---- order -----------------------------------------------------------------------------------


def _priority(p: Mapping[str, Any]) -> tuple[Any, ...]:
    return (p["spec"].get("priority", 0),)


def _names(views: Sequence[JobView]) -> list[str]:
    return [v.job["metadata"]["name"] for v in views]


def test_order_jobs_pod_order_then_newest_first() -> None:
    views = [
        JobView(job("a", None, created="2026-01-01T00:01:40Z"), pod("pa", priority=5)),
        JobView(job("b", None, created="2026-01-01T00:03:20Z"), pod("pb", priority=5)),
        JobView(job("c", None, created="2026-01-01T00:02:30Z"), None),
        JobView(job("d", None, created="2026-01-01T00:00:50Z"), pod("pd", priority=1)),
    ]
    # jobs without a pod first; then by pod (priority 1 before 5); ties newest first
    assert _names(order_jobs(views, _priority, {})) == ["c", "d", "b", "a"]


def test_order_jobs_groups_batch_jobs_and_puts_busier_ones_first() -> None:
    created = "2026-01-01T00:00:00Z"
    views = [
        JobView(job("j1", None, created=created), pod("x1", priority=1, owner=("Job", "x", "x-uid"))),
        JobView(job("p", None, created=created), pod("p", priority=2, owner=rs("web"))),
        JobView(job("j2", None, created=created), pod("x2", priority=3, owner=("Job", "x", "x-uid"))),
        JobView(job("k", None, created=created), pod("y1", priority=0, owner=("Job", "y", "y-uid"))),
    ]
    # by pod: k, j1, p, j2; job x's pods gather at j1's place: k, j1, j2, p
    assert _names(order_jobs(views, _priority, {})) == ["k", "j1", "j2", "p"]
    # job x already migrates 2 pods: its jobs go first
    assert _names(order_jobs(views, _priority, {"x-uid": 2})) == ["j1", "j2", "k", "p"]
    assert _names(order_jobs(views, _priority, {"x-uid": 1, "y-uid": 2})) == ["k", "j1", "j2", "p"]
