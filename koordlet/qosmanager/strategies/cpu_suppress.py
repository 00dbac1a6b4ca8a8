"""CPUSuppress: keep best-effort pods off the CPU that latency-sensitive work needs.

Upstream's formula, each term in whole milli-cores::

    suppress = capacity * cpuSuppressThresholdPercent / 100
               - CPU used by pods that are not BE
               - CPU used by the NodeSLO's host applications that are not BE
               - max(node used - all pods - those host applications, node reserved)

raised to ``capacity * cpuSuppressMinPercent / 100`` when that is set. The BE tier then
gets either a cpuset (policy ``cpuset``, the default) of ``max(ceil(suppress / 1000), 2)``
CPUs — at most the current BE cpuset plus 10 % of the node's CPUs per round (from an empty
one too, as upstream), split between the CPUs pods labelled LSR are pinned to and the
others in proportion, picked as hyper-thread pairs spread over NUMA nodes and sockets — or
a CFS quota (policy ``cfsQuota``) of ``suppress * 100`` µs per 100 ms (at least 2000),
changed only by more than 1 % of the node's whole cores, and raised by at most 10 % of the
node per round. The other mechanism is reset. With the NodeSLO switch off
(``resourceUsedThresholdWithBE.enable``), both are reset: quota unlimited, full cpuset.
With the BECPUManager gate (checked first, as upstream) both are reset too, but the
containers of pods bound by their resource status (a cpuset or NUMA nodes) keep theirs.

As upstream, nothing at all is planned without a NodeSLO switch to read, without pods, or
(when suppressing) without node usage or the CPU topology; a BE cpuset or quota that cannot
be read is left for the next round. Unlike upstream, an unset BE quota (-1) is set however
small the target: upstream's deadband would keep BE pods unlimited while the target is
within 1 % of the node of -1.

The CPUs BE pods may ever use are the node's processors less the reserved CPUs
(``node.koordinator.sh/reservation`` ``reservedCPUs``), the exclusive system-QoS CPUs
(``node.koordinator.sh/system-qos-resource``) and the CPUs LSE pods are pinned to
(``scheduling.koordinator.sh/resource-status``); the full cpuset a reset writes is those
CPUs, as upstream's. As upstream, a pool (LSR or LS CPUs) with fewer CPUs than its share
gives none, and an empty choice writes no cpuset (a note says why). Upstream reads the two
node annotations from the NodeResourceTopology (the NRT reporter copies them there); here
they are read from the Node.

A cpuset shrinks in a leveled update (the union first, parents to children, then the new
set, children to parents), which is the only order the kernel accepts; with the kubelet's
static CPU policy, pod-level cgroups keep the full set and only containers are narrowed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from koordinator.api.cpuset import cpus_or_empty, format_cpuset
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.node import get_node_reservation, node_reserved_resources
from koordinator.api.extension.numa import get_resource_status
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.extension.topology import get_system_qos_resource
from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.quantity import Quantity
from koordinator.api.sloconfig.nodeslo import feature_disabled_by_node_slo
from koordlet.executor import CgroupUpdate
from koordlet.metriccache.kinds import NODE_CPU_USAGE
from koordlet.qosmanager.framework import GatedStrategy, Plan, Snapshot
from koordlet.system.cgroup.registry import CPU_CFS_QUOTA, CPUSET_CPUS, Subsystem
from koordlet.system.topology import Processor

NAME = "CPUSuppress"
GATE = "BECPUSuppress"
CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 2000
MIN_CPUS = 2
GROWTH_RATIO = 0.1
QUOTA_DEADBAND_RATIO = 0.01
QUOTA_GROWTH_RATIO = 0.1
DEFAULT_THRESHOLD_PERCENT = 65


@dataclass(frozen=True)
class PinnedCPUs:
    """The CPUs BE pods never get (reserved, exclusive system QoS), and those LSR and LSE
    pods (by their ``koordinator.sh/qosClass`` label) are pinned to."""

    excluded: frozenset[int]
    lsr: frozenset[int]
    lse: frozenset[int]


def _ignored(plan: Plan, err: Exception) -> None:
    """Note, once a plan, that a malformed node annotation was ignored (the error names it)."""
    text = f"node annotation ignored: {err}"
    if text not in plan.notes:
        plan.note(text)


def pinned_cpus(snapshot: Snapshot, plan: Plan) -> PinnedCPUs:
    """Read from the Node's annotations and the pods' resource status (malformed ones are
    ignored, with a note for the Node's). The two node annotations are read independently,
    as upstream: a malformed reservation still leaves the exclusive system-QoS CPUs out,
    and the other way round."""
    annotations = snapshot.node.annotations
    excluded: set[int] = set()
    try:
        reservation = get_node_reservation(annotations)
    except (AnnotationError, ValueError) as err:
        _ignored(plan, err)
    else:
        if reservation is not None:
            excluded |= cpus_or_empty(reservation.reserved_cpus)
    try:
        system = get_system_qos_resource(annotations)
    except (AnnotationError, ValueError) as err:
        _ignored(plan, err)
    else:
        if system is not None and system.cpuset_exclusive is not False:
            excluded |= cpus_or_empty(system.cpuset)
    lsr: set[int] = set()
    lse: set[int] = set()
    for pod in snapshot.pods:
        try:
            pinned = cpus_or_empty(get_resource_status(pod.annotations).cpuset)
        except (AnnotationError, ValueError):
            continue
        # the QoS label only, as upstream: a Guaranteed pod without it is not LSR here
        qos = get_pod_qos_class_raw(pod.pod)
        if qos is QoSClass.LSR:
            lsr |= pinned
        elif qos is QoSClass.LSE:
            lse |= pinned
    return PinnedCPUs(frozenset(excluded), frozenset(lsr), frozenset(lse))


def select_cpus(count: int, processors: Sequence[Processor]) -> list[int]:
    """``count`` CPUs for the BE tier, by upstream's ``calculateBESuppressCPUSetPolicy``.

    The processors are bucketed by (NUMA node, socket), each bucket ordered by (core, cpu),
    the buckets largest first (then by their first CPU). Hyper-thread pairs (two adjacent
    entries of one core) are taken one per bucket in turn while more than one CPU is
    needed, then single CPUs the same way, starting at the bucket after the last one that
    gave a pair (where the pair phase stopped, upstream's ``startIndex := i``), so that the
    CPUs stay spread over the nodes; each phase also stops after a whole round that took
    nothing. None at all when ``processors`` has fewer than ``count`` CPUs."""
    if count > len(processors):
        return []
    buckets: dict[tuple[int, int], list[Processor]] = {}
    for p in processors:
        buckets.setdefault((p.node, p.socket), []).append(p)
    ordered = [sorted(b, key=lambda p: (p.core, p.cpu)) for b in buckets.values()]
    ordered.sort(key=lambda b: (-len(b), b[0].cpu))
    used: set[int] = set()

    def pair(bucket: list[Processor]) -> list[int]:
        for prev, cur in itertools.pairwise(bucket):
            if prev.core == cur.core and prev.cpu not in used and cur.cpu not in used:
                return [prev.cpu, cur.cpu]
        return []

    def single(bucket: list[Processor]) -> list[int]:
        return next(([p.cpu] for p in bucket if p.cpu not in used), [])

    need = count
    chosen: list[int] = []
    index = 0  # the next bucket to visit; the single phase goes on from where pairs stopped
    for take, size in ((pair, 2), (single, 1)):
        start, need_at_start = index, -1
        while need >= size:
            if index == start:
                if need == need_at_start:  # a whole round took nothing
                    break
                need_at_start = need
            picked = take(ordered[index])
            chosen += picked
            used.update(picked)
            need -= len(picked)
            index = (index + 1) % len(ordered)
    return chosen


class CPUSuppress(GatedStrategy):
    NAME = NAME
    GATE = GATE

    # --- inputs ------------------------------------------------------------------------------

    def _be_dir(self, snapshot: Snapshot) -> str:
        return snapshot.host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)

    def _full_cpuset(self, snapshot: Snapshot, pinned: PinnedCPUs) -> str:
        """Every CPU BE pods may use: the node's processors, less the reserved, exclusive
        system-QoS and LSE-pinned ones; empty when the CPU topology is not known yet."""
        if snapshot.host.cpu_info is None:
            return ""
        cpus = set(snapshot.host.cpu_info.topology.cpus())
        return format_cpuset(cpus - pinned.excluded - pinned.lse)

    def suppress_milli(self, snapshot: Snapshot, plan: Plan) -> int | None:
        """The CPU (milli-cores) the BE tier may use, or None when inputs are missing."""
        node = snapshot.node
        capacity = node.capacity.get("cpu", 0)
        if capacity <= 0:
            plan.note("node capacity unknown")
            return None
        reserved = max(capacity - node.allocatable.get("cpu", 0), 0)
        try:
            reserved = max(
                reserved, node_reserved_resources(node.annotations).get("cpu", Quantity()).milli_value()
            )
        except (AnnotationError, ValueError) as err:
            _ignored(plan, err)
        window = 2 * snapshot.collect_interval
        node_used = snapshot.metrics.last(NODE_CPU_USAGE, snapshot.now - window, snapshot.now)
        if node_used is None:
            plan.note(f"no node CPU usage in the last {window:g}s")
            return None
        pod_cpu = snapshot.pod_cpu(window)
        app_specs = {a.name: a for a in snapshot.node_slo.host_applications}
        # only the host applications the NodeSLO names, as upstream queries them
        apps = {n: v for n, v in snapshot.host_app_cpu(window).items() if n in app_specs}
        meta = {p.uid: p for p in snapshot.pods}
        non_be = 0.0
        for uid, used in pod_cpu.items():
            pod = meta.get(uid)
            is_be = pod is not None and (
                get_pod_qos_class_raw(pod.pod) is QoSClass.BE or pod.kube_qos is KubeQOSClass.BEST_EFFORT
            )
            if not is_be:
                non_be += used
        app_non_be = 0.0
        for name, used in apps.items():
            spec = app_specs.get(name)
            is_be = (
                spec is not None
                and spec.qos == "BE"
                and spec.cgroup_path is not None
                and spec.cgroup_path.base == "KubepodsBesteffort"
            )
            if not is_be:
                app_non_be += used
        system = max(node_used - sum(pod_cpu.values()) - sum(apps.values()), 0.0)
        system = max(system, reserved / 1000)
        threshold = snapshot.node_slo.resource_used_threshold_with_be
        assert threshold is not None
        percent = threshold.cpu_suppress_threshold_percent
        if percent is None:
            percent = DEFAULT_THRESHOLD_PERCENT
        # each term in whole milli-cores, as upstream's quantities
        suppress = (
            capacity * percent // 100 - int(non_be * 1000) - int(app_non_be * 1000) - int(system * 1000)
        )
        if threshold.cpu_suppress_min_percent is not None:
            suppress = max(suppress, capacity * threshold.cpu_suppress_min_percent // 100)
        plan.gauges.append(("be_suppress_ls_used_cpu_cores", (), non_be))
        return suppress

    # --- plans -------------------------------------------------------------------------------

    def _cpuset_levels(
        self, snapshot: Snapshot, top: str, containers: str, skip: Sequence[str] = ()
    ) -> list[list[CgroupUpdate]]:
        """The BE directory and its pods get ``top`` and the containers ``containers`` (an
        empty value leaves that level out), but the containers of the pod directories in
        ``skip``."""
        be = self._be_dir(snapshot)
        pods = snapshot.cgroups.at_depth(Subsystem.CPUSET, be, 1) if top else []
        below = snapshot.cgroups.at_depth(Subsystem.CPUSET, be, 2) if containers else []
        below = [c for c in below if not any(c.startswith(f"{pod}/") for pod in skip)]
        return [
            [CgroupUpdate(CPUSET_CPUS, be, top, NAME)] if top else [],
            [CgroupUpdate(CPUSET_CPUS, p, top, NAME) for p in pods],
            [CgroupUpdate(CPUSET_CPUS, c, containers, NAME) for c in below],
        ]

    def recover(
        self,
        snapshot: Snapshot,
        plan: Plan,
        *,
        quota: bool = True,
        cpuset: bool = True,
        keep_pinned_containers: bool = False,
    ) -> Plan:
        """Unlimited BE quota and the full cpuset for the BE directory, its pods and their
        containers; with ``keep_pinned_containers`` (BECPUManager), not for the containers of
        pods whose resource status names a cpuset or NUMA nodes (the cpuset hook owns them)."""
        be = self._be_dir(snapshot)
        if quota:
            plan.updates.append(CgroupUpdate(CPU_CFS_QUOTA, be, -1, NAME))
        if cpuset:
            full = self._full_cpuset(snapshot, pinned_cpus(snapshot, plan))
            skip = self._pinned_pod_dirs(snapshot) if keep_pinned_containers else []
            if full:
                plan.leveled.append(self._cpuset_levels(snapshot, full, full, skip))
            elif snapshot.host.cpu_info is None:
                plan.note("CPU topology not collected yet: the BE cpuset is not reset")
            else:
                plan.note("no CPU left for BE pods: their cpuset is not reset")
        return plan

    def _pinned_pod_dirs(self, snapshot: Snapshot) -> list[str]:
        """The cgroup directories of the pods whose resource status names a cpuset or NUMA
        nodes (a malformed status names neither)."""
        dirs: list[str] = []
        for pod in snapshot.pods:
            try:
                status = get_resource_status(pod.annotations)
            except (AnnotationError, ValueError):
                continue
            if status.cpuset or status.numa_node_resources:
                dirs.append(pod.cgroup_dir)
        return dirs

    def plan(self, snapshot: Snapshot) -> Plan:
        plan = Plan(NAME)
        disabled, why = feature_disabled_by_node_slo(snapshot.node_slo, GATE)
        if disabled and why:  # no NodeSLO switch to read: upstream does nothing at all
            return plan.note(f"suppress skipped: {why}")
        if snapshot.gates.enabled("BECPUManager"):  # before the switch, as upstream
            plan.note("BECPUManager keeps BE pods on their share pools")
            return self.recover(snapshot, plan, keep_pinned_containers=True)
        if disabled:
            return self.recover(snapshot, plan.note("suppress disabled by NodeSLO: enable=false"))
        if not snapshot.pods:
            return plan.note("no pods reported by the kubelet yet")
        suppress = self.suppress_milli(snapshot, plan)
        if suppress is None:
            return plan
        if snapshot.host.cpu_info is None:
            return plan.note("CPU topology not collected yet")
        threshold = snapshot.node_slo.resource_used_threshold_with_be
        policy = (threshold.cpu_suppress_policy if threshold else "") or "cpuset"
        if policy == "cfsQuota":
            self._plan_quota(snapshot, plan, suppress)
            return self.recover(snapshot, plan, quota=False)
        self._plan_cpuset(snapshot, plan, suppress)
        return self.recover(snapshot, plan, cpuset=False)

    def _plan_cpuset(self, snapshot: Snapshot, plan: Plan, suppress: int) -> None:
        info = snapshot.host.cpu_info
        assert info is not None
        current = snapshot.cgroups.read(CPUSET_CPUS, self._be_dir(snapshot))
        if current is None:
            plan.note("the BE cpuset cannot be read: not changed this round")
            return
        old = cpus_or_empty(current)
        pinned = pinned_cpus(snapshot, plan)
        processors = list(info.topology.processors)
        candidates = [p for p in processors if p.cpu not in pinned.excluded]
        lsr = [p for p in candidates if p.cpu in pinned.lsr]
        ls = [p for p in candidates if p.cpu not in pinned.lsr and p.cpu not in pinned.lse]
        if not lsr and not ls:
            plan.note("no CPU left for BE pods to share")
            return
        need = max(math.ceil(suppress / 1000), MIN_CPUS)
        # from an empty cpuset too, as upstream (which may then give fewer than MIN_CPUS)
        limit = len(old) + math.ceil(len(processors) * GROWTH_RATIO)
        if need > limit:
            plan.note(f"BE cpuset grows by at most {limit - len(old)} CPUs a round")
            need = limit
        n_lsr = need * len(lsr) // (len(lsr) + len(ls))
        chosen: list[int] = []
        for pool, count, cpus in (("LSR", n_lsr, lsr), ("LS", need - n_lsr, ls)):
            if count <= 0:
                continue
            picked = select_cpus(count, cpus)
            if not picked:
                plan.note(
                    f"the {pool} pool has {len(cpus)} CPUs for BE pods, "
                    f"fewer than the {count} asked: none taken"
                )
            chosen += picked
        static = snapshot.host.kubelet_cpu_policy == "static"
        # with the kubelet's static policy the BE and pod directories keep the full set
        full = self._full_cpuset(snapshot, pinned) if static else ""
        if not chosen:
            plan.note("no CPU chosen for BE pods: their cpuset is left as it is")
            if full:
                plan.leveled.append(self._cpuset_levels(snapshot, full, ""))
            return
        cpuset = format_cpuset(chosen)
        plan.leveled.append(
            self._cpuset_levels(snapshot, full, cpuset)
            if static
            else self._cpuset_levels(snapshot, cpuset, cpuset)
        )
        plan.gauges.append(("be_suppress_cpu_cores", ("cpuset",), float(len(chosen))))

    def _plan_quota(self, snapshot: Snapshot, plan: Plan, suppress: int) -> None:
        # whole cores, rounded up (the capacity quantity's Value(), as upstream)
        capacity_cores = math.ceil(snapshot.node.capacity.get("cpu", 0) / 1000)
        quota = max(suppress * CFS_PERIOD_US // 1000, MIN_QUOTA_US)
        be = self._be_dir(snapshot)
        current = snapshot.cgroups.read(CPU_CFS_QUOTA, be)
        if not isinstance(current, int):
            plan.note("the BE CFS quota cannot be read: not changed this round")
            return
        current_quota = current
        deadband = capacity_cores * CFS_PERIOD_US * QUOTA_DEADBAND_RATIO
        # Upstream applies the deadband to an unset quota (-1) too, so a target under 1 % of
        # the node would leave BE pods unlimited; the deadband only applies to a set quota here.
        if current_quota != -1 and abs(quota - current_quota) < deadband and quota != MIN_QUOTA_US:
            plan.note(f"quota change {quota - current_quota}us is under the 1% deadband")
            return
        if current_quota != -1 and quota > current_quota:
            quota = min(quota, int(current_quota + capacity_cores * CFS_PERIOD_US * QUOTA_GROWTH_RATIO))
        plan.updates.append(CgroupUpdate(CPU_CFS_QUOTA, be, quota, NAME))
        plan.gauges.append(("be_suppress_cpu_cores", ("cfsQuota",), quota / CFS_PERIOD_US))
