"""Kubernetes Events: tell the user, on the object itself, what a component did and why.

``core/v1`` Events as client-go's recorder writes them: ``involvedObject`` referencing the
object, ``reason`` (CamelCase), ``message``, ``type`` Normal or Warning, ``source``
(component and host), first/last timestamps and a count. The same event repeated within
the correlation window is counted on the existing Event instead of creating a new one.
Recording never raises: an Event that cannot be written is logged and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import KubeError
from koordinator.kube.timeutil import format_time

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
CORRELATION_WINDOW_S = 600.0
#: messages are cut to the apiserver's limit for an event's note (NoteLengthLimit), as
#: Kubernetes components cut theirs; core/v1 Events without eventTime are not held to it,
#: but a message of a megabyte (a quoted bad config) helps no one reading ``kubectl describe``
MESSAGE_LIMIT = 1024
#: events an :class:`EventQueue` holds before it drops new ones (client-go's broadcaster
#: holds 1000; a scheduler binding a burst of thousands of pods would lose most of their
#: Scheduled events with that)
MAX_QUEUED_EVENTS = 20000


def object_reference(obj: Mapping[str, Any], api_version: str = "v1", kind: str = "Pod") -> dict[str, Any]:
    metadata = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion") or api_version,
        "kind": obj.get("kind") or kind,
        "name": metadata.get("name", ""),
        "uid": metadata.get("uid", ""),
    }
    if metadata.get("namespace"):
        ref["namespace"] = metadata["namespace"]
    if metadata.get("resourceVersion"):
        ref["resourceVersion"] = metadata["resourceVersion"]
    return ref


class EventRecorder:
    def __init__(self, client: ApiClient, component: str, host: str = "") -> None:
        self.client = client
        self.component = component
        self.host = host
        #: (uid, type, reason, message) -> (event name, namespace, count, last time), in the
        #: order last written; entries past the correlation window are dropped as it moves on
        self._seen: dict[tuple[str, str, str, str], tuple[str, str, int, float]] = {}

    async def record(
        self, obj: Mapping[str, Any], event_type: str, reason: str, message: str, *, kind: str = "Pod"
    ) -> dict[str, Any] | None:
        """Write (or count) one Event about ``obj`` (its message cut to :data:`MESSAGE_LIMIT`);
        None when it could not be written."""
        if len(message) > MESSAGE_LIMIT:
            message = message[: MESSAGE_LIMIT - 3] + "..."
        ref = object_reference(obj, kind=kind)
        namespace = ref.get("namespace") or "default"
        now = time.time()
        self._forget_before(now - CORRELATION_WINDOW_S)
        key = (str(ref.get("uid")), event_type, reason, message)
        seen = self._seen.get(key)
        try:
            if seen is not None and now - seen[3] < CORRELATION_WINDOW_S:
                name, ns, count, _ = seen
                patched = await self.client.patch(
                    res.EVENTS, name, {"count": count + 1, "lastTimestamp": format_time(now)}, ns
                )
                del self._seen[key]  # to the end: the dict stays in last-written order
                self._seen[key] = (name, ns, count + 1, now)
                return patched
            name = f"{ref['name']}.{time.time_ns():x}"  # client-go's: the object, then the time
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": ref,
                "reason": reason,
                "message": message,
                "type": event_type,
                "source": {"component": self.component, **({"host": self.host} if self.host else {})},
                "firstTimestamp": format_time(now),
                "lastTimestamp": format_time(now),
                "count": 1,
                "reportingComponent": self.component,
                "reportingInstance": self.host or self.component,
            }
            created = await self.client.create(res.EVENTS, event, namespace)
            self._seen[key] = (name, namespace, 1, now)
            return created
        except KubeError as err:
            log.warning("event %s/%s (%s) not recorded: %s", namespace, ref.get("name"), reason, err)
            return None

    def _forget_before(self, cutoff: float) -> None:
        """Drop the Events last written before ``cutoff``: they are no longer counted on (a
        scheduler writes one per pod, and would otherwise keep them all)."""
        seen = self._seen
        while seen:
            oldest = next(iter(seen))
            if seen[oldest][3] >= cutoff:
                return
            del seen[oldest]


class EventQueue:
    """Events written in the background, one at a time and in the order emitted: client-go's
    event broadcaster with its recording goroutine, which is how upstream's components keep
    Event writes off their hot path.

    :meth:`emit` only queues; :meth:`run` (a task of the component's) writes through the
    recorder, which counts repeats and never raises. With :data:`MAX_QUEUED_EVENTS` waiting,
    new events are dropped and counted in :attr:`dropped`, with a log line at the first drop
    of each overflow. Events still queued when the task is cancelled are not written.
    """

    def __init__(self, recorder: EventRecorder, limit: int = MAX_QUEUED_EVENTS) -> None:
        self.recorder = recorder
        self.limit = limit
        self.dropped = 0
        self._pending: deque[tuple[Mapping[str, Any], str, str, str, str]] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._overflowing = False

    def emit(
        self, obj: Mapping[str, Any], event_type: str, reason: str, message: str, *, kind: str = "Pod"
    ) -> None:
        """Queue one Event about ``obj`` (see :meth:`EventRecorder.record`)."""
        if len(self._pending) >= self.limit:
            self.dropped += 1
            if not self._overflowing:
                self._overflowing = True
                log.warning("%d events wait to be written; new ones are dropped until they drain", self.limit)
            return
        self._overflowing = False
        self._pending.append((obj, event_type, reason, message, kind))
        self._idle.clear()
        self._wake.set()

    async def run(self) -> None:
        """Write the queued events until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                obj, event_type, reason, message, kind = self._pending.popleft()
                try:
                    await self.recorder.record(obj, event_type, reason, message, kind=kind)
                except Exception:  # the writer outlives a bad event
                    log.exception("event %s about %s not recorded", reason, kind)
            self._idle.set()

    async def flush(self) -> None:
        """Wait until every queued event was written (needs :meth:`run` running)."""
        await self._idle.wait()
