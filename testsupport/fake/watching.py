"""Watch plumbing of the fake apiserver: the event history and one open watch's filters and queue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from koordinator.api.selectors import FieldSelector, LabelSelector
from testsupport.fake.registry import ResourceType

Obj = dict[str, Any]
StorageKey = tuple[str, str]  # (group, plural)


@dataclass
class HistoryEvent:
    rv: int
    storage: StorageKey
    type: str
    obj: Obj
    prev: Obj | None


@dataclass(eq=False)
class Watcher:
    """One open watch: its filters and the queue its HTTP stream drains."""

    rtype: ResourceType
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    allow_bookmarks: bool
    queue: Any  # asyncio.Queue[bytes | None]; typed loosely to keep this module loop-agnostic
    #: resourceVersion of the last event or bookmark sent on this watch
    sent_rv: int = 0
    closed: bool = False

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        if not self.labels.empty and not self.labels.matches(meta.get("labels") or {}):
            return False
        return self.fields.empty or all(
            r.matches({r.field: self.rtype.field_label(obj, r.field)}) for r in self.fields.requirements
        )

    def offer(self, event_type: str, obj: Obj, prev: Obj | None, rv: int) -> None:
        if self.closed:
            return
        now_match = self.matches(obj)
        if event_type == "ADDED":
            kind = "ADDED" if now_match else ""
        elif event_type == "DELETED":
            kind = "DELETED" if self.matches(prev if prev is not None else obj) else ""
        else:
            was = self.matches(prev)
            if was and not now_match and prev is not None:
                # leaving the selection: the previous content, at this event's resourceVersion
                left = {**prev, "metadata": {**prev["metadata"], "resourceVersion": str(rv)}}
                self.send("DELETED", left)
                return
            kind = "MODIFIED" if was and now_match else "ADDED" if now_match else ""
        if kind:
            self.send(kind, obj)

    def send(self, kind: str, obj: Obj) -> None:
        api_version = self.rtype.resource.api_version
        if obj.get("apiVersion") != api_version:
            obj = {**obj, "apiVersion": api_version}
        self.queue.put_nowait(orjson.dumps({"type": kind, "object": obj}) + b"\n")
        self.sent_rv = max(self.sent_rv, int(obj["metadata"].get("resourceVersion") or 0))

    def bookmark(self, rv: int, initial_events_end: bool = False) -> None:
        meta: Obj = {"resourceVersion": str(rv)}
        if initial_events_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        body = {"kind": self.rtype.kind, "apiVersion": self.rtype.resource.api_version, "metadata": meta}
        self.queue.put_nowait(orjson.dumps({"type": "BOOKMARK", "object": body}) + b"\n")
        self.sent_rv = max(self.sent_rv, rv)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)
