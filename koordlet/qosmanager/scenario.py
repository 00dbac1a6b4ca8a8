"""``koordlet plan``: what the QoS strategies would do, for a described situation.

A scenario (YAML or JSON) describes the node, its NodeSLO, its pods and their recent
usage; the host tree (the cgroup, proc and sys roots) gives the current cgroup values and
CPU topology. Every selected strategy plans once against that snapshot and the plan is
printed: the files that would be written with their values (rendered for this host's
cgroup version, leveled batches in the order the executor would finish them) and the pods
that would be evicted, with the reason. Nothing is written and nothing is evicted.

Scenario keys::

    now: 1700000000            # optional, seconds
    collectInterval: 1         # optional, seconds
    featureGates: "BEMemoryEvict=true,CPUBurst=false"
    node: {...}                # a Node (status.capacity/allocatable, annotations)
    nodeSLO: {...}             # a NodeSLO spec, merged onto the defaults
    pods: [...]                # Pods as the kubelet reports them
    kubeletCPUPolicy: none     # or static
    usage:
      node: {cpu: 3.5, memory: 12Gi}       # cores, bytes (quantities accepted)
      pods: {default/web: {cpu: 0.5, memory: 1Gi}}
      hostApplications: {nginx: {cpu: 0.2}}
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from koordinator.api.features import KOORDLET_FEATURES, FeatureGateError, FeatureGates
from koordinator.api.model import ModelError
from koordinator.api.quantity import Quantity, QuantityError
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.executor import (
    CgroupUpdate,
    FileUpdate,
    ResctrlGroupRemoveUpdate,
    ResctrlSchemataUpdate,
    ResctrlTasksUpdate,
    Update,
)
from koordlet.metriccache import MetricCache, Sample, kinds
from koordlet.qosmanager.framework import CgroupView, HostFacts, MetricsView, Plan, Snapshot, Strategy
from koordlet.statesinformer.podmeta import pod_meta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.errors import HostError
from koordlet.system.paths import HostPaths
from koordlet.system.topology import NodeCPUInfo, read_cpu_basic_info, read_cpu_topology


class ScenarioError(ValueError):
    """A scenario that does not describe a situation (named field, reason)."""


def _number(value: Any, where: str, *, cpu: bool) -> float:
    if isinstance(value, bool):
        raise ScenarioError(f"{where}: expected a number, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    try:
        quantity = Quantity.parse(str(value))
    except QuantityError as err:
        raise ScenarioError(f"{where}: {err}") from None
    return quantity.milli_value() / 1000 if cpu else float(quantity.value())


def _mapping(data: Any, where: str) -> Mapping[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{where}: expected a mapping")
    return data


@dataclass
class Scenario:
    node: Mapping[str, Any]
    node_slo: NodeSLOSpec
    pods: list[Mapping[str, Any]]
    gates: FeatureGates
    now: float
    collect_interval: float = 1.0
    kubelet_cpu_policy: str = "none"
    usage: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Scenario:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ScenarioError(f"not YAML: {err}") from None
        data = _mapping(data, "scenario")
        try:
            gates = FeatureGates.parse(KOORDLET_FEATURES, str(data.get("featureGates") or ""))
        except FeatureGateError as err:
            raise ScenarioError(f"featureGates: {err}") from None
        try:
            spec = NodeSLOSpec.from_dict(dict(_mapping(data.get("nodeSLO"), "nodeSLO")), path="nodeSLO")
        except ModelError as err:
            raise ScenarioError(str(err)) from None
        pods = data.get("pods") or []
        if not isinstance(pods, list) or not all(isinstance(p, Mapping) for p in pods):
            raise ScenarioError("pods: expected a list of Pod objects")
        return cls(
            node=_mapping(data.get("node"), "node"),
            node_slo=merge_node_slo_spec(spec),
            pods=list(pods),
            gates=gates,
            now=float(data.get("now") or time.time()),
            collect_interval=float(data.get("collectInterval") or 1.0),
            kubelet_cpu_policy=str(data.get("kubeletCPUPolicy") or "none"),
            usage=_mapping(data.get("usage"), "usage"),
        )


def build_snapshot(scenario: Scenario, paths: HostPaths) -> Snapshot:
    cgroups = CgroupFS.detect(paths)
    metas = [m for m in (pod_meta(p, cgroups.layout) for p in scenario.pods) if m is not None]
    by_key = {m.key: m for m in metas}
    now = scenario.now
    samples: list[Sample] = []
    node = _mapping(scenario.usage.get("node"), "usage.node")
    if "cpu" in node:
        samples.append(kinds.NODE_CPU_USAGE.sample(_number(node["cpu"], "usage.node.cpu", cpu=True), now))
    if "memory" in node:
        samples.append(
            kinds.NODE_MEMORY_USAGE.sample(_number(node["memory"], "usage.node.memory", cpu=False), now)
        )
    for key, values in _mapping(scenario.usage.get("pods"), "usage.pods").items():
        meta = by_key.get(str(key))
        if meta is None:
            raise ScenarioError(f"usage.pods.{key}: no such pod in pods (use namespace/name)")
        values = _mapping(values, f"usage.pods.{key}")
        if "cpu" in values:
            cpu = _number(values["cpu"], f"usage.pods.{key}.cpu", cpu=True)
            samples.append(kinds.POD_CPU_USAGE.sample(cpu, now, pod_uid=meta.uid))
        if "memory" in values:
            memory = _number(values["memory"], f"usage.pods.{key}.memory", cpu=False)
            samples.append(kinds.POD_MEMORY_USAGE.sample(memory, now, pod_uid=meta.uid))
    for name, values in _mapping(scenario.usage.get("hostApplications"), "usage.hostApplications").items():
        values = _mapping(values, f"usage.hostApplications.{name}")
        if "cpu" in values:
            cpu = _number(values["cpu"], f"usage.hostApplications.{name}.cpu", cpu=True)
            samples.append(kinds.HOST_APPLICATION_CPU_USAGE.sample(cpu, now, host_app_name=str(name)))
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
        node=scenario.node,
        node_slo=scenario.node_slo,
        pods=metas,
        metrics=MetricsView(cache),
        host=host,
        cgroups=CgroupView(cgroups),
        gates=scenario.gates,
        collect_interval=scenario.collect_interval,
    )


def _render(update: Update, cgroups: CgroupFS) -> dict[str, str]:
    if isinstance(update, CgroupUpdate):
        try:
            path = cgroups.path(update.key, update.relative, for_write=True)
            value = cgroups.render(update.key, update.value)
        except HostError as err:
            return {"file": f"{update.relative}/{update.key}", "value": str(update.value), "error": str(err)}
        return {"file": str(path), "value": value}
    if isinstance(update, FileUpdate):
        return {"file": str(update.path), "value": update.value}
    if isinstance(update, ResctrlSchemataUpdate):
        return {"file": f"resctrl/{update.group}/schemata", "value": update.line}
    if isinstance(update, ResctrlTasksUpdate):
        return {"file": f"resctrl/{update.group}/tasks", "value": " ".join(map(str, update.tids))}
    if isinstance(update, ResctrlGroupRemoveUpdate):
        return {"file": f"resctrl/{update.group}/", "value": "(rmdir)"}
    return {"file": f"resctrl/{update.group}/", "value": "(mkdir)"}


def describe(plan: Plan, cgroups: CgroupFS) -> dict[str, Any]:
    """A plan as data: writes in execution order, evictions, notes."""
    writes = [_render(u, cgroups) for u in plan.updates]
    for batch in plan.leveled:
        for level in reversed(batch):  # what each file ends with, children first
            writes += [_render(u, cgroups) for u in level]
    return {
        "writes": writes,
        "evictions": [
            {"pod": e.pod.key, "feature": e.feature, "reason": e.reason, "message": e.message}
            for e in plan.evictions
        ],
        "notes": list(plan.notes),
    }


def plan_scenario(
    scenario: Scenario, paths: HostPaths, strategies: Sequence[Strategy], only: Sequence[str] = ()
) -> dict[str, Any]:
    snapshot = build_snapshot(scenario, paths)
    cgroups = snapshot.cgroups.cgroups
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
        out[strategy.NAME] = describe(strategy.plan(snapshot), cgroups)
    return out


def as_table(result: Mapping[str, Any]) -> str:
    lines: list[str] = []
    for name, plan in result.items():
        lines.append(f"{name}:")
        for write in plan["writes"]:
            suffix = f"  (not writable: {write['error']})" if "error" in write else ""
            lines.append(f"  write  {write['file']} = {write['value']}{suffix}")
        for eviction in plan["evictions"]:
            lines.append(f"  evict  {eviction['pod']}  [{eviction['reason']}] {eviction['message']}")
        for note in plan["notes"]:
            lines.append(f"  note   {note}")
        if not (plan["writes"] or plan["evictions"] or plan["notes"]):
            lines.append("  nothing to do")
    return "\n".join(lines)
