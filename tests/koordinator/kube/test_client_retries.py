"""The client's failure handling against injected faults: what is retried, what is not, and how."""

from __future__ import annotations

import asyncio

import pytest

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient, is_pdb_refusal
from koordinator.kube.errors import (
    ApiConnectionError,
    InternalError,
    ServiceUnavailableError,
    TooManyRequestsError,
)
from koordinator.kube.retry import RetryPolicy
from tests.koordinator.kube.builders import config_map, pod
from testsupport.fake import FakeApiServer, Fault

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


@pytest.fixture
async def client(fake_server: FakeApiServer):
    fake_server.create(res.CONFIG_MAPS, config_map("c", "ns", {"a": "1"}))
    async with fake_server.client(retry=FAST) as made:
        yield made


@pytest.mark.parametrize(
    ("status", "method"),
    [
        pytest.param(429, "GET", id="429-get"),
        pytest.param(429, "POST", id="429-post"),
        pytest.param(500, "GET", id="500-get"),
        pytest.param(503, "PUT", id="503-put"),
        pytest.param(504, "DELETE", id="504-delete"),
        pytest.param(0, "GET", id="dropped-get"),
    ],
)
async def test_transient_failures_are_retried(fake_server: FakeApiServer, client: ApiClient, status, method):
    fault = fake_server.inject(
        Fault(status=status, method=method, times=2, retry_after=0 if status == 429 else None)
    )
    current = await client.get(res.CONFIG_MAPS, "c", "ns")
    if method == "GET":
        result = await client.get(res.CONFIG_MAPS, "c", "ns")
        assert result["data"] == {"a": "1"}
    elif method == "POST":
        created = await client.create(res.CONFIG_MAPS, config_map("d", "ns"))
        assert created["metadata"]["name"] == "d"
    elif method == "PUT":
        updated = await client.replace(res.CONFIG_MAPS, {**current, "data": {"a": "2"}})
        assert updated["data"] == {"a": "2"}
    else:
        await client.delete(res.CONFIG_MAPS, "c", "ns")
        assert fake_server.list_objects(res.CONFIG_MAPS, "ns") == []
    assert fault.hits == 2


@pytest.mark.parametrize(
    ("status", "error"),
    [
        pytest.param(500, InternalError, id="500"),
        pytest.param(503, ServiceUnavailableError, id="503"),
        pytest.param(0, ApiConnectionError, id="dropped"),
    ],
)
async def test_non_idempotent_calls_are_not_retried_after_a_server_failure(
    fake_server: FakeApiServer, client: ApiClient, status, error
):
    fault = fake_server.inject(Fault(status=status, method="POST", times=5))
    with pytest.raises(error):
        await client.create(res.CONFIG_MAPS, config_map("d", "ns"))
    assert fault.hits == 1


async def test_retries_give_up_after_the_policy_attempts(fake_server: FakeApiServer, client: ApiClient):
    fault = fake_server.inject(Fault(status=503, method="GET", times=100))
    with pytest.raises(ServiceUnavailableError):
        await client.get(res.CONFIG_MAPS, "c", "ns")
    assert fault.hits == FAST.attempts


async def test_retry_after_is_honoured(fake_server: FakeApiServer):
    fake_server.create(res.CONFIG_MAPS, config_map("c", "ns"))
    policy = RetryPolicy(attempts=3, base_delay=10.0, max_delay=10.0)
    assert policy.delay(1, retry_after=0) == 0.0
    assert policy.delay(1, retry_after=60) == 10.0, "capped by max_delay"
    fault = fake_server.inject(Fault(status=429, times=1, retry_after=0, method="GET"))
    async with fake_server.client(retry=policy) as client:
        await asyncio.wait_for(client.get(res.CONFIG_MAPS, "c", "ns"), 5)
    assert fault.hits == 1


def test_backoff_grows_exponentially_within_jitter():
    policy = RetryPolicy(base_delay=0.2, factor=2.0, jitter=0.5, max_delay=10.0)
    for attempt, base in [(1, 0.2), (2, 0.4), (3, 0.8), (4, 1.6)]:
        samples = [policy.delay(attempt) for _ in range(200)]
        assert all(base * 0.5 <= s <= base * 1.5 for s in samples)
    assert max(policy.delay(20) for _ in range(50)) <= 10.0


async def test_connection_refused_is_retried_until_the_server_is_back(fake_server: FakeApiServer):
    fake_server.create(res.CONFIG_MAPS, config_map("c", "ns"))
    policy = RetryPolicy(attempts=50, base_delay=0.02, max_delay=0.05)
    async with fake_server.client(retry=policy) as client:
        await fake_server.stop_listening()
        pending = asyncio.ensure_future(client.create(res.CONFIG_MAPS, config_map("d", "ns")))
        await asyncio.sleep(0.2)
        assert not pending.done()
        await fake_server.start_listening()
        created = await asyncio.wait_for(pending, 5)
    assert created["metadata"]["name"] == "d"


async def test_request_timeout(fake_server: FakeApiServer):
    fake_server.create(res.CONFIG_MAPS, config_map("c", "ns"))
    fake_server.inject(Fault(status=500, delay=2.0, method="GET"))
    async with fake_server.client(timeout=0.2, retry=RetryPolicy(attempts=1)) as client:
        with pytest.raises(ApiConnectionError):
            await client.get(res.CONFIG_MAPS, "c", "ns")


async def test_eviction_refused_by_a_budget_is_not_retried_but_throttling_is(
    fake_server: FakeApiServer, client: ApiClient
):
    fake_server.create(res.PODS, pod("p", "ns"))
    throttled = fake_server.inject(Fault(status=429, retry_after=0, path="/eviction$", times=1))
    await client.evict("ns", "p")
    assert throttled.hits == 1
    fake_server.create(res.PODS, pod("q", "ns", labels={"app": "q"}, node="n1"))
    current = fake_server.get(res.PODS, "q", "ns")
    current["status"] = {
        **current["status"],
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    fake_server.update(res.PODS, current, subresource="status")
    pdb = fake_server.create(
        res.POD_DISRUPTION_BUDGETS,
        {
            "metadata": {"name": "q", "namespace": "ns"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "q"}}},
        },
    )
    pdb["status"] = {
        "observedGeneration": 1,
        "disruptionsAllowed": 0,
        "currentHealthy": 1,
        "desiredHealthy": 1,
    }
    fake_server.update(res.POD_DISRUPTION_BUDGETS, pdb, subresource="status")
    fake_server.record_requests = True
    with pytest.raises(TooManyRequestsError) as info:
        await client.evict("ns", "q")
    assert is_pdb_refusal(info.value)
    assert [r.status for r in fake_server.requests if r.path.endswith("/eviction")] == [429]


async def test_unauthorized_token_is_refreshed_once(fake_server: FakeApiServer, tmp_path):
    from koordinator.kube.config import ClusterConfig, FileToken
    from koordinator.kube.errors import UnauthorizedError

    fake_server.tokens = {"good": "alice"}
    token_file = tmp_path / "token"
    token_file.write_text("stale")
    async with ApiClient(
        ClusterConfig(server=fake_server.url, token=FileToken(token_file)), retry=FAST
    ) as client:
        with pytest.raises(UnauthorizedError):
            await client.server_version()
        token_file.write_text("good")
        assert (await client.server_version())["major"] == "1"
