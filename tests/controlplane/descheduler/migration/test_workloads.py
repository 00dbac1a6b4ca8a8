"""A pod's workload, its expected replicas, and upstream's ``GetMaxUnavailable`` (also the
migrating limit): the int-or-percent rounded down; when 0 or unset, 10% above 10 replicas,
2 from 4 to 10, else 1; never more than the replicas."""

from __future__ import annotations

import pytest

from controlplane.descheduler.migration.args import IntOrPercent
from controlplane.descheduler.migration.workloads import (
    Workload,
    controller_of,
    expected_replicas,
    is_ready,
    max_unavailable,
)
from tests.controlplane.descheduler.builders import pod, replica_set

REPLICAS = (1, 2, 3, 4, 10, 11, 20, 100)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # 1-3: 1; 4-10: 2; above 10: floor(10%) -- 11 gives 1, 20 gives 2, 100 gives 10
        (None, (1, 1, 1, 2, 2, 1, 2, 10)),
        (IntOrPercent(1), (1, 1, 1, 1, 1, 1, 1, 1)),
        # floor(50%): 1 -> 0 (falls back to 1), 3 -> 1, 11 -> 5
        (IntOrPercent(50, percent=True), (1, 1, 1, 2, 5, 5, 10, 50)),
        # 0 falls back to the default
        (IntOrPercent(0), (1, 1, 1, 2, 2, 1, 2, 10)),
        # floor(5%) is 0 below 20 replicas: the default again
        (IntOrPercent(5, percent=True), (1, 1, 1, 2, 2, 1, 1, 5)),
    ],
)
def test_max_unavailable(value: IntOrPercent | None, expected: tuple[int, ...]) -> None:
    assert tuple(max_unavailable(r, value) for r in REPLICAS) == expected


def test_max_unavailable_of_no_replicas_is_zero() -> None:
    assert max_unavailable(0, None) == 0


def test_max_unavailable_never_exceeds_the_replicas() -> None:
    assert max_unavailable(3, IntOrPercent(5)) == 3
    assert max_unavailable(4, IntOrPercent(150, percent=True)) == 4


def _workload(api_version: str, kind: str) -> Workload:
    return Workload(api_version, kind, "w", "w-uid", "default")


@pytest.mark.parametrize(
    ("api_version", "kind", "spec", "expected"),
    [
        ("apps/v1", "ReplicaSet", {"replicas": 5}, 5),
        ("apps/v1", "ReplicaSet", {}, 1),
        ("apps/v1", "StatefulSet", {"replicas": 3}, 3),
        ("v1", "ReplicationController", {"replicas": 7}, 7),
        ("batch/v1", "Job", {"parallelism": 4, "completions": 10}, 4),
        ("batch/v1", "Job", {}, 1),
        # a kind without a known replicas field: the pods it controls
        ("apps.kruise.io/v1alpha1", "CloneSet", {"replicas": 9}, 6),
    ],
)
def test_expected_replicas_by_kind(api_version: str, kind: str, spec: dict[str, int], expected: int) -> None:
    owner = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w"}, "spec": spec}
    assert expected_replicas(_workload(api_version, kind), owner, pods=6) == expected


def test_expected_replicas_of_an_owner_not_cached_is_the_pod_count() -> None:
    assert expected_replicas(_workload("apps/v1", "ReplicaSet"), None, pods=4) == 4


def test_expected_replicas_of_a_replica_set_builder() -> None:
    rs = replica_set("web", "prod", "web-uid", 10)
    assert expected_replicas(Workload("apps/v1", "ReplicaSet", "web", "web-uid", "prod"), rs, pods=3) == 10


def test_controller_of() -> None:
    workload = controller_of(pod("p", namespace="prod", owner=("StatefulSet", "db", "db-uid")))
    assert workload == Workload("apps/v1", "StatefulSet", "db", "db-uid", "prod")
    assert workload.group == "apps"
    assert workload.key == "prod/db"
    assert controller_of(pod("bare", owner=None)) is None
    not_controller = pod("p")
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert controller_of(not_controller) is None
    job = controller_of(pod("p", owner=("Job", "j", "j-uid")))
    assert job is not None
    assert job.group == "batch"
    rc = controller_of(pod("p", owner=("ReplicationController", "rc", "rc-uid")))
    assert rc is not None
    assert rc.group == ""


def test_is_ready() -> None:
    assert is_ready(pod("p", node="n1"))
    assert not is_ready(pod("p", node="n1", ready=False))
    assert not is_ready(pod("p", node="n1", phase="Failed"))
    terminating = pod("p", node="n1")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not is_ready(terminating)
