"""ResourceUpdateExecutor: cached, validated, ordered writes to the host.

* **Cache**: the last value written to each file and when. An update equal to it is
  skipped unless ``--resource-force-update-seconds`` (60 s) passed, so a value changed
  behind the koordlet's back is restored within a minute. A write is also preceded by a
  read: a file already holding the value is not written. Entries expire: one not refreshed
  for ``CACHE_TTL_PERIODS`` force-update periods (a file no longer managed: a removed pod's
  cgroup ...) is dropped by a sweep that runs at most once a period (upstream's expiring
  cache with its GC). Updates of files that belong to a process (``/proc/<pid>/...``) are
  not cached at all (a reused PID is another process); their writers read the value first.
* **Validation**: values go through the cgroup registry (ranges, syntax, cgroup version)
  or the update's own range; an invalid value raises before anything is written.
* **Leveled updates** (``leveled``): parents before children with a merged value first —
  a cpuset becomes the union of old and new, a quota or memory protection the larger of
  the two — then every level again, children first, with the real value. This is the order
  in which the kernel accepts a cpuset or limit that shrinks. As upstream, an update the
  cache already holds (same value, written within the force-update period) is not merged:
  its file is not read, and the second pass skips it too.
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
#: a cache entry not refreshed for this many force-update periods is dropped
CACHE_TTL_PERIODS = 3
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
        self._swept = clock()
        self._lock = threading.Lock()
        self.audit: collections.deque[AuditEvent] = collections.deque(maxlen=AUDIT_SIZE)

    # --- one update ------------------------------------------------------------------------

    def update(self, update: Update, *, cacheable: bool = True) -> Outcome:
        """Apply one update (validated; skipped when the cache or the file already agree)."""
        return self._update(update, cacheable, None)

    def _update(self, update: Update, cacheable: bool, target: tuple[str, str] | None) -> Outcome:
        """:meth:`update`, with the update's :meth:`~Update.target` when already rendered."""
        started = self.clock()
        try:
            key, text = target if target is not None else update.target(self.host)
            now = self.clock()
            self._sweep(now)
            with self._lock:
                cached = self._cache.get(key)
            if cacheable and update.cached and self._fresh(cached, text, now):
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

    @property
    def cache_size(self) -> int:
        """How many files the cache holds a value for."""
        with self._lock:
            return len(self._cache)

    def _sweep(self, now: float) -> None:
        """Drop the entries not refreshed for ``CACHE_TTL_PERIODS`` force-update periods (at
        most once a period, or a second when forcing every time)."""
        period = max(self.force_update_seconds, 1.0)
        if now - self._swept < period:
            return
        ttl = CACHE_TTL_PERIODS * period
        with self._lock:
            self._swept = now
            expired = [key for key, (_, at) in self._cache.items() if now - at >= ttl]
            for key in expired:
                del self._cache[key]
        if expired:
            log.debug("executor cache: %d entries expired", len(expired))

    def _fresh(self, cached: tuple[str, float] | None, text: str, now: float) -> bool:
        """Whether a cache entry says ``text`` was written within the force-update period."""
        return cached is not None and cached[0] == text and now - cached[1] < self.force_update_seconds

    def _rendered(self, update: Update) -> tuple[str, str] | None:
        """The update's target, or None when it cannot be rendered (:meth:`update` reports why)."""
        try:
            return update.target(self.host)
        except HostError:
            return None

    def _held(self, update: Update, target: tuple[str, str] | None) -> bool:
        """Whether the cache says the update's target already holds its value (upstream's
        ``needUpdate`` false)."""
        if target is None or not update.cached:
            return False
        key, text = target
        with self._lock:
            cached = self._cache.get(key)
        return self._fresh(cached, text, self.clock())

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
        """Parents to children with merged values, then children to parents with the real ones.
        Each update is rendered once, for both passes (its target depends on nothing else)."""
        rendered = [[self._rendered(u) for u in level] for level in levels]
        for level, targets in zip(levels, rendered, strict=True):
            for update, target in zip(level, targets, strict=True):
                if self._held(update, target):
                    continue  # nothing will be written: no merged value needed (no read)
                merged = update.merged(self.host)
                if merged != update:
                    self.update(merged, cacheable=False)
        outcomes: list[Outcome] = []
        for level, targets in zip(reversed(levels), reversed(rendered), strict=True):
            outcomes += [self._update(u, True, t) for u, t in zip(level, targets, strict=True)]
        return outcomes

    def forget(self, paths: Iterable[Path | str]) -> None:
        """Drop cache entries (cgroups that were removed)."""
        with self._lock:
            for path in paths:
                self._cache.pop(str(path), None)
