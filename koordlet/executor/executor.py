"""ResourceUpdateExecutor: cached, validated, ordered writes to the host.

* **Cache**: the last value written to each file and when. An update equal to it is
  skipped unless ``--resource-force-update-seconds`` (60 s) passed, so a value changed
  behind the koordlet's back is restored within a minute. A write is also preceded by a
  read: a file already holding the value is not written.
* **Validation**: values go through the cgroup registry (ranges, syntax, cgroup version)
  or the update's own range; an invalid value raises before anything is written.
* **Leveled updates** (``leveled``): parents before children with a merged value first —
  a cpuset becomes the union of old and new, a quota or memory protection the larger of
  the two — then every level again, children first, with the real value. This is the order
  in which the kernel accepts a cpuset or limit that shrinks.
* **Errors**: a vanished cgroup or a knob this kernel lacks is expected and skipped
  quietly; anything else is logged, counted in
  ``koordlet_resource_update_duration_milliseconds{status="failed"}`` and returned.
* **Audit**: the last writes (time, file, old and new value, owner) are kept in memory.
"""

from __future__ import annotations

import collections
import errno
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from koordinator.api.cpuset import CPUSetError
from koordinator.kube.clock import SYSTEM_CLOCK, Now
from koordlet.executor.updates import CgroupUpdate, Host, Update
from koordlet.metrics import KoordletMetrics
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.errors import CgroupVanishedError, HostError, UnsupportedResourceError, from_errno

log = logging.getLogger(__name__)

FORCE_UPDATE_SECONDS = 60.0
AUDIT_SIZE = 1024


@dataclass(frozen=True)
class AuditEvent:
    timestamp: float
    target: str
    old: str | None
    new: str
    owner: str


@dataclass(frozen=True)
class Outcome:
    update: Update
    written: bool
    error: HostError | None = None


class ResourceUpdateExecutor:
    def __init__(
        self,
        cgroups: CgroupFS,
        *,
        metrics: KoordletMetrics | None = None,
        force_update_seconds: float = FORCE_UPDATE_SECONDS,
        clock: Now = SYSTEM_CLOCK.monotonic,
    ) -> None:
        self.cgroups = cgroups
        self.host = Host.of(cgroups)
        self.metrics = metrics
        self.force_update_seconds = force_update_seconds
        self.clock = clock
        self._cache: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self.audit: collections.deque[AuditEvent] = collections.deque(maxlen=AUDIT_SIZE)

    # --- one update ------------------------------------------------------------------------

    def update(self, update: Update, *, cacheable: bool = True) -> Outcome:
        """Apply one update (validated; skipped when the cache or the file already agree)."""
        started = self.clock()
        try:
            key, text = update.target(self.host)
            now = self.clock()
            with self._lock:
                cached = self._cache.get(key)
            fresh = cached is not None and cached[0] == text and now - cached[1] < self.force_update_seconds
            if cacheable and update.cached and fresh:
                return Outcome(update, False)
            old = self._current(update)
            if old == text and not (cached is not None and now - cached[1] >= self.force_update_seconds):
                if update.cached:
                    with self._lock:
                        self._cache[key] = (text, now)
                return Outcome(update, False)
            self.forget(update.apply(self.host, text))
            if update.cached:  # nothing is kept for what is always checked (groups come and go)
                with self._lock:
                    self._cache[key] = (text, now)
            self.audit.append(AuditEvent(time.time(), key, old, text, update.owner))
            self._observe(update.kind, "succeeded", started)
            return Outcome(update, True)
        except (CgroupVanishedError, UnsupportedResourceError) as err:
            log.debug("skipped %s: %s", update.describe(), err)
            return Outcome(update, False, err)
        except HostError as err:
            log.warning("update %s failed: %s", update.describe(), err)
            self._observe(update.kind, "failed", started)
            return Outcome(update, False, err)
        except OSError as err:
            wrapped = from_errno(err.errno or errno.EIO, getattr(err, "filename", "") or update.describe())
            log.warning("update %s failed: %s", update.describe(), wrapped)
            self._observe(update.kind, "failed", started)
            return Outcome(update, False, wrapped)

    def _current(self, update: Update) -> str | None:
        """The target's current value; None when there is none to read or it cannot be read."""
        try:
            return update.current(self.host)
        except (OSError, ValueError, CPUSetError):
            return None

    def _observe(self, kind: str, status: str, started: float) -> None:
        if self.metrics is not None:
            elapsed_ms = (self.clock() - started) * 1000
            self.metrics.resource_update_duration_milliseconds.labels(kind, status).observe(elapsed_ms)

    def update_batch(self, updates: Iterable[Update], *, cacheable: bool = True) -> list[Outcome]:
        return [self.update(u, cacheable=cacheable) for u in updates]

    # --- leveled updates ------------------------------------------------------------------

    def leveled(self, levels: Sequence[Sequence[CgroupUpdate]]) -> list[Outcome]:
        """Parents to children with merged values, then children to parents with the real ones."""
        for level in levels:
            for update in level:
                merged = update.merged(self.host)
                if merged != update:
                    self.update(merged, cacheable=False)
        outcomes: list[Outcome] = []
        for level in reversed(levels):
            outcomes += [self.update(u) for u in level]
        return outcomes

    def forget(self, paths: Iterable[Path | str]) -> None:
        """Drop cache entries (cgroups that were removed)."""
        with self._lock:
            for path in paths:
                self._cache.pop(str(path), None)
