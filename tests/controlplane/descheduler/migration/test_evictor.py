"""Eviction policies against the fake apiserver: ``Eviction`` (the eviction subresource,
which PodDisruptionBudgets hold), ``Delete``, ``SoftEviction`` (an annotation, the pod
stays); the ``koordinator.sh/evict-policy`` label; the evictQPS/evictBurst token bucket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from controlplane.descheduler.migration.evictor import Evictor, TooManyEvictionsError, policy_for
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import TooManyRequestsError
from koordinator.kube.timeutil import format_time
from tests.controlplane.descheduler.builders import pod
from tests.controlplane.descheduler.migration.cluster import seed, started_fake
from testsupport.fake import FakeApiServer, FakeClock, StatusError

Obj = dict[str, Any]
SOFT = "scheduling.koordinator.sh/soft-eviction"
POLICY = "koordinator.sh/evict-policy"


class Env:
    def __init__(self, fake: FakeApiServer, client: ApiClient, clock: FakeClock) -> None:
        self.fake = fake
        self.client = client
        self.clock = clock

    def add_pod(self, name: str, **fields: Any) -> Obj:
        fields.setdefault("labels", {"app": "web"})
        return seed(self.fake, pod(name, node="n1", **fields))

    def get(self, name: str) -> Obj | None:
        try:
            return self.fake.get(res.PODS, name, "default")
        except StatusError as err:
            if err.code != 404:
                raise
            return None


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    clock = FakeClock()
    fake = await started_fake(clock)
    client = fake.client()
    try:
        yield Env(fake, client, clock)
    finally:
        await client.close()
        await fake.stop()


def blocking_pdb(env: Env) -> None:
    created = seed(
        env.fake,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    created["status"] = {
        "observedGeneration": created["metadata"].get("generation", 1),
        "disruptionsAllowed": 0,
        "currentHealthy": 1,
        "desiredHealthy": 1,
        "expectedPods": 1,
    }
    env.fake.update(res.POD_DISRUPTION_BUDGETS, created, subresource="status")


async def test_eviction_deletes_the_pod_with_the_delete_options(env: Env) -> None:
    p = env.add_pod("web-1")
    await Evictor(env.client, 10, 1, env.clock).evict(
        p, "Eviction", {"gracePeriodSeconds": 0}, "LowNodeLoad", "hot"
    )
    assert env.get("web-1") is None


async def test_eviction_without_options_starts_the_pods_graceful_termination(env: Env) -> None:
    p = env.add_pod("web-1")
    await Evictor(env.client, 10, 1, env.clock).evict(p, "Eviction", None, "LowNodeLoad", "hot")
    left = env.get("web-1")
    assert left is not None
    assert left["metadata"]["deletionGracePeriodSeconds"] == 30


async def test_eviction_respects_a_disruption_budget_and_delete_does_not(env: Env) -> None:
    p = env.add_pod("web-1")
    blocking_pdb(env)
    with pytest.raises(TooManyRequestsError, match="disruption budget"):
        await Evictor(env.client, 10, 1, env.clock).evict(p, "Eviction", {"gracePeriodSeconds": 0}, "t", "r")
    left = env.get("web-1")
    assert left is not None
    assert "deletionTimestamp" not in left["metadata"]
    await Evictor(env.client, 10, 1, env.clock).evict(p, "Delete", {"gracePeriodSeconds": 0}, "t", "r")
    assert env.get("web-1") is None


async def test_soft_eviction_annotates_the_pod_and_leaves_it(env: Env) -> None:
    p = env.add_pod("web-1")
    await Evictor(env.client, 10, 1, env.clock).evict(p, "SoftEviction", None, "LowNodeLoad", "node is hot")
    left = env.get("web-1")
    assert left is not None
    assert "deletionTimestamp" not in left["metadata"]
    assert json.loads(left["metadata"]["annotations"][SOFT]) == {
        "timestamp": format_time(env.clock.time()),
        "deleteOptions": None,
        "initiator": "LowNodeLoad",
        "reason": "node is hot",
    }


@pytest.mark.parametrize(
    ("initiator", "reason", "options", "expected_reason", "expected_options"),
    [
        ("LowNodeLoad", "", None, "LowNodeLoad", None),
        ("", "", None, "NotSet", None),
        ("X", "why", {"gracePeriodSeconds": 5}, "why", {"gracePeriodSeconds": 5}),
    ],
)
async def test_soft_eviction_reason_falls_back_to_the_initiator(
    env: Env,
    initiator: str,
    reason: str,
    options: Obj | None,
    expected_reason: str,
    expected_options: Obj | None,
) -> None:
    p = env.add_pod("web-1")
    await Evictor(env.client, 10, 1, env.clock).evict(p, "SoftEviction", options, initiator, reason)
    left = env.get("web-1")
    assert left is not None
    soft = json.loads(left["metadata"]["annotations"][SOFT])
    assert soft["reason"] == expected_reason
    assert soft["initiator"] == initiator
    assert soft["deleteOptions"] == expected_options


async def test_one_token_per_burst_refilled_at_evict_qps(env: Env) -> None:
    first, second = env.add_pod("web-1"), env.add_pod("web-2")
    evictor = Evictor(env.client, 10, 1, env.clock)
    await evictor.evict(first, "Delete", {"gracePeriodSeconds": 0}, "t", "r")
    with pytest.raises(TooManyEvictionsError):
        await evictor.evict(second, "Delete", {"gracePeriodSeconds": 0}, "t", "r")
    assert env.get("web-2") is not None
    assert evictor.retry_after_s == pytest.approx(0.1)
    env.clock.advance(0.05)
    with pytest.raises(TooManyEvictionsError):
        await evictor.evict(second, "Delete", {"gracePeriodSeconds": 0}, "t", "r")
    env.clock.advance(0.05)
    await evictor.evict(second, "Delete", {"gracePeriodSeconds": 0}, "t", "r")
    assert env.get("web-2") is None


async def test_a_burst_of_two(env: Env) -> None:
    pods = [env.add_pod(f"web-{i}") for i in range(3)]
    evictor = Evictor(env.client, 1, 2, env.clock)
    await evictor.evict(pods[0], "SoftEviction", None, "t", "r")
    await evictor.evict(pods[1], "SoftEviction", None, "t", "r")
    with pytest.raises(TooManyEvictionsError):
        await evictor.evict(pods[2], "SoftEviction", None, "t", "r")
    left = env.get("web-2")
    assert left is not None
    assert SOFT not in (left["metadata"].get("annotations") or {})


def _labelled(policy: str | None) -> Obj:
    return {"metadata": {"labels": {POLICY: policy} if policy else {}}}


@pytest.mark.parametrize(
    ("pod_label", "job_label", "expected"),
    [
        (None, None, "Eviction"),
        ("Delete", None, "Delete"),
        (None, "SoftEviction", "SoftEviction"),
        # the pod's label first
        ("Delete", "SoftEviction", "Delete"),
        # an unknown value keeps the configured policy
        ("Kill", None, "Eviction"),
        ("Kill", "Delete", "Eviction"),
    ],
)
def test_policy_for(pod_label: str | None, job_label: str | None, expected: str) -> None:
    assert policy_for(_labelled(pod_label), _labelled(job_label), "Eviction") == expected


async def test_the_pod_label_chooses_the_policy_the_evictor_applies(env: Env) -> None:
    p = env.add_pod("web-1", labels={"app": "web", POLICY: "SoftEviction"})
    policy = policy_for(p, _labelled(None), "Eviction")
    await Evictor(env.client, 10, 1, env.clock).evict(
        p, policy, {"gracePeriodSeconds": 0}, "LowNodeLoad", "r"
    )
    left = env.get("web-1")
    assert left is not None
    assert SOFT in left["metadata"]["annotations"]
