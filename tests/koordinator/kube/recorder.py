"""An informer consumer that records every event and checks the informer's guarantees as it goes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from koordinator.kube.informer import Informer, Tombstone


def rv(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


def key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


@dataclass
class Recorder:
    """Fails loudly on a duplicated add, an update that changes nothing, or a delete of the unknown."""

    events: list[tuple[str, str, str]] = field(default_factory=list)
    live: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    resyncs: int = 0

    def on_add(self, obj: dict[str, Any]) -> None:
        k = key(obj)
        if k in self.live:
            self.violations.append(f"duplicate add of {k}")
        self.live[k] = rv(obj)
        self.events.append(("add", k, rv(obj)))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        k = key(new)
        if old is new:
            self.resyncs += 1
            return
        if k not in self.live:
            self.violations.append(f"update of unknown {k}")
        if rv(old) == rv(new):
            self.violations.append(f"update of {k} without a new resourceVersion")
        self.live[k] = rv(new)
        self.events.append(("update", k, rv(new)))

    def on_delete(self, obj: dict[str, Any] | Tombstone[dict[str, Any]]) -> None:
        k = obj.key if isinstance(obj, Tombstone) else key(obj)
        kind = "tombstone" if isinstance(obj, Tombstone) else "delete"
        if self.live.pop(k, None) is None:
            self.violations.append(f"{kind} of unknown {k}")
        self.events.append((kind, k, ""))

    def attach(self, informer: Informer, **kwargs: Any) -> Any:
        return informer.add_consumer(
            on_add=self.on_add, on_update=self.on_update, on_delete=self.on_delete, **kwargs
        )
