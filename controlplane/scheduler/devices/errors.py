"""The one error DeviceShare's core raises: a scheduling status code with upstream's reasons."""

from __future__ import annotations

__all__ = ["ERROR", "UNSCHEDULABLE", "UNSCHEDULABLE_AND_UNRESOLVABLE", "DeviceShareError"]

#: Status codes, named as the scheduler framework names them.
UNSCHEDULABLE = "Unschedulable"
UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
ERROR = "Error"


class DeviceShareError(Exception):
    """A pod that cannot get devices (on this node, or at all), with upstream's reason strings."""

    def __init__(self, code: str, *reasons: str) -> None:
        super().__init__("; ".join(reasons))
        self.code = code
        self.reasons = reasons

    @property
    def unresolvable(self) -> bool:
        """Whether retrying on this node (after other pods leave) cannot help."""
        return self.code == UNSCHEDULABLE_AND_UNRESOLVABLE
