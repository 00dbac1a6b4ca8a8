"""CPUSetAllocator: which CPUs each container may run on.

Container level, in upstream's order:

1. a cpuset the scheduler recorded in ``scheduling.koordinator.sh/resource-status``
   (LSE/LSR pods bound to CPUs): exactly those CPUs, and the CFS quota lifted (-1) so the
   pinned pod is not throttled on its own CPUs (kept with ``--disable-unset-cpu-quota``);
2. a pod bound to NUMA nodes (``numaNodeResources`` with cpu or batch-cpu): the LS share
   pools of those NUMA nodes, or for a BE pod with the BECPUManager gate the BE share pools
   of those nodes; a BE pod without the gate goes on below (CPUSuppress owns its cpuset);
3. a SYSTEM pod on a node with a system-QoS cpuset: that cpuset;
4. an LS pod: every LS share pool;
5. otherwise: nothing for kube-BestEffort pods and under the kubelet's static CPU policy
   (the kubelet owns those cpusets), else every LS share pool.

The Koordinator QoS class is the pod's ``koordinator.sh/qosClass`` label as it is (upstream's
``GetQoSClassByAttrs``): a pod without the label is not LS or BE here even though other
parts of the koordlet treat a Burstable one as LS, so under the static policy the kubelet
keeps its cpuset. Pod level: the pod's CFS quota is lifted for pods with a recorded cpuset.
Share pools come from the NodeResourceTopology annotations the koordlet itself computes.
"""

from __future__ import annotations

from koordinator.api.cpuset import cpus_or_empty, format_cpuset
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.numa import get_resource_status
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.extension.resources import BATCH_CPU
from koordinator.api.extension.topology import get_cpu_shared_pools, get_system_qos_resource
from koordinator.api.kubeqos import KubeQOSClass
from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts, PodContext
from koordlet.statesinformer.podmeta import PodMeta

NAME = "CPUSetAllocator"


def _status_cpuset(pod: PodMeta) -> str:
    try:
        return get_resource_status(pod.annotations).cpuset
    except (AnnotationError, ValueError):
        return ""


def _numa_nodes(pod: PodMeta) -> list[int]:
    try:
        status = get_resource_status(pod.annotations)
    except (AnnotationError, ValueError):
        return []
    return [n.node for n in status.numa_node_resources if "cpu" in n.resources or BATCH_CPU in n.resources]


class CPUSetAllocator(HookBase):
    NAME = NAME
    GATE = NAME

    def pod(self, ctx: PodContext) -> None:
        if _status_cpuset(ctx.pod) and not ctx.node.disable_unset_cpu_quota:
            ctx.response.resources.cfs_quota = -1

    def _pools(self, node: NodeFacts, be: bool, numa: list[int] | None = None) -> str | None:
        try:
            pools = get_cpu_shared_pools(node.topology_annotations, be=be)
        except (AnnotationError, ValueError):
            return None
        if not pools:
            return None
        cpus: set[int] = set()
        for pool in pools:
            if numa is None or pool.node in numa:
                cpus.update(cpus_or_empty(pool.cpuset))
        return format_cpuset(cpus) if cpus else None

    def cpuset_for(self, pod: PodMeta, node: NodeFacts) -> str | None:
        """The cpuset the pod's containers get, or None to leave it alone."""
        pinned = _status_cpuset(pod)
        if pinned:
            return format_cpuset(cpus_or_empty(pinned)) or None
        qos = get_pod_qos_class_raw(pod.pod)
        numa = _numa_nodes(pod)
        if numa:
            if qos is not QoSClass.BE:
                return self._pools(node, False, numa)
            if node.gates.enabled("BECPUManager"):
                return self._pools(node, True, numa)
            # a BE pod without BECPUManager goes on as if not NUMA-bound: as kube-BestEffort it
            # is left alone, its cpuset is CPUSuppress's (which writes the besteffort tree)
        if qos is QoSClass.SYSTEM:
            annotations = ((node.node or {}).get("metadata") or {}).get("annotations") or {}
            try:
                system = get_system_qos_resource(annotations)
            except (AnnotationError, ValueError):
                system = None
            if system is not None and system.cpuset:
                return format_cpuset(cpus_or_empty(system.cpuset)) or None
        if qos is QoSClass.LS:
            return self._pools(node, False)
        if pod.kube_qos is KubeQOSClass.BEST_EFFORT or node.kubelet_cpu_policy == "static":
            return None
        return self._pools(node, False)

    def container(self, ctx: ContainerContext) -> None:
        cpuset = self.cpuset_for(ctx.pod, ctx.node)
        if cpuset is None:
            return
        ctx.response.resources.cpuset = cpuset
        if _status_cpuset(ctx.pod) and not ctx.node.disable_unset_cpu_quota:
            ctx.response.resources.cfs_quota = -1
