"""``koordlet probe``: what this node supports, one capability per row, with the reason.

Read-only by construction: it looks at mount tables, sysfs, procfs and cgroup files,
opens (and closes) perf counters on itself, and never writes. Everything is found
through the injected :class:`HostPaths`, so the same code inspects a DaemonSet's
``/host-*`` mounts, the host itself, or a fake tree.
"""

from __future__ import annotations

import contextlib
import stat
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

from koordlet.system import kernel, perf
from koordlet.system.cgroup.hierarchy import (
    CgroupMode,
    ControllerInfo,
    Mount,
    controllers,
    detect_mode,
    discover_mounts,
)
from koordlet.system.cgroup.layout import KubepodsLayout, detect_layout
from koordlet.system.devices import nvml, rdma
from koordlet.system.paths import HostPaths
from koordlet.system.resctrl import Resctrl

_RUNTIME_SOCKETS = {
    "containerd": ("containerd/containerd.sock", "containerd.sock"),
    "docker": ("docker.sock",),
    "cri-o": ("crio/crio.sock", "crio.sock"),
}
_RESCTRL_FLAGS = {
    "resctrl L3 CAT": ("cat_l3",),
    "resctrl MBA": ("mba",),
    "resctrl CMT": ("cqm_llc", "cqm_occup_llc"),
    "resctrl MBM": ("cqm_mbm_total", "cqm_mbm_local"),
}


@dataclass(frozen=True)
class Capability:
    name: str
    supported: bool
    reason: str


@dataclass
class _Host:
    paths: HostPaths
    mounts: list[Mount]
    mode: CgroupMode
    controllers: dict[str, ControllerInfo]

    def controller_dir(self, name: str) -> Path | None:
        info = self.controllers.get(name)
        return None if info is None else info.mount_point

    @cached_property
    def kubepods_layout(self) -> tuple[Path, KubepodsLayout, str]:
        """Where kubepods is looked for (the cpu controller, else the cgroup root), the layout
        and how it was found; detected once (it may scan /proc for the kubelet)."""
        base = self.controller_dir("cpu") or self.paths.cgroup_root
        layout, how = detect_layout(self.paths, base)
        return base, layout, how


def _kubepods(host: _Host) -> Path | None:
    if host.controller_dir("cpu") is None:
        return None
    base, layout, _ = host.kubepods_layout
    return base / layout.root if (base / layout.root).is_dir() else None


def _knob_dirs(host: _Host, controller: str) -> list[Path]:
    """Where to look for a knob: kubepods first, then the controller root, then a few children
    (cgroup v2 keeps most knobs off the root cgroup)."""
    base = host.controller_dir(controller)
    if base is None:
        return []
    dirs = [d for d in (_kubepods(host), base) if d is not None]
    with contextlib.suppress(OSError):
        dirs += sorted(p for p in base.iterdir() if p.is_dir())[:8]
    return dirs


def _knob(host: _Host, controller: str, files: tuple[str, ...], label: str, requirement: str) -> Capability:
    dirs = _knob_dirs(host, controller)
    if not dirs:
        return Capability(label, False, f"no {controller} controller mounted")
    for directory in dirs:
        for name in files:
            if (directory / name).is_file():
                return Capability(label, True, f"{name} present in {directory}")
    return Capability(label, False, f"{' / '.join(files)} not provided by this kernel ({requirement})")


def _kernel_row(paths: HostPaths) -> Capability:
    try:
        return Capability("kernel", True, kernel.release(paths.proc_root))
    except OSError as err:
        return Capability("kernel", False, f"cannot read osrelease: {err.strerror}")


def _mode_row(host: _Host) -> Capability:
    if not host.mounts:
        return Capability("cgroup mode", False, f"no cgroup hierarchy found under {host.paths.cgroup_root}")
    v2 = [m for m in host.mounts if m.fstype == "cgroup2"]
    if host.mode is CgroupMode.V2:
        return Capability("cgroup mode", True, f"v2 (unified) at {v2[0].mount_point}")
    if host.mode is CgroupMode.HYBRID:
        listed = ", ".join(v2[0].controllers) or "none"
        return Capability(
            "cgroup mode",
            True,
            f"hybrid: v1 controllers, cgroup2 at {v2[0].mount_point} (controllers: {listed})",
        )
    return Capability("cgroup mode", True, "v1")


def _controller_rows(host: _Host) -> Iterator[Capability]:
    wanted = ("cpu", "cpuacct", "cpuset", "memory", "blkio", "pids", "hugetlb", "net_cls", "perf_event")
    v2_equivalent = {"cpuacct": "cpu", "blkio": "io"}
    for name in wanted:
        info = host.controllers.get(name)
        if info is not None:
            yield Capability(f"cgroup {name}", True, f"v{info.version} at {info.mount_point}")
            continue
        twin = host.controllers.get(v2_equivalent.get(name, ""))
        if twin is not None and twin.version == 2:
            yield Capability(
                f"cgroup {name}", True, f"v2: served by the {twin.name} controller at {twin.mount_point}"
            )
        elif name == "perf_event" and any(m.fstype == "cgroup2" for m in host.mounts):
            # implicit on cgroup2 (never listed in cgroup.controllers), also on a hybrid host
            unified = next(m.mount_point for m in host.mounts if m.fstype == "cgroup2")
            yield Capability(
                "cgroup perf_event", True, f"v2: perf_event is implicit on the cgroup2 hierarchy at {unified}"
            )
        else:
            yield Capability(f"cgroup {name}", False, "not mounted on v1 and not enabled on the v2 hierarchy")


def _driver_rows(host: _Host) -> Iterator[Capability]:
    base, layout, how = host.kubepods_layout
    if (base / layout.root).is_dir():
        yield Capability("cgroup driver", True, f"{layout.driver} (from {layout.root})")
        yield Capability("kubepods root", True, str(base / layout.root))
        return
    if how.startswith("kubelet"):
        yield Capability("cgroup driver", True, f"{layout.driver} ({how}; no kubepods cgroup yet)")
    else:
        yield Capability(
            "cgroup driver",
            False,
            "unknown: no kubepods cgroup and no kubelet configuration (no kubelet here)",
        )
    yield Capability("kubepods root", False, f"no kubepods.slice or kubepods under {base}")


def _psi_rows(host: _Host) -> Iterator[Capability]:
    pressure = host.paths.proc("pressure")
    present = [r for r in ("cpu", "memory", "io") if (pressure / r).is_file()]
    try:
        (pressure / "cpu").read_bytes()
        readable = True
    except OSError:
        readable = False
    if present and readable:
        full = "full" in (pressure / "cpu").read_text()
        yield Capability(
            "psi", True, f"{pressure}/{{{','.join(present)}}}" + ("" if full else " (no cpu 'full' line)")
        )
    else:
        yield Capability(
            "psi", False, f"{pressure} missing or unreadable (kernel without CONFIG_PSI, or psi=0)"
        )
    cpu = host.controllers.get("cpu")
    if cpu is not None and cpu.version == 2:
        dirs = _knob_dirs(host, "cpu")
        if any((d / "cpu.pressure").is_file() for d in dirs):
            yield Capability("psi (cgroup)", True, "cpu/memory/io.pressure in v2 cgroups")
        else:
            yield Capability("psi (cgroup)", False, "cgroup v2 without *.pressure files (psi disabled)")
        return
    acct = host.controller_dir("cpuacct")
    if acct is not None and (acct / "cpu.pressure").is_file():
        yield Capability("psi (cgroup)", True, f"cpu.pressure under {acct} (v1 with per-cgroup PSI)")
    else:
        yield Capability(
            "psi (cgroup)", False, "cpu controller is v1 and cpuacct has no cpu.pressure (Anolis-only)"
        )


def _cpu_flags(paths: HostPaths) -> set[str]:
    try:
        text = paths.proc("cpuinfo").read_text()
    except OSError:
        return set()
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return flags


def _resctrl_rows(paths: HostPaths) -> Iterator[Capability]:
    info = Resctrl(paths).detect()
    flags = _cpu_flags(paths)
    if info.mounted:
        yield Capability("resctrl", True, info.reason)
    else:
        rdt = sorted(flags & {"cat_l3", "mba", "cqm_llc", "cqm_mbm_total"})
        hint = f"CPU flags present: {', '.join(rdt)}" if rdt else "CPU has no RDT flags"
        yield Capability("resctrl", False, f"{info.reason}; {hint}")
    from_info = {
        "resctrl L3 CAT": info.l3_cat,
        "resctrl MBA": info.mba,
        "resctrl CMT": info.cmt,
        "resctrl MBM": info.mbm,
    }
    for label, wanted in _RESCTRL_FLAGS.items():
        if info.mounted:
            ok = from_info[label]
            why = "listed in resctrl info/" if ok else "not listed in resctrl info/"
        else:
            ok = False
            has_flag = bool(flags & set(wanted))
            why = f"resctrl not mounted; CPU flag {'/'.join(wanted)} {'present' if has_flag else 'absent'}"
        yield Capability(label, ok, why)


def _perf_rows(host: _Host) -> Iterator[Capability]:
    ok, why = perf.supported(perf.CYCLES, host.paths.proc_root)
    yield Capability("perf hardware counters", ok, why)
    ok, why = perf.supported(perf.CPU_CLOCK, host.paths.proc_root)
    yield Capability("perf software events", ok, why)


def _qos_knob_rows(host: _Host) -> Iterator[Capability]:
    v2 = host.controllers.get("cpu") is not None and host.controllers["cpu"].version == 2
    yield _knob(host, "cpu", ("cpu.idle",), "cpu.idle", "Linux >= 5.15")
    yield _knob(
        host,
        "cpu",
        ("cpu.max.burst",) if v2 else ("cpu.cfs_burst_us",),
        "cpu burst",
        "Linux >= 5.14 or Anolis",
    )
    yield _knob(host, "cpu", ("cpu.bvt_warp_ns",), "group identity (bvt)", "Anolis kernels")
    for knob in ("memory.min", "memory.low", "memory.high"):
        yield _knob(host, "memory", (knob,), knob, "cgroup v2 or Anolis v1")
    yield _knob(host, "memory", ("memory.wmark_ratio",), "memory wmark", "Anolis kernels")


def _socket_row(label: str, candidates: list[Path]) -> Capability:
    for path in candidates:
        try:
            if stat.S_ISSOCK(path.stat().st_mode):
                return Capability(label, True, str(path))
        except OSError:
            continue
    return Capability(label, False, f"no socket at {', '.join(str(p) for p in candidates)}")


def _socket_rows(paths: HostPaths) -> Iterator[Capability]:
    yield _socket_row("NRI socket", [paths.var_run("nri", "nri.sock")])
    for runtime, names in _RUNTIME_SOCKETS.items():
        yield _socket_row(f"{runtime} socket", [paths.var_run(n) for n in names])


def probe(paths: HostPaths) -> list[Capability]:
    mounts = discover_mounts(paths)
    host = _Host(paths, mounts, detect_mode(paths, mounts), controllers(mounts))
    rows = [_kernel_row(paths), _mode_row(host)]
    rows += _controller_rows(host)
    rows += _driver_rows(host)
    rows += _psi_rows(host)
    rows += _resctrl_rows(paths)
    rows += _perf_rows(host)
    rows += _qos_knob_rows(host)
    rows += _socket_rows(paths)
    gpu_ok, gpu_why = nvml.supported()
    rows.append(Capability("GPU (NVML)", gpu_ok, gpu_why))
    rdma_ok, rdma_why = rdma.supported(paths.sys_root)
    rows.append(Capability("RDMA", rdma_ok, rdma_why))
    return rows


def as_json(rows: list[Capability]) -> dict[str, list[dict[str, object]]]:
    return {"capabilities": [asdict(r) for r in rows]}


def as_table(rows: list[Capability]) -> str:
    width = max(len("CAPABILITY"), *(len(r.name) for r in rows))
    lines = [f"{'CAPABILITY':<{width}}  SUPPORTED  REASON"]
    lines += [f"{r.name:<{width}}  {'yes' if r.supported else 'no':<9}  {r.reason}" for r in rows]
    return "\n".join(lines)
