"""PLEG: notice a new pod cgroup as soon as the kubelet creates it.

Upstream watches the three kube-QoS directories of the cpu hierarchy with inotify and,
when a pod directory appears, asks the pods informer for an early resync instead of
waiting for the 10 s period. Only "pod added" is used. Missing directories (no kubelet
yet) are retried on the next resync; an inotify failure disables PLEG with a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from koordinator.api.kubeqos import KubeQOSClass
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.registry import Subsystem
from koordlet.system.errors import HostError
from koordlet.system.inotify import Inotify

log = logging.getLogger(__name__)


class PodLifecycleEvents:
    def __init__(self, cgroups: CgroupFS, on_pod_added: Callable[[str], None]) -> None:
        self.cgroups = cgroups
        self.on_pod_added = on_pod_added
        self._inotify: Inotify | None = None
        self._watched: set[str] = set()

    def _watch_qos_dirs(self) -> None:
        assert self._inotify is not None
        layout = self.cgroups.layout
        for qos in KubeQOSClass:
            rel = layout.qos_dir(qos)
            if rel in self._watched:
                continue
            try:
                self._inotify.watch(self.cgroups.directory(Subsystem.CPU, rel))
                self._watched.add(rel)
            except HostError as err:
                log.debug("PLEG: cannot watch %s yet: %s", rel, err)

    def _on_readable(self) -> None:
        assert self._inotify is not None
        layout = self.cgroups.layout
        for event in self._inotify.read():
            if event.created_dir:
                uid = layout.parse_pod_uid(event.name)
                if uid is not None:
                    self.on_pod_added(uid)
        if len(self._watched) < len(KubeQOSClass):
            self._watch_qos_dirs()

    def start(self) -> bool:
        """Start watching; False (PLEG disabled, periodic resync only) when inotify fails."""
        try:
            self._inotify = Inotify()
        except HostError as err:
            log.warning("PLEG disabled: inotify unavailable: %s", err)
            return False
        self._watch_qos_dirs()
        asyncio.get_running_loop().add_reader(self._inotify.fd, self._on_readable)
        return True

    def refresh(self) -> None:
        """Watch QoS directories that did not exist at start (called on every resync)."""
        if self._inotify is not None and len(self._watched) < len(KubeQOSClass):
            self._watch_qos_dirs()

    def stop(self) -> None:
        if self._inotify is not None:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().remove_reader(self._inotify.fd)
            self._inotify.close()
            self._inotify = None
