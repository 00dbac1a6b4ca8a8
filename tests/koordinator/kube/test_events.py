"""The Event recorder, against the fake apiserver: one Event per (object, type, reason,
message), repeats counted on it, and every message cut to the apiserver's note limit; the
Event queue writing them in the background, in order, bounded."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from koordinator.kube import resources as res
from koordinator.kube.events import (
    CORRELATION_WINDOW_S,
    MESSAGE_LIMIT,
    NORMAL,
    WARNING,
    EventQueue,
    EventRecorder,
)
from testsupport.fake import FakeApiServer

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
}


async def test_long_messages_are_cut_to_the_note_limit_and_repeats_counted():
    async with FakeApiServer() as fake, fake.client() as client:
        recorder = EventRecorder(client, "koordlet", "node-1")
        long = "bad value: " + "x" * 5000
        for message in (long, long, "short"):
            assert await recorder.record(POD, WARNING, "Refused", message) is not None
        events = {e["message"]: e for e in (await client.list(res.EVENTS, "default"))["items"]}
        cut = long[: MESSAGE_LIMIT - 3] + "..."
        assert set(events) == {cut, "short"}
        assert len(cut) == MESSAGE_LIMIT == 1024
        assert events[cut]["count"] == 2  # the repeat is counted on the same Event
        assert events["short"]["count"] == 1


async def test_events_past_the_correlation_window_are_forgotten_and_a_repeat_is_a_new_event(monkeypatch):
    now = [1_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    async with FakeApiServer() as fake, fake.client() as client:
        recorder = EventRecorder(client, "koord-scheduler")
        for i in range(3):
            other = {**POD, "metadata": {**POD["metadata"], "name": f"p{i}", "uid": f"u{i}"}}
            await recorder.record(other, WARNING, "FailedScheduling", "no fit")
        now[0] += 300
        await recorder.record(POD, WARNING, "FailedScheduling", "again")
        assert len(recorder._seen) == 4
        # past the window: the first three are dropped, the fourth is still counted on
        now[0] += CORRELATION_WINDOW_S - 100
        await recorder.record(POD, WARNING, "FailedScheduling", "again")
        assert len(recorder._seen) == 1
        now[0] += 1
        await recorder.record(
            {**POD, "metadata": {**POD["metadata"], "name": "p0", "uid": "u0"}},
            WARNING,
            "FailedScheduling",
            "no fit",
        )
        listed = (await client.list(res.EVENTS, "default"))["items"]
        counts = sorted((e["involvedObject"]["name"], e["message"], e["count"]) for e in listed)
        assert counts == [
            ("p", "again", 2),
            ("p0", "no fit", 1),
            ("p0", "no fit", 1),
            ("p1", "no fit", 1),
            ("p2", "no fit", 1),
        ]


async def test_the_event_queue_writes_in_order_in_the_background_and_drops_past_its_limit():
    async with FakeApiServer() as fake, fake.client() as client:
        queue = EventQueue(EventRecorder(client, "koord-scheduler"), limit=3)
        for i in range(5):  # nothing is written until the writer runs: two are dropped
            queue.emit(POD, NORMAL, "Scheduled", f"m{i}")
        assert queue.dropped == 2
        writer = asyncio.create_task(queue.run())
        try:
            async with asyncio.timeout(5):
                await queue.flush()
            queue.emit(POD, NORMAL, "Scheduled", "m5")
            async with asyncio.timeout(5):
                await queue.flush()
        finally:
            writer.cancel()
        listed = (await client.list(res.EVENTS, "default"))["items"]
        ordered = sorted(listed, key=lambda e: e["metadata"]["name"])  # named by the time written
        assert [e["message"] for e in ordered] == ["m0", "m1", "m2", "m5"]


async def test_the_event_queue_outlives_an_event_that_fails():
    class Failing(EventRecorder):
        async def record(
            self, obj: Any, event_type: str, reason: str, message: str, *, kind: str = "Pod"
        ) -> Any:
            if message == "bad":
                raise RuntimeError("boom")
            return await super().record(obj, event_type, reason, message, kind=kind)

    async with FakeApiServer() as fake, fake.client() as client:
        queue = EventQueue(Failing(client, "koord-scheduler"))
        writer = asyncio.create_task(queue.run())
        try:
            queue.emit(POD, NORMAL, "Scheduled", "bad")
            queue.emit(POD, NORMAL, "Scheduled", "good")
            async with asyncio.timeout(5):
                await queue.flush()
        finally:
            writer.cancel()
        assert [e["message"] for e in (await client.list(res.EVENTS, "default"))["items"]] == ["good"]
