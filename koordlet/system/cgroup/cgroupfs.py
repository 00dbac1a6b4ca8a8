"""CgroupFS: read and write registered cgroup resources under an injected root.

Callers name a resource by its registry key and a directory relative to the
controller root (``kubepods.slice/kubepods-besteffort.slice``); this class picks the v1
subsystem directory or the unified one, the file of that version, validates and converts
the value, and turns every failure into a domain error (koordlet.system.errors). The
cgroup version is upstream's: v2 only when the root itself is cgroup2 (a hybrid host keeps
its controllers on v1).
"""

from __future__ import annotations

import errno
import os
from functools import cached_property
from pathlib import Path

from koordlet.system.cgroup import io
from koordlet.system.cgroup.hierarchy import CgroupMode, detect_mode
from koordlet.system.cgroup.layout import KubepodsLayout, detect_layout
from koordlet.system.cgroup.registry import RESOURCES, Registry, Resource, Subsystem, Support, Value
from koordlet.system.errors import MalformedContentError, UnsupportedResourceError
from koordlet.system.paths import HostPaths


class CgroupFS:
    def __init__(
        self,
        paths: HostPaths,
        version: int,
        registry: Registry = RESOURCES,
        *,
        layout: KubepodsLayout | None = None,
    ) -> None:
        if version not in (1, 2):
            raise ValueError(f"cgroup version must be 1 or 2, not {version!r}")
        self.paths = paths
        self.version = version
        self.registry = registry
        self._support: dict[str, tuple[bool, str]] = {}
        if layout is not None:  # given (a kubelet configured elsewhere, tests): not detected
            self.__dict__["kubepods"] = (layout, "given")

    @classmethod
    def detect(cls, paths: HostPaths, kube_dir: str = "") -> CgroupFS:
        """The host's cgroup version; the kubepods layout from ``kube_dir`` when given
        (``--cgroup-kube-dir``), else detected on first use."""
        layout = KubepodsLayout.from_kube_dir(kube_dir) if kube_dir.strip("/") else None
        return cls(paths, 2 if detect_mode(paths) is CgroupMode.V2 else 1, layout=layout)

    # --- paths ---------------------------------------------------------------------------

    def controller_root(self, subsystem: Subsystem | str) -> Path:
        root = self.paths.cgroup_root
        return root / str(subsystem) if self.version == 1 else root

    def directory(self, subsystem: Subsystem | str, relative: str = "") -> Path:
        base = self.controller_root(subsystem)
        rel = relative.strip("/")
        return base / rel if rel else base

    def resource(self, key: str) -> Resource:
        return self.registry[key]

    def path(self, key: str, relative: str = "", *, for_write: bool = False) -> Path:
        resource = self.registry[key]
        return self.directory(resource.subsystem, relative) / resource.file(self.version, for_write=for_write)

    @cached_property
    def kubepods(self) -> tuple[KubepodsLayout, str]:
        """The kubepods layout and how it was found (upstream: detected once at start)."""
        return detect_layout(self.paths, self.controller_root(Subsystem.CPU))

    @property
    def layout(self) -> KubepodsLayout:
        return self.kubepods[0]

    # --- support -------------------------------------------------------------------------

    def supported(self, key: str) -> tuple[bool, str]:
        """Does this host have the resource? Optional files are looked up once in kubepods
        (or the controller root when there is no kubepods yet), as upstream does."""
        cached = self._support.get(key)
        if cached is not None:
            return cached
        resource = self.registry[key]
        answer: tuple[bool, str]
        name = resource.v1_file if self.version == 1 else resource.v2_file
        if name is None:
            answer = (False, f"{key} has no cgroup v{self.version} file")
        elif resource.support is Support.ALWAYS:
            answer = (True, f"{name} is part of cgroup v{self.version}")
        else:
            where = [self.directory(resource.subsystem, self.layout.root), self.directory(resource.subsystem)]
            found = next((d for d in where if (d / name).is_file()), None)
            answer = (
                (True, f"{name} found in {found}")
                if found
                else (False, f"{name} not provided by this kernel")
            )
        self._support[key] = answer
        return answer

    # --- I/O -----------------------------------------------------------------------------

    def read_text(self, key: str, relative: str = "") -> str:
        resource = self.registry[key]
        directory = self.directory(resource.subsystem, relative)
        return io.read_file(directory, resource.file(self.version)).decode(errors="replace")

    def read(self, key: str, relative: str = "") -> Value:
        """The resource's current value in v1 semantics; MalformedContentError if it does not parse."""
        text = self.read_text(key, relative)
        try:
            return self.registry[key].parse(self.version, text)
        except (ValueError, IndexError):
            path = self.path(key, relative)
            raise MalformedContentError(errno.EBADMSG, f"cannot parse {text[:64]!r}", str(path)) from None

    def render(self, key: str, value: Value) -> str:
        """What :meth:`write` would write; raises InvalidValueError or UnsupportedResourceError."""
        return self.registry[key].render(self.version, value)

    def write(self, key: str, relative: str, value: Value) -> str:
        """Validate, convert and write ``value``; returns the text written.

        Optional resources this host lacks raise UnsupportedResourceError before any write.
        """
        text = self.render(key, value)
        self.write_text(key, relative, text)
        return text

    def write_text(self, key: str, relative: str, text: str) -> None:
        """Write ``text`` as :meth:`render` returned it (no second validation).

        Optional resources this host lacks raise UnsupportedResourceError before any write.
        """
        resource = self.registry[key]
        if resource.support is Support.IF_EXISTS:
            ok, why = self.supported(key)
            if not ok:
                raise UnsupportedResourceError(errno.EOPNOTSUPP, why, str(self.path(key, relative)))
        directory = self.directory(resource.subsystem, relative)
        io.write_file(directory, resource.file(self.version, for_write=True), text)

    def exists(self, subsystem: Subsystem | str, relative: str) -> bool:
        return self.directory(subsystem, relative).is_dir()

    def children(self, subsystem: Subsystem | str, relative: str = "") -> list[str]:
        """Names of child cgroups (sorted); empty when the cgroup vanished."""
        try:
            with os.scandir(self.directory(subsystem, relative)) as entries:
                return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            return []

    def descendants(self, subsystem: Subsystem | str, relative: str, max_depth: int) -> list[str]:
        """Relative paths of cgroups below ``relative`` down to ``max_depth`` levels (upstream's
        ``GetBECPUSetPathsByMaxDepth``: 1 = pods, 2 = containers), parents before children."""
        found: list[str] = []
        for depth in range(1, max_depth + 1):
            found += self.at_depth(subsystem, relative, depth)
        return found

    def at_depth(self, subsystem: Subsystem | str, relative: str, depth: int) -> list[str]:
        """Cgroups exactly ``depth`` levels below ``relative`` (``GetCgroupPathsByTargetDepth``)."""
        level = [relative.strip("/")]
        for _ in range(depth):
            level = [f"{parent}/{child}" for parent in level for child in self.children(subsystem, parent)]
        return level
