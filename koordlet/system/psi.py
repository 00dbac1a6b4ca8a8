"""Pressure stall information: the PSI record, node pressure (/proc/pressure/*), cgroup files.

The kernel prints ``some avg10=.. avg60=.. avg300=.. total=..`` and, for memory and io
(and cpu since 5.13), a ``full`` line. Parsing is done by the native parser or its twin
(koordlet.system.cgroup.io.parse_psi); this module gives the values their meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

from koordlet.system.cgroup import io
from koordlet.system.paths import HostPaths

RESOURCES = ("cpu", "memory", "io")


@dataclass(frozen=True, slots=True)
class PSI:
    """One pressure file: averages in percent, totals in microseconds; ``full`` may be absent."""

    some_avg10: float
    some_avg60: float
    some_avg300: float
    some_total_us: int
    full_avg10: float | None
    full_avg60: float | None
    full_avg300: float | None
    full_total_us: int | None

    @classmethod
    def from_values(cls, values: tuple[int | None, ...]) -> PSI:
        """From the parser's eight values (averages in hundredths)."""

        def pct(v: int | None) -> float | None:
            return None if v is None else v / 100

        s10, s60, s300, stotal, f10, f60, f300, ftotal = values
        return cls(
            pct(s10) or 0.0,
            pct(s60) or 0.0,
            pct(s300) or 0.0,
            stotal or 0,
            pct(f10),
            pct(f60),
            pct(f300),
            ftotal,
        )

    @property
    def full_supported(self) -> bool:
        return self.full_avg10 is not None


def read_node_pressure(paths: HostPaths, resource: str) -> PSI:
    """/proc/pressure/{cpu,memory,io}."""
    if resource not in RESOURCES:
        raise ValueError(f"unknown pressure resource {resource!r}")
    path = paths.proc("pressure", resource)
    return PSI.from_values(io.parse_psi(io.read_file(path.parent, path.name), str(path)))
