"""Builders of the objects the slo-controller tests feed in: Nodes, NodeMetrics, Pods, the ConfigMap."""

from __future__ import annotations

import json
from typing import Any

Obj = dict[str, Any]

GI = 1 << 30
CONFIG_NAMESPACE = "koordinator-system"
CONFIG_NAME = "slo-controller-config"


def node(
    name: str = "node-1",
    *,
    capacity: tuple[str, str] = ("16", "64Gi"),
    allocatable: tuple[str, str] = ("15", "60Gi"),
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    extended: dict[str, str] | None = None,
) -> Obj:
    cap: Obj = {"cpu": capacity[0], "memory": capacity[1], "pods": "110"}
    alloc: Obj = {"cpu": allocatable[0], "memory": allocatable[1], "pods": "110"}
    for resource, value in (extended or {}).items():
        cap[resource] = value
        alloc[resource] = value
    meta: Obj = {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "status": {"capacity": cap, "allocatable": alloc},
    }


def usage(cpu: str, memory: str) -> Obj:
    return {"resources": {"cpu": cpu, "memory": memory}}


def pod_metric(name: str, cpu: str, memory: str, *, namespace: str = "default", priority: str = "") -> Obj:
    info: Obj = {"namespace": namespace, "name": name, "podUsage": usage(cpu, memory)}
    if priority:
        info["priority"] = priority
    return info


def node_metric(
    name: str = "node-1",
    *,
    update_time: str | None = "2026-01-01T00:00:00Z",
    node_usage: tuple[str, str] | None = ("6", "20Gi"),
    system_usage: tuple[str, str] | None = ("500m", "2Gi"),
    pods: list[Obj] | None = None,
    prod_reclaimable: tuple[str, str] | None = None,
    host_apps: list[Obj] | None = None,
) -> Obj:
    status: Obj = {}
    if update_time is not None:
        status["updateTime"] = update_time
    info: Obj = {}
    if node_usage is not None:
        info["nodeUsage"] = usage(*node_usage)
    if system_usage is not None:
        info["systemUsage"] = usage(*system_usage)
    status["nodeMetric"] = info
    status["podsMetric"] = list(pods or [])
    if prod_reclaimable is not None:
        status["prodReclaimableMetric"] = {"resource": usage(*prod_reclaimable)}
    if host_apps:
        status["hostApplicationMetric"] = list(host_apps)
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": name},
        "status": status,
    }


def pod(
    name: str,
    cpu: str,
    memory: str,
    *,
    node_name: str = "node-1",
    namespace: str = "default",
    phase: str = "Running",
    priority_class: str | None = None,
    qos: str | None = None,
    batch: bool = False,
) -> Obj:
    """A pod requesting ``cpu``/``memory`` (as batch-cpu/batch-memory when ``batch``)."""
    labels: Obj = {}
    if priority_class:
        labels["koordinator.sh/priority-class"] = priority_class
    if qos:
        labels["koordinator.sh/qosClass"] = qos
    if batch:
        from koordinator.api.quantity import Quantity

        requests: Obj = {
            "kubernetes.io/batch-cpu": str(Quantity.parse(cpu).milli_value()),
            "kubernetes.io/batch-memory": memory,
        }
    else:
        requests = {"cpu": cpu, "memory": memory}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "main", "image": "registry.example/app:1", "resources": {"requests": requests}}
            ],
        },
        "status": {"phase": phase},
    }


def config_map(colocation: Obj | None = None, **keys: Obj) -> Obj:
    """The slo-controller-config; keyword names are ConfigMap keys with ``_`` for ``-``."""
    data: dict[str, str] = {}
    if colocation is not None:
        data["colocation-config"] = json.dumps(colocation)
    for key, value in keys.items():
        data[key.replace("_", "-")] = json.dumps(value)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_NAME, "namespace": CONFIG_NAMESPACE},
        "data": data,
    }
