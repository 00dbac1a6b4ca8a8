"""CPUBurst: let LS pods run past their CPU limit for short bursts (gate CPUBurst).

Pods whose ``koordinator.sh/qosClass`` label is not LSE, LSR or BE (LS and unlabelled pods)
and that are Pending or Running take the NodeSLO ``cpuBurstStrategy`` overlaid with their
``koordinator.sh/cpuBurst`` annotation (an annotation that does not parse is ignored).

* **cpuBurstOnly / auto** — ``cpu.cfs_burst_us`` (v2 ``cpu.max.burst``) of each started
  container is ``limit cores * cpuBurstPercent / 100 * 100000`` µs, capped at the container's
  quota (the kernel refuses a burst above the quota), and the pod's is the sum of its
  containers' (capped at the pod's quota). Any other policy writes 0. Planned only where the
  kernel has the file.
* **cfsQuotaBurstOnly / auto** — the CFS quota of each running container with a CPU limit
  scales between ``base = limit milli * 100`` µs (at least 1000) and
  ``base * cfsQuotaBurstPercent / 100``. The node state comes from the average node CPU over
  ``min(5 * interval, 10 s)``: the share pool is ``#CPUs - Σ CPU requests of LSE/LSR pods``
  and its use ``node used - Σ average use of LSE/LSR/BE pods``; a ratio at or above
  ``sharePoolThresholdPercent`` is *Overload*, at or above 90 % of it *Cooling*, below
  *Idle*, and *Unknown* without data. Per container: a policy without quota burst resets to
  base; a limiter that says no scales down (x0.8); a throttled ratio (last value, two collect
  intervals) above 0 scales up (x1.2); otherwise it remains. A container whose quota is
  unlimited is left so (upstream would impose the base quota again). Overload turns
  up/remain into down; Cooling and Unknown turn up into remain. The pod quota moves by the containers'
  deltas (when it is limited); each pod is one leveled batch, so a rise reaches the pod
  before its containers and a fall the containers before the pod, and a burst is written
  before its quota (lowered after a fall, already raised by a rise).
* **Limiter** (``cfsQuotaBurstPeriodSeconds >= 0``) — a token bucket per container of
  ``period * (cfsQuotaBurstPercent - 100)`` tokens, filled to a random fraction in [0, 50 %)
  when made; each round, at usage (last value, percent of the limit, the limit when unknown)
  of 100 % or more it loses ``(usage - 100) * whole seconds since the last round``, under 60 %
  it gains ``(100 - usage) * seconds``; the fraction of a second left over counts in a
  later round (upstream bug fixed: upstream drops it, so a round 0.99 s after the last
  counts nothing and rounds less than a second apart never consume); it allows while it
  holds tokens, is remade when its capacity changes and dropped after ``2 * period`` idle.
  This is the one state a strategy keeps between rounds; its clock is the snapshot's time
  and its random source is injected.

Gauges: ``container_scaled_cfs_burst_us`` for every burst planned and
``container_scaled_cfs_quota_us`` for every quota changed (a container keeps its last
value while it remains); the series of containers no longer on the node are removed.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.podqos import get_pod_cpu_burst
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.sloconfig.merge import merge
from koordinator.api.types.slo import CPUBurstConfig, CPUBurstStrategy
from koordlet.executor import CgroupUpdate, Update
from koordlet.metriccache.kinds import (
    CONTAINER_CPU_THROTTLED,
    CONTAINER_CPU_USAGE,
    NODE_CPU_USAGE,
    POD_CPU_USAGE,
)
from koordlet.qosmanager.framework import GatedStrategy, Plan, Snapshot
from koordlet.qosmanager.strategies import podspec
from koordlet.statesinformer.podmeta import ContainerMeta, PodMeta
from koordlet.system.cgroup.registry import CPU_CFS_BURST, CPU_CFS_QUOTA

NAME = "CPUBurst"
GATE = "CPUBurst"
CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 1000
SCALE_UP = 1.2
SCALE_DOWN = 0.8
COOLING_RATIO = 0.9
LIMITER_CONSUME_PERCENT = 100
LIMITER_SAVE_PERCENT = 60
NODE_WINDOW_MAX = 10.0

BURST_POLICIES = ("cpuBurstOnly", "auto")
QUOTA_BURST_POLICIES = ("cfsQuotaBurstOnly", "auto")


class NodeState(enum.StrEnum):
    OVERLOAD = "Overload"
    COOLING = "Cooling"
    IDLE = "Idle"
    UNKNOWN = "Unknown"


class Operation(enum.StrEnum):
    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    REMAIN = "Remain"
    RESET = "Reset"


def adjust_by_node(state: NodeState, operation: Operation) -> Operation:
    """Overload turns up/remain into down; Cooling and Unknown turn up into remain."""
    if state is NodeState.OVERLOAD and operation in (Operation.SCALE_UP, Operation.REMAIN):
        return Operation.SCALE_DOWN
    if state in (NodeState.COOLING, NodeState.UNKNOWN) and operation is Operation.SCALE_UP:
        return Operation.REMAIN
    return operation


def base_quota(limit_milli: int) -> int:
    """``MilliCPUToQuota``: 0 without a limit, else ``milli * 100`` µs, at least 1000."""
    if limit_milli <= 0:
        return 0
    return max(limit_milli * CFS_PERIOD_US // 1000, MIN_QUOTA_US)


@dataclass
class BurstLimiter:
    """Token bucket bounding how long a container may keep running above its limit."""

    capacity: int
    tokens: int
    last: float
    expire_after: float

    @classmethod
    def new(cls, period_seconds: int, burst_percent: int, now: float, fill: float) -> BurstLimiter:
        """A bucket of ``period * (percent - 100)`` tokens holding ``fill`` (in [0, 0.5)) of them."""
        capacity = period_seconds * (burst_percent - 100)
        return cls(capacity, int(capacity * fill), now, 2.0 * period_seconds)

    def allow(self, now: float, usage_percent: int) -> bool:
        # whole seconds, as upstream; the bucket's clock advances by those only, so the
        # fraction counts in a later round (upstream drops it: a round 0.99 s after the
        # last counts nothing, and rounds closer than a second never consume)
        elapsed = max(int(now - self.last), 0)
        if usage_percent >= LIMITER_CONSUME_PERCENT:
            self.tokens -= (usage_percent - 100) * elapsed
        elif usage_percent < LIMITER_SAVE_PERCENT:
            self.tokens += (100 - usage_percent) * elapsed
        self.tokens = max(min(self.tokens, self.capacity), -self.capacity)
        self.last = self.last + elapsed if now >= self.last else now
        return self.tokens > 0

    def expired(self, now: float) -> bool:
        return now - self.last > self.expire_after


def node_state(snapshot: Snapshot, interval: float, threshold_percent: int, plan: Plan) -> NodeState:
    """The share pool's state from the average node CPU over ``min(5 * interval, 10 s)``."""
    window = min(5 * interval, NODE_WINDOW_MAX)
    start = snapshot.now - window
    used = snapshot.metrics.avg(NODE_CPU_USAGE, start, snapshot.now)
    info = snapshot.host.cpu_info
    if used is None:
        plan.note(f"node state unknown: no node CPU usage in the last {window:g}s")
        return NodeState.UNKNOWN
    if info is None:
        plan.note("node state unknown: CPU topology not collected yet")
        return NodeState.UNKNOWN
    total = float(info.topology.number_cpus)
    usage = used
    for pod in snapshot.pods:
        qos = get_pod_qos_class_raw(pod.pod)
        if qos in (QoSClass.LSE, QoSClass.LSR):
            total -= podspec.pod_request(pod.pod, "cpu") / 1000
        if qos in (QoSClass.LSE, QoSClass.LSR, QoSClass.BE):
            pod_used = snapshot.metrics.avg(POD_CPU_USAGE, start, snapshot.now, pod_uid=pod.uid)
            if pod_used is not None:
                usage -= pod_used
    ratio = usage / total if total > 0 else 1.0
    threshold = threshold_percent / 100
    if ratio >= threshold:
        return NodeState.OVERLOAD
    if ratio >= threshold * COOLING_RATIO:
        return NodeState.COOLING
    return NodeState.IDLE


def pod_config(pod: PodMeta, node: CPUBurstStrategy, plan: Plan) -> CPUBurstConfig:
    """The node's burst config overlaid with the pod's ``koordinator.sh/cpuBurst``."""
    try:
        override = get_pod_cpu_burst(pod.annotations)
    except AnnotationError as err:
        plan.note(f"{pod.key}: cpuBurst annotation ignored ({err})")
        override = None
    # without an override the node's config as it is (only read here): no copy per pod a round
    return node if override is None else merge(node, override)


def static_burst(limit_milli: int, config: CPUBurstConfig) -> int:
    """``limit cores * cpuBurstPercent / 100 * 100000`` µs; 0 without a limit or burst policy."""
    if config.policy not in BURST_POLICIES or limit_milli <= 0:
        return 0
    percent = config.cpu_burst_percent if config.cpu_burst_percent is not None else 1000
    return int(limit_milli / 1000 * percent / 100 * CFS_PERIOD_US)


def _cap(burst: int, quota: int | None) -> int:
    return quota if quota is not None and 0 < quota < burst else burst


@dataclass
class _Container:
    meta: ContainerMeta
    spec: Mapping[str, Any]
    limit_milli: int
    quota: int | None
    target: int | None = None

    @property
    def final_quota(self) -> int | None:
        return self.target if self.target is not None else self.quota


class CPUBurst(GatedStrategy):
    NAME = NAME
    GATE = GATE

    def __init__(
        self,
        interval: float = 1.0,
        *,
        random_fill: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(interval)
        #: the initial fill of a new limiter, in [0, 0.5) (upstream: rand.Float64() / 2)
        self.random_fill = random_fill or (lambda: random.random() / 2)
        self.limiters: dict[str, BurstLimiter] = {}

    # --- one container ------------------------------------------------------------------------

    def _limiter_allows(self, snapshot: Snapshot, config: CPUBurstConfig, container: _Container) -> bool:
        period = config.cfs_quota_burst_period_seconds
        if period is None or period < 0:
            return True
        percent = config.cfs_quota_burst_percent
        if percent is None or percent < 100:
            return False
        limit_cores = container.limit_milli / 1000
        window = 2 * snapshot.collect_interval
        used = snapshot.metrics.last(
            CONTAINER_CPU_USAGE, snapshot.now - window, snapshot.now, container_id=container.meta.container_id
        )
        usage = used if used is not None else limit_cores
        key = container.meta.container_id
        limiter = self.limiters.get(key)
        capacity = period * (percent - 100)
        if limiter is None or limiter.capacity != capacity:
            limiter = BurstLimiter.new(period, percent, snapshot.now, self.random_fill())
            self.limiters[key] = limiter
        return limiter.allow(snapshot.now, int(usage / limit_cores * 100))

    def operation(self, snapshot: Snapshot, config: CPUBurstConfig, container: _Container) -> Operation:
        allowed = self._limiter_allows(snapshot, config, container)
        if config.policy not in QUOTA_BURST_POLICIES:
            return Operation.RESET
        if not allowed:
            return Operation.SCALE_DOWN
        window = 2 * snapshot.collect_interval
        throttled = snapshot.metrics.last(
            CONTAINER_CPU_THROTTLED,
            snapshot.now - window,
            snapshot.now,
            container_id=container.meta.container_id,
        )
        if throttled is not None and throttled > 0:
            return Operation.SCALE_UP
        return Operation.REMAIN

    # --- the plan -------------------------------------------------------------------------------

    def plan(self, snapshot: Snapshot) -> Plan:
        plan = Plan(NAME)
        alive: set[tuple[str, ...]] = {
            (pod.namespace, pod.name, c.container_id, c.name) for pod in snapshot.pods for c in pod.containers
        }
        plan.retain = {"container_scaled_cfs_burst_us": alive, "container_scaled_cfs_quota_us": alive}
        strategy = snapshot.node_slo.cpu_burst_strategy
        if strategy is None:
            return plan.note("no cpuBurstStrategy in the NodeSLO")
        burst_supported = snapshot.cgroups.supported(CPU_CFS_BURST)
        if not burst_supported:
            plan.note("this kernel has no cfs burst (cpu.cfs_burst_us / cpu.max.burst): bursts not planned")
        threshold = strategy.share_pool_threshold_percent
        state = node_state(snapshot, self.interval, threshold if threshold is not None else 50, plan)
        burstable = 0
        for pod in snapshot.pods:
            if get_pod_qos_class_raw(pod.pod) in (QoSClass.LSE, QoSClass.LSR, QoSClass.BE):
                continue
            if not podspec.is_active(pod):
                continue
            burstable += 1
            self._plan_pod(snapshot, plan, pod, pod_config(pod, strategy, plan), state, burst_supported)
        if not burstable:
            plan.note("no burstable (LS or unlabelled, pending or running) pods")
        for key in [k for k, limiter in self.limiters.items() if limiter.expired(snapshot.now)]:
            del self.limiters[key]
        return plan

    def _plan_pod(
        self,
        snapshot: Snapshot,
        plan: Plan,
        pod: PodMeta,
        config: CPUBurstConfig,
        state: NodeState,
        burst_supported: bool,
    ) -> None:
        containers: list[_Container] = []
        for meta in pod.containers:
            if meta.init:
                continue
            spec = podspec.container_spec(pod.pod, meta.name)
            if spec is None:
                continue
            limit = podspec.limit(spec, "cpu") or 0
            # without a CPU limit there is no base quota to scale and no static burst, so
            # the quota would never be looked at: not read (a file read per container a round)
            quota = snapshot.cgroups.read(CPU_CFS_QUOTA, meta.cgroup_dir) if limit > 0 else None
            containers.append(_Container(meta, spec, limit, quota if isinstance(quota, int) else None))
        delta = 0
        for container in containers:
            delta += self._scale(snapshot, plan, pod, config, state, container)

        container_level: list[CgroupUpdate] = []
        pod_level: list[CgroupUpdate] = []
        pod_burst = 0
        for container in containers:
            if burst_supported:
                burst = _cap(static_burst(container.limit_milli, config), container.final_quota)
                pod_burst += burst
                container_level.append(CgroupUpdate(CPU_CFS_BURST, container.meta.cgroup_dir, burst, NAME))
                plan.gauges.append(("container_scaled_cfs_burst_us", self._labels(pod, container), burst))
            if container.target is not None:
                container_level.append(
                    CgroupUpdate(CPU_CFS_QUOTA, container.meta.cgroup_dir, container.target, NAME)
                )
        pod_quota: int | None = None
        if delta or pod_burst:  # else the pod's quota changes nothing (no target, a burst of 0)
            pod_quota_now = snapshot.cgroups.read(CPU_CFS_QUOTA, pod.cgroup_dir)
            pod_quota = pod_quota_now if isinstance(pod_quota_now, int) else None
        pod_target = pod_quota + delta if pod_quota is not None and pod_quota > 0 and delta else None
        if burst_supported:
            final_pod_quota = pod_target if pod_target is not None else pod_quota
            pod_burst = _cap(pod_burst, final_pod_quota)
            pod_level.append(CgroupUpdate(CPU_CFS_BURST, pod.cgroup_dir, pod_burst, NAME))
        if pod_target is not None:
            pod_level.append(CgroupUpdate(CPU_CFS_QUOTA, pod.cgroup_dir, pod_target, NAME))
        if any(c.target is not None for c in containers):
            plan.leveled.append([pod_level, container_level])
        else:
            updates: list[Update] = [*container_level, *pod_level]
            plan.updates += updates

    def _scale(
        self,
        snapshot: Snapshot,
        plan: Plan,
        pod: PodMeta,
        config: CPUBurstConfig,
        state: NodeState,
        container: _Container,
    ) -> int:
        """Set the container's target quota; returns the change (0 when it stays)."""
        base = base_quota(container.limit_milli)
        if base <= 0 or container.quota is None or not podspec.is_running(pod, container.meta):
            return 0
        if container.quota <= 0:
            # unlimited on purpose (a hook unset it): upstream would impose the base again
            plan.note(f"{pod.key}/{container.meta.name}: unlimited CFS quota left alone")
            return 0
        percent = config.cfs_quota_burst_percent
        ceiling = int(base * percent / 100) if percent is not None and percent > 100 else base
        operation = adjust_by_node(state, self.operation(snapshot, config, container))
        current = container.quota
        target = {
            Operation.SCALE_UP: int(current * SCALE_UP),
            Operation.SCALE_DOWN: int(current * SCALE_DOWN),
            Operation.RESET: base,
            Operation.REMAIN: current,
        }[operation]
        target = max(base, min(target, ceiling))
        if target == current:
            return 0
        container.target = target
        plan.gauges.append(("container_scaled_cfs_quota_us", self._labels(pod, container), target))
        plan.note(f"{pod.key}/{container.meta.name}: {operation} (node {state}) quota {current} -> {target}")
        return target - current

    @staticmethod
    def _labels(pod: PodMeta, container: _Container) -> tuple[str, str, str, str]:
        return (pod.namespace, pod.name, container.meta.container_id, container.meta.name)
