"""A fake host tree under a temporary directory (cgroup v1 or v2, procfs, sysfs).

Built through :class:`HostPaths.rooted`, so production code reads it exactly as it reads
a real node: no patching of ``open``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from koordlet.system.paths import HostPaths

V1_ROOT_FILES = {
    "cpu": {
        "cpu.shares": "1024\n",
        "cpu.cfs_period_us": "100000\n",
        "cpu.cfs_quota_us": "-1\n",
        "cpu.stat": "",
    },
    "cpuacct": {"cpuacct.usage": "0\n"},
    "cpuset": {"cpuset.cpus": "0-3\n", "cpuset.mems": "0\n"},
    "memory": {
        "memory.limit_in_bytes": "9223372036854771712\n",
        "memory.stat": "",
        "memory.usage_in_bytes": "0\n",
    },
    "blkio": {"blkio.weight": "500\n"},
    "pids": {"pids.max": "max\n"},
}
V2_CONTROLLERS = "cpuset cpu io memory hugetlb pids"


class FakeHost:
    def __init__(self, root: Path, cgroup: Literal["v1", "v2"] = "v1") -> None:
        self.root = root
        self.version = cgroup
        self.paths = HostPaths.rooted(root)
        self.write("proc/sys/kernel/osrelease", "6.1.0-fake\n")
        if cgroup == "v1":
            for controller, files in V1_ROOT_FILES.items():
                for name, content in files.items():
                    self.write_cgroup(controller, "", name, content)
        else:
            self.write("cgroup/cgroup.controllers", V2_CONTROLLERS + "\n")
            self.write("cgroup/cgroup.subtree_control", V2_CONTROLLERS + "\n")

    def write(self, relpath: str, content: str) -> Path:
        path = self.root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        return path

    def cgroup_dir(self, controller: str, relative: str = "") -> Path:
        base = self.paths.cgroup_root / controller if self.version == "v1" else self.paths.cgroup_root
        return base / relative if relative else base

    def mkdir_cgroup(self, controller: str, relative: str) -> Path:
        path = self.cgroup_dir(controller, relative)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_cgroup(self, controller: str, relative: str, name: str, content: str) -> Path:
        directory = self.cgroup_dir(controller, relative)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / name
        path.write_text(content)
        return path
