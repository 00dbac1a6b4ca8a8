"""What the NRI plug-in and the runtime-proxy hook server share: a pod or container that the
runtime is about to create, turned into the hooks' contexts, the hooks run, their host
writes done, and their answer split into what the runtime applies itself and what the
executor writes.

A transport describes the pod as the runtime sees it (:class:`Sandbox`: identity, labels and
annotations — the kubelet copies the pod's —, cgroup parent). The pod object the hooks read
is built from that: its spec from the states informer when it has the pod, else containers
named by the webhook's ``node.koordinator.sh/extended-resource-spec`` annotation (which also
carries their batch resources); the QoS class from the cgroup parent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.resources import get_extended_resource_spec
from koordlet.executor import ResourceUpdateExecutor
from koordlet.runtimehooks.framework import HookError, HookManager
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts, PodContext, Resources, Stage
from koordlet.statesinformer.podmeta import ContainerMeta, PodMeta, meta_with_uid
from koordlet.system.cgroup.layout import ContainerIDError, qos_of_dir


class TransportHookError(RuntimeError):
    """A hook failed under the Fail policy: the runtime is told, and fails the call."""


@dataclass
class Sandbox:
    """A pod as the runtime describes it."""

    name: str
    namespace: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: the pod cgroup as the kubelet named it (``/kubepods/burstable/pod<uid>``, a slice ...)
    cgroup_parent: str = ""


def _pod_object(sandbox: Sandbox, known: PodMeta | None, kube_qos: str) -> dict[str, Any]:
    spec: dict[str, Any]
    if known is not None:
        spec = dict(known.pod.get("spec") or {})
    else:
        try:
            recorded = get_extended_resource_spec(sandbox.annotations)
        except (AnnotationError, ValueError):
            recorded = None
        names = sorted(recorded.containers) if recorded is not None else []
        spec = {"containers": [{"name": name} for name in names]}
    return {
        "metadata": {
            "name": sandbox.name,
            "namespace": sandbox.namespace,
            "uid": sandbox.uid,
            "labels": dict(sandbox.labels),
            "annotations": dict(sandbox.annotations),
        },
        "spec": spec,
        "status": {"qosClass": kube_qos},
    }


def origin_resources(resources: Resources) -> Resources:
    """The resources the runtime itself applies to a container (upstream's "origin" ones):
    CPU shares, CFS quota, cpuset, memory limit."""
    return Resources(
        cpu_shares=resources.cpu_shares,
        cfs_quota=resources.cfs_quota,
        cpuset=resources.cpuset or None,
        memory_limit=resources.memory_limit,
    )


def ext_resources(resources: Resources) -> Resources:
    """The resources the runtime has no field for, written by the executor."""
    return Resources(
        cpu_bvt=resources.cpu_bvt, cpu_idle=resources.cpu_idle, net_cls_classid=resources.net_cls_classid
    )


class HookRunner:
    """Runs the hooks for one runtime event and does their host writes."""

    def __init__(
        self,
        manager: HookManager,
        facts: Callable[[], NodeFacts],
        executor: ResourceUpdateExecutor,
        known: Callable[[str], PodMeta | None] = lambda _uid: None,
    ) -> None:
        self.manager = manager
        self.facts = facts
        self.executor = executor
        #: the states informer's pod by UID (its spec, once the kubelet lists the pod)
        self.known = known
        #: the scheme of the container IDs the kubelet reports (``containerd://``, ``cri-o://``)
        self.id_scheme = "containerd"

    def pod_meta(self, sandbox: Sandbox, node: NodeFacts) -> PodMeta:
        known = self.known(sandbox.uid)
        kube_qos = known.kube_qos if known is not None else qos_of_dir(sandbox.cgroup_parent)
        return meta_with_uid(_pod_object(sandbox, known, kube_qos.value), node.cgroups.layout, sandbox.uid)

    def container_meta(self, pod: PodMeta, name: str, container_id: str, node: NodeFacts) -> ContainerMeta:
        """A container the runtime creates; without an ID yet (before CreateContainer
        answered) it has no cgroup."""
        full_id = f"{self.id_scheme}://{container_id}" if container_id else ""
        cgroup_dir = ""
        if container_id:
            try:
                cgroup_dir = node.cgroups.layout.container_dir(pod.kube_qos, pod.uid, full_id)
            except ContainerIDError:
                cgroup_dir = ""
        init_names = {str(c.get("name")) for c in (pod.pod.get("spec") or {}).get("initContainers") or ()}
        return ContainerMeta(name, full_id, cgroup_dir, name in init_names)

    def run_pod(self, sandbox: Sandbox, stage: Stage) -> PodContext:
        """Pod-level hooks. Before the sandbox runs, their cgroup values are written to the pod
        cgroup (the kubelet made it); when it is gone, their cleanup is done."""
        node = self.facts()
        pod = self.pod_meta(sandbox, node)
        try:
            ctx = self.manager.run_pod(PodContext(pod, node), stage)
        except HookError as exc:
            raise TransportHookError(str(exc)) from exc
        if stage is Stage.POST_STOP_POD_SANDBOX:
            self.executor.update_batch(ctx.response.extra, cacheable=False)
        else:
            self.executor.leveled([ctx.response.resources.updates(pod.cgroup_dir, f"pod {pod.key}")])
            self.executor.update_batch(ctx.response.extra)
        return ctx

    def run_container(self, sandbox: Sandbox, name: str, container_id: str, stage: Stage) -> ContainerContext:
        """Container-level hooks; the executor writes what the runtime has no field for."""
        node = self.facts()
        pod = self.pod_meta(sandbox, node)
        meta = self.container_meta(pod, name, container_id, node)
        try:
            ctx = self.manager.run_container(ContainerContext(pod, meta, node), stage)
        except HookError as exc:
            raise TransportHookError(str(exc)) from exc
        if meta.cgroup_dir:
            owner = f"pod {pod.key} {meta.name}"
            self.executor.update_batch(ext_resources(ctx.response.resources).updates(meta.cgroup_dir, owner))
        self.executor.update_batch(ctx.response.extra)
        return ctx
