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

from koordinator.api.cpuset import CPUSetError, format_cpuset, parse_cpuset
from koordinator.kube.clock import SYSTEM_CLOCK, Now
from koordlet.executor.updates import (
    CgroupUpdate,
    FileUpdate,
    ResctrlGroupRemoveUpdate,
    ResctrlGroupUpdate,
    ResctrlSchemataUpdate,
    ResctrlTasksUpdate,
    Update,
)
from koordlet.metrics import KoordletMetrics
from koordlet.system.cgroup import io
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.registry import Merge
from koordlet.system.errors import (
    CgroupVanishedError,
    HostError,
    InvalidValueError,
    UnsupportedResourceError,
    from_errno,
)
from koordlet.system.resctrl import Resctrl

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


def _unlimited_larger(old: int, new: int) -> int:
    """The looser of two limits where -1 means unlimited."""
    if old == -1 or new == -1:
        return -1
    return max(old, new)


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
        self.resctrl = Resctrl(cgroups.paths)
        self.metrics = metrics
        self.force_update_seconds = force_update_seconds
        self.clock = clock
        self._cache: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self.audit: collections.deque[AuditEvent] = collections.deque(maxlen=AUDIT_SIZE)

    # --- one update ------------------------------------------------------------------------

    def _target(self, update: Update) -> tuple[str, str]:
        """(cache key, rendered value); raises InvalidValueError/UnsupportedResourceError."""
        if isinstance(update, CgroupUpdate):
            path = self.cgroups.path(update.key, update.relative, for_write=True)
            return str(path), self.cgroups.render(update.key, update.value)
        if isinstance(update, FileUpdate):
            if update.low is not None or update.high is not None:
                try:
                    number = int(update.value)
                except ValueError:
                    raise InvalidValueError(
                        errno.EINVAL, f"{update.value!r} is not an integer", str(update.path)
                    ) from None
                if (update.low is not None and number < update.low) or (
                    update.high is not None and number > update.high
                ):
                    raise InvalidValueError(
                        errno.EINVAL, f"{number} outside [{update.low}, {update.high}]", str(update.path)
                    )
            return str(update.path), update.value
        if isinstance(update, ResctrlSchemataUpdate):
            return f"{update.line[:3]}{self.resctrl.group_dir(update.group)}", update.line
        if isinstance(update, ResctrlGroupUpdate):
            return f"group:{self.resctrl.group_dir(update.group)}", "present"
        if isinstance(update, ResctrlGroupRemoveUpdate):
            return f"group:{self.resctrl.group_dir(update.group)}", "absent"
        return f"tasks:{update.group}", ",".join(map(str, update.tids))

    def _current(self, update: Update) -> str | None:
        try:
            if isinstance(update, CgroupUpdate):
                value = self.cgroups.read(update.key, update.relative)
                if self.cgroups.resource(update.key).merge is Merge.CPUSET_UNION:
                    return format_cpuset(parse_cpuset(str(value)))
                return self.cgroups.render(update.key, value)
            if isinstance(update, FileUpdate):
                return update.path.read_text().strip()
            if isinstance(update, ResctrlSchemataUpdate):
                schemata = self.resctrl.read_schemata(update.group)
                return schemata.l3_line() if update.line.startswith("L3:") else schemata.mb_line()
            if isinstance(update, ResctrlGroupUpdate):
                return "present" if self.resctrl.group_dir(update.group).is_dir() else None
            if isinstance(update, ResctrlGroupRemoveUpdate):
                return "present" if self.resctrl.group_dir(update.group).is_dir() else "absent"
        except (OSError, ValueError, CPUSetError):
            return None
        return None

    def _write(self, update: Update, text: str) -> None:
        if isinstance(update, CgroupUpdate):
            self.cgroups.write(update.key, update.relative, update.value)
        elif isinstance(update, FileUpdate):
            io.write_file(update.path.parent, update.path.name, text)
        elif isinstance(update, ResctrlSchemataUpdate):
            self.resctrl.write_schemata_line(update.group, update.line)
        elif isinstance(update, ResctrlGroupUpdate):
            self.resctrl.create_group(update.group)
        elif isinstance(update, ResctrlGroupRemoveUpdate):
            self.resctrl.delete_group(update.group)
            directory = self.resctrl.group_dir(update.group)
            self.forget([f"L3:{directory}", f"MB:{directory}"])  # a new group of that name starts afresh
        else:
            self.resctrl.add_tasks(update.group, list(update.tids))

    def update(self, update: Update, *, cacheable: bool = True) -> Outcome:
        """Apply one update (validated; skipped when the cache or the file already agree)."""
        started = self.clock()
        kind = update.key if isinstance(update, CgroupUpdate) else type(update).__name__
        try:
            key, text = self._target(update)
            now = self.clock()
            tasks = isinstance(update, ResctrlTasksUpdate)
            # a group's existence is always checked: its cache entry proves nothing after an rmdir
            uncached = tasks or isinstance(update, ResctrlGroupUpdate | ResctrlGroupRemoveUpdate)
            with self._lock:
                cached = self._cache.get(key)
            fresh = cached is not None and cached[0] == text and now - cached[1] < self.force_update_seconds
            if cacheable and not uncached and fresh:
                return Outcome(update, False)
            old = None if tasks else self._current(update)
            if old == text and not (cached is not None and now - cached[1] >= self.force_update_seconds):
                if not uncached:
                    with self._lock:
                        self._cache[key] = (text, now)
                return Outcome(update, False)
            self._write(update, text)
            if not uncached:  # nothing is kept for what is always checked (groups come and go)
                with self._lock:
                    self._cache[key] = (text, now)
            self.audit.append(AuditEvent(time.time(), key, old, text, update.owner))
            self._observe(kind, "succeeded", started)
            return Outcome(update, True)
        except (CgroupVanishedError, UnsupportedResourceError) as err:
            log.debug("skipped %s: %s", update.describe(), err)
            return Outcome(update, False, err)
        except HostError as err:
            log.warning("update %s failed: %s", update.describe(), err)
            self._observe(kind, "failed", started)
            return Outcome(update, False, err)
        except OSError as err:
            wrapped = from_errno(err.errno or errno.EIO, getattr(err, "filename", "") or update.describe())
            log.warning("update %s failed: %s", update.describe(), wrapped)
            self._observe(kind, "failed", started)
            return Outcome(update, False, wrapped)

    def _observe(self, kind: str, status: str, started: float) -> None:
        if self.metrics is not None:
            elapsed_ms = (self.clock() - started) * 1000
            self.metrics.resource_update_duration_milliseconds.labels(kind, status).observe(elapsed_ms)

    def update_batch(self, updates: Iterable[Update], *, cacheable: bool = True) -> list[Outcome]:
        return [self.update(u, cacheable=cacheable) for u in updates]

    # --- leveled updates ------------------------------------------------------------------

    def _merged(self, update: CgroupUpdate) -> CgroupUpdate:
        """The update's value merged with the file's current one (pass one of a leveled update)."""
        resource = self.cgroups.resource(update.key)
        if resource.merge is Merge.NONE:
            return update
        try:
            current = self.cgroups.read(update.key, update.relative)
        except HostError:
            return update
        if resource.merge is Merge.CPUSET_UNION:
            try:
                new = set(parse_cpuset(str(update.value)))
                old = set(parse_cpuset(str(current)))
            except CPUSetError:
                return update
            if new <= old:
                return CgroupUpdate(update.key, update.relative, format_cpuset(old), update.owner)
            return CgroupUpdate(update.key, update.relative, format_cpuset(old | new), update.owner)
        return CgroupUpdate(
            update.key, update.relative, _unlimited_larger(int(current), int(update.value)), update.owner
        )

    def leveled(self, levels: Sequence[Sequence[CgroupUpdate]]) -> list[Outcome]:
        """Parents to children with merged values, then children to parents with the real ones."""
        for level in levels:
            for update in level:
                merged = self._merged(update)
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
