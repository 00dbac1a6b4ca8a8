"""``koordlet plan``: what the QoS strategies would do, for a described situation.

A scenario (YAML or JSON) describes the node, its NodeSLO, its pods and their recent
usage; the host tree (the cgroup, proc and sys roots) gives the current cgroup values and
CPU topology. Every selected strategy plans once against that snapshot and the plan is
printed: the files that would be written with their values (rendered for this host's
cgroup version, leveled batches in the order the executor would finish them) and the pods
that would be evicted, with the reason. Nothing is written and nothing is evicted.

The scenario's format (every key, its type and default) is in ``docs/plan-scenario.md``
and checked by :mod:`koordlet.qosmanager.scenario_format`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from koordlet.executor import Host, Update
from koordlet.metriccache import MetricCache, Sample, kinds
from koordlet.qosmanager.evictor import DEFAULT_BURST, DEFAULT_QPS
from koordlet.qosmanager.framework import (
    CgroupView,
    HostFacts,
    MetricsView,
    NodeView,
    Plan,
    Snapshot,
    Strategy,
)
from koordlet.qosmanager.scenario_format import Scenario, ScenarioError
from koordlet.statesinformer.podmeta import pod_meta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.errors import HostError
from koordlet.system.paths import HostPaths
from koordlet.system.topology import NodeCPUInfo, read_cpu_basic_info, read_cpu_topology

__all__ = ["Scenario", "ScenarioError", "as_table", "build_snapshot", "describe", "plan_scenario"]


def build_snapshot(scenario: Scenario, paths: HostPaths) -> Snapshot:
    cgroups = CgroupFS.detect(paths)
    metas = [m for m in (pod_meta(p, cgroups.layout) for p in scenario.pods) if m is not None]
    by_key = {m.key: m for m in metas}
    now = scenario.now
    usage = scenario.usage
    samples: list[Sample] = []
    if usage.node_cpu is not None:
        samples.append(kinds.NODE_CPU_USAGE.sample(usage.node_cpu, now))
    if usage.node_memory is not None:
        samples.append(kinds.NODE_MEMORY_USAGE.sample(usage.node_memory, now))
    for key, values in usage.pods.items():
        uid = by_key[key].uid
        if "cpu" in values:
            samples.append(kinds.POD_CPU_USAGE.sample(values["cpu"], now, pod_uid=uid))
        if "memory" in values:
            samples.append(kinds.POD_MEMORY_USAGE.sample(values["memory"], now, pod_uid=uid))
    for name, values in usage.host_applications.items():
        if "cpu" in values:
            samples.append(kinds.HOST_APPLICATION_CPU_USAGE.sample(values["cpu"], now, host_app_name=name))
    cache = MetricCache()
    cache.append(samples)
    try:
        topology = read_cpu_topology(paths)
        cpu_info: NodeCPUInfo | None = NodeCPUInfo(topology, read_cpu_basic_info(paths, topology), "")
    except (OSError, HostError):
        cpu_info = None
    host = HostFacts(cgroups.version, cgroups.layout, cpu_info, scenario.kubelet_cpu_policy)
    return Snapshot(
        now=now,
        node=NodeView.decode(scenario.node),
        node_slo=scenario.node_slo,
        pods=metas,
        metrics=MetricsView(cache),
        host=host,
        cgroups=CgroupView(cgroups),
        gates=scenario.gates,
        collect_interval=scenario.collect_interval,
    )


def _render(update: Update, host: Host) -> dict[str, str]:
    try:
        file, value = update.preview(host)
    except HostError as err:
        return {"write": update.describe(), "error": str(err)}
    return {"file": file, "value": value}


def describe(plan: Plan, host: Host) -> dict[str, Any]:
    """A plan as data: writes in execution order, evictions, notes. Evictions are those the
    evictor would ask for (it never evicts LSE, LSR or LS pods, and strategies pass those
    over); more than it asks for at once are noted."""
    writes = [_render(u, host) for u in plan.updates]
    for batch in plan.leveled:
        for level in reversed(batch):  # what each file ends with, children first
            writes += [_render(u, host) for u in level]
    notes = list(plan.notes)
    later = [e.pod.key for e in plan.evictions[DEFAULT_BURST:]]
    if later:
        notes.append(
            f"the evictor asks for at most {DEFAULT_BURST} evictions at once, then {DEFAULT_QPS:g} a second: "
            f"{', '.join(later)} would wait"
        )
    return {
        "writes": writes,
        "evictions": [
            {"pod": e.pod.key, "feature": e.feature, "reason": e.reason, "message": e.message}
            for e in plan.evictions
        ],
        "notes": notes,
    }


def plan_scenario(
    scenario: Scenario, paths: HostPaths, strategies: Sequence[Strategy], only: Sequence[str] = ()
) -> dict[str, Any]:
    snapshot = build_snapshot(scenario, paths)
    host = Host.of(snapshot.cgroups.cgroups)
    unknown = set(only) - {s.NAME for s in strategies}
    if unknown:
        raise ScenarioError(f"unknown strategies: {', '.join(sorted(unknown))}")
    out: dict[str, Any] = {}
    for strategy in strategies:
        if only and strategy.NAME not in only:
            continue
        enabled, why = strategy.enabled(snapshot)
        if not enabled:
            out[strategy.NAME] = {"writes": [], "evictions": [], "notes": [f"disabled: {why}"]}
            continue
        out[strategy.NAME] = describe(strategy.plan(snapshot), host)
    return out


def as_table(result: Mapping[str, Any]) -> str:
    lines: list[str] = []
    for name, plan in result.items():
        lines.append(f"{name}:")
        for write in plan["writes"]:
            if "error" in write:
                lines.append(f"  write  {write['write']}  (not writable: {write['error']})")
            else:
                lines.append(f"  write  {write['file']} = {write['value']}")
        for eviction in plan["evictions"]:
            lines.append(f"  evict  {eviction['pod']}  [{eviction['reason']}] {eviction['message']}")
        for note in plan["notes"]:
            lines.append(f"  note   {note}")
        if not (plan["writes"] or plan["evictions"] or plan["notes"]):
            lines.append("  nothing to do")
    return "\n".join(lines)
