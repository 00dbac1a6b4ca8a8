"""The Event recorder, against the fake apiserver: one Event per (object, type, reason,
message), repeats counted on it, and every message cut to the apiserver's note limit."""

from __future__ import annotations

from koordinator.kube import resources as res
from koordinator.kube.events import MESSAGE_LIMIT, WARNING, EventRecorder
from testsupport.fake import FakeApiServer

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u1"}}


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
