"""The work queue: deduplication, one worker per key, delays, backoff and shutdown."""

from __future__ import annotations

import asyncio

import pytest

from controlplane.reactor import (
    BucketRateLimiter,
    ItemExponentialRateLimiter,
    MaxOfRateLimiter,
    ReactorMetrics,
    WorkQueue,
)
from testsupport.fake import FakeClock


def queue(clock: FakeClock | None = None, **kwargs) -> WorkQueue:
    return WorkQueue("test", clock=clock or FakeClock(), **kwargs)


async def take(q: WorkQueue) -> str | None:
    async with asyncio.timeout(5):
        return await q.get()


async def test_a_key_added_twice_is_handed_out_once():
    q = queue()
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    assert [await take(q), await take(q)] == ["a", "b"]
    assert len(q) == 0


async def test_a_key_added_while_processing_waits_for_done_and_comes_back_once():
    q = queue()
    q.add("a")
    assert await take(q) == "a"
    q.add("a")
    q.add("a")
    assert len(q) == 0, "the key is in progress: no second worker may take it"
    assert q.processing == {"a"}
    q.done("a")
    assert len(q) == 1
    assert await take(q) == "a"
    q.done("a")
    assert q.is_idle()


async def test_waiting_getters_are_woken_in_order():
    q = queue()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add("x")
    q.add("y")
    async with asyncio.timeout(5):
        assert await first == "x"
        assert await second == "y"


async def test_delayed_keys_appear_when_their_time_comes_and_the_earliest_delay_wins():
    clock = FakeClock()
    q = queue(clock)
    q.add_after("late", 10)
    q.add_after("soon", 5)
    q.add_after("soon", 8)  # later than the pending delay: ignored
    await asyncio.sleep(0)
    assert len(q) == 0
    assert q.delayed == 2
    clock.advance(5)
    assert await take(q) == "soon"
    assert len(q) == 0
    clock.advance(5)
    assert await take(q) == "late"
    q.done("soon")
    q.done("late")
    assert q.is_idle()
    await q.close()


async def test_an_earlier_delay_replaces_a_later_one():
    clock = FakeClock()
    q = queue(clock)
    q.add_after("k", 60)
    q.add_after("k", 1)
    await asyncio.sleep(0)
    clock.advance(1)
    assert await take(q) == "k"
    q.done("k")
    clock.advance(60)
    await asyncio.sleep(0)
    assert len(q) == 0, "the superseded delay must not add the key again"
    await q.close()


def test_exponential_backoff_doubles_per_failure_and_resets_on_forget():
    limiter = ItemExponentialRateLimiter(0.005, 1.0)
    assert [limiter.when("k") for _ in range(10)] == [
        0.005,
        0.01,
        0.02,
        0.04,
        0.08,
        0.16,
        0.32,
        0.64,
        1.0,
        1.0,
    ]
    assert limiter.retries("k") == 10
    assert limiter.when("other") == 0.005
    limiter.forget("k")
    assert limiter.retries("k") == 0
    assert limiter.when("k") == 0.005


def test_the_bucket_limits_the_overall_retry_rate():
    clock = FakeClock()
    bucket = BucketRateLimiter(qps=2.0, burst=2, clock=clock)
    assert [bucket.when(k) for k in "abcd"] == [0.0, 0.0, 0.5, 1.0]
    clock.advance(10)
    assert bucket.when("e") == 0.0


def test_the_combined_limiter_takes_the_longer_delay():
    clock = FakeClock()
    limiter = MaxOfRateLimiter(ItemExponentialRateLimiter(1.0, 100.0), BucketRateLimiter(1.0, 1, clock))
    assert limiter.when("a") == 1.0
    assert limiter.when("b") == 1.0
    assert limiter.when("a") == 2.0
    assert limiter.retries("a") == 2


async def test_rate_limited_adds_back_off_until_forgotten():
    clock = FakeClock()
    q = queue(clock, rate_limiter=ItemExponentialRateLimiter(1.0, 100.0))
    q.add_rate_limited("k")
    await asyncio.sleep(0)
    clock.advance(0.5)
    await asyncio.sleep(0)
    assert len(q) == 0
    clock.advance(0.5)
    assert await take(q) == "k"
    q.done("k")
    q.add_rate_limited("k")  # second failure: 2 s
    await asyncio.sleep(0)
    clock.advance(1.5)
    await asyncio.sleep(0)
    assert len(q) == 0
    clock.advance(0.5)
    assert await take(q) == "k"
    q.forget("k")
    assert q.num_requeues("k") == 0
    await q.close()


async def test_shutdown_wakes_getters_and_refuses_new_keys():
    q = queue()
    getter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.shutdown()
    async with asyncio.timeout(5):
        assert await getter is None
    q.add("late")
    assert len(q) == 0
    assert await take(q) is None


async def test_wait_idle_returns_once_everything_is_done():
    q = queue()
    q.add("a")
    waiter = asyncio.create_task(q.wait_idle())
    key = await take(q)
    await asyncio.sleep(0)
    assert not waiter.done()
    assert key is not None
    q.done(key)
    async with asyncio.timeout(5):
        await waiter


@pytest.mark.parametrize("adds", [1, 3], ids=["one-add", "three-adds"])
async def test_queue_metrics_count_adds_depth_and_durations(adds):
    clock = FakeClock()
    metrics = ReactorMetrics()
    q = WorkQueue("nodes", clock=clock, metrics=metrics)
    for _ in range(adds):
        q.add("a")
    q.add("b")
    sample = metrics.registry.get_sample_value
    assert sample("workqueue_adds_total", {"name": "nodes"}) == 2.0
    assert sample("workqueue_depth", {"name": "nodes"}) == 2.0
    clock.advance(3)
    key = await take(q)
    assert key == "a"
    assert sample("workqueue_queue_duration_seconds_sum", {"name": "nodes"}) == 3.0
    clock.advance(2)
    assert sample("workqueue_longest_running_processor_seconds", {"name": "nodes"}) == 2.0
    assert sample("workqueue_unfinished_work_seconds", {"name": "nodes"}) == 2.0
    q.done(key)
    assert sample("workqueue_work_duration_seconds_count", {"name": "nodes"}) == 1.0
    assert sample("workqueue_longest_running_processor_seconds", {"name": "nodes"}) == 0.0
    assert sample("workqueue_depth", {"name": "nodes"}) == 1.0
