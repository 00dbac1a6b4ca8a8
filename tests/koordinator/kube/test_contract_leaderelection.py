"""Contract: Lease leader election with two contenders, failover and release, on both backends.

Time is virtual (:class:`FakeClock`): it advances only while every contender sleeps, so
the bounds below are exact statements about the election's logic, not wall-clock timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from collections.abc import Callable
from typing import Any

from koordinator.kube import resources as res
from koordinator.kube.errors import ConflictError
from koordinator.kube.leaderelection import LeaderElectionConfig, LeaderElector
from koordinator.kube.timeutil import parse_time
from tests.koordinator.kube.conftest import Backend
from testsupport.fake import FakeClock

LEASE, RENEW, RETRY, JITTER = 4.0, 3.0, 1.0, 1.2
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class Contender:
    def __init__(
        self, backend: Backend, clock: FakeClock, identity: str, seed: int, release: bool = True
    ) -> None:
        self.client = backend.new_client()
        self.events: list[str] = []
        config = LeaderElectionConfig(
            namespace=backend.namespace,
            name="election",
            identity=identity,
            lease_duration=LEASE,
            renew_deadline=RENEW,
            retry_period=RETRY,
            jitter_factor=JITTER,
            release_on_cancel=release,
        )
        self.elector = LeaderElector(
            self.client,
            config,
            on_started_leading=self._lead,
            on_stopped_leading=lambda: self.events.append("stopped"),
            on_new_leader=lambda who: self.events.append(f"leader={who}"),
            clock=clock,
            rng=random.Random(seed),
        )
        self.task: asyncio.Task[None] | None = None
        self.led_at: float | None = None
        self.clock = clock

    async def _lead(self) -> None:
        self.led_at = self.clock.monotonic()
        self.events.append("started")
        await asyncio.Event().wait()

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.client.close()


async def drive(clock: FakeClock, actors: int, until: Callable[[], bool], limit: float = 60.0) -> float:
    """Step virtual time until ``until()`` (within ``limit`` virtual and 30 real seconds)."""
    start = clock.monotonic()
    async with asyncio.timeout(30):
        while not until():
            if clock.monotonic() - start > limit:
                raise AssertionError(f"condition not reached within {limit}s of virtual time")
            await clock.step(actors, unless=until)
    return clock.monotonic()


async def lease(backend: Backend) -> dict[str, Any]:
    spec: dict[str, Any] = (await backend.client.get(res.LEASES, "election", backend.namespace))["spec"]
    return spec


async def test_two_contenders_one_leader_then_failover(backend: Backend):
    clock = FakeClock()
    a = Contender(backend, clock, "alpha", seed=1, release=False)
    b = Contender(backend, clock, "beta", seed=2)
    try:
        a.start()
        await drive(clock, 1, lambda: a.led_at is not None)
        b.start()
        await drive(clock, 2, lambda: clock.monotonic() > 5 * LEASE)
        assert a.elector.leading
        assert not b.elector.leading
        assert b.led_at is None
        assert b.events == ["leader=alpha"]
        spec = await lease(backend)
        assert spec["holderIdentity"] == "alpha"
        assert spec["leaseDurationSeconds"] == int(LEASE)
        assert spec["leaseTransitions"] == 0
        assert MICRO_TIME.match(spec["acquireTime"])
        assert MICRO_TIME.match(spec["renewTime"])

        await clock.wait_sleeping(2)  # no request in flight: a crash between two renewals
        killed_at = clock.monotonic()
        await a.stop()  # a crash: no release
        assert (await lease(backend))["holderIdentity"] == "alpha"
        seen = [b.elector.observed_time]

        def beta_leads() -> bool:
            if not b.elector.is_leader():
                seen.append(b.elector.observed_time)  # when beta last saw alpha's record change
            return b.led_at is not None

        await drive(clock, 1, beta_leads)
        taken_at = parse_time((await lease(backend))["acquireTime"]) - clock.time() + clock.monotonic()
        longest_retry = RETRY * (1 + JITTER)
        # client-go's guarantee: the first attempt after the lease expired, counted from when
        # the survivor last saw the leader renew
        assert seen[-1] + LEASE < taken_at <= seen[-1] + LEASE + longest_retry
        assert taken_at - killed_at <= LEASE + 2 * longest_retry
        spec = await lease(backend)
        assert spec["holderIdentity"] == "beta"
        assert spec["leaseTransitions"] == 1
        assert b.events == ["leader=alpha", "leader=beta", "started"]
    finally:
        await a.stop()
        await b.stop()


async def test_release_on_shutdown_hands_over_at_once(backend: Backend):
    clock = FakeClock()
    a = Contender(backend, clock, "alpha", seed=3)
    b = Contender(backend, clock, "beta", seed=4)
    try:
        a.start()
        await drive(clock, 1, lambda: a.led_at is not None)
        b.start()
        await drive(clock, 2, lambda: "leader=alpha" in b.events)
        await a.stop()
        assert a.events[-1] == "stopped"
        released = await lease(backend)
        assert released["holderIdentity"] == ""
        assert released["leaseDurationSeconds"] == 1
        stopped_at = clock.monotonic()
        await drive(clock, 1, lambda: b.led_at is not None)
        taken_at = parse_time((await lease(backend))["acquireTime"]) - clock.time() + clock.monotonic()
        assert taken_at - stopped_at <= 1 + RETRY * (1 + JITTER)
        assert (await lease(backend))["leaseTransitions"] == 1
    finally:
        await a.stop()
        await b.stop()


async def test_leader_that_cannot_renew_steps_down(backend: Backend):
    clock = FakeClock()
    a = Contender(backend, clock, "alpha", seed=5)
    try:
        a.start()
        await drive(clock, 1, lambda: a.led_at is not None)
        # the intruder writes as any contender does: on the version it read, again on a Conflict
        # (the leader's renewal right after acquiring may land between its read and its write)
        for _ in range(5):
            current = await backend.client.get(res.LEASES, "election", backend.namespace)
            usurped = {**current, "spec": {**current["spec"], "holderIdentity": "intruder"}}
            try:
                await backend.client.replace(res.LEASES, usurped)
                break
            except ConflictError:
                continue
        else:
            raise AssertionError("the intruder never wrote the lease")
        await drive(clock, 1, lambda: a.task is not None and a.task.done(), limit=4 * LEASE)
        assert a.events[-1] == "stopped"
        assert not a.elector.leading
    finally:
        await a.stop()
