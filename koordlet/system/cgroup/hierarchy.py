"""Which cgroup version serves each controller, and where it is mounted.

Upstream decides "v2 or not" by the statfs magic of the cgroup root. That is kept, and
refined per controller from the mount table, because hybrid hosts (v1 controllers plus
a cgroup2 mount at ``<root>/unified``) are common and a controller lives on exactly one
of them. Fake trees in tests have no mounts; their layout is read instead: a
``cgroup.controllers`` file at the root means v2, controller directories mean v1.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

from koordlet.system.kernel import CGROUP2_SUPER_MAGIC, filesystem_magic
from koordlet.system.paths import HostPaths

#: v1 controllers the koordlet cares about, in the order reports list them
V1_CONTROLLERS = (
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "blkio",
    "pids",
    "hugetlb",
    "net_cls",
    "perf_event",
    "devices",
    "freezer",
)


class CgroupMode(enum.StrEnum):
    V1 = "v1"
    HYBRID = "hybrid"
    V2 = "v2"


@dataclass(frozen=True)
class Mount:
    mount_point: Path
    fstype: str
    #: v1: controllers named in the super options; v2: from cgroup.controllers
    controllers: tuple[str, ...]


@dataclass(frozen=True)
class ControllerInfo:
    name: str
    version: int
    mount_point: Path


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[tuple[Path, str, str]]:
    """``(mount point, fstype, super options)`` for each line of /proc/<pid>/mountinfo."""
    entries = []
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index("-")
        except ValueError:
            continue
        if len(fields) < sep + 4 or sep < 5:
            continue
        entries.append((Path(_unescape(fields[4])), fields[sep + 1], fields[sep + 3]))
    return entries


def _v2_controllers(mount_point: Path) -> tuple[str, ...]:
    try:
        return tuple((mount_point / "cgroup.controllers").read_text().split())
    except OSError:
        return ()


def cgroup_mounts(paths: HostPaths) -> list[Mount]:
    """cgroup and cgroup2 mounts at or below the cgroup root, from the mount table."""
    try:
        text = paths.proc("self", "mountinfo").read_text()
    except OSError:
        return []
    root = Path(os.path.realpath(paths.cgroup_root))
    mounts = []
    for point, fstype, options in parse_mountinfo(text):
        if fstype not in ("cgroup", "cgroup2") or not (point == root or root in point.parents):
            continue
        if fstype == "cgroup":
            names = tuple(o for o in options.split(",") if o in V1_CONTROLLERS or o.startswith("name="))
        else:
            names = _v2_controllers(point)
        mounts.append(Mount(point, fstype, names))
    return mounts


def _layout_mounts(paths: HostPaths) -> list[Mount]:
    """Mounts as a fake (unmounted) tree's layout implies them."""
    root = paths.cgroup_root
    if (root / "cgroup.controllers").is_file():
        return [Mount(root, "cgroup2", _v2_controllers(root))]
    mounts = [Mount(root / c, "cgroup", (c,)) for c in V1_CONTROLLERS if (root / c).is_dir()]
    unified = root / "unified"
    if (unified / "cgroup.controllers").is_file():
        mounts.append(Mount(unified, "cgroup2", _v2_controllers(unified)))
    return mounts


def discover_mounts(paths: HostPaths) -> list[Mount]:
    return cgroup_mounts(paths) or _layout_mounts(paths)


def detect_mode(paths: HostPaths, mounts: list[Mount] | None = None) -> CgroupMode:
    """v2 when the root itself is cgroup2 (upstream's statfs rule), hybrid when v1 and v2 coexist."""
    root = paths.cgroup_root
    try:
        if filesystem_magic(root) == CGROUP2_SUPER_MAGIC:
            return CgroupMode.V2
    except OSError:
        pass
    found = discover_mounts(paths) if mounts is None else mounts
    kinds = {m.fstype for m in found}
    if kinds == {"cgroup2"} and any(m.mount_point == root for m in found):
        return CgroupMode.V2
    if "cgroup2" in kinds and "cgroup" in kinds:
        return CgroupMode.HYBRID
    return CgroupMode.V1


def controllers(mounts: list[Mount]) -> dict[str, ControllerInfo]:
    """Each controller's version and mount point; a v1 mount wins over a v2 listing (hybrid)."""
    found: dict[str, ControllerInfo] = {}
    for mount in mounts:
        version = 2 if mount.fstype == "cgroup2" else 1
        for name in mount.controllers:
            if name.startswith("name="):
                continue
            current = found.get(name)
            if current is None or (current.version == 2 and version == 1):
                found[name] = ControllerInfo(name, version, mount.mount_point)
    return found
