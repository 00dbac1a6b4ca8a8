"""``koord-descheduler explain``: what a descheduling round would do, offline, from objects in
files, with the same plug-ins as the process.

Nodes (``--nodes``), NodeMetrics (``--node-metrics``) and pods (``--pods``) make the cluster;
``--objects`` adds PodMigrationJobs already running, the workloads (ReplicaSets,
StatefulSets, Jobs) whose replicas the eviction gates read, and PriorityClasses (a
``priorityThreshold`` by name). Each profile of ``--config``
(default: the defaults, which balance nothing) runs ``--rounds`` rounds (default: enough for a
node over its thresholds in every round to be found anomalous) at ``--now``; MigrationController
admits pods exactly as it would (gates and limits, counting the jobs of earlier choices),
but creates nothing. The report gives, per LowNodeLoad node pool, the thresholds, the low,
high and anomalous nodes with their usage, the budget and the pods chosen, each with its
reason and a node it fits.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import orjson

from controlplane.descheduler.config import ConfigError, DeschedulerConfig, Profile, load
from controlplane.descheduler.descheduler import ClusterView, build_profile, round_nodes
from controlplane.descheduler.framework import EvictionLimiter
from controlplane.descheduler.lownodeload.args import NAME as LOW_NODE_LOAD
from controlplane.descheduler.lownodeload.args import LowNodeLoadArgs
from controlplane.descheduler.lownodeload.plugin import LowNodeLoad
from controlplane.descheduler.migration.admission import MigrationView, build_admission
from controlplane.descheduler.migration.args import NAME as MIGRATION_CONTROLLER
from controlplane.descheduler.migration.args import MigrationControllerArgs
from controlplane.descheduler.migration.workloads import (
    Workload,
    controller_of,
    expected_replicas,
)
from koordinator.cli import read_documents
from koordinator.kube.timeutil import format_time, parse_time
from koordinator.nodemetrics import NodeMetricRecord, node_metric_record

__all__ = ["ExplainError", "explain", "run"]

Obj = Mapping[str, Any]
OWNER_KINDS = {"ReplicaSet": "apps", "StatefulSet": "apps", "Job": "batch"}


class ExplainError(ValueError):
    """Input the explanation cannot be made from; the message names the file or object."""


class StaticClock:
    """A clock stopped at ``now`` (explain evaluates one instant)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def _objects(path: str, kinds: Sequence[str]) -> list[Obj]:
    try:
        docs = read_documents(path)
    except ValueError as err:
        raise ExplainError(str(err)) from None
    out: list[Obj] = []
    for doc in docs:
        if not isinstance(doc, Mapping):
            raise ExplainError(f"{path}: a document is not an object")
        items = doc.get("items") if str(doc.get("kind") or "").endswith("List") else [doc]
        for item in items or ():
            if not isinstance(item, Mapping) or not (item.get("metadata") or {}).get("name"):
                raise ExplainError(f"{path}: an object without metadata.name")
            if item.get("kind", kinds[0]) in kinds:
                out.append(item)
    return out


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


@dataclass
class OfflineCluster:
    nodes: list[Obj]
    pods: list[Obj]
    records: dict[str, NodeMetricRecord]
    jobs: list[Obj] = field(default_factory=list)
    owners: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    priority_classes: dict[str, Obj] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_node: dict[str, list[Obj]] = defaultdict(list)
        self.by_controller: dict[str, list[Obj]] = defaultdict(list)
        self.by_key = {_key(p): p for p in self.pods}
        for pod in self.pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                self.by_node[str(node)].append(pod)
            workload = controller_of(pod)
            if workload is not None:
                self.by_controller[workload.uid].append(pod)

    def pods_on_node(self, node: str) -> Sequence[Obj]:
        return self.by_node.get(node, [])

    def pod_of_job(self, job: Obj) -> Obj | None:
        ref = (job.get("spec") or {}).get("podRef") or {}
        return self.by_key.get(f"{ref.get('namespace') or ''}/{ref.get('name') or ''}")

    def expected_replicas(self, workload: Workload) -> int:
        owner = self.owners.get((workload.kind, workload.namespace, workload.name))
        return expected_replicas(workload, owner, len(self.by_controller.get(workload.uid, [])))


class OfflineMigration:
    """MigrationController's Filter and Evict over the files: admission as the controller
    decides it; an admitted pod gets a Pending job in memory."""

    name = MIGRATION_CONTROLLER

    def __init__(self, args: MigrationControllerArgs, cluster: OfflineCluster, clock: StaticClock) -> None:
        self.args = args
        self.cluster = cluster
        view = MigrationView(
            jobs=lambda: cluster.jobs,
            jobs_of_pod=self._jobs_of_pod,
            pod_of_job=cluster.pod_of_job,
            workload_pods=lambda w: cluster.by_controller.get(w.uid, []),
            expected_replicas=cluster.expected_replicas,
            nodes=lambda: cluster.nodes,
            pods_on_node=cluster.pods_on_node,
            priority_class=cluster.priority_classes.get,
        )
        try:
            self.admission = build_admission(args, view, clock)
        except ValueError as err:
            raise ExplainError(str(err)) from None
        self.refused: list[dict[str, str]] = []

    def _jobs_of_pod(self, pod: Obj) -> list[Obj]:
        return [
            j
            for j in self.cluster.jobs
            if self.cluster.pod_of_job(j) is pod
            and str((j.get("status") or {}).get("phase") or "") in ("", "Pending", "Running")
        ]

    def filter(self, pod: Obj) -> bool:
        why = self.admission.reason(pod)
        if why is not None:
            self.refused.append({"pod": _key(pod), "reason": why})
        return why is None

    async def evict(self, pod: Obj, reason: str, plugin: str) -> bool:
        if self.args.dry_run:
            return True
        if self.admission.reason(pod) is not None:
            return False
        meta = pod.get("metadata") or {}
        self.cluster.jobs.append(
            {
                "metadata": {"name": str(uuid.uuid4())},
                "spec": {"podRef": {"namespace": meta.get("namespace"), "name": meta.get("name")}},
                "status": {"phase": "Pending"},
            }
        )
        return True


def _rounds(profile: Profile) -> int:
    args = profile.args.get(LOW_NODE_LOAD)
    if not isinstance(args, LowNodeLoadArgs):
        return 1
    counts = [p.anomaly_condition.consecutive_abnormalities for p in args.node_pools]
    return max((1 if c == 1 else c + 1) for c in counts)


async def _explain_profile(
    profile: Profile, config: DeschedulerConfig, cluster: OfflineCluster, now: float, rounds: int | None
) -> dict[str, Any]:
    clock = StaticClock(now)
    limiter = EvictionLimiter(
        config.max_pods_to_evict_per_node,
        config.max_pods_to_evict_per_namespace,
        config.max_pods_to_evict_total,
    )
    chosen: list[dict[str, str]] = []
    migrations: list[OfflineMigration] = []

    def migration(p: Profile) -> OfflineMigration:
        plugin = OfflineMigration(p.args[MIGRATION_CONTROLLER], cluster, clock)
        migrations.append(plugin)
        return plugin

    def on_evicted(pod: Obj, plugin: str, reason: str) -> None:
        chosen.append(
            {
                "pod": _key(pod),
                "node": str((pod.get("spec") or {}).get("nodeName") or ""),
                "plugin": plugin,
                "reason": reason,
            }
        )

    runtime = build_profile(
        profile,
        lambda: ClusterView(cluster.pods_on_node, lambda: cluster.records, clock),
        limiter,
        migration,
        clock,
        dry_run=config.dry_run,
        on_evicted=on_evicted,
    )
    count = rounds if rounds is not None else _rounds(profile)
    nodes = round_nodes(config, cluster.nodes)
    for _ in range(count):
        chosen.clear()
        for m in migrations:
            m.refused.clear()
        if len(nodes) > 1:
            limiter.reset()
            for balance in runtime.balance:
                await balance.balance(nodes)
    pools = [
        report.to_dict()
        for plugin in runtime.balance
        if isinstance(plugin, LowNodeLoad)
        for report in plugin.reports
    ]
    return {
        "profile": profile.name,
        "rounds": count,
        "nodePools": pools,
        "migrations": chosen,
        "refusedByMigrationController": [r for m in migrations for r in m.refused],
    }


def explain(
    config: DeschedulerConfig,
    nodes: list[Obj],
    pods: list[Obj],
    node_metrics: list[Obj],
    objects: list[Obj],
    now: float,
    rounds: int | None = None,
) -> dict[str, Any]:
    records: dict[str, NodeMetricRecord] = {}
    for obj in node_metrics:
        try:
            record = node_metric_record(obj)
        except ValueError as err:
            raise ExplainError(f"NodeMetric {(obj.get('metadata') or {}).get('name')}: {err}") from None
        records[record.node] = record
    cluster = OfflineCluster(nodes, pods, records)
    for obj in objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "PodMigrationJob":
            cluster.jobs.append(obj)
        elif obj.get("kind") == "PriorityClass":
            cluster.priority_classes[str(meta.get("name"))] = obj
        elif obj.get("kind") in OWNER_KINDS:
            cluster.owners[(str(obj["kind"]), str(meta.get("namespace") or ""), str(meta.get("name")))] = obj
    results = [
        asyncio.run(_explain_profile(profile, config, cluster, now, rounds)) for profile in config.profiles
    ]
    return {
        "now": format_time(now),
        "nodes": len(nodes),
        "pods": len(pods),
        "profiles": results,
    }


def as_text(report: Mapping[str, Any]) -> str:
    lines = [f"at {report['now']}: {report['nodes']} node(s), {report['pods']} pod(s)"]
    for profile in report["profiles"]:
        lines.append(f"profile {profile['profile']} ({profile['rounds']} round(s)):")
        if not profile["nodePools"]:
            lines.append("  no LowNodeLoad plug-in enabled")
        for pool in profile["nodePools"]:
            lines.append(f"  node pool {pool['nodePool'] or '(all nodes)'}: {pool['outcome']}")
            lines.append(
                "    low: "
                + (", ".join(pool["lowNodes"]) or "-")
                + "; both-low: "
                + (", ".join(pool["bothLowNodes"]) or "-")
                + "; prod-low: "
                + (", ".join(pool["prodLowNodes"]) or "-")
                + "; high: "
                + (", ".join(pool["highNodes"]) or "-")
                + "; prod-high: "
                + (", ".join(pool["prodHighNodes"]) or "-")
                + "; anomalous: "
                + (", ".join(pool["anomalousNodes"]) or "-")
            )
            for node in pool["nodes"]:
                usage = ", ".join(f"{k} {v:.2f}%" for k, v in node.get("usagePercent", {}).items())
                detail = f" ({node['detail']})" if node.get("detail") else ""
                lines.append(f"    {node['name']}: {node['classification']}{detail} {usage}".rstrip())
        for move in profile["migrations"]:
            lines.append(f"  migrate {move['pod']} from {move['node']}: {move['reason']}")
        for refused in profile["refusedByMigrationController"]:
            lines.append(f"  not {refused['pod']}: {refused['reason']}")
    return "\n".join(lines)


def run(
    nodes_file: str,
    pods_file: str,
    metrics_file: str,
    objects_files: Sequence[str],
    config_file: str | None,
    now: str | None,
    rounds: int | None,
    output: str,
    out: TextIO,
    wall_clock: float,
) -> int:
    try:
        config = load(config_file)
    except ConfigError as err:
        raise ExplainError(str(err)) from None
    if now:
        try:
            instant = parse_time(now)
        except ValueError as err:
            raise ExplainError(f"--now: {err}") from None
    else:
        instant = wall_clock
    if rounds is not None and rounds < 1:
        raise ExplainError("--rounds must be at least 1")
    kinds = ("PodMigrationJob", "PriorityClass", *OWNER_KINDS)
    objects = [o for path in objects_files for o in _objects(path, kinds)]
    report = explain(
        config,
        _objects(nodes_file, ("Node",)),
        _objects(pods_file, ("Pod",)),
        _objects(metrics_file, ("NodeMetric",)),
        objects,
        instant,
        rounds,
    )
    if output == "json":
        out.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        out.write(as_text(report) + "\n")
    return 0
