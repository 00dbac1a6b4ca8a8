"""What a strategy or hook asks to write: a cgroup resource, a host file, resctrl.

Updates are plain values (a plan can be printed, compared in tests and executed later).
Each type knows its own target (the cache key and the text it writes, validated and
rendered once), how to read the current value, how to apply the text, and -- for cgroups --
how to merge with the current value for the first pass of a leveled update.
:class:`~koordlet.executor.executor.ResourceUpdateExecutor` decides *whether* to write (its
cache, the current value, the audit log); the update decides *what* and *where*.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from koordinator.api.cpuset import CPUSetError, format_cpuset, parse_cpuset
from koordlet.system.cgroup import io
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.registry import Merge, Value
from koordlet.system.errors import HostError, InvalidValueError
from koordlet.system.resctrl import Resctrl


@dataclass(frozen=True)
class Host:
    """What updates write through: the cgroup tree and the resctrl filesystem."""

    cgroups: CgroupFS
    resctrl: Resctrl

    @classmethod
    def of(cls, cgroups: CgroupFS) -> Host:
        return cls(cgroups, Resctrl(cgroups.paths))


def _unlimited_larger(old: int, new: int) -> int:
    """The looser of two limits where -1 means unlimited."""
    if old == -1 or new == -1:
        return -1
    return max(old, new)


@dataclass(frozen=True, slots=True)
class CgroupUpdate:
    """Set registry resource ``key`` of the cgroup ``relative`` (to the controller roots)."""

    key: str
    relative: str
    value: Value
    #: who asked (strategy or hook name), for the audit log
    owner: str = ""

    #: the executor caches the last text written (False: the target is always checked)
    cached: ClassVar[bool] = True

    @property
    def kind(self) -> str:
        """The ``koordlet_resource_update_duration_milliseconds`` resource label."""
        return self.key

    def describe(self) -> str:
        return f"{self.relative or '/'} {self.key}={self.value}"

    def target(self, host: Host) -> tuple[str, str]:
        """(cache key, rendered value); raises InvalidValueError or UnsupportedResourceError."""
        path = host.cgroups.path(self.key, self.relative, for_write=True)
        return str(path), host.cgroups.render(self.key, self.value)

    def preview(self, host: Host) -> tuple[str, str]:
        """(file, value) as a dry run shows them; raises HostError when it cannot be written."""
        return self.target(host)

    def current(self, host: Host) -> str:
        """The file's value, rendered as :meth:`target` renders (cpusets normalised)."""
        value = host.cgroups.read(self.key, self.relative)
        if host.cgroups.resource(self.key).merge is Merge.CPUSET_UNION:
            return format_cpuset(parse_cpuset(str(value)))
        return host.cgroups.render(self.key, value)

    def apply(self, host: Host, text: str) -> tuple[str, ...]:
        """Write ``text`` (already rendered by :meth:`target`); returns cache keys to drop."""
        host.cgroups.write_text(self.key, self.relative, text)
        return ()

    def merged(self, host: Host) -> CgroupUpdate:
        """This update merged with the file's current value -- a cpuset the union of both, a
        quota or memory protection the looser -- for the parents-first pass of a leveled
        update; the update itself when the resource does not merge or cannot be read."""
        resource = host.cgroups.resource(self.key)
        if resource.merge is Merge.NONE:
            return self
        try:
            current = host.cgroups.read(self.key, self.relative)
        except HostError:
            return self
        if resource.merge is Merge.CPUSET_UNION:
            try:
                union = set(parse_cpuset(str(current))) | set(parse_cpuset(str(self.value)))
            except CPUSetError:
                return self
            return CgroupUpdate(self.key, self.relative, format_cpuset(union), self.owner)
        return CgroupUpdate(
            self.key, self.relative, _unlimited_larger(int(current), int(self.value)), self.owner
        )


@dataclass(frozen=True, slots=True)
class FileUpdate:
    """Set a host file outside cgroups (``/proc/sys/vm/...``, ``/sys/kernel/mm/...``), validated
    against an inclusive integer range when one is given."""

    path: Path
    value: str
    low: int | None = None
    high: int | None = None
    owner: str = ""
    #: the executor caches the last text written; False for a file of a process
    #: (``/proc/<pid>/...``): a reused PID is another process, so its file is always read
    cached: bool = True

    kind: ClassVar[str] = "FileUpdate"

    def describe(self) -> str:
        return f"{self.path}={self.value}"

    def target(self, host: Host) -> tuple[str, str]:
        where = str(self.path)
        if self.low is not None or self.high is not None:
            try:
                number = int(self.value)
            except ValueError:
                raise InvalidValueError(errno.EINVAL, f"{self.value!r} is not an integer", where) from None
            if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
                raise InvalidValueError(errno.EINVAL, f"{number} outside [{self.low}, {self.high}]", where)
        return where, self.value

    def preview(self, host: Host) -> tuple[str, str]:
        return str(self.path), self.value

    def current(self, host: Host) -> str:
        return self.path.read_text().strip()

    def apply(self, host: Host, text: str) -> tuple[str, ...]:
        io.write_file(self.path.parent, self.path.name, text)
        return ()


@dataclass(frozen=True, slots=True)
class ResctrlSchemataUpdate:
    """One schemata line (``L3:...`` or ``MB:...``) of a resctrl group."""

    group: str
    line: str
    owner: str = ""

    cached: ClassVar[bool] = True
    kind: ClassVar[str] = "ResctrlSchemataUpdate"

    def describe(self) -> str:
        return f"resctrl {self.group} schemata {self.line}"

    def target(self, host: Host) -> tuple[str, str]:
        # one cache entry per line type and group: "L3:<dir>" and "MB:<dir>"
        return f"{self.line[:3]}{host.resctrl.group_dir(self.group)}", self.line

    def preview(self, host: Host) -> tuple[str, str]:
        return f"resctrl/{self.group}/schemata", self.line

    def current(self, host: Host) -> str:
        schemata = host.resctrl.read_schemata(self.group)
        return schemata.l3_line() if self.line.startswith("L3:") else schemata.mb_line()

    def apply(self, host: Host, text: str) -> tuple[str, ...]:
        host.resctrl.write_schemata_line(self.group, text)
        return ()


@dataclass(frozen=True, slots=True)
class ResctrlTasksUpdate:
    """Tasks to move into a resctrl group (never cached: tasks come and go)."""

    group: str
    tids: tuple[int, ...]
    owner: str = ""

    cached: ClassVar[bool] = False
    kind: ClassVar[str] = "ResctrlTasksUpdate"

    def describe(self) -> str:
        return f"resctrl {self.group} tasks +{len(self.tids)}"

    def target(self, host: Host) -> tuple[str, str]:
        return f"tasks:{self.group}", ",".join(map(str, self.tids))

    def preview(self, host: Host) -> tuple[str, str]:
        return f"resctrl/{self.group}/tasks", " ".join(map(str, self.tids))

    def current(self, host: Host) -> str | None:
        return None

    def apply(self, host: Host, text: str) -> tuple[str, ...]:
        host.resctrl.add_tasks(self.group, list(self.tids))
        return ()


@dataclass(frozen=True, slots=True)
class ResctrlGroupUpdate:
    """Make sure a resctrl group exists (mkdir under the resctrl root; nothing when it does)."""

    group: str
    owner: str = ""

    # a group's existence is always checked: a cache entry proves nothing after an rmdir
    cached: ClassVar[bool] = False
    kind: ClassVar[str] = "ResctrlGroupUpdate"

    def describe(self) -> str:
        return f"resctrl {self.group} mkdir"

    def target(self, host: Host) -> tuple[str, str]:
        return f"group:{host.resctrl.group_dir(self.group)}", "present"

    def preview(self, host: Host) -> tuple[str, str]:
        return f"resctrl/{self.group}/", "(mkdir)"

    def current(self, host: Host) -> str | None:
        return "present" if host.resctrl.group_dir(self.group).is_dir() else None

    def apply(self, host: Host, text: str) -> tuple[str, ...]:
        host.resctrl.create_group(self.group)
        return ()


@dataclass(frozen=True, slots=True)
class ResctrlGroupRemoveUpdate:
    """Make sure a resctrl group is gone (rmdir: its tasks return to the default group; nothing
    when it is already gone)."""

    group: str
    owner: str = ""

    cached: ClassVar[bool] = False
    kind: ClassVar[str] = "ResctrlGroupRemoveUpdate"

    def describe(self) -> str:
        return f"resctrl {self.group} rmdir"

    def target(self, host: Host) -> tuple[str, str]:
        return f"group:{host.resctrl.group_dir(self.group)}", "absent"

    def preview(self, host: Host) -> tuple[str, str]:
        return f"resctrl/{self.group}/", "(rmdir)"

    def current(self, host: Host) -> str:
        return "present" if host.resctrl.group_dir(self.group).is_dir() else "absent"

    def apply(self, host: Host, text: str) -> tuple[str, ...]:
        host.resctrl.delete_group(self.group)
        directory = host.resctrl.group_dir(self.group)
        return (f"L3:{directory}", f"MB:{directory}")  # a new group of that name starts afresh


Update = (
    CgroupUpdate
    | FileUpdate
    | ResctrlSchemataUpdate
    | ResctrlTasksUpdate
    | ResctrlGroupUpdate
    | ResctrlGroupRemoveUpdate
)
