"""kidled (Anolis kernels): idle page scanning, and the cold pages of memory cgroups.

kidled lives at ``<sys>/kernel/mm/kidled``; the koordlet turns it on with a 5-second scan
period and hierarchical accounting (``scan_period_in_seconds=5``, ``use_hierarchy=1``),
as upstream. Each v1 memory cgroup then has ``memory.idle_page_stats``: a commented
header, then one row per page type (clean/dirty, swap/file, evictable/unevictable,
inactive/active) with the bytes idle for each age bucket ([1,2), [2,5), [5,15), [15,30),
[30,60), [60,120), [120,240), [240,+inf) scan periods). Cold bytes are the inactive file
pages (rows ``cfei``, ``dfei``, ``cfui``, ``dfui``) idle for at least the sixth bucket.
"""

from __future__ import annotations

import errno
from pathlib import Path

from koordlet.system.cgroup import io
from koordlet.system.errors import MalformedContentError
from koordlet.system.paths import HostPaths

SCAN_PERIOD_FILE = "scan_period_in_seconds"
USE_HIERARCHY_FILE = "use_hierarchy"
DEFAULT_SCAN_PERIOD_SECONDS = 5
DEFAULT_USE_HIERARCHY = 1
#: the rows counted as cold, and the first bucket counted
COLD_ROWS = ("cfei", "dfei", "cfui", "dfui")
COLD_FROM_BUCKET = 5
BUCKETS = 8


def kidled_dir(paths: HostPaths) -> Path:
    return paths.sys("kernel", "mm", "kidled")


def supported(paths: HostPaths) -> tuple[bool, str]:
    """Does the kernel have kidled (both of its control files)?"""
    directory = kidled_dir(paths)
    missing = [name for name in (SCAN_PERIOD_FILE, USE_HIERARCHY_FILE) if not (directory / name).is_file()]
    if missing:
        return False, f"no kidled in this kernel ({directory}/{missing[0]} is absent)"
    return True, f"kidled at {directory}"


def enable(
    paths: HostPaths,
    scan_period_seconds: int = DEFAULT_SCAN_PERIOD_SECONDS,
    use_hierarchy: int = DEFAULT_USE_HIERARCHY,
) -> None:
    """Start kidled scanning (raises a HostError when the kernel refuses)."""
    directory = kidled_dir(paths)
    io.write_file(directory, SCAN_PERIOD_FILE, str(scan_period_seconds))
    io.write_file(directory, USE_HIERARCHY_FILE, str(use_hierarchy))


def parse_cold_page_bytes(text: str, path: Path | str = "memory.idle_page_stats") -> int:
    """Cold bytes in an ``memory.idle_page_stats`` text."""
    rows: dict[str, list[int]] = {}
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        try:
            rows[words[0]] = [int(word) for word in words[1:]]
        except ValueError:
            raise MalformedContentError(
                errno.EBADMSG, f"bad idle page row {line.strip()!r}", str(path)
            ) from None
    cold = 0
    for name in COLD_ROWS:
        values = rows.get(name)
        if values is None or len(values) != BUCKETS:
            raise MalformedContentError(
                errno.EBADMSG, f"idle page stats without {BUCKETS} buckets of {name}", str(path)
            )
        cold += sum(values[COLD_FROM_BUCKET:])
    return cold
