"""What ``/proc/PID/status`` says about a process under test: its peak resident set size."""

from __future__ import annotations

from pathlib import Path


def peak_rss_mib(pid: int) -> float:
    """``VmHWM`` of ``pid`` (the most resident memory it has held so far) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")
