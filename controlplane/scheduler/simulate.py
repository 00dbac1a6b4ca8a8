"""``koord-scheduler simulate``: schedule pods offline, in order, with the scheduler's own
framework, and say for each where it went and why (or why nowhere).

Nodes come from ``--nodes``, the pods to place from ``--pods``, and other cluster objects
from ``--objects`` (pods already bound there count on their nodes; PodDisruptionBudgets
guide whom preemption would evict; NodeMetrics give LoadAwareScheduling the nodes' usage;
PodGroups define gangs for Coscheduling, ElasticQuotas the quota trees;
NodeResourceTopologies and Devices feed NodeNUMAResource and DeviceShare, placed
Reservations hold their room for their owners;
PersistentVolumes, claims, StorageClasses and CSINodes feed the volume plug-ins). Each
scheduled pod is assumed on its node before the next one is placed, as the live
scheduler does, with the profile's Reserve and Permit plug-ins run on it (a pod a Permit
plug-in would hold is reported waiting; nothing is bound or written). Pods that name
another scheduler are reported and left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.pdbs import pdb_record
from controlplane.scheduler.plugins.interface import Handle
from controlplane.scheduler.podinfo import PodInfo, pod_info
from koordinator.api.resourcelist import ResourceListError
from koordinator.cli import read_documents
from koordinator.nodemetrics import node_metric_record


class SimulateError(ValueError):
    """Input the simulation cannot use (exit status 2)."""


def _objects(paths: Iterable[str]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for path in paths:
        try:
            documents = read_documents(path)
        except ValueError as err:
            raise SimulateError(str(err)) from None
        for index, doc in enumerate(documents):
            items = (
                doc.get("items")
                if isinstance(doc, Mapping) and doc.get("kind", "").endswith("List")
                else [doc]
            )
            for item in items or ():
                if not isinstance(item, Mapping) or not isinstance(item.get("kind"), str):
                    raise SimulateError(f"{path}: document {index + 1} is not a Kubernetes object")
                out.append(item)
    return out


def _of_kind(objects: Iterable[Mapping[str, Any]], kind: str, path: str) -> list[Mapping[str, Any]]:
    chosen = [o for o in objects if o.get("kind") == kind]
    others = sorted({str(o.get("kind")) for o in objects} - {kind})
    if others:
        raise SimulateError(f"{path}: expected only {kind} objects, found {', '.join(others)}")
    return chosen


class _PlacedReservations:
    """Reserve pods offline: those of placed (Available) Reservations hold their room on
    their nodes; Reservations not placed yet are not scheduled here."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def add_reserve_pod(self, pod: PodInfo) -> None:
        if pod.node_name:
            self.cluster.place(pod, pod.node_name)

    def remove_reserve_pod(self, key: str) -> None:
        self.cluster.unplace(key)


class _Waiting:
    """A pod ``simulate`` reports waiting at Permit: a plug-in allowing or rejecting it later
    (a gang completed, or rejected as a whole) rewrites its result."""

    def __init__(self, cluster: Cluster, pod: PodInfo, entry: dict[str, Any], pending: set[str]) -> None:
        self.cluster, self.pod, self.entry, self.pending = cluster, pod, entry, pending

    def allow(self, plugin: str) -> None:
        self.pending.discard(plugin)
        if not self.pending:
            self.entry["status"] = "Scheduled"

    def reject(self, plugin: str, message: str) -> None:
        self.cluster.unplace(self.pod.key)
        self.entry["node"] = None
        self.entry["status"] = f"rejected at Permit by {plugin}: {message}"


class _WaitingPods:
    def __init__(self) -> None:
        self.pods: dict[str, _Waiting] = {}

    def get(self, uid: str) -> _Waiting | None:
        waiting = self.pods.get(uid)
        return (
            waiting if waiting is not None and waiting.entry["node"] is not None and waiting.pending else None
        )


def _with_uid(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """Pods written by hand often lack a UID; the pods waiting at Permit are found by it."""
    meta = obj.get("metadata") or {}
    if meta.get("uid"):
        return obj
    uid = f"simulated:{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
    return {**obj, "metadata": {**meta, "uid": uid}}


def _reserve_and_permit(framework: Framework, pod: PodInfo, node: str) -> tuple[str | None, str, set[str]]:
    """Reserve and Permit as the live scheduler runs them (they never touch the API); the
    pod stays assumed on its node unless a plug-in refuses it. The third part: the plug-ins
    it waits for at Permit."""
    framework.cluster.place(pod, node)
    refused, permit = framework.points.reserve_and_permit({}, pod, node)
    if refused is not None:
        framework.cluster.unplace(pod.key)
        return None, f"rejected at Reserve/Permit by {refused.plugin}: {refused.message}", set()
    if permit.waits:
        return node, f"Waiting on Permit: {', '.join(sorted(permit.waits))}", set(permit.waits)
    return node, "Scheduled", set()


def simulate(
    config: SchedulerConfig,
    nodes_path: str,
    pods_path: str,
    object_paths: Sequence[str] = (),
    *,
    seed: int | None = None,
) -> list[dict[str, Any]]:
    cluster = Cluster()
    node_objects = _of_kind(_objects([nodes_path]), "Node", nodes_path)
    extra = _objects(object_paths)
    for node in [*node_objects, *(o for o in extra if o.get("kind") == "Node")]:
        try:
            cluster.set_node(node)
        except (ResourceListError, KeyError) as err:
            raise SimulateError(f"node {(node.get('metadata') or {}).get('name')!r}: {err}") from None
    for obj in extra:
        if obj.get("kind") == "Pod" and (obj.get("spec") or {}).get("nodeName"):
            try:
                info = pod_info(obj)
            except ValueError as err:
                raise SimulateError(f"pod {(obj.get('metadata') or {}).get('name')!r}: {err}") from None
            cluster.place(info, info.node_name)
        elif obj.get("kind") == "PodDisruptionBudget":
            cluster.set_pdb(pdb_record(obj))
        elif obj.get("kind") == "NodeMetric":
            try:
                cluster.set_node_metric(node_metric_record(obj))
            except ValueError as err:
                raise SimulateError(
                    f"NodeMetric {(obj.get('metadata') or {}).get('name')!r}: {err}"
                ) from None
        else:  # PersistentVolumes, claims, StorageClasses and CSINodes for the volume plug-ins
            cluster.volumes.add_object(obj)
    frameworks = {
        profile.scheduler_name: Framework(
            profile,
            cluster,
            percentage=config.percentage_of_nodes_to_score,
            seed=seed,
            gates=config.feature_gates,
        )
        for profile in config.profiles
    }
    waiting = _WaitingPods()
    for profile_framework in frameworks.values():
        profile_framework.bind_handle(Handle(waiting, lambda _: 0, _PlacedReservations(cluster)))
    pending = []
    pod_objects = [_with_uid(obj) for obj in _of_kind(_objects([pods_path]), "Pod", pods_path)]
    for obj in pod_objects:
        try:
            pending.append(pod_info(obj))
        except ValueError as err:
            raise SimulateError(f"pod {(obj.get('metadata') or {}).get('name')!r}: {err}") from None
    # plug-ins that follow objects of their own (PodGroups, ElasticQuotas, every pod) get them
    for profile_framework in frameworks.values():
        for plugin in profile_framework.plugins.values():
            take = getattr(plugin, "take_object", None)
            if callable(take):
                for obj in [*extra, *pod_objects]:
                    take(obj)
    # the plug-ins that follow every pod (gangs) know the bound and the pending ones first
    for profile_framework in frameworks.values():
        for info in [*(p for _, _, p in cluster.placed.values()), *pending]:
            profile_framework.on_pod(None, info)
    results: list[dict[str, Any]] = []
    for pod in pending:
        framework = frameworks.get(pod.scheduler_name)
        if framework is None:
            results.append(
                {
                    "pod": pod.key,
                    "node": None,
                    "filtered": {},
                    "scores": {},
                    "status": f"not scheduled: schedulerName {pod.scheduler_name!r} "
                    "is not a profile of this scheduler",
                }
            )
            continue
        explained = framework.explain(pod)
        result = framework.schedule(pod)
        placed, status = result.node, "Scheduled" if result.node is not None else result.message
        waits: set[str] = set()
        if placed is not None:
            placed, status, waits = _reserve_and_permit(framework, pod, placed)
        entry: dict[str, Any] = {
            "pod": pod.key,
            "node": placed,
            "filtered": explained["filtered"],
            "scores": explained["scores"],
            "status": status,
        }
        if result.preemption is not None:  # what the live scheduler would evict (nothing is, here)
            entry["preemption"] = {
                "node": result.preemption.node,
                "victims": [v.key for v in result.preemption.victims],
            }
        for plugin in framework.plugins.values():  # the pod's quota, its gang ...
            describe = getattr(plugin, "describe", None)
            if callable(describe) and (described := describe(pod)) is not None:
                entry[described[0]] = described[1]
        if waits and placed is not None:
            waiting.pods[pod.uid] = _Waiting(cluster, pod, entry, waits)
        results.append(entry)
    return results


def as_table(results: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for result in results:
        lines.append(f"{result['pod']}: {result['node'] or '-'}  ({result['status']})")
        for node, scores in sorted(result["scores"].items(), key=lambda kv: -kv[1]["total"]):
            detail = ", ".join(f"{k} {v}" for k, v in scores.items() if k != "total")
            lines.append(f"  score  {node}: {scores['total']}  [{detail}]")
        for node, reasons in sorted(result["filtered"].items()):
            lines.append(f"  filter {node}: {'; '.join(reasons)}")
    return "\n".join(lines)
