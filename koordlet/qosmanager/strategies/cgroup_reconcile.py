"""CgroupReconcile: memory QoS of QoS-class, pod and container cgroups (gate CgroupReconcile).

Every pending or running pod takes the ``memoryQOS`` of its class (LSE/LSR -> ``lsrClass``,
LS -> ``lsClass``, BE -> ``beClass``, SYSTEM -> ``systemClass``; no class -> by Kubernetes
QoS; a disabled class has been reset to the "none" values by the NodeSLO merge), changed by
its ``koordinator.sh/memoryQOS`` annotation: ``policy: none`` turns everything off,
``policy: auto`` starts from the default class config, and fields given override. Then:

* **pod**: request ``R`` = the pod's memory request (BE pods: Σ ``kubernetes.io/batch-memory``
  requests); ``memory.min = R * minLimitPercent / 100``, ``memory.low = R * lowLimitPercent /
  100`` (raised to min when lower but not 0); ``memory.wmark_ratio``,
  ``memory.wmark_scale_factor`` (``wmarkScalePermill``), ``memory.wmark_min_adj``,
  ``memory.priority``, ``memory.use_priority_oom`` (``priorityEnable``), ``memory.oom.group``
  (``oomKillGroup``) as configured;
* **container**: the same with the container's request (0 when unset) and limit (BE:
  batch-memory), plus ``memory.high``: unlimited (MaxInt64, "max") for a throttling percent
  of 0, else ``floor((R + (L - R) * throttlingPercent / 100) / 4096) * 4096`` with ``L`` the
  limit or, without one, the node's allocatable memory; raised to min when lower;
* **QoS directories**: Burstable and BestEffort get Σ min and Σ low of their pods, the
  Guaranteed directory (kubepods itself, the parent of the others) the sums of all pods; each
  gets ``memory.priority``, ``memory.use_priority_oom`` and ``memory.oom.group`` of its class
  (Guaranteed -> LSR, Burstable -> LS, BestEffort -> BE).

One leveled batch (QoS, pods, containers): protections that grow reach parents first,
those that shrink children first. Knobs this kernel lacks (memory.min/low/high on v1 need
Anolis; wmark, priority and oom group need Anolis or a v2 kernel that has them) are not
planned. The page cache limit (Anolis) has no field in the NodeSLO memory QoS and is not set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.podqos import get_pod_memory_qos
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.extension.resources import BATCH_MEMORY
from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.sloconfig.merge import merge
from koordinator.api.sloconfig.nodeslo import default_resource_qos_strategy, none_memory_qos
from koordinator.api.types.slo import MemoryQOS, ResourceQOS, ResourceQOSStrategy
from koordlet.executor import CgroupUpdate
from koordlet.qosmanager.framework import GatedStrategy, Plan, Snapshot
from koordlet.qosmanager.strategies import podspec
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.registry import (
    MEMORY_HIGH,
    MEMORY_LOW,
    MEMORY_MIN,
    MEMORY_OOM_GROUP,
    MEMORY_PRIORITY,
    MEMORY_USE_PRIORITY_OOM,
    MEMORY_WMARK_MIN_ADJ,
    MEMORY_WMARK_RATIO,
    MEMORY_WMARK_SCALE_FACTOR,
)

NAME = "CgroupReconcile"
GATE = "CgroupReconcile"
PAGE_SIZE = 4096
MAX_INT64 = (1 << 63) - 1
KUBE_QOS_ORDER = (KubeQOSClass.GUARANTEED, KubeQOSClass.BURSTABLE, KubeQOSClass.BEST_EFFORT)


@dataclass
class Summary:
    """Values to write to one cgroup; None leaves a knob alone."""

    memory_min: int | None = None
    memory_low: int | None = None
    memory_high: int | None = None
    wmark_ratio: int | None = None
    wmark_scale_factor: int | None = None
    wmark_min_adj: int | None = None
    priority: int | None = None
    use_priority_oom: int | None = None
    oom_group: int | None = None

    def set_static(self, qos: MemoryQOS) -> None:
        self.wmark_ratio = qos.wmark_ratio
        self.wmark_scale_factor = qos.wmark_scale_permill
        self.wmark_min_adj = qos.wmark_min_adj
        self.use_priority_oom = qos.priority_enable
        self.priority = qos.priority
        self.oom_group = qos.oom_kill_group

    def set_protection(self, qos: MemoryQOS, request: int) -> None:
        if qos.min_limit_percent is not None:
            self.memory_min = request * qos.min_limit_percent // 100
        if qos.low_limit_percent is not None:
            self.memory_low = request * qos.low_limit_percent // 100
        if (
            self.memory_min is not None
            and self.memory_low is not None
            and 0 < self.memory_low < self.memory_min
        ):
            self.memory_low = self.memory_min

    def updates(self, relative: str, supported: Callable[[str], bool]) -> list[CgroupUpdate]:
        values = (
            (MEMORY_MIN, self.memory_min),
            (MEMORY_LOW, self.memory_low),
            (MEMORY_HIGH, self.memory_high),
            (MEMORY_WMARK_RATIO, self.wmark_ratio),
            (MEMORY_WMARK_SCALE_FACTOR, self.wmark_scale_factor),
            (MEMORY_WMARK_MIN_ADJ, self.wmark_min_adj),
            (MEMORY_PRIORITY, self.priority),
            (MEMORY_USE_PRIORITY_OOM, self.use_priority_oom),
            (MEMORY_OOM_GROUP, self.oom_group),
        )
        return [
            CgroupUpdate(key, relative, value, NAME)
            for key, value in values
            if value is not None and supported(key)
        ]


def class_of(strategy: ResourceQOSStrategy, qos: QoSClass, kube_qos: KubeQOSClass) -> ResourceQOS | None:
    """The class config of a pod (``GetPodResourceQoSByQoSClass``)."""
    if qos in (QoSClass.LSE, QoSClass.LSR):
        return strategy.lsr_class
    if qos is QoSClass.LS:
        return strategy.ls_class
    if qos is QoSClass.BE:
        return strategy.be_class
    if qos is QoSClass.SYSTEM:
        return strategy.system_class
    return kube_qos_class(strategy, kube_qos)


def kube_qos_class(strategy: ResourceQOSStrategy, kube_qos: KubeQOSClass) -> ResourceQOS | None:
    return {
        KubeQOSClass.GUARANTEED: strategy.lsr_class,
        KubeQOSClass.BURSTABLE: strategy.ls_class,
        KubeQOSClass.BEST_EFFORT: strategy.be_class,
    }[kube_qos]


def _memory_fields(config: Any) -> MemoryQOS:
    return MemoryQOS(**{f.name: getattr(config, f.name) for f in dataclasses.fields(MemoryQOS)})


def pod_memory_qos(strategy: ResourceQOSStrategy, pod: PodMeta, plan: Plan) -> MemoryQOS:
    """The class's memory QoS changed by the pod's ``koordinator.sh/memoryQOS``."""
    config = class_of(strategy, pod.qos, pod.kube_qos)
    base = _memory_fields(config.memory_qos) if config is not None and config.memory_qos else MemoryQOS()
    try:
        override = get_pod_memory_qos(pod.annotations)
    except AnnotationError as err:
        plan.note(f"{pod.key}: memoryQOS annotation ignored ({err})")
        override = None
    policy = override.policy if override is not None else ""
    if policy == "none":
        return none_memory_qos()
    if policy == "auto":
        default = class_of(default_resource_qos_strategy(), pod.qos, pod.kube_qos)
        base = (
            _memory_fields(default.memory_qos) if default is not None and default.memory_qos else MemoryQOS()
        )
    if override is None:
        return base
    return merge(base, _memory_fields(override))


def pod_memory_request(pod: PodMeta) -> int:
    if get_pod_qos_class_raw(pod.pod) is QoSClass.BE:
        return podspec.sum_requests(pod.pod, BATCH_MEMORY)
    return podspec.pod_request(pod.pod, "memory")


def memory_high(qos: MemoryQOS, request: int, limit: int, node_allocatable: int) -> int | None:
    percent = qos.throttling_percent
    if percent is None:
        return None
    if percent == 0:
        return MAX_INT64
    ceiling = limit if limit > 0 else node_allocatable
    return (request + (ceiling - request) * percent // 100) // PAGE_SIZE * PAGE_SIZE


class CgroupReconcile(GatedStrategy):
    NAME = NAME
    GATE = GATE

    def plan(self, snapshot: Snapshot) -> Plan:
        plan = Plan(NAME)
        strategy = snapshot.node_slo.resource_qos_strategy
        if strategy is None:
            return plan.note("no resourceQOSStrategy in the NodeSLO")
        allocatable = snapshot.node.allocatable.get("memory")
        if allocatable is None:
            return plan.note("node allocatable memory unknown")
        supported = snapshot.cgroups.supported
        qos_sums = {q: Summary() for q in KUBE_QOS_ORDER}
        pod_level: list[CgroupUpdate] = []
        container_level: list[CgroupUpdate] = []
        for pod in snapshot.pods:
            if not podspec.is_active(pod):
                continue
            qos = pod_memory_qos(strategy, pod, plan)
            request = pod_memory_request(pod)
            summary = Summary()
            summary.set_static(qos)
            summary.set_protection(qos, request)
            pod_level += summary.updates(pod.cgroup_dir, supported)
            self._add_to_qos(qos_sums[pod.kube_qos], qos, request)
            container_level += self._containers(pod, qos, allocatable, supported)
        qos_level: list[CgroupUpdate] = []
        self._complete(qos_sums)
        for kube_qos in KUBE_QOS_ORDER:
            summary = qos_sums[kube_qos]
            config = kube_qos_class(strategy, kube_qos)
            if config is not None and config.memory_qos is not None:
                summary.use_priority_oom = config.memory_qos.priority_enable
                summary.priority = config.memory_qos.priority
                summary.oom_group = config.memory_qos.oom_kill_group
            qos_level += summary.updates(snapshot.host.layout.qos_dir(kube_qos), supported)
        if not (qos_level or pod_level or container_level):
            return plan.note("none of the memory QoS knobs is provided by this kernel")
        plan.leveled.append([qos_level, pod_level, container_level])
        return plan

    @staticmethod
    def _add_to_qos(summary: Summary, qos: MemoryQOS, request: int) -> None:
        if qos.min_limit_percent is not None:
            summary.memory_min = (summary.memory_min or 0) + request * qos.min_limit_percent // 100
        if qos.low_limit_percent is not None:
            summary.memory_low = (summary.memory_low or 0) + request * qos.low_limit_percent // 100

    @staticmethod
    def _complete(sums: dict[KubeQOSClass, Summary]) -> None:
        """The Guaranteed directory is the parent of the others: it protects all pods."""
        mins = [s.memory_min for s in sums.values() if s.memory_min is not None]
        lows = [s.memory_low for s in sums.values() if s.memory_low is not None]
        if mins:
            sums[KubeQOSClass.GUARANTEED].memory_min = sum(mins)
        if lows:
            sums[KubeQOSClass.GUARANTEED].memory_low = sum(lows)

    @staticmethod
    def _containers(
        pod: PodMeta, qos: MemoryQOS, node_allocatable: int, supported: Callable[[str], bool]
    ) -> list[CgroupUpdate]:
        be = get_pod_qos_class_raw(pod.pod) is QoSClass.BE
        name = BATCH_MEMORY if be else "memory"
        updates: list[CgroupUpdate] = []
        for container in pod.containers:
            if container.init:
                continue
            spec = podspec.container_spec(pod.pod, container.name)
            if spec is None:
                continue
            request = max(podspec.request(spec, name) or 0, 0)
            limit = podspec.limit(spec, name)
            summary = Summary()
            summary.set_static(qos)
            summary.set_protection(qos, request)
            summary.memory_high = memory_high(
                qos, request, limit if limit is not None else -1, node_allocatable
            )
            if (
                summary.memory_high is not None
                and summary.memory_min is not None
                and 0 < summary.memory_high < summary.memory_min
            ):
                summary.memory_high = summary.memory_min
            updates += summary.updates(container.cgroup_dir, supported)
        return updates
