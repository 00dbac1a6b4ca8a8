"""GroupIdentity: CPU scheduling priority of each QoS class's cgroups.

On Alibaba Cloud Linux / Anolis kernels this is ``cpu.bvt_warp_ns`` ("group identity"),
with upstream's rule (``hooks/groupidentity/rule.go``). A class's value is its ``cpuQOS``
``groupIdentity`` (2, 2, -1 by default) when the class is enabled and the NodeSLO's
``cpuPolicy`` is ``groupIdentity`` (the default), else 0 — so another policy resets the
cgroups to 0 rather than leaving the old values. Pods by their ``koordinator.sh/qosClass``
label: LSE/LSR the LSR value, LS the LS value, BE the BE value; a pod without one of these
(SYSTEM, no label) by its Kubernetes QoS: Guaranteed the LSR value when that class is
enabled, else the LS value when LS is, else 0; Burstable the LS value; BestEffort the BE
value. An LS pod's ``koordinator.sh/cpuQOS`` annotation takes precedence: its
``groupIdentity`` when given, 0 unless ``enable`` is true. The kube-QoS cgroups: burstable
the LS value, besteffort the BE value, the Guaranteed one (kubepods) 0. The pod's value is
also written to every cgroup below the pod (containers, sandbox): the kernel copies a
parent's value into a new cgroup, so a container keeps what its pod had when it started.

When some class is enabled the hook turns the kernel feature on where it has a switch:
``/proc/sys/kernel/sched_core=0`` first (core scheduling and group identity exclude each
other), then ``/proc/sys/kernel/sched_group_identity_enabled=1`` — unless the SystemConfig
strategy sets ``schedGroupIdentityEnabled`` itself (gate SystemConfig on, field set): then
that setting owns the switch, so the two never write the file in turn. When no class is
enabled and the switch is off, nothing is written (the cgroups' values do not matter then);
with the switch on, or on kernels without it, every cgroup gets 0.

On mainline kernels, which have no bvt, this hook uses ``cpu.idle`` (Linux 5.15) instead —
an improvement over upstream, which does nothing there: pods with a negative group
identity, and pods with the BE class's value when that class asks for ``schedIdle: 1``, run
as SCHED_IDLE (``cpu.idle=1``); every other pod gets ``cpu.idle=0``. The kube-QoS cgroups,
the ``besteffort`` one included, are never made idle: the kernel refuses ``cpu.shares`` on
an idle cgroup, and the kubelet writes the ``besteffort`` cgroup's shares when it starts —
it would fail to start ("failed to initialize top level QOS containers") after a restart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.podqos import get_pod_cpu_qos
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.types.slo import CPUQOSCfg, NodeSLOSpec, ResourceQOS
from koordlet.executor import CgroupUpdate, FileUpdate
from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.protocol import NodeFacts, PodContext, QOSContext
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.registry import CPU_BVT_WARP_NS, CPU_IDLE

log = logging.getLogger(__name__)

NAME = "GroupIdentity"
SCHED_GROUP_IDENTITY = ("sys", "kernel", "sched_group_identity_enabled")
SCHED_CORE = ("sys", "kernel", "sched_core")
CPU_POLICY = "groupIdentity"
#: the SystemConfig strategy's gate (it writes ``schedGroupIdentityEnabled`` when set)
SYSTEM_CONFIG_GATE = "SystemConfig"


@dataclass(frozen=True)
class BvtRule:
    """Group identity values of the NodeSLO (upstream's ``bvtRule``)."""

    #: some class is enabled under the groupIdentity policy
    enable: bool
    lsr: int
    ls: int
    be: int
    #: a Guaranteed pod without a class: LSR's value when LSR is enabled, else LS's
    guaranteed_pod: int
    #: the BE class is enabled and asks for ``schedIdle: 1`` (cpu.idle mode)
    be_sched_idle: bool

    def class_value(self, qos: QoSClass, kube_qos: KubeQOSClass) -> int:
        """A pod's value: by its Koordinator QoS label, else by its Kubernetes QoS."""
        if qos in (QoSClass.LSE, QoSClass.LSR):
            return self.lsr
        if qos is QoSClass.LS:
            return self.ls
        if qos is QoSClass.BE:
            return self.be
        return {
            KubeQOSClass.GUARANTEED: self.guaranteed_pod,
            KubeQOSClass.BURSTABLE: self.ls,
            KubeQOSClass.BEST_EFFORT: self.be,
        }[kube_qos]

    def kube_qos_dir_value(self, kube_qos: KubeQOSClass) -> int:
        """A kube-QoS cgroup's value (the Guaranteed one, kubepods, stays 0)."""
        return {
            KubeQOSClass.GUARANTEED: 0,
            KubeQOSClass.BURSTABLE: self.ls,
            KubeQOSClass.BEST_EFFORT: self.be,
        }[kube_qos]


def _cpu_qos(qos: ResourceQOS | None) -> CPUQOSCfg | None:
    return qos.cpu_qos if qos is not None else None


def parse_rule(spec: NodeSLOSpec) -> BvtRule:
    """The rule of a (merged) NodeSLO: a class's value is its group identity when the class
    is enabled under the groupIdentity policy, else 0 (upstream's ``parseRule``)."""
    strategy = spec.resource_qos_strategy
    if strategy is None:
        return BvtRule(False, 0, 0, 0, 0, False)
    policy = strategy.policies.cpu_policy if strategy.policies is not None else None
    policy_on = not policy or policy == CPU_POLICY
    lsr, ls, be = (_cpu_qos(c) for c in (strategy.lsr_class, strategy.ls_class, strategy.be_class))
    lsr_on, ls_on, be_on = (policy_on and c is not None and bool(c.enable) for c in (lsr, ls, be))

    def value(cfg: CPUQOSCfg | None, on: bool) -> int:
        return (cfg.group_identity or 0) if cfg is not None and on else 0

    lsr_value, ls_value, be_value = value(lsr, lsr_on), value(ls, ls_on), value(be, be_on)
    guaranteed = lsr_value if lsr_on else ls_value if ls_on else 0
    be_idle = be_on and be is not None and be.sched_idle == 1
    return BvtRule(lsr_on or ls_on or be_on, lsr_value, ls_value, be_value, guaranteed, be_idle)


def pod_identity(rule: BvtRule, pod: PodMeta) -> int:
    """A pod's group identity: its class's value, or for an LS pod its ``koordinator.sh/cpuQOS``
    annotation (``groupIdentity`` when given; 0 unless ``enable`` is true)."""
    qos = get_pod_qos_class_raw(pod.pod)
    value = rule.class_value(qos, pod.kube_qos)
    if qos is not QoSClass.LS:
        return value  # only LS pods may change theirs (LS may go down to BE, never BE up)
    try:
        override = get_pod_cpu_qos(pod.annotations)
    except (AnnotationError, ValueError) as err:
        log.debug("pod %s: cpuQOS annotation ignored: %s", pod.key, err)
        return value
    if override is None:
        return value
    if override.group_identity is not None:
        value = override.group_identity
    return value if override.enable else 0


def _pod_idle(rule: BvtRule, pod: PodMeta) -> int:
    """cpu.idle mode: idle for a negative identity, or the BE class's value with schedIdle."""
    if pod_identity(rule, pod) < 0:
        return 1
    qos = get_pod_qos_class_raw(pod.pod)
    falls_to_be = qos is QoSClass.BE or (
        qos not in (QoSClass.LSE, QoSClass.LSR, QoSClass.LS) and pod.kube_qos is KubeQOSClass.BEST_EFFORT
    )
    return 1 if falls_to_be and rule.be_sched_idle else 0


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
        if self._mode(node) is None:
            return False, "the kernel has neither cpu.bvt_warp_ns (Anolis) nor cpu.idle (Linux 5.15)"
        return True, ""

    def _rule(self, node: NodeFacts) -> BvtRule | None:
        """The rule to apply, or None when there is nothing to write: bvt mode with no class
        enabled and the kernel's switch off (or unreadable), as upstream's ``prepare``."""
        rule = parse_rule(node.node_slo)
        if rule.enable or self._mode(node) != "bvt":
            return rule
        sysctl = node.proc_root.joinpath(*SCHED_GROUP_IDENTITY)
        try:
            switched_on = int(sysctl.read_text().strip()) != 0
        except FileNotFoundError:
            return rule  # a kernel without the switch: group identity is always on
        except (OSError, ValueError) as err:
            log.debug("cannot read %s: %s", sysctl, err)
            return None
        return rule if switched_on else None

    def pod(self, ctx: PodContext) -> None:
        node = ctx.node
        mode = self._mode(node)
        rule = self._rule(node)
        if rule is None:
            return
        if mode == "bvt":
            value = pod_identity(rule, ctx.pod)
            ctx.response.resources.cpu_bvt = value
            # containers and the sandbox: the kernel gave them the pod's value of their start
            pod_dir = ctx.pod.cgroup_dir
            subsystem = node.cgroups.resource(CPU_BVT_WARP_NS).subsystem
            for child in node.cgroups.children(subsystem, pod_dir):
                ctx.response.extra.append(CgroupUpdate(CPU_BVT_WARP_NS, f"{pod_dir}/{child}", value, NAME))
        elif mode == "idle":
            ctx.response.resources.cpu_idle = _pod_idle(rule, ctx.pod)

    def kube_qos(self, ctx: QOSContext) -> None:
        node = ctx.node
        mode = self._mode(node)
        rule = self._rule(node)
        if rule is None:
            return
        if mode == "bvt":
            if ctx.qos is KubeQOSClass.GUARANTEED and rule.enable:
                ctx.response.extra += self._switch_on(node)
            ctx.response.resources.cpu_bvt = rule.kube_qos_dir_value(ctx.qos)
        elif mode == "idle":
            # never idle: the kubelet writes these cgroups' cpu.shares (see the module's doc)
            ctx.response.resources.cpu_idle = 0

    @staticmethod
    def _switch_on(node: NodeFacts) -> list[FileUpdate]:
        """sched_core=0, then sched_group_identity_enabled=1, where the kernel has them and
        the SystemConfig strategy does not set the latter itself."""
        updates = []
        core = node.proc_root.joinpath(*SCHED_CORE)
        if core.exists():
            updates.append(FileUpdate(core, "0", 0, 1, NAME))
        system = node.node_slo.system_strategy
        owned = (
            node.gates.enabled(SYSTEM_CONFIG_GATE)
            and system is not None
            and system.sched_group_identity_enabled is not None
        )
        sysctl = node.proc_root.joinpath(*SCHED_GROUP_IDENTITY)
        if not owned and sysctl.exists():
            updates.append(FileUpdate(sysctl, "1", 0, 1, NAME))
        return updates
