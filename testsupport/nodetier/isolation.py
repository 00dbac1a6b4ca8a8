"""Keeping a node off the host: its mounts, network, kernel tunables and cgroups.

The node's PID 1 runs in fresh pid, mount and network namespaces. In its mount namespace
it shadows what the kubelet, containerd and libcni write at fixed host paths:

* ``/run`` and ``/var/log`` become directories of the node's scratch dir;
* ``/var/lib`` becomes an overlay whose writes land in the scratch dir (the kubelet's
  device-plugin socket and libcni's result cache ignore every configured root);
* the global (not namespaced) sysctls the kubelet rewrites at start get scratch files
  bind-mounted over them, so the host's values never change.

Its network namespace gets ``lo`` and a veth pair carrying the node IP. Its cgroups live
under a cgroup root of its own in every hierarchy, which :func:`remove_cgroup_root` takes
down deepest first once every process in it is gone. :func:`enter_netns` lets a host
process (a koordlet, a koord-manager) join the node's network, as a DaemonSet with
``hostNetwork`` would.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from testsupport.nodetier.spec import NODE_GATEWAY, NODE_IP, NODE_VETH

CGROUP_MOUNT = Path("/sys/fs/cgroup")
#: the global sysctls the kubelet sets when protectKernelDefaults is off
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
_CLONE_NEWNET = 0x40000000


class IsolationError(RuntimeError):
    """A mount, link or cgroup of the node could not be set up."""


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise IsolationError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def shadow_host_paths(workdir: Path) -> None:
    """Inside the node's mount namespace: private /run, /var/log, /var/lib and sysctls."""
    _run("mount", "--make-rshared", "/")
    for name, target in (("run", "/run"), ("var-log", "/var/log")):
        (workdir / "host" / name).mkdir(parents=True, exist_ok=True)
        _run("mount", "--bind", str(workdir / "host" / name), target)
    upper, work = workdir / "host" / "var-lib", workdir / "host" / "var-lib-work"
    upper.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    _run(
        "mount",
        "-t",
        "overlay",
        "overlay",
        "-o",
        f"lowerdir=/var/lib,upperdir={upper},workdir={work}",
        "/var/lib",
    )
    for name in KUBELET_SYSCTLS:
        real = Path("/proc/sys") / name
        if not real.exists():
            continue
        shadow = workdir / "host" / "sysctl" / name
        shadow.parent.mkdir(parents=True, exist_ok=True)
        shadow.write_text(real.read_text())
        _run("mount", "--bind", str(shadow), str(real))


def node_network() -> None:
    """Inside the node's network namespace: lo up, the node IP on a veth, a default route."""
    node, peer = NODE_VETH
    _run("ip", "link", "set", "lo", "up")
    _run("ip", "link", "add", node, "type", "veth", "peer", "name", peer)
    _run("ip", "addr", "add", f"{NODE_IP}/24", "dev", node)
    _run("ip", "link", "set", node, "up")
    _run("ip", "link", "set", peer, "up")
    _run("ip", "route", "add", "default", "via", NODE_GATEWAY, "dev", node, "onlink")


def enter_netns(netns: Path) -> Callable[[], None]:
    """A ``preexec_fn`` that moves the child into the network namespace at ``netns``."""

    def enter() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(netns, os.O_RDONLY)
        try:
            if libc.setns(fd, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns {netns}")
        finally:
            os.close(fd)

    return enter


# --- cgroups ---------------------------------------------------------------------------------


def hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (each v1 controller, name=systemd, the v2 one)."""
    return sorted(p for p in CGROUP_MOUNT.iterdir() if p.is_dir() and (p / "cgroup.procs").exists())


def make_cgroup_root(root: str) -> None:
    """``root`` in every hierarchy (the kubelet refuses a missing cgroupRoot); a new v1
    cpuset cgroup starts empty, so it gets its parent's CPUs and memory nodes."""
    name = root.strip("/")
    for hierarchy in hierarchies():
        directory = hierarchy / name
        directory.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / knob).exists() and not (directory / knob).read_text().strip():
                (directory / knob).write_text((hierarchy / knob).read_text())


def _processes(directory: Path) -> bool:
    try:
        return any(d for d in (directory / "cgroup.procs").read_text().split())
    except OSError:
        return False


def remove_cgroup_root(root: str, timeout: float = 15.0) -> list[str]:
    """rmdir ``root`` and everything below it in every hierarchy, deepest first, waiting
    up to ``timeout`` for exiting processes to leave. Returns what could not be removed."""
    name = root.strip("/")
    if not name:
        raise IsolationError("refusing to remove the cgroup mount root")
    deadline = time.monotonic() + timeout
    while True:
        left: list[str] = []
        for hierarchy in hierarchies():
            top = hierarchy / name
            if not top.is_dir():
                continue
            tree = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            for directory in [*tree, top]:
                try:
                    directory.rmdir()
                except FileNotFoundError:
                    continue
                except OSError:
                    left.append(str(directory))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def busy(root: str) -> bool:
    """Whether a process still lives in ``root`` of any hierarchy."""
    name = root.strip("/")
    return any(
        _processes(directory)
        for hierarchy in hierarchies()
        if (top := hierarchy / name).is_dir()
        for directory in (top, *(p for p in top.rglob("*") if p.is_dir()))
    )
