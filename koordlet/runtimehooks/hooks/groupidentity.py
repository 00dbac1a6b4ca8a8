"""GroupIdentity: CPU scheduling priority of each QoS class's cgroups.

On Alibaba Cloud Linux / Anolis kernels this is ``cpu.bvt_warp_ns`` ("group identity"):
LSE/LSR pods get the LSR class value, LS pods the LS value, BE pods the BE value (2, 2, -1
when the class's ``cpuQOS`` is enabled, 0 otherwise), the ``burstable`` and
``besteffort`` kube-QoS cgroups the LS and BE values, the Guaranteed one 0; an LS pod may
override its value with the ``koordinator.sh/cpuQOS`` annotation (``enable: false`` means
0). Turning it on also sets ``/proc/sys/kernel/sched_group_identity_enabled`` to 1.

On mainline kernels, which have no bvt, this hook uses ``cpu.idle`` (Linux 5.15) instead —
an improvement over upstream, which does nothing there: BE pods run as SCHED_IDLE
(``cpu.idle=1``) when the BE class asks for a negative group identity or for
``schedIdle: 1``; every other cgroup gets ``cpu.idle=0``. The kube-QoS cgroups, the
``besteffort`` one included, are never made idle: the kernel refuses ``cpu.shares`` on an
idle cgroup, and the kubelet writes the ``besteffort`` cgroup's shares when it starts — it
would fail to start ("failed to initialize top level QOS containers") after a restart.
The hook serves the ``groupIdentity`` CPU policy of the NodeSLO (the default).
"""

from __future__ import annotations

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.podqos import get_pod_cpu_qos
from koordinator.api.extension.qos import QoSClass
from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.types.slo import CPUQOSCfg, ResourceQOS
from koordlet.executor import FileUpdate
from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.protocol import NodeFacts, PodContext, QOSContext
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.registry import CPU_BVT_WARP_NS, CPU_IDLE

NAME = "GroupIdentity"
SCHED_GROUP_IDENTITY = ("sys", "kernel", "sched_group_identity_enabled")


def _cpu_qos(qos: ResourceQOS | None) -> CPUQOSCfg | None:
    return qos.cpu_qos if qos is not None else None


def _identity(cfg: CPUQOSCfg | None) -> int:
    if cfg is None or not cfg.enable:
        return 0
    return cfg.group_identity or 0


class GroupIdentity(HookBase):
    NAME = NAME
    GATE = NAME

    def _mode(self, node: NodeFacts) -> str | None:
        """``bvt`` on kernels with group identity, ``idle`` on kernels with cpu.idle."""
        if node.cgroups.supported(CPU_BVT_WARP_NS)[0]:
            return "bvt"
        if node.cgroups.supported(CPU_IDLE)[0]:
            return "idle"
        return None

    def enabled(self, node: NodeFacts) -> tuple[bool, str]:
        gated, why = super().enabled(node)
        if not gated:
            return gated, why
        strategy = node.node_slo.resource_qos_strategy
        policy = (strategy.policies.cpu_policy if strategy and strategy.policies else None) or "groupIdentity"
        if policy != "groupIdentity":
            return False, f"NodeSLO cpuPolicy is {policy}"
        if self._mode(node) is None:
            return False, "the kernel has neither cpu.bvt_warp_ns (Anolis) nor cpu.idle (Linux 5.15)"
        return True, ""

    def _class(self, node: NodeFacts, qos: QoSClass) -> CPUQOSCfg | None:
        strategy = node.node_slo.resource_qos_strategy
        if strategy is None:
            return None
        if qos in (QoSClass.LSE, QoSClass.LSR):
            return _cpu_qos(strategy.lsr_class)
        if qos is QoSClass.LS:
            return _cpu_qos(strategy.ls_class)
        if qos is QoSClass.BE:
            return _cpu_qos(strategy.be_class)
        return None

    def _be_idle(self, node: NodeFacts) -> int:
        cfg = self._class(node, QoSClass.BE)
        if cfg is None or not cfg.enable:
            return 0
        return 1 if (cfg.group_identity or 0) < 0 or cfg.sched_idle == 1 else 0

    def _pod_identity(self, pod: PodMeta, node: NodeFacts) -> int:
        if pod.qos is QoSClass.LS:
            try:
                override = get_pod_cpu_qos(pod.annotations)
            except (AnnotationError, ValueError):
                override = None
            if override is not None:
                return _identity(override) if override.enable is not False else 0
        return _identity(self._class(node, pod.qos))

    def pod(self, ctx: PodContext) -> None:
        mode = self._mode(ctx.node)
        if mode == "bvt":
            ctx.response.resources.cpu_bvt = self._pod_identity(ctx.pod, ctx.node)
        elif mode == "idle":
            ctx.response.resources.cpu_idle = self._be_idle(ctx.node) if ctx.pod.qos is QoSClass.BE else 0

    def kube_qos(self, ctx: QOSContext) -> None:
        mode = self._mode(ctx.node)
        node = ctx.node
        if mode == "bvt":
            value = {
                KubeQOSClass.GUARANTEED: 0,
                KubeQOSClass.BURSTABLE: _identity(self._class(node, QoSClass.LS)),
                KubeQOSClass.BEST_EFFORT: _identity(self._class(node, QoSClass.BE)),
            }[ctx.qos]
            ctx.response.resources.cpu_bvt = value
            if ctx.qos is KubeQOSClass.GUARANTEED:
                sysctl = node.proc_root.joinpath(*SCHED_GROUP_IDENTITY)
                if sysctl.exists():
                    ctx.response.extra.append(FileUpdate(sysctl, "1", 0, 1, NAME))
        elif mode == "idle":
            # never idle: the kubelet writes these cgroups' cpu.shares (see the module's doc)
            ctx.response.resources.cpu_idle = 0
