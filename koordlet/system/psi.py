"""Pressure stall information: the PSI record, node pressure (/proc/pressure/*), cgroup files.

The kernel prints ``some avg10=.. avg60=.. avg300=.. total=..`` and, for memory and io
(and cpu since 5.13), a ``full`` line. Parsing is done by the native parser or its twin
(koordlet.system.cgroup.io.parse_psi), which gives averages in hundredths of a percent;
:class:`PSI` keeps those eight values as they come (it is built on the collectors' hot
path) and gives them their meaning through properties.
"""

from __future__ import annotations

from typing import NamedTuple

from koordlet.system.cgroup import io
from koordlet.system.paths import HostPaths

RESOURCES = ("cpu", "memory", "io")


class PSI(NamedTuple):
    """One pressure file: averages in hundredths of a percent, totals in microseconds;
    the ``full`` values are None when the kernel prints no ``full`` line."""

    some10: int
    some60: int
    some300: int
    some_total_us: int
    full10: int | None
    full60: int | None
    full300: int | None
    full_total_us: int | None

    @property
    def some_avg10(self) -> float:
        return self.some10 / 100

    @property
    def some_avg60(self) -> float:
        return self.some60 / 100

    @property
    def some_avg300(self) -> float:
        return self.some300 / 100

    @property
    def full_avg10(self) -> float | None:
        return None if self.full10 is None else self.full10 / 100

    @property
    def full_avg60(self) -> float | None:
        return None if self.full60 is None else self.full60 / 100

    @property
    def full_avg300(self) -> float | None:
        return None if self.full300 is None else self.full300 / 100

    @property
    def full_supported(self) -> bool:
        """Older kernels print no ``full`` line for cpu."""
        return self.full10 is not None


def read_node_pressure(paths: HostPaths, resource: str) -> PSI:
    """/proc/pressure/{cpu,memory,io}."""
    if resource not in RESOURCES:
        raise ValueError(f"unknown pressure resource {resource!r}")
    path = paths.proc("pressure", resource)
    values = io.parse_psi(io.read_file(path.parent, path.name), str(path))
    return PSI._make(values)
