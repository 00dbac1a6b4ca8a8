"""Where the kubelet puts pods: cgroup driver, kubepods root, QoS, pod and container directories.

Directories are relative to a controller's root (``<cgroup root>/<subsystem>/`` on v1,
``<cgroup root>/`` on v2), as upstream's ``CgroupDir`` values are. The systemd driver
nests slices by name (``a-b.slice`` lives in ``a.slice``) and escapes ``-`` in pod UIDs as
``_``; cgroupfs uses plain names. A custom kubelet ``cgroupRoot`` (kind runs the kubelet
with ``/kubelet``) prefixes every slice name or adds a parent directory.

The driver is found the way upstream finds it: a ``kubepods.slice`` or ``kubepods``
directory under the cpu controller, then the kubelet's own flags and config file, then
systemd as the default.
"""

from __future__ import annotations

import enum
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from koordinator.api.kubeqos import KubeQOSClass
from koordlet.system.paths import HostPaths


class CgroupDriver(enum.StrEnum):
    SYSTEMD = "systemd"
    CGROUPFS = "cgroupfs"


class ContainerIDError(ValueError):
    """A container ID without a ``<runtime>://`` prefix, or with a runtime we cannot place."""


#: runtime of ``<runtime>://<id>`` -> systemd scope prefix of the container's cgroup
_SCOPE_PREFIX = {
    "docker": "docker-",
    "containerd": "cri-containerd-",
    "pouch": "pouch-",
    "cri-o": "crio-",
}
_QOS_SUFFIX = {
    KubeQOSClass.GUARANTEED: "",
    KubeQOSClass.BURSTABLE: "burstable",
    KubeQOSClass.BEST_EFFORT: "besteffort",
}
_UID = r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"


def split_container_id(container_id: str) -> tuple[str, str]:
    """``"containerd://abc"`` -> ``("containerd", "abc")``."""
    runtime, sep, ident = container_id.partition("://")
    if not sep or not runtime or not ident:
        raise ContainerIDError(f"container ID {container_id!r} is not '<runtime>://<id>'")
    return runtime, ident


@dataclass(frozen=True)
class KubepodsLayout:
    """The kubelet's cgroup naming for one driver and cgroup root.

    ``root`` is the kubepods directory relative to a controller root: ``kubepods.slice``,
    ``kubepods``, or with kind's ``--cgroup-root=/kubelet``
    ``kubelet.slice/kubelet-kubepods.slice`` / ``kubelet/kubepods``.
    """

    driver: CgroupDriver
    root: str

    @classmethod
    def default(cls, driver: CgroupDriver, cgroup_root: str = "/") -> KubepodsLayout:
        """The layout a kubelet with ``--cgroup-driver`` and ``--cgroup-root`` creates."""
        parts = [p for p in cgroup_root.strip("/").split("/") if p]
        if driver is CgroupDriver.CGROUPFS:
            return cls(driver, "/".join([*parts, "kubepods"]))
        # systemd: "/kubelet" or "/kubelet.slice" -> prefix "kubelet"
        names = [p.removesuffix(".slice") for p in parts]
        prefix = "-".join(n for name in names for n in name.split("-") if n)
        if not prefix:
            return cls(driver, "kubepods.slice")
        slices = _expand_slice(f"{prefix}-kubepods")
        return cls(driver, "/".join(slices))

    @classmethod
    def from_kube_dir(cls, kube_dir: str) -> KubepodsLayout:
        """``--cgroup-kube-dir``: the kubepods directory relative to a controller root; a
        ``.slice`` name means the systemd driver."""
        root = kube_dir.strip("/")
        if not root:
            raise ValueError("the kubepods cgroup directory is empty")
        driver = CgroupDriver.SYSTEMD if root.endswith(".slice") else CgroupDriver.CGROUPFS
        return cls(driver, root)

    @property
    def _slice_base(self) -> str:
        return Path(self.root).name.removesuffix(".slice")

    def qos_dir(self, qos: KubeQOSClass) -> str:
        """The QoS class directory (Guaranteed pods live directly in kubepods)."""
        suffix = _QOS_SUFFIX[qos]
        if not suffix:
            return self.root
        if self.driver is CgroupDriver.SYSTEMD:
            return f"{self.root}/{self._slice_base}-{suffix}.slice"
        return f"{self.root}/{suffix}"

    def pod_dir_name(self, qos: KubeQOSClass, pod_uid: str) -> str:
        if self.driver is CgroupDriver.SYSTEMD:
            suffix = _QOS_SUFFIX[qos]
            base = f"{self._slice_base}-{suffix}" if suffix else self._slice_base
            return f"{base}-pod{pod_uid.replace('-', '_')}.slice"
        return f"pod{pod_uid}"

    def pod_dir(self, qos: KubeQOSClass, pod_uid: str) -> str:
        return f"{self.qos_dir(qos)}/{self.pod_dir_name(qos, pod_uid)}"

    def container_dir_name(self, container_id: str) -> str:
        runtime, ident = split_container_id(container_id)
        if self.driver is CgroupDriver.CGROUPFS:
            return ident
        try:
            return f"{_SCOPE_PREFIX[runtime]}{ident}.scope"
        except KeyError:
            raise ContainerIDError(f"unknown container runtime {runtime!r} in {container_id!r}") from None

    def container_dir(self, qos: KubeQOSClass, pod_uid: str, container_id: str) -> str:
        return f"{self.pod_dir(qos, pod_uid)}/{self.container_dir_name(container_id)}"

    def parse_pod_uid(self, dir_name: str) -> str | None:
        """The pod UID of a pod directory name (with ``-`` restored), or None."""
        if self.driver is CgroupDriver.SYSTEMD:
            match = re.fullmatch(rf".*-pod({_UID})\.slice", dir_name)
            return match.group(1).replace("_", "-") if match else None
        match = re.fullmatch(rf"pod({_UID})", dir_name)
        return match.group(1) if match else None

    def parse_container_id(self, dir_name: str) -> str | None:
        """The bare container ID of a container directory name, or None."""
        if self.driver is CgroupDriver.CGROUPFS:
            return dir_name if re.fullmatch(r"[0-9a-zA-Z]{12,}", dir_name) else None
        for prefix in _SCOPE_PREFIX.values():
            if dir_name.startswith(prefix) and dir_name.endswith(".scope"):
                return dir_name[len(prefix) : -len(".scope")]
        return None


def qos_of_dir(relative: str) -> KubeQOSClass:
    """The QoS class a pod or QoS directory belongs to (upstream's substring rule)."""
    if "besteffort" in relative:
        return KubeQOSClass.BEST_EFFORT
    if "burstable" in relative:
        return KubeQOSClass.BURSTABLE
    return KubeQOSClass.GUARANTEED


def _expand_slice(name: str) -> list[str]:
    """systemd slice nesting: ``a-b-c`` -> ``["a.slice", "a-b.slice", "a-b-c.slice"]``."""
    parts = name.split("-")
    return [f"{'-'.join(parts[: i + 1])}.slice" for i in range(len(parts))]


# --- detection ------------------------------------------------------------------------------


def _from_tree(controller_root: Path) -> KubepodsLayout | None:
    """A kubepods directory at the top or one level down (a custom kubelet cgroupRoot)."""
    if (controller_root / "kubepods.slice").is_dir():
        return KubepodsLayout(CgroupDriver.SYSTEMD, "kubepods.slice")
    if (controller_root / "kubepods").is_dir():
        return KubepodsLayout(CgroupDriver.CGROUPFS, "kubepods")
    try:
        children = sorted(p for p in controller_root.iterdir() if p.is_dir())
    except OSError:
        return None
    for child in children:
        for entry in sorted(child.glob("*-kubepods.slice")):
            if entry.is_dir():
                return KubepodsLayout(CgroupDriver.SYSTEMD, f"{child.name}/{entry.name}")
        if (child / "kubepods").is_dir():
            return KubepodsLayout(CgroupDriver.CGROUPFS, f"{child.name}/kubepods")
    return None


@dataclass(frozen=True)
class KubeletCgroupConfig:
    driver: CgroupDriver | None
    cgroup_root: str
    source: str


def _yaml_scalar(text: str, key: str) -> str | None:
    match = re.search(rf"^{key}:\s*['\"]?([^'\"\s#]+)", text, re.MULTILINE)
    return match.group(1) if match else None


def _driver(value: str | None) -> CgroupDriver | None:
    try:
        return CgroupDriver(value) if value else None
    except ValueError:
        return None


def _kubelet_pid(paths: HostPaths) -> int | None:
    try:
        entries = list(paths.proc_root.iterdir())
    except OSError:
        return None
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == "kubelet":
                return int(entry.name)
        except OSError:
            continue
    return None


def kubelet_cgroup_config(paths: HostPaths) -> KubeletCgroupConfig | None:
    """Driver and cgroup root from the running kubelet's flags and ``--config`` file.

    Flags win over the config file, as in the kubelet. A relative ``--config`` is
    resolved against the kubelet's working directory. Without a kubelet process the
    conventional ``/var/lib/kubelet/config.yaml`` is read.
    """
    flags: dict[str, str] = {}
    config_path: Path | None = None
    pid = _kubelet_pid(paths)
    if pid is not None:
        try:
            argv = paths.proc(str(pid), "cmdline").read_bytes().split(b"\0")
        except OSError:
            argv = []
        args = [a.decode(errors="replace") for a in argv if a]
        for i, arg in enumerate(args):
            name, sep, value = arg.partition("=")
            if not sep and i + 1 < len(args) and not args[i + 1].startswith("-"):
                value = args[i + 1]
            flags[name.lstrip("-")] = value
        if flags.get("config"):
            config_path = Path(flags["config"])
            if not config_path.is_absolute():
                config_path = paths.proc(str(pid), "cwd") / config_path
            else:
                # the kubelet's absolute paths are on the host: read them through its root
                config_path = paths.proc(str(pid), "root") / config_path.relative_to("/")
    if config_path is None:
        config_path = paths.var_lib_kubelet / "config.yaml"
    try:
        text = config_path.read_text()
    except OSError:
        text = ""
    driver = _driver(flags.get("cgroup-driver")) or _driver(_yaml_scalar(text, "cgroupDriver"))
    root = flags.get("cgroup-root") or _yaml_scalar(text, "cgroupRoot") or "/"
    if driver is None and not text and not flags:
        return None
    source = f"kubelet pid {pid}" if pid is not None else str(config_path)
    return KubeletCgroupConfig(driver, root, shlex.quote(source))


def detect_layout(paths: HostPaths, controller_root: Path) -> tuple[KubepodsLayout, str]:
    """The kubepods layout and how it was found (for logs and ``koordlet probe``)."""
    found = _from_tree(controller_root)
    if found is not None:
        return found, f"{found.root} under {controller_root}"
    config = kubelet_cgroup_config(paths)
    if config is not None and config.driver is not None:
        layout = KubepodsLayout.default(config.driver, config.cgroup_root)
        return layout, f"kubelet configuration ({config.source})"
    return KubepodsLayout.default(CgroupDriver.SYSTEMD), "default (no kubepods cgroup and no kubelet config)"
