"""Runtime hook protocol: stages, the contexts hooks read, the resource plan they fill.

The same hook code serves every transport (the reconciler here; NRI and the runtime proxy
later): a transport builds a context for a pod, a container or a kube-QoS cgroup, the hooks
fill its ``response`` (cgroup resources, environment, devices), and the transport applies
it — the reconciler turns it into cgroup updates through the executor, NRI would turn it
into a container adjustment.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from koordinator.api.features import FeatureGates
from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.executor import CgroupUpdate, Update
from koordlet.statesinformer.podmeta import ContainerMeta, PodMeta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.registry import (
    CPU_BVT_WARP_NS,
    CPU_CFS_QUOTA,
    CPU_IDLE,
    CPU_SHARES,
    CPUSET_CPUS,
    MEMORY_LIMIT,
    NET_CLS_CLASSID,
)


class Stage(enum.StrEnum):
    PRE_RUN_POD_SANDBOX = "PreRunPodSandbox"
    POST_STOP_POD_SANDBOX = "PostStopPodSandbox"
    PRE_CREATE_CONTAINER = "PreCreateContainer"
    PRE_START_CONTAINER = "PreStartContainer"
    POST_START_CONTAINER = "PostStartContainer"
    PRE_UPDATE_CONTAINER_RESOURCES = "PreUpdateContainerResources"


@dataclass
class Resources:
    """What hooks ask for a cgroup: ``None`` leaves a resource as it is."""

    cpu_shares: int | None = None
    cfs_quota: int | None = None
    cpuset: str | None = None
    memory_limit: int | None = None
    cpu_bvt: int | None = None
    cpu_idle: int | None = None
    net_cls_classid: int | None = None

    def updates(self, relative: str, owner: str = "") -> list[CgroupUpdate]:
        """The cgroup updates these resources mean for the cgroup ``relative``.

        A cgroup made idle (``cpu.idle=1``) has the kernel's minimal weight and refuses
        ``cpu.shares`` (EINVAL), so its shares are not written.
        """
        shares = None if self.cpu_idle == 1 else self.cpu_shares
        pairs = (
            (CPU_SHARES, shares),
            (CPU_CFS_QUOTA, self.cfs_quota),
            (CPUSET_CPUS, self.cpuset),
            (MEMORY_LIMIT, self.memory_limit),
            (CPU_BVT_WARP_NS, self.cpu_bvt),
            (CPU_IDLE, self.cpu_idle),
            (NET_CLS_CLASSID, self.net_cls_classid),
        )
        return [CgroupUpdate(key, relative, value, owner) for key, value in pairs if value is not None]


@dataclass(frozen=True)
class Mount:
    """A mount a container should get (NRI / runtime proxy transports)."""

    destination: str
    source: str
    type: str = "bind"
    options: tuple[str, ...] = ("rbind",)


@dataclass
class Response:
    resources: Resources = field(default_factory=Resources)
    #: environment variables a container should get (NRI / runtime proxy transports)
    env: dict[str, str] = field(default_factory=dict)
    #: host updates beyond the context's own cgroup (resctrl tasks, /proc files, ...)
    extra: list[Update] = field(default_factory=list)
    #: mounts a container should get (NRI / runtime proxy transports)
    mounts: list[Mount] = field(default_factory=list)


@dataclass
class NodeFacts:
    """What hooks may read about the node, shared by every context of one reconcile."""

    cgroups: CgroupFS
    node: Mapping[str, Any] | None
    node_slo: NodeSLOSpec
    gates: FeatureGates
    #: NodeResourceTopology annotations the koordlet computed (share pools, CPU topology ...)
    topology_annotations: Mapping[str, str] = field(default_factory=dict)
    kubelet_cpu_policy: str = "none"
    proc_root: Path = Path("/proc")
    #: ``--disable-unset-cpu-quota``: keep the CFS quota of pinned containers
    disable_unset_cpu_quota: bool = False


@dataclass
class PodContext:
    pod: PodMeta
    node: NodeFacts
    response: Response = field(default_factory=Response)

    @property
    def cgroup_parent(self) -> str:
        return self.pod.cgroup_dir


@dataclass
class ContainerContext:
    pod: PodMeta
    container: ContainerMeta
    node: NodeFacts
    response: Response = field(default_factory=Response)

    @property
    def cgroup_parent(self) -> str:
        return self.container.cgroup_dir


@dataclass
class QOSContext:
    """A kube-QoS cgroup (``kubepods``, ``burstable``, ``besteffort``)."""

    qos: KubeQOSClass
    node: NodeFacts
    response: Response = field(default_factory=Response)

    @property
    def cgroup_parent(self) -> str:
        return self.node.cgroups.layout.qos_dir(self.qos)
