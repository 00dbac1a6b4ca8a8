"""Controllers on the reactor: one reconcile per key at a time, retries by error kind, events, stopping."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import pytest

from controlplane.reactor import (
    Controller,
    ItemExponentialRateLimiter,
    PermanentError,
    ReactorMetrics,
    Result,
    TemporaryError,
    is_temporary,
)
from koordinator.kube import resources as res
from koordinator.kube.errors import (
    ApiConnectionError,
    ConflictError,
    InvalidError,
    NotFoundError,
    ServiceUnavailableError,
    TooManyRequestsError,
)
from koordinator.kube.events import EventRecorder
from tests.polling import eventually
from testsupport.fake import FakeApiServer, FakeClock


def status(code: int, reason: str = "") -> dict[str, object]:
    return {"kind": "Status", "code": code, "reason": reason, "message": f"failure {code}"}


@pytest.mark.parametrize(
    ("error", "temporary"),
    [
        pytest.param(ConflictError(status(409, "Conflict")), True, id="conflict"),
        pytest.param(TooManyRequestsError(status(429)), True, id="throttled"),
        pytest.param(ServiceUnavailableError(status(503)), True, id="unavailable"),
        pytest.param(NotFoundError(status(404)), True, id="cache-behind"),
        pytest.param(ApiConnectionError("connection refused"), True, id="no-connection"),
        pytest.param(TimeoutError(), True, id="timeout"),
        pytest.param(TemporaryError("later"), True, id="declared-temporary"),
        pytest.param(InvalidError(status(422, "Invalid")), False, id="invalid-object"),
        pytest.param(PermanentError("never"), False, id="declared-permanent"),
        pytest.param(KeyError("bug"), False, id="bug"),
    ],
)
def test_errors_are_sorted_into_temporary_and_permanent(error, temporary):
    assert is_temporary(error) is temporary


class Recorder:
    """A reconcile function that records what it saw and does what the test tells it."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.concurrent: Counter[str] = Counter()
        self.max_concurrent: Counter[str] = Counter()
        self.outcomes: dict[str, list[object]] = {}
        self.gates: dict[str, asyncio.Event] = {}

    async def __call__(self, key: str) -> Result | None:
        self.calls[key] += 1
        self.concurrent[key] += 1
        self.max_concurrent[key] = max(self.max_concurrent[key], self.concurrent[key])
        try:
            gate = self.gates.get(key)
            if gate is not None:
                await gate.wait()
            plan = self.outcomes.get(key) or []
            outcome = plan.pop(0) if plan else None
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome if isinstance(outcome, Result) else None
        finally:
            self.concurrent[key] -= 1


@contextlib.asynccontextmanager
async def running(controller: Controller):
    task = asyncio.create_task(controller.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def idle(controller: Controller) -> None:
    async with asyncio.timeout(5):
        await controller.queue.wait_idle()


async def test_a_key_is_never_reconciled_by_two_workers_at_once():
    reconcile = Recorder()
    reconcile.gates["a"] = asyncio.Event()
    controller = Controller("test", reconcile, workers=4, clock=FakeClock())
    async with running(controller):
        controller.enqueue("a")
        await eventually(lambda: reconcile.calls["a"] == 1)
        for _ in range(5):
            controller.enqueue("a")
        controller.enqueue_all(["b", "c"])
        await eventually(lambda: reconcile.calls["b"] == 1 and reconcile.calls["c"] == 1)
        assert reconcile.calls["a"] == 1
        reconcile.gates["a"].set()
        await idle(controller)
    assert reconcile.calls["a"] == 2, "the adds during the reconcile collapse into one more pass"
    assert reconcile.max_concurrent["a"] == 1


async def test_temporary_failures_are_retried_with_backoff_until_success():
    clock = FakeClock()
    metrics = ReactorMetrics()
    reconcile = Recorder()
    reconcile.outcomes["n"] = [
        ConflictError(status(409, "Conflict")),
        ApiConnectionError("reset by peer"),
    ]
    controller = Controller(
        "test", reconcile, clock=clock, rate_limiter=ItemExponentialRateLimiter(1.0, 60.0), metrics=metrics
    )
    async with running(controller):
        controller.enqueue("n")
        await eventually(lambda: reconcile.calls["n"] == 1 and controller.queue.delayed == 1)
        clock.advance(1.0)  # first backoff: 1 s
        await eventually(lambda: reconcile.calls["n"] == 2 and controller.queue.delayed == 1)
        clock.advance(1.0)
        await asyncio.sleep(0.05)
        assert reconcile.calls["n"] == 2, "the second backoff is 2 s"
        clock.advance(1.0)
        await eventually(lambda: reconcile.calls["n"] == 3)
        await idle(controller)
    assert controller.queue.num_requeues("n") == 0, "success forgets the backoff"
    sample = metrics.registry.get_sample_value
    assert sample("controller_runtime_reconcile_total", {"controller": "test", "result": "error"}) == 2
    assert sample("controller_runtime_reconcile_total", {"controller": "test", "result": "success"}) == 1
    assert sample("controller_runtime_reconcile_errors_total", {"controller": "test"}) == 2
    assert sample("workqueue_retries_total", {"name": "test"}) == 2
    assert sample("controller_runtime_terminal_reconcile_errors_total", {"controller": "test"}) in (None, 0)


async def test_a_temporary_error_with_a_delay_comes_back_after_that_delay():
    clock = FakeClock()
    reconcile = Recorder()
    reconcile.outcomes["n"] = [TemporaryError("NodeMetric not reported yet", retry_after=30.0)]
    controller = Controller("test", reconcile, clock=clock)
    async with running(controller):
        controller.enqueue("n")
        await eventually(lambda: controller.queue.delayed == 1)
        clock.advance(29.0)
        await asyncio.sleep(0.05)
        assert reconcile.calls["n"] == 1
        clock.advance(1.0)
        await eventually(lambda: reconcile.calls["n"] == 2)
        await idle(controller)


async def test_requeue_after_brings_the_key_back():
    clock = FakeClock()
    metrics = ReactorMetrics()
    reconcile = Recorder()
    reconcile.outcomes["n"] = [Result(requeue_after=300.0)]
    controller = Controller("test", reconcile, clock=clock, metrics=metrics)
    async with running(controller):
        controller.enqueue("n")
        await eventually(lambda: controller.queue.delayed == 1)
        clock.advance(300.0)
        await eventually(lambda: reconcile.calls["n"] == 2)
        await idle(controller)
    assert (
        metrics.registry.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": "test", "result": "requeue_after"}
        )
        == 1
    )


async def test_permanent_failures_are_not_retried_and_tell_the_user_with_an_event():
    async with FakeApiServer() as fake, fake.client() as client:
        node = fake.create(res.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        clock = FakeClock()
        metrics = ReactorMetrics()
        reconcile = Recorder()
        reconcile.outcomes["n1"] = [
            PermanentError(
                "the node reservation annotation is not JSON",
                reason="InvalidNodeReservation",
                involved=node,
                kind="Node",
            )
        ]
        reconcile.outcomes["bug"] = [ZeroDivisionError("division by zero")]
        controller = Controller(
            "test",
            reconcile,
            clock=clock,
            metrics=metrics,
            recorder=EventRecorder(client, "slo-controller"),
        )
        async with running(controller):
            controller.enqueue_all(["n1", "bug"])
            await idle(controller)
            clock.advance(3600)
            await asyncio.sleep(0.05)
        assert reconcile.calls == Counter({"n1": 1, "bug": 1})
        events = fake.list_objects(res.EVENTS, "default")
        assert [
            (e["reason"], e["type"], e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events
        ] == [("InvalidNodeReservation", "Warning", "Node", "n1")]
        assert events[0]["message"] == "the node reservation annotation is not JSON"
        assert (
            metrics.registry.get_sample_value(
                "controller_runtime_terminal_reconcile_errors_total", {"controller": "test"}
            )
            == 2
        )


async def test_cancelling_drains_reconciles_in_progress():
    reconcile = Recorder()
    reconcile.gates["slow"] = asyncio.Event()
    controller = Controller("test", reconcile, clock=FakeClock(), drain_timeout=5.0)
    task = asyncio.create_task(controller.run())
    controller.enqueue("slow")
    await eventually(lambda: reconcile.calls["slow"] == 1)
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done(), "a graceful stop waits for the reconcile in progress"
    controller.enqueue("never")
    reconcile.gates["slow"].set()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert reconcile.concurrent["slow"] == 0
    assert reconcile.calls["never"] == 0, "no new key starts once stopping"


async def test_cancelling_without_drain_stops_reconciles_at_once():
    reconcile = Recorder()
    reconcile.gates["slow"] = asyncio.Event()
    controller = Controller("test", reconcile, clock=FakeClock(), drain_timeout=30.0)
    controller.drain_on_cancel = False
    task = asyncio.create_task(controller.run())
    controller.enqueue("slow")
    await eventually(lambda: reconcile.calls["slow"] == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert reconcile.concurrent["slow"] == 0, "the reconcile was cancelled, not left running"
    assert not reconcile.gates["slow"].is_set()


class BrokenRecorder:
    """An event recorder that fails: the worker loop itself breaks, not a reconcile."""

    async def record(self, *args, **kwargs):
        raise RuntimeError("recorder is broken")


async def test_a_worker_that_dies_outside_a_reconcile_stops_the_controller_loudly():
    reconcile = Recorder()
    reconcile.outcomes["n"] = [PermanentError("bad", involved={"metadata": {"name": "n"}})]
    controller = Controller("test", reconcile, clock=FakeClock(), workers=2, recorder=BrokenRecorder())  # type: ignore[arg-type]
    task = asyncio.create_task(controller.run())
    controller.enqueue("n")
    with pytest.raises(RuntimeError, match="recorder is broken"):
        async with asyncio.timeout(5):
            await task
