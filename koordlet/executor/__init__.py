"""The resource update executor: the only writer to the host's cgroups, sysctls and resctrl."""

from koordlet.executor.executor import ResourceUpdateExecutor
from koordlet.executor.updates import (
    CgroupUpdate,
    FileUpdate,
    Host,
    ResctrlGroupRemoveUpdate,
    ResctrlGroupUpdate,
    ResctrlSchemataUpdate,
    ResctrlTasksUpdate,
    Update,
)

__all__ = [
    "CgroupUpdate",
    "FileUpdate",
    "Host",
    "ResctrlGroupRemoveUpdate",
    "ResctrlGroupUpdate",
    "ResctrlSchemataUpdate",
    "ResctrlTasksUpdate",
    "ResourceUpdateExecutor",
    "Update",
]
