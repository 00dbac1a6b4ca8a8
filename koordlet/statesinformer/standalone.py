"""Standalone mode: the koordlet's states with no apiserver and no kubelet.

* Pods are discovered from the kubepods cgroup tree: every pod directory (its UID and QoS
  class from the name) with its container directories. They carry no spec, so they have
  usage but no requests.
* The Node is described from the host: its hostname, CPU count and memory.
* The NodeSLO is upstream's defaults, plus one host application per top-level cgroup of
  the cpu hierarchy outside kubepods (``system.slice``, ``user.slice`` ...), so whatever
  runs on the machine shows up in the metrics.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.types.slo import HostApplicationSpec
from koordlet.system import proc
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.layout import CgroupDriver
from koordlet.system.cgroup.registry import Subsystem

STANDALONE_NAMESPACE = "standalone"
_SCOPE_RUNTIME = {"cri-containerd-": "containerd", "docker-": "docker", "crio-": "cri-o", "pouch-": "pouch"}


def _runtime_of(dir_name: str) -> str:
    for prefix, runtime in _SCOPE_RUNTIME.items():
        if dir_name.startswith(prefix):
            return runtime
    return "containerd"


class CgroupPodsSource:
    """``get_pods`` from the cgroup tree, in the kubelet's PodList item shape."""

    def __init__(self, cgroups: CgroupFS) -> None:
        self.cgroups = cgroups

    def discover(self) -> list[dict[str, Any]]:
        layout = self.cgroups.layout
        pods = []
        qos_dirs = {qos: layout.qos_dir(qos) for qos in KubeQOSClass}
        for qos, qos_dir in qos_dirs.items():
            for name in self.cgroups.children(Subsystem.CPU, qos_dir):
                uid = layout.parse_pod_uid(name)
                if uid is None:
                    continue
                containers = []
                for child in self.cgroups.children(Subsystem.CPU, f"{qos_dir}/{name}"):
                    ident = layout.parse_container_id(child)
                    if ident is None:
                        continue
                    runtime = _runtime_of(child) if layout.driver is CgroupDriver.SYSTEMD else "containerd"
                    containers.append(
                        {"name": ident[:12], "containerID": f"{runtime}://{ident}", "ready": True}
                    )
                pods.append(
                    {
                        "metadata": {
                            "name": f"pod-{uid[:8]}",
                            "namespace": STANDALONE_NAMESPACE,
                            "uid": uid,
                            "resourceVersion": str(len(containers)),
                        },
                        "spec": {"containers": [{"name": c["name"]} for c in containers]},
                        "status": {"phase": "Running", "qosClass": str(qos), "containerStatuses": containers},
                    }
                )
        return pods

    async def get_pods(self) -> list[dict[str, Any]]:
        return self.discover()


def describe_node(cgroups: CgroupFS, name: str | None = None) -> dict[str, Any]:
    """A Node object for this machine (capacity from the CPU count and MemTotal)."""
    node_name = name or socket.gethostname()
    cpus = os.cpu_count() or 1
    try:
        memory = proc.read_meminfo(cgroups.paths).total_bytes
    except OSError:
        memory = 0
    resources = {"cpu": str(cpus), "memory": str(memory)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node_name, "labels": {"kubernetes.io/hostname": node_name}},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": node_name},
            ],
        },
    }


def host_applications(cgroups: CgroupFS) -> list[HostApplicationSpec]:
    """One application per top-level cgroup of the cpu hierarchy, kubepods excluded."""
    kubepods_top = cgroups.layout.root.split("/", 1)[0]
    return [
        HostApplicationSpec(name=child)
        for child in cgroups.children(Subsystem.CPU)
        if child != kubepods_top and not child.startswith(".")
    ]
