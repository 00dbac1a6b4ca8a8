"""Plain-dict builders of the objects the descheduler reads: Node, Pod, ReplicaSet and
NodeMetric. Each returns a new dict in the shape the apiserver serves (status included), so
it can be handed to a plug-in directly or created on the fake apiserver (which drops what a
client may not set on create: write the status through the status subresource)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from koordinator.api import resourcelist

Obj = dict[str, Any]

#: the owner kinds' apiVersions (others: ``apps/v1``)
OWNER_API_VERSIONS = {
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Deployment": "apps/v1",
    "Job": "batch/v1",
    "ReplicationController": "v1",
}


def node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, Any]] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
) -> Obj:
    spec: Obj = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def owner_reference(kind: str, name: str, uid: str) -> Obj:
    """A controller ownerReference."""
    return {
        "apiVersion": OWNER_API_VERSIONS.get(kind, "apps/v1"),
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod(
    name: str,
    namespace: str = "default",
    node: str = "",
    cpu: str = "1",
    memory: str = "1Gi",
    owner: tuple[str, str, str] | None = ("ReplicaSet", "rs", "rs-uid"),
    priority: int | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    scheduler: str = "koord-scheduler",
    ready: bool = True,
    phase: str = "Running",
    uid: str | None = None,
    volumes: Sequence[Mapping[str, Any]] | None = None,
) -> Obj:
    """A pod with one container requesting (and limited to) ``cpu``/``memory``; ``owner`` is
    the controller as (kind, name, uid), None for a bare pod. Its uid defaults to
    ``uid-<namespace>-<name>`` (the fake apiserver assigns its own). The status has
    ``PodScheduled`` (True when ``node`` is set, else False/Unschedulable) and ``Ready``."""
    meta: Obj = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{namespace}-{name}",
        "labels": dict(labels or {}),
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(*owner)]
    requests = {"cpu": cpu, "memory": memory}
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [
            {"name": "main", "image": "app", "resources": {"requests": requests, "limits": dict(requests)}}
        ],
    }
    if node:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    if volumes:
        spec["volumes"] = [dict(v) for v in volumes]
    scheduled: Obj = {"type": "PodScheduled", "status": "True"}
    if not node:
        scheduled = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/1 nodes are available",
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": [scheduled, {"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def replica_set(name: str, namespace: str, uid: str, replicas: int) -> Obj:
    """A ReplicaSet selecting ``app: <name>`` (the fake apiserver assigns its own uid)."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": dict(labels)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"containers": [{"name": "main", "image": "app"}]},
            },
        },
    }


def node_metric(
    name: str,
    update_time: str,
    system: Mapping[str, str] | None = None,
    pods: Mapping[str, Mapping[str, str]] | None = None,
    priorities: Mapping[str, str] | None = None,
) -> Obj:
    """A NodeMetric as the koordlet reports it: ``systemUsage`` is ``system`` (default 1 core,
    1Gi), each ``"namespace/name"`` of ``pods`` is a ``podsMetric`` entry with that usage (and
    its priority class from ``priorities``, e.g. ``koord-prod``), and ``nodeUsage`` is the sum
    of the system's and the pods' usages."""
    system = {"cpu": "1", "memory": "1Gi"} if system is None else system
    pods = pods or {}
    priorities = priorities or {}
    node_usage = resourcelist.sum_of(
        [resourcelist.parse(system), *(resourcelist.parse(u) for u in pods.values())]
    )
    pods_metric: list[Obj] = []
    for key, usage in pods.items():
        namespace, _, pod_name = key.rpartition("/")
        entry: Obj = {"namespace": namespace, "name": pod_name, "podUsage": {"resources": dict(usage)}}
        if key in priorities:
            entry["priority"] = priorities[key]
        pods_metric.append(entry)
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": name},
        "spec": {},
        "status": {
            "updateTime": update_time,
            "nodeMetric": {
                "nodeUsage": {"resources": resourcelist.to_json(node_usage)},
                "systemUsage": {"resources": dict(system)},
            },
            "podsMetric": pods_metric,
        },
    }
