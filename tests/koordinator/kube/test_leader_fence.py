"""The leader's write fence, on a virtual clock against the fake apiserver.

A leader holds its lease for ``renew_deadline`` from the moment its last successful renew
request *started*, on its own clock. A process that was paused past that finds it out
before its next write (which is refused, never sent) and stops leading at once; a lost
term ends :meth:`LeaderElector.run`, which can run again and lead again. The guarded client
view refuses writes only, and only while its guard says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import NotLeaderError
from koordinator.kube.leaderelection import LeaderElectionConfig, LeaderElector
from koordinator.kube.retry import RetryPolicy
from testsupport.fake import FakeApiServer, FakeClock, Fault

LEASE, RENEW, RETRY = 4.0, 3.0, 1.0
NAMESPACE = "election"


class Leader:
    """One contender whose leading callback runs until cancelled, counting its terms."""

    def __init__(self, client: ApiClient, clock: FakeClock, identity: str = "alpha") -> None:
        self.clock = clock
        self.terms = 0
        self.leading = asyncio.Event()
        self.cancelled = 0
        self.stopped = 0
        self.elector = LeaderElector(
            client,
            LeaderElectionConfig(
                namespace=NAMESPACE,
                name="election",
                identity=identity,
                lease_duration=LEASE,
                renew_deadline=RENEW,
                retry_period=RETRY,
            ),
            on_started_leading=self._lead,
            on_stopped_leading=self._stopped,
            clock=clock,
            rng=random.Random(7),
        )

    async def _lead(self) -> None:
        self.terms += 1
        self.leading.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.leading.clear()

    def _stopped(self) -> None:
        self.stopped += 1


@pytest.fixture
async def fake() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer() as server:
        server.create(res.NAMESPACES, {"metadata": {"name": NAMESPACE}})
        yield server


@contextlib.asynccontextmanager
async def running(leader: Leader) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(leader.elector.run())
    try:
        async with asyncio.timeout(10):
            await leader.leading.wait()
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_lease_is_held_while_renewed_and_lapses_renew_deadline_after_the_last_renewal(
    fake: FakeApiServer,
):
    clock = FakeClock()
    async with fake.client() as client:
        leader = Leader(client, clock)
        async with running(leader) as task:
            for _ in range(5):  # renewals keep it held, however long it leads
                async with asyncio.timeout(10):
                    await clock.step(1)
                assert leader.elector.holds_lease()
                leader.elector.check_lease()
            # a pause: time jumps past the renew deadline before the renew loop can run
            clock.advance(RENEW + 0.5)
            assert not leader.elector.holds_lease()
            with pytest.raises(NotLeaderError, match="alpha does not hold the election lease"):
                leader.elector.check_lease()
            async with asyncio.timeout(10):
                await task  # the term ends at once: no renew attempt, no retry period waited
            assert (leader.cancelled, leader.stopped) == (1, 1)
            assert not leader.elector.leading
            with pytest.raises(NotLeaderError):
                leader.elector.check_lease()


async def test_the_fence_counts_from_when_the_renewal_started(fake: FakeApiServer):
    """A renewal that took 2 s of the 3 s deadline leaves the lease held for 1 s more, not 3."""
    clock = FakeClock()
    async with fake.client() as client:
        leader = Leader(client, clock)
        update = leader.elector.lock.update

        async def slow_update(record: Any) -> None:
            clock.advance(2.0)  # the request is in flight for 2 s
            await update(record)

        async with running(leader):
            async with asyncio.timeout(10):
                await clock.wait_sleeping(1)  # the renew loop waits for its next retry period
            leader.elector.lock.update = slow_update  # type: ignore[method-assign]
            started = clock.monotonic() + RETRY
            async with asyncio.timeout(10):
                await clock.step(1)  # the renewal: starts at `started`, succeeds 2 s later
                await clock.wait_sleeping(1)
            assert clock.monotonic() == pytest.approx(started + 2.0)
            leader.elector.lock.update = update  # type: ignore[method-assign]
            clock.advance(0.9)  # 2.9 s after the renewal started: still held
            assert leader.elector.holds_lease()
            clock.advance(0.2)  # 3.1 s: lapsed, though the renewal answered only 1.1 s ago
            assert not leader.elector.holds_lease()


async def test_a_renewal_that_sees_another_holder_steps_down_at_once(fake: FakeApiServer):
    clock = FakeClock()
    async with fake.client() as client:
        leader = Leader(client, clock)
        async with running(leader) as task:
            async with asyncio.timeout(10):
                await clock.wait_sleeping(1)  # renewed; the next renewal is a retry period away
            lease = fake.get(res.LEASES, "election", NAMESPACE)
            lease["spec"]["holderIdentity"] = "intruder"
            fake.update(res.LEASES, lease)
            before = clock.monotonic()
            async with asyncio.timeout(10):
                await clock.step(1)  # the next renewal re-reads the lease and finds the intruder
                await task
            assert clock.monotonic() - before <= RETRY, "no wait for the renew deadline"
            assert not leader.elector.holds_lease()
            assert leader.elector.leader == "intruder"


async def test_a_lost_term_can_be_followed_by_another(fake: FakeApiServer):
    clock = FakeClock()
    async with fake.client() as client:
        leader = Leader(client, clock)
        async with running(leader) as task:
            clock.advance(RENEW + 0.5)
            with pytest.raises(NotLeaderError):
                leader.elector.check_lease()
            async with asyncio.timeout(10):
                await task
        # nobody else took it: contending again wins it back, and the fence opens again
        async with running(leader):
            assert leader.terms == 2
            assert leader.elector.holds_lease()
            leader.elector.check_lease()


async def test_a_write_refused_while_contending_does_not_cut_the_next_term_short(fake: FakeApiServer):
    """A straggler write between terms is refused; the term won afterwards is not ended by it."""
    clock = FakeClock()
    fake.create(
        res.LEASES,
        {
            "metadata": {"name": "election", "namespace": NAMESPACE},
            "spec": {"holderIdentity": "intruder", "leaseDurationSeconds": int(LEASE)},
        },
    )
    async with fake.client() as client:
        leader = Leader(client, clock)
        task = asyncio.create_task(leader.elector.run())
        try:
            async with asyncio.timeout(10):
                await clock.wait_sleeping(1)  # contending: the intruder's lease has not expired
                with pytest.raises(NotLeaderError):
                    leader.elector.check_lease()
                while not leader.leading.is_set():
                    await clock.step(1, unless=leader.leading.is_set)
                for _ in range(5):
                    await clock.step(1)
            assert not task.done()
            assert leader.elector.holds_lease()
            assert (leader.terms, leader.cancelled) == (1, 0)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_a_refused_write_in_the_leading_callback_ends_the_term_without_an_error(fake: FakeApiServer):
    clock = FakeClock()
    async with fake.client() as client:
        guarded = client.with_write_guard(lambda: elector.check_lease())

        async def lead() -> None:
            clock.advance(RENEW + 0.5)  # paused between two writes
            await guarded.create(
                res.CONFIG_MAPS, {"metadata": {"name": "x", "namespace": NAMESPACE}, "data": {}}
            )

        elector = LeaderElector(
            client,
            LeaderElectionConfig(NAMESPACE, "election", "alpha", LEASE, RENEW, RETRY),
            on_started_leading=lead,
            clock=clock,
        )
        async with asyncio.timeout(10):
            await elector.run()  # returns: the lease is lost, not failed
        assert fake.list_objects(res.CONFIG_MAPS, NAMESPACE) == []


async def test_a_guarded_view_refuses_writes_only_and_sends_nothing(fake: FakeApiServer):
    allowed = True

    def guard() -> None:
        if not allowed:
            raise NotLeaderError("fenced")

    async with fake.client() as client:
        guarded = client.with_write_guard(guard)
        body = {"metadata": {"name": "a", "namespace": NAMESPACE}, "data": {"k": "v"}}
        created = await guarded.create(res.CONFIG_MAPS, body)
        allowed = False
        fake.record_requests = True
        with pytest.raises(NotLeaderError):
            await guarded.create(res.CONFIG_MAPS, {**body, "metadata": {**body["metadata"], "name": "b"}})
        with pytest.raises(NotLeaderError):
            await guarded.replace(res.CONFIG_MAPS, {**created, "data": {"k": "w"}})
        with pytest.raises(NotLeaderError):
            await guarded.patch(res.CONFIG_MAPS, "a", {"data": {"k": "w"}}, NAMESPACE)
        with pytest.raises(NotLeaderError):
            await guarded.delete(res.CONFIG_MAPS, "a", NAMESPACE)
        with pytest.raises(NotLeaderError):
            await guarded.request("POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps", body=body)
        assert [r.method for r in fake.requests] == [], "a refused write is never sent"
        # reads go through, and the client the view was made from is not guarded
        assert (await guarded.get(res.CONFIG_MAPS, "a", NAMESPACE))["data"] == {"k": "v"}
        await client.patch(res.CONFIG_MAPS, "a", {"data": {"k": "x"}}, NAMESPACE)
        assert [r.method for r in fake.requests] == ["GET", "PATCH"]
        # closing the view leaves the shared connection pool to its owner
        await guarded.close()
        assert (await client.get(res.CONFIG_MAPS, "a", NAMESPACE))["data"] == {"k": "x"}


async def test_the_guard_is_asked_again_before_each_retry(fake: FakeApiServer):
    """A write retried after a 503 is not resent once the guard refuses (the lease lapsed meanwhile)."""
    calls = 0

    def guard() -> None:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise NotLeaderError("fenced")

    async with fake.client(retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.01)) as client:
        await client.create(res.CONFIG_MAPS, {"metadata": {"name": "a", "namespace": NAMESPACE}})
        fake.inject(Fault(status=503, method="PUT", times=5))
        fake.record_requests = True
        current = await client.get(res.CONFIG_MAPS, "a", NAMESPACE)
        with pytest.raises(NotLeaderError):
            await client.with_write_guard(guard).replace(res.CONFIG_MAPS, {**current, "data": {"k": "v"}})
        assert [(r.method, r.status) for r in fake.requests] == [("GET", 200), ("PUT", 503)]
