"""HostPaths: every host root the koordlet reads or writes, injected, never global.

Defaults follow upstream: in DaemonSet mode the host's trees are mounted under
``/host-cgroup/``, ``/host-sys/`` and friends; with ``agent_mode=hostMode`` in the
environment the koordlet runs on the host and uses the real paths. Tests build a tree
with :meth:`HostPaths.rooted`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

AGENT_MODE_ENV = "agent_mode"
HOST_MODE = "hostMode"
DAEMONSET_MODE = "dsMode"


@dataclass(frozen=True)
class HostPaths:
    cgroup_root: Path
    proc_root: Path
    sys_root: Path
    #: parent of the resctrl mount (``<sys_fs_root>/resctrl``)
    sys_fs_root: Path
    var_run_root: Path
    run_root: Path
    var_lib_kubelet: Path
    runtime_hooks_config_dir: Path

    @classmethod
    def daemonset(cls) -> HostPaths:
        return cls(
            cgroup_root=Path("/host-cgroup/"),
            proc_root=Path("/proc/"),
            sys_root=Path("/host-sys/"),
            sys_fs_root=Path("/host-sys-fs/"),
            var_run_root=Path("/host-var-run/"),
            run_root=Path("/host-run/"),
            var_lib_kubelet=Path("/var/lib/kubelet/"),
            runtime_hooks_config_dir=Path("/host-etc-hookserver/"),
        )

    @classmethod
    def host(cls) -> HostPaths:
        return cls(
            cgroup_root=Path("/sys/fs/cgroup/"),
            proc_root=Path("/proc/"),
            sys_root=Path("/sys/"),
            sys_fs_root=Path("/sys/fs/"),
            var_run_root=Path("/var/run/"),
            run_root=Path("/run/"),
            var_lib_kubelet=Path("/var/lib/kubelet/"),
            runtime_hooks_config_dir=Path("/etc/runtime/hookserver.d"),
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> HostPaths:
        """Upstream's default: DaemonSet paths unless ``agent_mode=hostMode``."""
        env = os.environ if environ is None else environ
        return cls.host() if env.get(AGENT_MODE_ENV) == HOST_MODE else cls.daemonset()

    @classmethod
    def rooted(cls, root: Path | str) -> HostPaths:
        """A self-contained host tree under ``root`` (fake hosts in tests)."""
        r = Path(root)
        return cls(
            cgroup_root=r / "cgroup",
            proc_root=r / "proc",
            sys_root=r / "sys",
            sys_fs_root=r / "sys" / "fs",
            var_run_root=r / "var" / "run",
            run_root=r / "run",
            var_lib_kubelet=r / "var" / "lib" / "kubelet",
            runtime_hooks_config_dir=r / "etc" / "runtime" / "hookserver.d",
        )

    def with_overrides(self, **roots: Path | str | None) -> HostPaths:
        """Replace the roots given (``None`` keeps the current one)."""
        return replace(self, **{k: Path(v) for k, v in roots.items() if v is not None})

    def proc(self, *parts: str) -> Path:
        return self.proc_root.joinpath(*parts)

    def sys(self, *parts: str) -> Path:
        return self.sys_root.joinpath(*parts)

    def cgroup(self, *parts: str) -> Path:
        return self.cgroup_root.joinpath(*parts)

    @property
    def resctrl_root(self) -> Path:
        return self.sys_fs_root / "resctrl"

    def var_run(self, *parts: str) -> Path:
        return self.var_run_root.joinpath(*parts)
