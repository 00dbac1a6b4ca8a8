"""The Event recorder, against the fake apiserver: one Event per (object, type, reason,
message), repeats counted on it, and every message cut to the apiserver's note limit."""

from __future__ import annotations

import time
from typing import Any

from koordinator.kube import resources as res
from koordinator.kube.events import CORRELATION_WINDOW_S, MESSAGE_LIMIT, WARNING, EventRecorder
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
