"""The status the scheduler writes on each quota: annotations, status.used, only when changed."""

from __future__ import annotations

import copy
from typing import Any

from controlplane.scheduler.quota import QuotaForest, status_patch
from koordinator.api.quantity import Quantity

from .builders import eq, pod

P = "quota.scheduling.koordinator.sh/"


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch (what the apiserver applies)."""
    result = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def setup(obj: dict[str, Any]) -> QuotaForest:
    forest = QuotaForest()
    forest.set_cluster_total({"cpu": Quantity.parse("4"), "memory": Quantity.parse("8Gi")})
    forest.upsert_quota(obj)
    forest.add_pod(
        pod("run", quota="team", requests={"cpu": "3", "memory": "2Gi"}, node="n1", phase="Running")
    )
    forest.add_pod(pod("np", quota="team", requests={"cpu": "1", "memory": "1Gi"}, non_preemptible=True))
    return forest


def team(**kwargs: Any) -> dict[str, Any]:
    return eq("team", min={"cpu": "2", "memory": "4Gi"}, max={"cpu": "10", "memory": "20Gi"}, **kwargs)


def test_first_write_carries_every_non_empty_figure():
    obj = team()
    forest = setup(obj)
    summary = forest.summary("team")
    assert summary is not None
    assert status_patch(obj, summary) == {
        "metadata": {
            "annotations": {
                P + "runtime": '{"cpu":"4","memory":"3Gi"}',
                P + "request": '{"cpu":"4","memory":"3Gi"}',
                P + "child-request": '{"cpu":"4","memory":"3Gi"}',
                P + "non-preemptible-request": '{"cpu":"1","memory":"1Gi"}',
            }
        },
        "status": {"used": {"cpu": "3", "memory": "2Gi"}},
    }


def test_nothing_is_written_once_in_line():
    obj = team()
    forest = setup(obj)
    summary = forest.summary("team")
    assert summary is not None
    patch = status_patch(obj, summary)
    assert patch is not None
    assert status_patch(merge(obj, patch), summary) is None


def test_zeros_are_ignored_and_equal_values_in_other_spellings_are_not_rewritten():
    obj = team(
        annotations={
            P + "runtime": '{"cpu":"4000m","memory":"3Gi","nvidia.com/gpu":"0"}',
            P + "request": '{"cpu":"4","memory":"3221225472"}',
            P + "child-request": '{"cpu":"4","memory":"3Gi"}',
            P + "non-preemptible-request": '{"cpu":"1","memory":"1Gi"}',
            P + "non-preemptible-used": '{"cpu":"0"}',
        },
        used={"cpu": "3000m", "memory": "2Gi", "pods": "0"},
    )
    forest = setup(obj)
    summary = forest.summary("team")
    assert summary is not None
    assert status_patch(obj, summary) is None


def test_changes_are_patched_key_by_key():
    obj = team(
        annotations={
            P + "runtime": '{"cpu":"4","memory":"3Gi"}',
            P + "request": "not json",
            P + "child-request": '{"cpu":"4","memory":"3Gi"}',
            P + "non-preemptible-request": '{"cpu":"1","memory":"1Gi"}',
        },
        used={"cpu": "3000m", "memory": "1Gi", "pods": "1"},
    )
    forest = setup(obj)
    summary = forest.summary("team")
    assert summary is not None
    assert status_patch(obj, summary) == {
        "metadata": {"annotations": {P + "request": '{"cpu":"4","memory":"3Gi"}'}},
        "status": {"used": {"memory": "2Gi", "pods": None}},
    }
