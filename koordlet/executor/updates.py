"""What a strategy or hook asks to write: a cgroup resource, a host file, resctrl.

Updates are plain values (a plan can be printed, compared in tests and executed later);
only :class:`~koordlet.executor.executor.ResourceUpdateExecutor` turns them into writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from koordlet.system.cgroup.registry import Value


@dataclass(frozen=True, slots=True)
class CgroupUpdate:
    """Set registry resource ``key`` of the cgroup ``relative`` (to the controller roots)."""

    key: str
    relative: str
    value: Value
    #: who asked (strategy or hook name), for the audit log
    owner: str = ""

    def describe(self) -> str:
        return f"{self.relative or '/'} {self.key}={self.value}"


@dataclass(frozen=True, slots=True)
class FileUpdate:
    """Set a host file outside cgroups (``/proc/sys/vm/...``, ``/sys/kernel/mm/...``), validated
    against an inclusive integer range when one is given."""

    path: Path
    value: str
    low: int | None = None
    high: int | None = None
    owner: str = ""

    def describe(self) -> str:
        return f"{self.path}={self.value}"


@dataclass(frozen=True, slots=True)
class ResctrlSchemataUpdate:
    """One schemata line (``L3:...`` or ``MB:...``) of a resctrl group."""

    group: str
    line: str
    owner: str = ""

    def describe(self) -> str:
        return f"resctrl {self.group} schemata {self.line}"


@dataclass(frozen=True, slots=True)
class ResctrlTasksUpdate:
    """Tasks to move into a resctrl group (never cached: tasks come and go)."""

    group: str
    tids: tuple[int, ...]
    owner: str = ""

    def describe(self) -> str:
        return f"resctrl {self.group} tasks +{len(self.tids)}"


@dataclass(frozen=True, slots=True)
class ResctrlGroupUpdate:
    """Make sure a resctrl group exists (mkdir under the resctrl root; nothing when it does)."""

    group: str
    owner: str = ""

    def describe(self) -> str:
        return f"resctrl {self.group} mkdir"


@dataclass(frozen=True, slots=True)
class ResctrlGroupRemoveUpdate:
    """Make sure a resctrl group is gone (rmdir: its tasks return to the default group; nothing
    when it is already gone)."""

    group: str
    owner: str = ""

    def describe(self) -> str:
        return f"resctrl {self.group} rmdir"


Update = (
    CgroupUpdate
    | FileUpdate
    | ResctrlSchemataUpdate
    | ResctrlTasksUpdate
    | ResctrlGroupUpdate
    | ResctrlGroupRemoveUpdate
)
